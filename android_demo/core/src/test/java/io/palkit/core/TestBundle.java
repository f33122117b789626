package io.palkit.core;

import io.palkit.core.json.Json;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Writes a small, valid bundle (fake weights, real hashes) into a temp folder. Tests edit
 * {@link #manifest} or the files, then call {@link #writeManifest}.
 */
final class TestBundle {
    static final String TRUNK_SHA = "ab".repeat(32);

    final File dir;
    final Map<String, Object> manifest = new LinkedHashMap<>();
    private final Map<String, Object> files = new LinkedHashMap<>();

    TestBundle() throws IOException {
        dir = Files.createTempDirectory("palkit-bundle").toFile();
        addFile("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n##s\n");
        addFile("executorch/trunk.pte", "trunk program");
        addFile("executorch/trunk.ptd", "trunk weights");
        addFile("onnx/trunk.onnx", "trunk graph");
        List<Object> tasks = new ArrayList<>();
        tasks.add(task("sst", "single_classification", Arrays.asList("negative", "positive"), null, 2));
        tasks.add(task("stsb", "pair_regression", null, Arrays.asList(0L, 5L), 1));
        manifest.put("format", "palkit-bundle");
        manifest.put("version", 3L);
        manifest.put("palkit_version", "0.1.0");
        manifest.put("trunk", map("sha256", TRUNK_SHA, "base_model", "all-MiniLM-L6-v2",
                "hidden_size", 384L, "num_layers", 6L));
        manifest.put("tokenizer", map("vocab_file", "vocab.txt", "lowercase", true,
                "strip_accents", true, "max_length", 128L, "cls_token", "[CLS]",
                "sep_token", "[SEP]", "pad_token", "[PAD]", "unk_token", "[UNK]",
                "max_input_chars_per_word", 100L));
        manifest.put("quantization", map("scheme", "int8", "details", "test"));
        manifest.put("runtimes", map(
                "executorch", map("version", "1.5.1", "program", "executorch/trunk.pte",
                        "trunk_data", "executorch/trunk.ptd", "method", "forward",
                        "task_inputs", Arrays.asList("head.out.weight_t", "head.out.bias")),
                "onnxruntime", map("version", "1.31.1", "trunk_model", "onnx/trunk.onnx")));
        manifest.put("io", map(
                "inputs", Arrays.asList(
                        map("name", "input_ids", "dtype", "int64", "shape", Arrays.asList(1L, "seq")),
                        map("name", "attention_mask", "dtype", "int64", "shape", Arrays.asList(1L, "seq")),
                        map("name", "token_type_ids", "dtype", "int64", "shape", Arrays.asList(1L, "seq"))),
                "outputs", Arrays.asList(map("name", "logits", "dtype", "float32",
                        "shape", Arrays.asList(1L, "num_outputs")))));
        manifest.put("tasks", tasks);
        manifest.put("files", files);
        writeManifest();
    }

    private Map<String, Object> task(String name, String kind, List<String> labels,
            List<Long> range, long outputs) throws IOException {
        String pte = "executorch/" + name + ".safetensors";
        String adapter = "onnx/" + name + ".onnx_adapter";
        addFile(pte, name + " weights");
        addFile(adapter, name + " adapter");
        return map("name", name, "kind", kind, "labels", labels, "score_range", range,
                "metric", "accuracy", "num_outputs", outputs, "decoding",
                "pair_regression".equals(kind) ? "score" : "argmax", "trunk_sha256", TRUNK_SHA,
                "files", map("executorch", pte, "onnxruntime", adapter));
    }

    /** Writes a bundle file and records its true size and hash in the files table. */
    void addFile(String path, String content) throws IOException {
        byte[] bytes = content.getBytes(StandardCharsets.UTF_8);
        File file = new File(dir, path);
        file.getParentFile().mkdirs();
        Files.write(file.toPath(), bytes);
        files.put(path, map("sha256", sha256(bytes), "bytes", (long) bytes.length));
    }

    @SuppressWarnings("unchecked")
    Map<String, Object> task(int index) {
        return (Map<String, Object>) ((List<Object>) manifest.get("tasks")).get(index);
    }

    @SuppressWarnings("unchecked")
    Map<String, Object> section(String key) {
        return (Map<String, Object>) manifest.get(key);
    }

    @SuppressWarnings("unchecked")
    Map<String, Object> runtime(String key) {
        return (Map<String, Object>) section("runtimes").get(key);
    }

    void writeManifest() throws IOException {
        Files.write(new File(dir, "manifest.json").toPath(),
                Json.write(manifest).getBytes(StandardCharsets.UTF_8));
    }

    static Map<String, Object> map(Object... keysAndValues) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < keysAndValues.length; i += 2) {
            m.put((String) keysAndValues[i], keysAndValues[i + 1]);
        }
        return m;
    }

    private static String sha256(byte[] bytes) {
        try {
            StringBuilder hex = new StringBuilder();
            for (byte b : MessageDigest.getInstance("SHA-256").digest(bytes)) {
                hex.append(String.format("%02x", b));
            }
            return hex.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
