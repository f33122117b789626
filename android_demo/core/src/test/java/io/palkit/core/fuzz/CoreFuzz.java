package io.palkit.core.fuzz;

import io.palkit.core.json.Json;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

/**
 * A coverage-free mutation fuzzer for the app core's parsers (Jazzer is not installable offline:
 * it comes from Maven Central). Each target mutates its seed inputs (Mutator), feeds them to
 * the core, and counts as a crash any exception other than the documented one (FuzzTargets) or a
 * broken invariant; an input running longer than --hang-ms is a hang. The first input of each
 * distinct crash (exception class and core frame) is written to --out as a reproducer, and the
 * slowest input of each target as TARGET-slowest.txt.
 *
 * <pre>
 * java -Dpalkit.signing=DIR -Dpalkit.golden=FILE -Dpalkit.vocab=FILE io.palkit.core.fuzz.CoreFuzz
 *      [--inputs N] [--seconds S] [--seed N] [--hang-ms MS] [--out DIR] TARGET...
 * ... io.palkit.core.fuzz.CoreFuzz --replay FILE TARGET      one saved input, 5 timed runs
 * TARGET: json | manifest | signature | tokenizer
 * </pre>
 * Prints one JSON list (a row per target: inputs, accepted, refused, crashes, max_ms) on stdout;
 * exit status 0 when no target crashed, 1 on a crash, 3 on a hang.
 */
public final class CoreFuzz {
    private final long seed;
    private final long maxInputs;
    private final double maxSeconds;
    private final File out;
    private final Watchdog watchdog;

