package io.palkit.core.bundle;

import io.palkit.core.json.Json;
import io.palkit.core.json.JsonException;
import io.palkit.core.tokenizer.TokenizerConfig;
import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Turns manifest.json text into a {@link Manifest}. Checks format and version before anything
 * else, so a bundle from a newer exporter is refused with that reason rather than a missing key.
 */
public final class ManifestParser {
    private ManifestParser() {}

    public static Manifest parse(String text) throws BundleException {
        JsonFields root;
        try {
            root = new JsonFields(Json.parse(text), "");
        } catch (JsonException e) {
            throw new BundleException("manifest.json is not valid JSON: " + e.getMessage(), e);
        }
        checkFormatAndVersion(root);
        JsonFields trunk = root.object("trunk");
        JsonFields tokenizer = root.object("tokenizer");
        Map<RuntimeKind, String> versions = new EnumMap<>(RuntimeKind.class);
        Map<RuntimeKind, String> trunkFiles = new EnumMap<>(RuntimeKind.class);
        readRuntimes(root.object("runtimes"), versions, trunkFiles);
        JsonFields runtimes = root.object("runtimes");
        JsonFields et = runtimes.has(RuntimeKind.EXECUTORCH.key)
                ? runtimes.object(RuntimeKind.EXECUTORCH.key) : null;
        JsonFields ort = runtimes.has(RuntimeKind.ONNXRUNTIME.key)
                ? runtimes.object(RuntimeKind.ONNXRUNTIME.key) : null;
        JsonFields io = root.object("io");
        return new Manifest(
                trunk.string("sha256"),
                trunk.has("base_model") ? trunk.string("base_model") : null,
                tokenizer.string("vocab_file"),
                readTokenizer(tokenizer),
                Collections.unmodifiableMap(versions),
                Collections.unmodifiableMap(trunkFiles),
                ort != null && ort.has("trunk_data") ? ort.string("trunk_data") : null,
                et == null ? null : et.string("program"),
                et == null ? null : et.string("method"),
                et == null ? Collections.<String>emptyList()
                        : Collections.unmodifiableList(et.strings("task_inputs")),
                readNames(io, "inputs"),
                readNames(io, "outputs").get(0),
                readTasks(root, et, ort, placementOf(trunk)),
                readFiles(root.object("files")));
    }

    private static void checkFormatAndVersion(JsonFields root) throws BundleException {
        String format = root.has("format") ? String.valueOf(root.raw("format")) : "(none)";
        if (!Manifest.FORMAT.equals(format)) {
            throw new BundleException("not a palkit bundle: format is \"" + format + "\"");
        }
        Object version = root.has("version") ? root.raw("version") : "(none)";
        if (!(version instanceof Long) || (Long) version != Manifest.VERSION) {
            throw new BundleException("unsupported bundle version " + version
                    + "; this app reads version " + Manifest.VERSION
                    + " (re-export the bundle with this palkit: palkit export RUN --out BUNDLE)");
        }
    }

    private static TokenizerConfig readTokenizer(JsonFields t) throws BundleException {
        String mask = t.has("mask_token") ? t.string("mask_token") : "[MASK]";
        return new TokenizerConfig(t.bool("lowercase"), t.bool("strip_accents"),
                // 4: [CLS] a [SEP] b [SEP] must leave room for one token of text
                t.intAtLeast("max_length", 4), t.intAtLeast("max_input_chars_per_word", 1),
                t.string("cls_token"), t.string("sep_token"), t.string("pad_token"),
                t.string("unk_token"), mask);
    }

    private static void readRuntimes(JsonFields runtimes, Map<RuntimeKind, String> versions,
            Map<RuntimeKind, String> trunkFiles) throws BundleException {
        if (runtimes.has(RuntimeKind.EXECUTORCH.key)) {
            JsonFields et = runtimes.object(RuntimeKind.EXECUTORCH.key);
            versions.put(RuntimeKind.EXECUTORCH, et.string("version"));
            trunkFiles.put(RuntimeKind.EXECUTORCH, et.string("trunk_data"));
        }
        if (runtimes.has(RuntimeKind.ONNXRUNTIME.key)) {
            JsonFields ort = runtimes.object(RuntimeKind.ONNXRUNTIME.key);
            versions.put(RuntimeKind.ONNXRUNTIME, ort.string("version"));
            trunkFiles.put(RuntimeKind.ONNXRUNTIME, ort.string("trunk_model"));
        }
        if (versions.isEmpty()) {
            throw new BundleException("manifest: runtimes names neither executorch nor onnxruntime");
        }
    }

