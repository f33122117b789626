package io.palkit.core.bundle;

import io.palkit.core.tokenizer.TokenizerConfig;
import java.util.List;
import java.util.Map;

/** The parts of manifest.json the app uses (see runtime/BUNDLE.md). */
public final class Manifest {
    public static final String FORMAT = "palkit-bundle";
    /** 2: an ExecuTorch task is a weights file bound to the one program (1: a program per task). */
    public static final long VERSION = 3;

    public final String trunkSha256;
    /** What --base-model named; null for the trunk palkit embeds by default. */
    public final String baseModel;
    public final String vocabFile;
    public final TokenizerConfig tokenizer;
    /** Runtime version the bundle was exported for, per runtime present. */
    public final Map<RuntimeKind, String> runtimeVersions;
    /** Bundle-relative path of the shared trunk file, per runtime present. */
    public final Map<RuntimeKind, String> trunkFiles;
    /** ONNX Runtime: the weights file its graph reads (next to it, as ONNX external data), or
     *  null where the graph holds its own. */
    public final String onnxTrunkData;
    /** ExecuTorch: the one program (its trunk constants in trunkFiles), or null without it. */
    public final String executorchProgram;
    /** ExecuTorch: the program's method for one task of the trunk's placement (each task names
     *  its own: {@link TaskSpec#executorchMethod}). */
    public final String executorchMethod;
    /** ExecuTorch: the tensor names of a weights file for that method, in its input order after
     *  the text inputs ({@link TaskSpec#executorchTaskInputs}: a task's own). */
    public final List<String> executorchTaskInputs;
    /** Model input names in the order the programs take them (ids, mask, token types). */
    public final List<String> inputNames;
    public final String outputName;
    public final List<TaskSpec> tasks;
    public final Map<String, FileEntry> files;

    Manifest(String trunkSha256, String baseModel, String vocabFile, TokenizerConfig tokenizer,
            Map<RuntimeKind, String> runtimeVersions, Map<RuntimeKind, String> trunkFiles,
            String onnxTrunkData, String executorchProgram, String executorchMethod, List<String> executorchTaskInputs,
            List<String> inputNames, String outputName, List<TaskSpec> tasks,
            Map<String, FileEntry> files) {
        this.trunkSha256 = trunkSha256;
        this.baseModel = baseModel;
        this.vocabFile = vocabFile;
        this.tokenizer = tokenizer;
        this.runtimeVersions = runtimeVersions;
        this.trunkFiles = trunkFiles;
        this.onnxTrunkData = onnxTrunkData;
        this.executorchProgram = executorchProgram;
        this.executorchMethod = executorchMethod;
        this.executorchTaskInputs = executorchTaskInputs;
        this.inputNames = inputNames;
        this.outputName = outputName;
        this.tasks = tasks;
        this.files = files;
    }
}