    private CoreFuzz(long seed, long maxInputs, double maxSeconds, long hangMs, File out) {
        this.seed = seed;
        this.maxInputs = maxInputs;
        this.maxSeconds = maxSeconds;
        this.out = out;
        this.watchdog = new Watchdog(hangMs, this::saveHang);
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> options = new LinkedHashMap<>();
        options.put("--inputs", "10000");
        options.put("--seconds", "1e9");
        options.put("--seed", "1");
        options.put("--hang-ms", "10000");
        options.put("--out", "");
        options.put("--replay", "");
        List<String> targets = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if (options.containsKey(args[i]) && i + 1 < args.length) {
                options.put(args[i], args[++i]);
            } else if (FuzzTargets.NAMES.contains(args[i])) {
                targets.add(args[i]);
            } else {
                System.err.println("usage: CoreFuzz [--inputs N] [--seconds S] [--seed N] "
                        + "[--hang-ms MS] [--out DIR] " + String.join("|", FuzzTargets.NAMES) + "...");
                System.exit(2);
            }
        }
        if (!options.get("--replay").isEmpty() && targets.size() == 1) {
            replay(FuzzTargets.create(targets.get(0), new Random(1)), new File(options.get("--replay")));
            return;
        }
        String outDir = options.get("--out");
        CoreFuzz fuzz = new CoreFuzz(Long.parseLong(options.get("--seed")),
                Long.parseLong(options.get("--inputs")), Double.parseDouble(options.get("--seconds")),
                Long.parseLong(options.get("--hang-ms")), outDir.isEmpty() ? null : new File(outDir));
        List<Object> rows = new ArrayList<>();
        boolean crashed = false;
        for (String name : targets.isEmpty() ? FuzzTargets.NAMES : targets) {
            Map<String, Object> row = fuzz.campaign(FuzzTargets.create(name, new Random(fuzz.seed)));
            crashed |= (Long) row.get("crashes") > 0;
            rows.add(row);
        }
        System.out.print(Json.write(rows));
        System.exit(crashed ? 1 : 0);
    }

    private Map<String, Object> campaign(FuzzTargets.Target target) throws IOException {
        long inputs = 0;
        long accepted = 0;
        long refused = 0;
        long maxNanos = 0;
        String slowest = "";
        Map<String, Long> crashes = new LinkedHashMap<>();
        long start = System.nanoTime();
        watchdog.startThread();
        while (inputs < maxInputs && (System.nanoTime() - start) / 1e9 < maxSeconds) {
            String input = target.mutator.next();
            inputs++;
            long began = System.nanoTime();
            watchdog.arm(target.name, input);
            try {
                if (target.run(input)) {
                    accepted++;
                    target.mutator.keep(input);
                }
            } catch (Throwable thrown) {
                if (target.documents(thrown)) {
                    refused++;
                } else {
                    String site = site(thrown);
                    if (crashes.merge(site, 1L, Long::sum) == 1L) {
                        saveCrash(target.name, crashes.size(), site, input, thrown);
                    }
                }
            }
            watchdog.disarm();
            if (System.nanoTime() - began > maxNanos) {
                maxNanos = System.nanoTime() - began;
                slowest = input;
            }
        }
        if (out != null) { // to time it alone: a slow maximum may be a GC pause, or a slow path
            out.mkdirs();
            Files.write(new File(out, target.name + "-slowest.txt").toPath(),
                    slowest.getBytes(StandardCharsets.UTF_8));
        }
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("target", target.name);
        row.put("inputs", inputs);
        row.put("accepted", accepted);
        row.put("refused", refused);
        row.put("crashes", crashes.values().stream().mapToLong(Long::longValue).sum());
        row.put("crash_sites", new ArrayList<Object>(crashes.keySet()));
        row.put("hangs", 0L);
        row.put("max_ms", maxNanos / 1e6);
        row.put("seconds", (System.nanoTime() - start) / 1e9);
        row.put("seed", seed);
        return row;
    }

    /** Runs one saved input (a reproducer, a slowest input) 5 times: its outcome and times. */
    private static void replay(FuzzTargets.Target target, File file) throws IOException {
        String input = new String(Files.readAllBytes(file.toPath()), StandardCharsets.UTF_8);
        for (int i = 0; i < 5; i++) {
            long began = System.nanoTime();
            String outcome;
            try {
                outcome = target.run(input) ? "accepted" : "ran";
            } catch (Throwable thrown) {
                outcome = (target.documents(thrown) ? "refused: " : "CRASH: ") + thrown;
            }
            System.out.printf("%s %.2f ms: %s%n", target.name, (System.nanoTime() - began) / 1e6,
                    outcome);
        }
    }

    /** The exception class and the innermost core frame: one reproducer per distinct bug. */
    private static String site(Throwable thrown) {
        for (StackTraceElement frame : thrown.getStackTrace()) {
            if (frame.getClassName().startsWith("io.palkit.core.")
                    && !frame.getClassName().startsWith("io.palkit.core.fuzz.")) {
                return thrown.getClass().getName() + " at " + frame;
            }
        }
        return thrown.getClass().getName() + ": " + thrown.getMessage();
    }

    private void saveCrash(String target, int index, String site, String input, Throwable thrown)
            throws IOException {
        System.err.println("CRASH " + target + " #" + index + ": " + site + " (" + thrown + ")");
        if (out != null) {
            out.mkdirs();
            Files.write(new File(out, target + "-crash-" + index + ".txt").toPath(),
                    input.getBytes(StandardCharsets.UTF_8));
        }
    }

    private void saveHang(String target, String input, long ms) {
        System.err.println("HANG " + target + ": one input ran over " + ms + " ms");
        try {
            if (out != null) {
                out.mkdirs();
                Files.write(new File(out, target + "-hang.txt").toPath(),
                        input.getBytes(StandardCharsets.UTF_8));
            }
        } catch (IOException e) {
            System.err.println("could not save the hang's input: " + e);
        }
        System.out.print(Json.write(List.of(Map.of("target", target, "hangs", 1L))));
        System.out.flush();
        Runtime.getRuntime().halt(3);
    }

    /** Halts the process when one input runs past the limit (a hang never returns to the loop). */
    private static final class Watchdog {
        interface OnHang {
            void hang(String target, String input, long ms);
        }

        private final long limitMs;
        private final OnHang onHang;
        private volatile long armedAt;
        private volatile String target;
        private volatile String input;
        private Thread thread;

        Watchdog(long limitMs, OnHang onHang) {
            this.limitMs = limitMs;
            this.onHang = onHang;
        }

        void startThread() {
            if (thread != null) {
                return;
            }
            thread = new Thread(() -> {
                while (true) {
                    long at = armedAt;
                    if (at != 0 && (System.nanoTime() - at) / 1_000_000 > limitMs) {
                        onHang.hang(target, input, limitMs);
                    }
                    try {
                        Thread.sleep(50);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }, "fuzz-watchdog");
            thread.setDaemon(true);
            thread.start();
        }

        void arm(String target, String input) {
            this.target = target;
            this.input = input;
            armedAt = System.nanoTime();
        }

        void disarm() {
            armedAt = 0;
        }
    }
}
