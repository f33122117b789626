package io.palkit.core.decode;

import java.util.Arrays;

/**
 * A task's output as the bundle's programs return it (runtime/BUNDLE.md, "Output rows"): rows
 * [1 + seq, columns] flattened row-major. Row 0 is the head on the pooled sentence, row 1 + p
 * the head on token p; a task's values are the first numOutputs columns of a row.
 */
public final class TaskRows {
    private TaskRows() {}

    /** A sentence task's outputs: row 0's first {@code numOutputs} values. */
    public static float[] sentence(float[] rows, int numOutputs) {
        return Arrays.copyOf(rows, numOutputs);
    }

    /** A tagging task's outputs: one row per token of an input of {@code tokens} tokens. */
    public static float[][] tokens(float[] rows, int tokens, int numOutputs) {
        int columns = rows.length / (1 + tokens);
        if (columns * (1 + tokens) != rows.length || columns < numOutputs) {
            throw new IllegalArgumentException("the output holds " + rows.length + " values, not "
                    + (1 + tokens) + " rows of at least " + numOutputs);
        }
        float[][] out = new float[tokens][];
        for (int p = 0; p < tokens; p++) {
            int from = (1 + p) * columns;
            out[p] = Arrays.copyOfRange(rows, from, from + numOutputs);
        }
        return out;
    }
}
