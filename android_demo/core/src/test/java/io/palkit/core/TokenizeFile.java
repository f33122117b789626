package io.palkit.core;

import io.palkit.core.json.Json;
import io.palkit.core.tokenizer.BertTokenizer;
import io.palkit.core.tokenizer.Encoding;
import io.palkit.core.tokenizer.TokenizerConfig;
import io.palkit.core.tokenizer.Vocab;
import java.io.FileInputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Tokenizes every case of a JSON file ({"cases": [{"text", "text_pair", "max_length"}]}) and
 * writes {"results": [{"input_ids", "token_type_ids"}]}, so Python property tests can compare
 * arbitrary text against the Hugging Face tokenizer. Usage: TokenizeFile VOCAB IN OUT
 */
public final class TokenizeFile {
    public static void main(String[] args) throws Exception {
        BertTokenizer tokenizer;
        try (InputStream in = new FileInputStream(args[0])) {
            tokenizer = new BertTokenizer(TokenizerConfig.bertUncased(128), Vocab.read(in));
        }
        Map<?, ?> root = (Map<?, ?>) Json.parse(
                new String(Files.readAllBytes(Paths.get(args[1])), StandardCharsets.UTF_8));
        List<Object> results = new ArrayList<>();
        for (Object item : (List<?>) root.get("cases")) {
            Map<?, ?> c = (Map<?, ?>) item;
            String pair = (String) c.get("text_pair");
            int maxLength = ((Long) c.get("max_length")).intValue();
            Encoding e = pair == null ? tokenizer.encode((String) c.get("text"), maxLength)
                    : tokenizer.encodePair((String) c.get("text"), pair, maxLength);
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("input_ids", boxed(e.inputIds));
            r.put("token_type_ids", boxed(e.tokenTypeIds));
            results.add(r);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("results", results);
        Files.write(Paths.get(args[2]), Json.write(out).getBytes(StandardCharsets.UTF_8));
    }

    private static List<Long> boxed(long[] values) {
        List<Long> out = new ArrayList<>(values.length);
        for (long v : values) {
            out.add(v);
        }
        return out;
    }
}
