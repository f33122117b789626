package io.palkit.core.bench;

import io.palkit.core.json.Json;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Builds the "palkit-bench" JSON the app exports (schema in android_demo/README.md), which
 * `python cli.py report --device-results FILE` reads.
 */
public final class BenchReport {
    public static final String SCHEMA = "palkit-bench";
    public static final int VERSION = 1;

    private final Map<String, Object> machine = new LinkedHashMap<>();
    private final Map<String, Object> bundle = new LinkedHashMap<>();
    private final List<Object> results = new ArrayList<>();
    private final Map<String, Object> loadMs = new LinkedHashMap<>();
    private final Map<String, Object> swapMs = new LinkedHashMap<>();
    private final Map<String, Object> memoryRssBytes = new LinkedHashMap<>();

    public BenchReport(String manufacturer, String model, String androidVersion, String abi) {
        machine.put("kind", "android");
        machine.put("manufacturer", manufacturer);
        machine.put("model", model);
        machine.put("android_version", androidVersion);
        machine.put("abi", abi);
    }

    /** A bundle size entry, e.g. ("onnxruntime_bytes", 23000000). */
    public void bundleSize(String key, long bytes) {
        bundle.put(key, bytes);
    }

    /** @param config "task:NAME" for one task, "all_tasks" for every task in turn */
    public void result(String runtime, String config, int threads, int seqLen, double[] latenciesMs) {
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("runtime", runtime);
        row.put("config", config);
        row.put("threads", threads);
        row.put("seq_len", seqLen);
        row.put("p50_ms", round(Percentiles.of(latenciesMs, 50)));
        row.put("p90_ms", round(Percentiles.of(latenciesMs, 90)));
        row.put("runs", latenciesMs.length);
        results.add(row);
    }

    public void loadMs(String runtime, double ms) {
        loadMs.put(runtime, round(ms));
    }

    public void swapMs(String runtime, double ms) {
        swapMs.put(runtime, round(ms));
    }

    /** @param when e.g. "after_load_onnxruntime", "peak" */
    public void memoryRssBytes(String when, long bytes) {
        memoryRssBytes.put(when, bytes);
    }

    public String toJson() {
        Map<String, Object> root = new LinkedHashMap<>();
        root.put("schema", SCHEMA);
        root.put("version", VERSION);
        root.put("machine", machine);
        root.put("bundle", bundle);
        root.put("results", results);
        root.put("load_ms", loadMs);
        root.put("swap_ms", swapMs);
        root.put("memory_rss_bytes", memoryRssBytes);
        return Json.write(root);
    }

    private static double round(double ms) {
        return Math.round(ms * 1000.0) / 1000.0;
    }
}