    private static List<String> readNames(JsonFields io, String key) throws BundleException {
        List<Object> items = io.list(key);
        List<String> names = new ArrayList<>();
        for (int i = 0; i < items.size(); i++) {
            names.add(new JsonFields(items.get(i), io.where(key) + "[" + i + "]").string("name"));
        }
        if (names.isEmpty()) {
            throw new BundleException("manifest: " + io.where(key) + " is empty");
        }
        return Collections.unmodifiableList(names);
    }

    private static List<TaskSpec> readTasks(JsonFields root, JsonFields et, JsonFields ort,
            List<Integer> trunkLayers) throws BundleException {
        List<Object> items = root.list("tasks");
        if (items.isEmpty()) {
            throw new BundleException("manifest: the bundle has no tasks");
        }
        List<TaskSpec> tasks = new ArrayList<>();
        for (int i = 0; i < items.size(); i++) {
            tasks.add(readTask(new JsonFields(items.get(i), "tasks[" + i + "]"), et, ort,
                    trunkLayers));
        }
        return Collections.unmodifiableList(tasks);
    }

    /** The trunk's PAL layers (the launch tasks' placement); empty when it has none. */
    private static List<Integer> placementOf(JsonFields trunk) throws BundleException {
        if (!trunk.has("pal") || trunk.raw("pal") == null) {
            return Collections.emptyList();
        }
        return layers(trunk.object("pal"), "layers");
    }

    /** A task's adapter layers: its own "adapter" record, else (older bundles) the trunk's. */
    private static List<Integer> adapterOf(JsonFields t, List<Integer> trunkLayers)
            throws BundleException {
        if (!t.has("adapter")) {
            return trunkLayers;
        }
        JsonFields adapter = t.object("adapter");
        String kind = adapter.string("kind");
        List<Integer> layers = layers(adapter, "layers");
        if (!(kind.equals("head") && layers.isEmpty()) && !(kind.equals("pal") && !layers.isEmpty())) {
            throw new BundleException("manifest: " + t.where("adapter")
                    + " must be a head (no layers) or PALs in some layers");
        }
        return layers;
    }

    private static List<Integer> layers(JsonFields f, String key) throws BundleException {
        List<Integer> out = new ArrayList<>();
        for (Object x : f.list(key)) {
            if (!(x instanceof Long) || (Long) x < 0 || (Long) x > 4096) {
                throw new BundleException("manifest: " + f.where(key) + " must list layer numbers");
            }
            out.add(((Long) x).intValue());
        }
        return Collections.unmodifiableList(out);
    }

    /** The ExecuTorch method running a task of these adapter layers, and its task inputs: the
     *  section's "method" for the trunk's placement, else the "methods" entry of that adapter. */
    private static final class Method {
        final String name;
        final List<String> taskInputs;

        Method(String name, List<String> taskInputs) {
            this.name = name;
            this.taskInputs = Collections.unmodifiableList(taskInputs);
        }
    }

    private static Method methodFor(String task, List<Integer> adapter, JsonFields et,
            List<Integer> trunkLayers) throws BundleException {
        if (adapter.equals(trunkLayers)) {
            return new Method(et.string("method"), et.strings("task_inputs"));
        }
        if (et.has("methods")) {
            JsonFields methods = et.object("methods");
            for (Map.Entry<?, ?> entry : methods.entries()) {
                String name = String.valueOf(entry.getKey());
                JsonFields m = new JsonFields(entry.getValue(), methods.where(name));
                if (layers(m.object("adapter"), "layers").equals(adapter)) {
                    return new Method(name, m.strings("task_inputs"));
                }
            }
        }
        throw new BundleException("manifest: task '" + task + "' has "
                + (adapter.isEmpty() ? "a head only" : "PALs in layers " + adapter)
                + ", for which the ExecuTorch program has no method; re-export the bundle");
    }

