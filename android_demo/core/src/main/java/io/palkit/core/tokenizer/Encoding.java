package io.palkit.core.tokenizer;

import java.util.Arrays;

/** Model inputs for one example, unpadded: every position is a real token (attention mask 1). */
public final class Encoding {
    public final long[] inputIds;
    public final long[] tokenTypeIds;
    public final long[] attentionMask;

    public Encoding(long[] inputIds, long[] tokenTypeIds) {
        this.inputIds = inputIds;
        this.tokenTypeIds = tokenTypeIds;
        this.attentionMask = new long[inputIds.length];
        Arrays.fill(attentionMask, 1L);
    }

    public int length() {
        return inputIds.length;
    }
}
