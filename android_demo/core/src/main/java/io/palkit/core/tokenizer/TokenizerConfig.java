package io.palkit.core.tokenizer;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/** The manifest's "tokenizer" section. */
public final class TokenizerConfig {
    public final boolean lowercase;
    public final boolean stripAccents;
    public final int maxLength;
    public final int maxInputCharsPerWord;
    public final String clsToken;
    public final String sepToken;
    public final String padToken;
    public final String unkToken;
    /** Matched verbatim in raw input before normalization, as HF does for added special tokens. */
    public final List<String> specialTokens;

    public TokenizerConfig(boolean lowercase, boolean stripAccents, int maxLength,
            int maxInputCharsPerWord, String clsToken, String sepToken, String padToken,
            String unkToken, String maskToken) {
        this.lowercase = lowercase;
        this.stripAccents = stripAccents;
        this.maxLength = maxLength;
        this.maxInputCharsPerWord = maxInputCharsPerWord;
        this.clsToken = clsToken;
        this.sepToken = sepToken;
        this.padToken = padToken;
        this.unkToken = unkToken;
        List<String> specials = new ArrayList<>();
        Collections.addAll(specials, padToken, unkToken, clsToken, sepToken, maskToken);
        this.specialTokens = Collections.unmodifiableList(specials);
    }

    /** The settings of the MiniLM / bert-base-uncased family. */
    public static TokenizerConfig bertUncased(int maxLength) {
        return new TokenizerConfig(true, true, maxLength, 100,
                "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]");
    }
}
