package io.palkit.core.tokenizer;

import java.text.Normalizer;

/**
 * The BERT text clean-up, in Hugging Face's order: drop control characters, turn whitespace into
 * spaces, pad CJK ideographs with spaces, strip accents (NFD, drop non-spacing
 * marks), lower-case.
 */
final class BertNormalizer {
    private final boolean lowercase;
    private final boolean stripAccents;

    BertNormalizer(boolean lowercase, boolean stripAccents) {
        this.lowercase = lowercase;
        this.stripAccents = stripAccents;
    }

    String normalize(String text) {
        StringBuilder cleaned = new StringBuilder(text.length() + 8);
        text.codePoints().forEach(cp -> {
            if (BertChars.isRemoved(cp)) {
                return;
            }
            if (BertChars.isWhitespace(cp)) {
                cleaned.append(' ');
            } else if (BertChars.isChinese(cp)) {
                cleaned.append(' ').appendCodePoint(cp).append(' ');
            } else {
                cleaned.appendCodePoint(cp);
            }
        });
        String s = cleaned.toString();
        if (stripAccents) {
            s = stripAccents(s);
        }
        return lowercase ? lowercase(s) : s;
    }

    private static String stripAccents(String s) {
        StringBuilder sb = new StringBuilder(s.length());
        Normalizer.normalize(s, Normalizer.Form.NFD).codePoints()
                .filter(cp -> !BertChars.isAccent(cp))
                .forEach(sb::appendCodePoint);
        return sb.toString();
    }

    /**
     * Per-code-point lower-casing like Rust's char::to_lowercase. Not String.toLowerCase: that one
     * applies the context-sensitive final-sigma rule, which HF does not.
     */
    private static String lowercase(String s) {
        StringBuilder sb = new StringBuilder(s.length());
        s.codePoints().forEach(cp -> {
            if (cp == 0x130) {
                sb.append("i\u0307"); // İ: the only unconditional one-to-two lower-case mapping
            } else {
                sb.appendCodePoint(Character.toLowerCase(cp));
            }
        });
        return sb.toString();
    }
}