    /** The ONNX graph a task of these adapter layers runs in: the "graphs" entry of that
     *  adapter, else the trunk graph (whose PALs are zeros where the task has none). */
    private static String onnxModelFor(List<Integer> adapter, JsonFields ort)
            throws BundleException {
        if (ort.has("graphs")) {
            JsonFields graphs = ort.object("graphs");
            for (Map.Entry<?, ?> entry : graphs.entries()) {
                JsonFields g = new JsonFields(entry.getValue(), graphs.where(String.valueOf(entry.getKey())));
                if (layers(g.object("adapter"), "layers").equals(adapter)) {
                    return g.string("model");
                }
            }
        }
        return ort.string("trunk_model");
    }

    private static TaskSpec readTask(JsonFields t, JsonFields et, JsonFields ort,
            List<Integer> trunkLayers) throws BundleException {
        TaskKind kind = TaskKind.fromKey(t.string("kind"));
        int numOutputs = t.intAtLeast("num_outputs", 1);
        List<String> labels = kind == TaskKind.PAIR_REGRESSION
                ? Collections.<String>emptyList() : t.strings("labels");
        if (kind != TaskKind.PAIR_REGRESSION && labels.size() != numOutputs) {
            throw new BundleException("manifest: " + t.where("labels") + " has " + labels.size()
                    + " names for " + numOutputs + " outputs");
        }
        double[] scoreRange = kind == TaskKind.PAIR_REGRESSION ? readRange(t) : null;
        if (!kind.decoding.equals(t.string("decoding"))) {
            throw new BundleException("manifest: " + t.where("decoding") + " is '"
                    + t.string("decoding") + "'; this app decodes " + kind.key + " as '"
                    + kind.decoding + "'; re-export the bundle");
        }
        double threshold = kind == TaskKind.MULTI_LABEL ? readThreshold(t) : Double.NaN;
        Map<RuntimeKind, String> files = new EnumMap<>(RuntimeKind.class);
        JsonFields fileMap = t.object("files");
        for (RuntimeKind runtime : RuntimeKind.values()) {
            if (fileMap.has(runtime.key)) {
                files.put(runtime, fileMap.string(runtime.key));
            }
        }
        String name = t.string("name");
        List<Integer> adapter = adapterOf(t, trunkLayers);
        Method method = et == null ? new Method(null, Collections.<String>emptyList())
                : methodFor(name, adapter, et, trunkLayers);
        return new TaskSpec(name, kind, Collections.unmodifiableList(labels), scoreRange,
                numOutputs, threshold, t.string("trunk_sha256"), Collections.unmodifiableMap(files), adapter,
                method.name, method.taskInputs, ort == null ? null : onnxModelFor(adapter, ort));
    }

    private static double readThreshold(JsonFields t) throws BundleException {
        Object value = t.raw("threshold");
        double threshold = value instanceof Number ? ((Number) value).doubleValue() : Double.NaN;
        if (!(threshold > 0 && threshold < 1)) {
            throw new BundleException("manifest: " + t.where("threshold")
                    + " must be a number between 0 and 1");
        }
        return threshold;
    }

    private static double[] readRange(JsonFields t) throws BundleException {
        List<Object> range = t.list("score_range");
        if (range.size() != 2 || !(range.get(0) instanceof Number) || !(range.get(1) instanceof Number)) {
            throw new BundleException("manifest: " + t.where("score_range") + " must be [low, high]");
        }
        return new double[] {((Number) range.get(0)).doubleValue(), ((Number) range.get(1)).doubleValue()};
    }

    private static Map<String, FileEntry> readFiles(JsonFields files) throws BundleException {
        Map<String, FileEntry> out = new LinkedHashMap<>();
        for (Map.Entry<?, ?> entry : files.entries()) {
            String path = String.valueOf(entry.getKey());
            JsonFields f = new JsonFields(entry.getValue(), "files[\"" + path + "\"]");
            out.put(path, new FileEntry(path, f.string("sha256"), f.integer("bytes")));
        }
        return Collections.unmodifiableMap(out);
    }
}
