package io.palkit.core.tokenizer;

/**
 * Character classes exactly as Hugging Face's Rust BERT normalizer and pre-tokenizer define them.
 * Categories come from {@link BertCharTables} (HF's Unicode tables are older than Java's/Android's);
 * whitespace is not {@link Character#isWhitespace}, which differs on NBSP, U+001C..U+001F, etc.
 * All methods take Unicode code points, never UTF-16 units.
 */
final class BertChars {
    private BertChars() {}

    /** Unicode White_Space. */
    static boolean isWhitespace(int cp) {
        switch (cp) {
            case '\t': case '\n': case 0x0B: case 0x0C: case '\r': case ' ':
            case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
            case 0x202F: case 0x205F: case 0x3000:
                return true;
            default:
                return cp >= 0x2000 && cp <= 0x200A;
        }
    }

    /** Deleted by the clean-up step (control/format/private-use, NUL, U+FFFD, lone surrogates). */
    static boolean isRemoved(int cp) {
        return Character.isSurrogate((char) cp) && cp <= 0xFFFF || inRanges(BertCharTables.REMOVED, cp);
    }

    /** A non-spacing mark, deleted after NFD when accents are stripped. */
    static boolean isAccent(int cp) {
        return inRanges(BertCharTables.ACCENTS, cp);
    }

    /** Split off as a word of its own. */
    static boolean isPunctuation(int cp) {
        return inRanges(BertCharTables.PUNCTUATION, cp);
    }

    /**
     * The CJK Unified Ideograph blocks BERT surrounds with spaces (not Hiragana, Katakana, Hangul).
     * HF's Rust code starts the Extension E range at U+2B920, not U+2B820 (Python BERT's value);
     * we follow Rust since that tokenizer is the reference.
     */
    static boolean isChinese(int cp) {
        return (cp >= 0x4E00 && cp <= 0x9FFF)
                || (cp >= 0x3400 && cp <= 0x4DBF)
                || (cp >= 0x20000 && cp <= 0x2A6DF)
                || (cp >= 0x2A700 && cp <= 0x2B73F)
                || (cp >= 0x2B740 && cp <= 0x2B81F)
                || (cp >= 0x2B920 && cp <= 0x2CEAF)
                || (cp >= 0xF900 && cp <= 0xFAFF)
                || (cp >= 0x2F800 && cp <= 0x2FA1F);
    }

    /** Binary search over sorted inclusive [first, last] pairs. */
    private static boolean inRanges(int[] ranges, int cp) {
        int lo = 0;
        int hi = ranges.length / 2 - 1;
        while (lo <= hi) {
            int mid = (lo + hi) >>> 1;
            if (cp < ranges[2 * mid]) {
                hi = mid - 1;
            } else if (cp > ranges[2 * mid + 1]) {
                lo = mid + 1;
            } else {
                return true;
            }
        }
        return false;
    }
}
