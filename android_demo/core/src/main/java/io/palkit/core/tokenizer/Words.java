package io.palkit.core.tokenizer;

import java.util.List;

/** A text as a tagging task reads it: the model inputs, its whitespace-separated words, and each
 *  word's first token position (-1 for a word with no token: emptied by the normalizer, or past
 *  the maximum length). */
public final class Words {
    public final Encoding encoding;
    public final List<String> words;
    public final int[] firstPieces;

    Words(Encoding encoding, List<String> words, int[] firstPieces) {
        this.encoding = encoding;
        this.words = words;
        this.firstPieces = firstPieces;
    }
}
