package io.palkit.host;

import io.palkit.core.bundle.Bundle;
import io.palkit.core.bundle.TaskSpec;
import io.palkit.core.tokenizer.Encoding;
import io.palkit.demo.runtime.ExecuTorchTasks;
import java.io.File;
import java.util.Arrays;

/**
 * What the app does between its two tabs, on the host: "Try it" loads every task with one
 * thread count, "Benchmark" asks for another, then "Try it" runs its programs again. ExecuTorch's
 * XNNPACK delegates keep the raw thread pool they were loaded with, so a resize while they are
 * loaded would leave them on a freed pool; the JNI must refuse that resize, and a resize with no
 * program loaded must take effect. One line per step on stdout; exit 1 when a step goes wrong.
 *
 * <pre>
 * ThreadPoolProbe BUNDLE TRY_THREADS BENCH_THREADS TEXT
 * </pre>
 */
public final class ThreadPoolProbe {
    private ThreadPoolProbe() {}

    public static void main(String[] args) throws Exception {
        Bundle bundle = Bundle.open(new File(args[0]), null);
        int tryThreads = Integer.parseInt(args[1]);
        int benchThreads = Integer.parseInt(args[2]);
        TaskSpec task = bundle.manifest.tasks.get(0);
        Encoding input = task.kind.isPair
                ? bundle.tokenizer().encodePair(args[3], args[3]) : bundle.tokenizer().encode(args[3]);

        ExecuTorchTasks tryIt = new ExecuTorchTasks(bundle, tryThreads);
        float[] first = tryIt.run(task, input);
        System.out.println("try-it loaded: " + task.name);

        // The benchmark's thread count while "Try it" still holds its programs.
        try (ExecuTorchTasks bench = new ExecuTorchTasks(bundle, benchThreads)) {
            bench.run(task, input);
            System.out.println("bench while loaded: ran");
        } catch (IllegalStateException refused) {
            System.out.println("bench while loaded: refused: " + refused.getMessage());
        }
        float[] again = tryIt.run(task, input);
        System.out.println("try-it again: " + (Arrays.equals(first, again) ? "same" : "DIFFERENT"));

        // What the app does: close "Try it", benchmark, then "Try it" loads afresh.
        tryIt.close();
        try (ExecuTorchTasks bench = new ExecuTorchTasks(bundle, benchThreads)) {
            float[] benched = bench.run(task, input);
            System.out.println("bench after close: " + (Arrays.equals(first, benched)
                    ? "same" : "DIFFERENT"));
        }
        try (ExecuTorchTasks reloaded = new ExecuTorchTasks(bundle, tryThreads)) {
            float[] last = reloaded.run(task, input);
            System.out.println("try-it reloaded: " + (Arrays.equals(first, last) ? "same" : "DIFFERENT"));
        }
    }
}
