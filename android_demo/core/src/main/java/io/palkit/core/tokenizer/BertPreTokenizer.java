package io.palkit.core.tokenizer;

import java.util.ArrayList;
import java.util.List;

/** Splits normalized text into words: whitespace separates, each punctuation mark stands alone. */
final class BertPreTokenizer {
    private BertPreTokenizer() {}

    static List<String> split(String text) {
        List<String> words = new ArrayList<>();
        StringBuilder current = new StringBuilder();
        text.codePoints().forEach(cp -> {
            if (BertChars.isWhitespace(cp)) {
                flush(current, words);
            } else if (BertChars.isPunctuation(cp)) {
                flush(current, words);
                words.add(new String(Character.toChars(cp)));
            } else {
                current.appendCodePoint(cp);
            }
        });
        flush(current, words);
        return words;
    }

    private static void flush(StringBuilder current, List<String> words) {
        if (current.length() > 0) {
            words.add(current.toString());
            current.setLength(0);
        }
    }
}
