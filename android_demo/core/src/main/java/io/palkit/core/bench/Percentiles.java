package io.palkit.core.bench;

import java.util.Arrays;

/** Percentiles with linear interpolation between ranks (numpy's default), so Python agrees. */
public final class Percentiles {
    private Percentiles() {}

    public static double of(double[] samples, double percent) {
        if (samples.length == 0) {
            throw new IllegalArgumentException("no samples");
        }
        double[] sorted = samples.clone();
        Arrays.sort(sorted);
        double rank = percent / 100.0 * (sorted.length - 1);
        int lower = (int) Math.floor(rank);
        int upper = Math.min(lower + 1, sorted.length - 1);
        return sorted[lower] + (rank - lower) * (sorted[upper] - sorted[lower]);
    }
}
