package io.palkit.core.tokenizer;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

/** WordPiece vocabulary: one token per line, id = zero-based line number. */
public final class Vocab {
    private final Map<String, Integer> ids;

    private Vocab(Map<String, Integer> ids) {
        this.ids = ids;
    }

    public static Vocab read(InputStream in) throws IOException {
        Map<String, Integer> ids = new HashMap<>();
        BufferedReader reader = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
        String line;
        int id = 0;
        while ((line = reader.readLine()) != null) {
            ids.putIfAbsent(line, id++); // first occurrence wins, like HF's vocab loader
        }
        return new Vocab(ids);
    }

    /** The token's id, or -1 when the vocabulary lacks it. */
    public int id(String token) {
        Integer id = ids.get(token);
        return id == null ? -1 : id;
    }

    public int size() {
        return ids.size();
    }
}
