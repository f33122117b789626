package io.palkit.core;

import io.palkit.core.bundle.Bundle;
import io.palkit.core.bundle.Manifest;
import io.palkit.core.bundle.RuntimeKind;
import io.palkit.core.bundle.TaskKind;
import io.palkit.core.bundle.TaskSpec;
import io.palkit.core.tokenizer.Encoding;
import java.util.Arrays;
import java.util.Map;

public final class ManifestTest {
    public static void testOpensAValidBundle() throws Exception {
        TestBundle fixture = new TestBundle();
        Bundle bundle = Bundle.open(fixture.dir);
        Manifest m = bundle.manifest;
        Check.equal(TestBundle.TRUNK_SHA, m.trunkSha256, "trunk hash");
        Check.equal("vocab.txt", m.vocabFile, "vocab file");
        Check.equal(128, m.tokenizer.maxLength, "max length");
        Check.equal("1.5.1", m.runtimeVersions.get(RuntimeKind.EXECUTORCH), "executorch version");
        Check.equal("onnx/trunk.onnx", m.trunkFiles.get(RuntimeKind.ONNXRUNTIME), "ort trunk");
        Check.equal(Arrays.asList("input_ids", "attention_mask", "token_type_ids"), m.inputNames, "inputs");
        Check.equal("logits", m.outputName, "output");
        Check.equal(2, m.tasks.size(), "tasks");
        TaskSpec sst = m.tasks.get(0);
        Check.equal(TaskKind.SINGLE_CLASSIFICATION, sst.kind, "sst kind");
        Check.equal(Arrays.asList("negative", "positive"), sst.labels, "sst labels");
        Check.equal("executorch/sst.safetensors", sst.files.get(RuntimeKind.EXECUTORCH), "sst weights");
        Check.equal("executorch/trunk.pte", m.executorchProgram, "executorch program");
        Check.equal("forward", m.executorchMethod, "executorch method");
        Check.equal(Arrays.asList("head.out.weight_t", "head.out.bias"), m.executorchTaskInputs,
                "task inputs");
        TaskSpec stsb = m.tasks.get(1);
        Check.isTrue(stsb.kind.isPair, "stsb takes two texts");
        Check.equal(5.0, stsb.scoreRange[1], "stsb range");
        Check.equal((long) ("trunk graph".length() + "sst adapter".length() + "stsb adapter".length()),
                bundle.bytesFor(RuntimeKind.ONNXRUNTIME), "onnx bytes");
    }

    /** A task added later with its own adapter names its own method and inputs; the launch
     *  tasks keep the trunk's placement and the section's method. */
    public static void testHybridTasksNameTheirMethods() throws Exception {
        TestBundle fixture = new TestBundle();
        fixture.section("trunk").put("pal", TestBundle.map("size", 8L, "heads", 2L,
                "layers", Arrays.asList(0L, 1L), "share_projections", true));
        fixture.task(1).put("adapter", TestBundle.map("kind", "head", "layers", Arrays.asList()));
        Map<String, Object> et = fixture.runtime("executorch");
        et.put("methods", TestBundle.map("forward_head", TestBundle.map(
                "adapter", TestBundle.map("kind", "head", "layers", Arrays.asList()),
                "task_inputs", Arrays.asList("head.out.weight_t", "head.out.bias", "output.linear"))));
        fixture.writeManifest();
        Manifest m = Bundle.open(fixture.dir).manifest;
        TaskSpec sst = m.tasks.get(0);
        TaskSpec stsb = m.tasks.get(1);
        Check.equal(Arrays.asList(0, 1), sst.adapterLayers, "sst keeps the trunk's PALs");
        Check.equal("forward", sst.executorchMethod, "sst method");
        Check.equal(m.executorchTaskInputs, sst.executorchTaskInputs, "sst inputs");
        Check.isTrue(stsb.headOnly(), "stsb is a head only");
        Check.equal("forward_head", stsb.executorchMethod, "stsb method");
        Check.equal(Arrays.asList("head.out.weight_t", "head.out.bias", "output.linear"),
                stsb.executorchTaskInputs, "stsb inputs");
    }

    public static void testTaskOfAPlacementWithoutAMethodIsRefused() throws Exception {
        TestBundle fixture = new TestBundle();
        fixture.task(1).put("adapter", TestBundle.map("kind", "pal", "layers", Arrays.asList(3L)));
        fixture.writeManifest();
        Check.failsMentioning(io.palkit.core.bundle.BundleException.class,
                "task 'stsb' has PALs in layers [3], for which the ExecuTorch program has no method",
                () -> Bundle.open(fixture.dir));
        fixture.task(1).put("adapter", TestBundle.map("kind", "pal", "layers", Arrays.asList()));
        fixture.writeManifest();
        Check.failsMentioning(io.palkit.core.bundle.BundleException.class,
                "must be a head (no layers) or PALs", () -> Bundle.open(fixture.dir));
    }

    public static void testBundleTokenizerUsesManifestSettings() throws Exception {
        Bundle bundle = Bundle.open(new TestBundle().dir);
        Encoding e = bundle.tokenizer().encodePair("Hello worlds", "HELLO [MASK]");
        Check.equal(new long[] {2, 5, 6, 7, 3, 5, 4, 3}, e.inputIds, "ids");
        Check.equal(new long[] {0, 0, 0, 0, 0, 1, 1, 1}, e.tokenTypeIds, "types");
    }

    public static void testOneRuntimeIsEnough() throws Exception {
        TestBundle fixture = new TestBundle();
        fixture.section("runtimes").remove("executorch");
        fixture.task(0).put("files", TestBundle.map("onnxruntime", "onnx/sst.onnx_adapter"));
        fixture.writeManifest();
        Check.equal(1, Bundle.open(fixture.dir).manifest.trunkFiles.size(), "runtimes");
    }

    public static void testDefaultTrunkHasNoBaseModel() throws Exception {
        TestBundle fixture = new TestBundle();
        fixture.section("trunk").put("base_model", null); // what export writes without --base-model
        fixture.writeManifest();
        Check.equal(null, Bundle.open(fixture.dir).manifest.baseModel, "base model");
    }

    public static void testOptionalMaskTokenIsRead() throws Exception {
        TestBundle fixture = new TestBundle();
        fixture.section("tokenizer").put("mask_token", "[MASK]");
        fixture.writeManifest();
        Check.isTrue(Bundle.open(fixture.dir).manifest.tokenizer.specialTokens.contains("[MASK]"),
                "mask token");
    }
}
