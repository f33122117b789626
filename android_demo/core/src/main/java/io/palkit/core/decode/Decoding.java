package io.palkit.core.decode;

import java.util.ArrayList;
import java.util.List;

/**
 * The decoding rules of the set and tagging kinds, as palkit's runtime/labels.py has them (a
 * golden test holds the two equal on a real bundle's outputs).
 *
 * <p>Tags are BIO: {@code O}, {@code B-type}, {@code I-type}. Spans follow the CoNLL rule: a
 * span starts at {@code B-x}, or at an {@code I-x} whose previous tag is neither {@code B-x} nor
 * {@code I-x}, and runs over the {@code I-x} that follow it.
 */
public final class Decoding {
    private Decoding() {}

    /** Each word's tag: the best label at its first piece's row of {@code tokenRows} (row p is
     *  token p); a word without a piece (-1, or past the end of {@code firstPieces}) gets O. */
    public static List<String> wordTags(float[][] tokenRows, int[] firstPieces, List<String> labels,
            int words) {
        List<String> tags = new ArrayList<>(words);
        for (int w = 0; w < words; w++) {
            int p = w < firstPieces.length ? firstPieces[w] : -1;
            tags.add(p < 0 ? "O" : labels.get(argmax(tokenRows[p], labels.size())));
        }
        return tags;
    }

    /** The spans of one text's tags. */
    public static List<Span> bioSpans(List<String> tags) {
        List<Span> spans = new ArrayList<>();
        String kind = null;
        int start = 0;
        for (int i = 0; i < tags.size(); i++) {
            String tag = tags.get(i);
            boolean inside = tag.startsWith("I-") && tag.substring(2).equals(kind);
            if (kind != null && !inside) {
                spans.add(new Span(kind, start, i));
                kind = null;
            }
            if (!tag.equals("O") && !inside) {
                kind = tag.substring(2);
                start = i;
            }
        }
        if (kind != null) {
            spans.add(new Span(kind, start, tags.size()));
        }
        return spans;
    }

    /** The labels whose sigmoid reaches {@code threshold}; none: the most likely one alone. */
    public static List<String> labelSet(float[] logits, List<String> labels, double threshold) {
        List<String> chosen = new ArrayList<>();
        for (int j = 0; j < labels.size(); j++) {
            if (sigmoid(logits[j]) >= threshold) {
                chosen.add(labels.get(j));
            }
        }
        if (chosen.isEmpty()) {
            chosen.add(labels.get(argmax(logits, labels.size())));
        }
        return chosen;
    }

    public static double sigmoid(double x) {
        return x >= 0 ? 1.0 / (1.0 + Math.exp(-x)) : Math.exp(x) / (1.0 + Math.exp(x));
    }

    /** The first index of the largest of the first n values (ties: the first, as Python's max). */
    static int argmax(float[] values, int n) {
        int best = 0;
        for (int j = 1; j < n; j++) {
            if (values[j] > values[best]) {
                best = j;
            }
        }
        return best;
    }
}
