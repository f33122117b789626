package io.palkit.host;

import io.palkit.core.bench.Percentiles;
import io.palkit.core.bundle.Bundle;
import io.palkit.core.bundle.BundleException;
import io.palkit.core.bundle.BundleSignature;
import io.palkit.core.bundle.BundleSignatureException;
import io.palkit.core.bundle.TaskKind;
import io.palkit.core.bundle.TaskSpec;
import io.palkit.core.decode.TaskRows;
import io.palkit.core.json.Json;
import io.palkit.core.json.JsonException;
import io.palkit.core.tokenizer.BertTokenizer;
import io.palkit.core.tokenizer.Encoding;
import io.palkit.demo.runtime.ExecuTorchProgram;
import io.palkit.demo.runtime.ExecuTorchTasks;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.PublicKey;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Drives the app's ExecuTorch path on the host, the way the app does: {@link Bundle#open} checks
 * the manifest and every file, the core tokenizer encodes, {@link ExecuTorchTasks} opens the
 * bundle's one program against trunk.ptd and binds each task's weights file through the JNI
 * library. Prints one JSON document on stdout.
 * Exit status 3 with one line on stderr when the bundle or a program is refused.
 *
 * <p>With {@code --trust-key PEM} before the command (palkit passes the key its own loaders
 * trust: --trust-key, else $PALKIT_TRUST_KEY), as the app with its assets/trusted_key.pem: run,
 * bench and score refuse a bundle without that key's valid model.sig before the manifest is
 * parsed, and program, which loads files no manifest vouches for, is refused. The harness reads
 * no environment variable: the caller decides the key. Before exiting, one stderr line says whether the
 * JNI library was ever loaded into the process ("native runtime loaded: yes|no", read from
 * /proc/self/maps), so tests can tell that a refused bundle never reached native code.
 *
 * <pre>
 * [--trust-key PEM] COMMAND ARGS...
 * run BUNDLE THREADS TEXT PAIR TASK...      logits of each TASK in turn (pair tasks read PAIR)
 * program PTE PTD WEIGHTS NAME...           load the program with that data file and one task's
 *                                           weights (tensors NAME... in input order), run once
 * bench BUNDLE THREADS INPUT_JSON WARMUP RUNS   latency and resident memory of every task
 * score BUNDLE THREADS INPUTS_JSONL         logits of every line's input, in order; a line is
 *                                           {"task": NAME, "input_ids": [...],
 *                                           "token_type_ids": [...]} (many examples, one JVM)
 * </pre>
 */
public final class HostHarness {
    private static final String TRUST_KEY_FLAG = "--trust-key";

    private HostHarness() {}

    public static void main(String[] argv) throws Exception {
        try {
            boolean keyed = argv.length >= 2 && argv[0].equals(TRUST_KEY_FLAG);
            PublicKey trustedKey = keyed ? trustedKey(argv[1]) : null;
            String[] args = keyed ? Arrays.copyOfRange(argv, 2, argv.length) : argv;
            switch (args.length == 0 ? "" : args[0]) {
                case "run":
                    System.out.print(Json.write(run(args, trustedKey)));
                    break;
                case "program":
                    if (trustedKey != null) {
                        throw new BundleException("program loads files no signed manifest vouches "
                                + "for; give no " + TRUST_KEY_FLAG + " to probe the runtime directly");
                    }
                    System.out.print(Json.write(program(args)));
                    break;
                case "bench":
                    System.out.print(Json.write(bench(args, trustedKey)));
                    break;
                case "score":
                    System.out.print(Json.write(score(args, trustedKey)));
                    break;
                default:
                    System.err.println("usage: [--trust-key PEM] run|program|bench|score ... "
                            + "(see HostHarness.java)");
                    System.exit(2);
            }
            System.err.println(nativeStatus());
        } catch (BundleException | IllegalStateException e) {
            System.err.println(nativeStatus());
            System.err.println("refused: " + e.getMessage());
            System.exit(3);
        }
    }

    /** The signer's public key in the .pub.pem file at {@code path}. */
    private static PublicKey trustedKey(String path) throws BundleException, IOException {
        File pem = new File(path);
        if (!pem.isFile()) {
            throw new BundleSignatureException(pem, "bad_key", "trusted key not found; give the "
                    + "signer's public key (a .pub.pem file)");
        }
        try (InputStream in = new FileInputStream(pem)) {
            return BundleSignature.readTrustedKey(in, pem);
        }
    }

