package io.palkit.core.tokenizer;

import java.util.List;

/** Greedy longest-match-first WordPiece; a word that cannot be fully covered becomes [UNK]. */
final class WordPiece {
    private static final String CONTINUATION = "##";

    private final Vocab vocab;
    private final int unkId;
    private final int maxInputCharsPerWord;

    WordPiece(Vocab vocab, int unkId, int maxInputCharsPerWord) {
        this.vocab = vocab;
        this.unkId = unkId;
        this.maxInputCharsPerWord = maxInputCharsPerWord;
    }

    /** Appends the ids of one pre-tokenized word to {@code out}. */
    void encodeWord(String word, List<Integer> out) {
        int[] cps = word.codePoints().toArray(); // the length limit counts code points, not chars
        if (cps.length > maxInputCharsPerWord) {
            out.add(unkId);
            return;
        }
        int sizeBefore = out.size();
        int start = 0;
        while (start < cps.length) {
            int end = cps.length;
            int found = -1;
            while (end > start) {
                String piece = new String(cps, start, end - start);
                found = vocab.id(start > 0 ? CONTINUATION + piece : piece);
                if (found >= 0) {
                    break;
                }
                end--;
            }
            if (found < 0) {
                out.subList(sizeBefore, out.size()).clear();
                out.add(unkId);
                return;
            }
            out.add(found);
            start = end;
        }
    }
}
