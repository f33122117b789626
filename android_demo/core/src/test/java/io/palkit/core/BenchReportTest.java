package io.palkit.core;

import io.palkit.core.bench.BenchReport;
import io.palkit.core.bench.Percentiles;
import io.palkit.core.json.Json;
import java.util.List;
import java.util.Map;

public final class BenchReportTest {
    public static void testPercentilesInterpolateLikeNumpy() {
        double[] samples = {5, 1, 4, 2, 3};
        Check.equal(3.0, Percentiles.of(samples, 50), "p50");
        Check.equal(4.6, Math.round(Percentiles.of(samples, 90) * 1e9) / 1e9, "p90");
        Check.equal(7.0, Percentiles.of(new double[] {7}, 90), "single sample");
    }

    public static void testReportFollowsTheReadmeSchema() throws Exception {
        BenchReport report = new BenchReport("Google", "Pixel 8", "14", "arm64-v8a");
        report.bundleSize("onnxruntime_bytes", 1234L);
        report.result("onnxruntime", "task:sst", 4, 128, new double[] {2, 4, 6});
        report.result("executorch", "all_tasks", 4, 128, new double[] {10});
        report.loadMs("onnxruntime", 12.3456);
        report.swapMs("onnxruntime", 0.5);
        report.memoryRssBytes("after_load_onnxruntime", 99L);
        Map<?, ?> json = (Map<?, ?>) Json.parse(report.toJson());
        Check.equal("palkit-bench", json.get("schema"), "schema");
        Check.equal(1L, json.get("version"), "version");
        Map<?, ?> machine = (Map<?, ?>) json.get("machine");
        Check.equal("android", machine.get("kind"), "kind");
        Check.equal("Pixel 8", machine.get("model"), "model");
        Check.equal("14", machine.get("android_version"), "android version");
        Map<?, ?> first = (Map<?, ?>) ((List<?>) json.get("results")).get(0);
        Check.equal("task:sst", first.get("config"), "config");
        Check.equal(4.0, first.get("p50_ms"), "p50");
        Check.equal(5.6, first.get("p90_ms"), "p90");
        Check.equal(3L, first.get("runs"), "runs");
        Check.equal(12.346, ((Map<?, ?>) json.get("load_ms")).get("onnxruntime"), "load ms");
        Check.equal(99L, ((Map<?, ?>) json.get("memory_rss_bytes")).get("after_load_onnxruntime"), "rss");
    }
}