    private static String nativeStatus() throws IOException {
        boolean loaded = Files.readAllLines(Paths.get("/proc/self/maps")).stream()
                .anyMatch(line -> line.endsWith("/" + System.mapLibraryName("palkit_executorch")));
        return "native runtime loaded: " + (loaded ? "yes" : "no");
    }

    private static List<Object> run(String[] args, PublicKey trustedKey) throws BundleException {
        Bundle bundle = Bundle.open(new File(args[1]), trustedKey);
        BertTokenizer tokenizer = bundle.tokenizer();
        List<Object> out = new ArrayList<>();
        try (ExecuTorchTasks tasks = new ExecuTorchTasks(bundle, Integer.parseInt(args[2]))) {
            for (int i = 5; i < args.length; i++) {
                TaskSpec task = task(bundle, args[i]);
                Encoding input = task.kind.isPair
                        ? tokenizer.encodePair(args[3], args[4]) : tokenizer.encode(args[3]);
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("task", task.name);
                row.put("input_ids", longs(input.inputIds));
                row.put("token_type_ids", longs(input.tokenTypeIds));
                row.put("logits", values(task, tasks.run(task, input), input.length()));
                out.add(row);
            }
        }
        return out;
    }

    /** score BUNDLE THREADS INPUTS_JSONL: the logits of each line's already tokenized input. */
    private static List<Object> score(String[] args, PublicKey trustedKey)
            throws BundleException, IOException, JsonException {
        Bundle bundle = Bundle.open(new File(args[1]), trustedKey);
        List<Object> out = new ArrayList<>();
        try (ExecuTorchTasks tasks = new ExecuTorchTasks(bundle, Integer.parseInt(args[2]))) {
            for (String line : Files.readAllLines(Paths.get(args[3]), StandardCharsets.UTF_8)) {
                if (line.isBlank()) {
                    continue;
                }
                Map<?, ?> json = (Map<?, ?>) Json.parse(line);
                Encoding input = new Encoding(toLongs(json.get("input_ids")),
                        toLongs(json.get("token_type_ids")));
                TaskSpec task = task(bundle, (String) json.get("task"));
                out.add(values(task, tasks.run(task, input), input.length()));
            }
        }
        return out;
    }

    /** program PTE PTD WEIGHTS INPUT_NAME...: the raw runtime, no manifest (a probe). */
    private static Map<String, Object> program(String[] args) {
        long[] ids = {2, 5, 3}; // three ids that exist in any BERT vocabulary
        long[] ones = {1, 1, 1};
        List<String> names = Arrays.asList(args).subList(4, args.length);
        try (ExecuTorchProgram program = new ExecuTorchProgram(args[1], args[2], "forward", 1)) {
            long weights = ExecuTorchProgram.bind(args[3], names);
            try {
                float[] rows = program.forward(weights, ids, ones, new long[ids.length]);
                // row 0, the sentence row, of [1 + tokens, columns]
                return Map.of("logits", floats(Arrays.copyOf(rows, rows.length / (1 + ids.length))));
            } finally {
                ExecuTorchProgram.release(weights);
            }
        }
    }

    private static Map<String, Object> bench(String[] args, PublicKey trustedKey)
            throws BundleException, IOException, JsonException, ClassNotFoundException {
        Bundle bundle = Bundle.open(new File(args[1]), trustedKey);
        int threads = Integer.parseInt(args[2]);
        Encoding input = readInput(args[3]);
        int warmup = Integer.parseInt(args[4]);
        int runs = Integer.parseInt(args[5]);
        // Load the JNI library (and ExecuTorch with it) before the first reading.
        Class.forName(ExecuTorchProgram.class.getName(), true, HostHarness.class.getClassLoader());
        Map<String, Object> rss = new LinkedHashMap<>();
        rss.put("runtime_loaded", residentBytes());
        Map<String, Object> swapMs = new LinkedHashMap<>();
        Map<String, Object> swapAndRunMs = new LinkedHashMap<>();
        long opening = System.nanoTime();
        try (ExecuTorchTasks tasks = new ExecuTorchTasks(bundle, threads)) { // binds every task
            double openMs = (System.nanoTime() - opening) / 1e6;
            double loadMs = 0;
            for (TaskSpec task : bundle.manifest.tasks) {
                long start = System.nanoTime();
                tasks.load(task); // the swap: the task's weights, bound when the bundle opened
                double swap = (System.nanoTime() - start) / 1e6;
                tasks.run(task, input);
                double ms = (System.nanoTime() - start) / 1e6;
                if (task == bundle.manifest.tasks.get(0)) {
                    loadMs = openMs + ms;
                    rss.put("one_task", residentBytes());
                } else {
                    swapMs.put(task.name, swap);
                    swapAndRunMs.put(task.name, ms);
                }
            }
            rss.put("all_tasks", residentBytes());
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("threads", threads);
            out.put("seq_len", input.length());
            out.put("tasks", bundle.manifest.tasks.stream().map(t -> t.name).toList());
            out.put("open_ms", openMs); // the program loaded, every task's weights read
            out.put("first_load_and_run_ms", loadMs);
            out.put("swap_ms", swapMs);
            out.put("swap_and_run_ms", swapAndRunMs);
            out.put("rows", time(bundle.manifest.tasks, tasks, input, warmup, runs));
            rss.put("after_runs", residentBytes());
            out.put("rss_bytes", rss);
            return out;
        }
    }

