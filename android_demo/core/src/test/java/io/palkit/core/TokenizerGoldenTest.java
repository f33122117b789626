package io.palkit.core;

import io.palkit.core.json.Json;
import io.palkit.core.tokenizer.BertTokenizer;
import io.palkit.core.tokenizer.Encoding;
import io.palkit.core.tokenizer.TokenizerConfig;
import io.palkit.core.tokenizer.Vocab;
import java.io.File;
import java.io.FileInputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.MessageDigest;
import java.util.List;
import java.util.Map;

/** Every case of tokenizer_golden.json (written by tests/tools/make_tokenizer_golden.py) must match exactly. */
public final class TokenizerGoldenTest {
    // Found by the fuzzer (CoreFuzz tokenizer): each special token typed in the text re-searched
    // the rest of it for every special, so 260,000 characters of [CLS] took ~10 s (now ~0.1 s).
    public static void testTypedSpecialTokensTokenizeInLinearTime() throws Exception {
        BertTokenizer tokenizer;
        try (InputStream in = new FileInputStream(requiredProperty("palkit.vocab"))) {
            tokenizer = new BertTokenizer(TokenizerConfig.bertUncased(16), Vocab.read(in));
        }
        String text = "[CLS]".repeat(52_000) + " film";
        long start = System.nanoTime();
        Encoding e = tokenizer.encode(text);
        double seconds = (System.nanoTime() - start) / 1e9;
        Check.equal(16, e.length(), "truncated to max_length");
        Check.equal(101L, e.inputIds[1], "a typed [CLS] stays whole");
        Check.isTrue(seconds < 2.0, "260,000 characters took " + seconds + " s");
    }

    public static void testMatchesHuggingFaceGoldenVectors() throws Exception {
        File golden = new File(requiredProperty("palkit.golden"));
        File vocabFile = new File(requiredProperty("palkit.vocab"));
        Map<?, ?> root = (Map<?, ?>) Json.parse(
                new String(Files.readAllBytes(golden.toPath()), StandardCharsets.UTF_8));
        Check.equal(root.get("vocab_sha256"), sha256(vocabFile), "vocab.txt is the golden's vocab");
        BertTokenizer tokenizer;
        try (InputStream in = new FileInputStream(vocabFile)) {
            tokenizer = new BertTokenizer(TokenizerConfig.bertUncased(128), Vocab.read(in));
        }
        List<?> cases = (List<?>) root.get("cases");
        Check.isTrue(cases.size() > 100, "golden file has its cases");
        for (Object item : cases) {
            Map<?, ?> c = (Map<?, ?>) item;
            String text = (String) c.get("text");
            String pair = (String) c.get("text_pair");
            int maxLength = ((Long) c.get("max_length")).intValue();
            Encoding e = pair == null ? tokenizer.encode(text, maxLength)
                    : tokenizer.encodePair(text, pair, maxLength);
            String what = "case " + Json.write(c).replace('\n', ' ');
            Check.equal(longs(c.get("input_ids")), e.inputIds, "input_ids of " + what);
            Check.equal(longs(c.get("token_type_ids")), e.tokenTypeIds, "token_type_ids of " + what);
        }
    }

    static String requiredProperty(String name) {
        String value = System.getProperty(name);
        if (value == null) {
            throw new IllegalStateException("run with -D" + name + "=PATH");
        }
        return value;
    }

    static long[] longs(Object list) {
        List<?> items = (List<?>) list;
        long[] out = new long[items.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = (Long) items.get(i);
        }
        return out;
    }

    private static String sha256(File file) throws Exception {
        byte[] digest = MessageDigest.getInstance("SHA-256").digest(Files.readAllBytes(file.toPath()));
        StringBuilder hex = new StringBuilder();
        for (byte b : digest) {
            hex.append(String.format("%02x", b));
        }
        return hex.toString();
    }
}