    /** Timed in rounds, one call of each configuration per round, as bench/worker.py does. */
    private static List<Object> time(List<TaskSpec> taskList, ExecuTorchTasks tasks, Encoding input,
            int warmup, int runs) {
        int configs = taskList.size() + 1; // each task, then all tasks in turn
        double[][] samples = new double[configs][runs];
        for (int round = -warmup; round < runs; round++) {
            for (int c = 0; c < configs; c++) {
                long start = System.nanoTime();
                for (TaskSpec task : c < taskList.size() ? List.of(taskList.get(c)) : taskList) {
                    tasks.run(task, input);
                }
                if (round >= 0) {
                    samples[c][round] = (System.nanoTime() - start) / 1e6;
                }
            }
        }
        List<Object> rows = new ArrayList<>();
        for (int c = 0; c < configs; c++) {
            Map<String, Object> row = new LinkedHashMap<>();
            if (c < taskList.size()) {
                row.put("config", "task:" + taskList.get(c).name);
            } else {
                row.put("config", "all_tasks");
                row.put("all_tasks_mode", "sequential"); // as the app runs them: one call each
            }
            row.put("p50_ms", Percentiles.of(samples[c], 50));
            row.put("p90_ms", Percentiles.of(samples[c], 90));
            row.put("min_ms", Percentiles.of(samples[c], 0));
            row.put("runs", runs);
            rows.add(row);
        }
        return rows;
    }

    private static TaskSpec task(Bundle bundle, String name) throws BundleException {
        for (TaskSpec task : bundle.manifest.tasks) {
            if (task.name.equals(name)) {
                return task;
            }
        }
        throw new BundleException("the bundle has no task \"" + name + "\"");
    }

    /** {"input_ids": [...], "token_type_ids": [...]}: every token attended, as the app sends. */
    private static Encoding readInput(String path) throws IOException, JsonException {
        Map<?, ?> json = (Map<?, ?>) Json.parse(
                new String(Files.readAllBytes(Paths.get(path)), StandardCharsets.UTF_8));
        return new Encoding(toLongs(json.get("input_ids")), toLongs(json.get("token_type_ids")));
    }

    private static long[] toLongs(Object list) {
        return ((List<?>) list).stream().mapToLong(v -> ((Number) v).longValue()).toArray();
    }

    private static List<Object> longs(long[] values) {
        List<Object> out = new ArrayList<>();
        for (long v : values) {
            out.add(v);
        }
        return out;
    }

    /** The task's values from its output rows, as palkit's TaskEntry.rows gives them: the
     *  sentence row's, or a tagging task's row per token. */
    private static List<Object> values(TaskSpec task, float[] rows, int tokens) {
        if (task.kind != TaskKind.TOKEN_TAGGING) {
            return floats(TaskRows.sentence(rows, task.numOutputs));
        }
        List<Object> out = new ArrayList<>();
        for (float[] row : TaskRows.tokens(rows, tokens, task.numOutputs)) {
            out.add(floats(row));
        }
        return out;
    }

    private static List<Object> floats(float[] values) {
        List<Object> out = new ArrayList<>();
        for (float v : values) {
            out.add((double) v);
        }
        return out;
    }

    /** VmRSS, read the way the app's Benchmark reads it. */
    private static long residentBytes() throws IOException {
        for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
            if (line.startsWith("VmRSS:")) {
                return Long.parseLong(line.split("\\s+")[1]) * 1024;
            }
        }
        throw new IOException("no VmRSS in /proc/self/status");
    }
}
