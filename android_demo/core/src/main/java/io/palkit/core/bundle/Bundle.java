package io.palkit.core.bundle;

import io.palkit.core.tokenizer.BertTokenizer;
import io.palkit.core.tokenizer.Vocab;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.PublicKey;
import java.util.LinkedHashSet;
import java.util.Set;

/**
 * A bundle folder whose manifest was parsed and whose every referenced file was checked against
 * the manifest's size and SHA-256. Anything BUNDLE.md says a loader must refuse throws
 * {@link BundleException} from {@link #open}.
 */
public final class Bundle {
    public final File dir;
    public final Manifest manifest;

    private Bundle(File dir, Manifest manifest) {
        this.dir = dir;
        this.manifest = manifest;
    }

    /** A bundle whose publisher is not checked: the manifest's hashes stop corruption only. */
    public static Bundle open(File dir) throws BundleException {
        return open(dir, null);
    }

    /**
     * With a trusted key, model.sig is checked first (BundleSignature steps 1-6: an unsigned,
     * foreign or edited bundle is refused before its manifest is parsed) and the manifest bytes
     * that were verified are the ones parsed; then every referenced file's size and SHA-256.
     */
    public static Bundle open(File dir, PublicKey trustedKey) throws BundleException {
        byte[] manifestBytes = trustedKey != null
                ? BundleSignature.verifiedManifest(dir, trustedKey) : readManifest(dir);
        Manifest manifest = ManifestParser.parse(new String(manifestBytes, StandardCharsets.UTF_8));
        Bundle bundle = new Bundle(dir, manifest);
        bundle.checkTrunkHashes();
        for (String path : bundle.referencedFiles()) {
            bundle.verify(path);
        }
        return bundle;
    }

    private static byte[] readManifest(File dir) throws BundleException {
        File manifestFile = new File(dir, "manifest.json");
        if (!manifestFile.isFile()) {
            throw new BundleException("no manifest.json in " + dir);
        }
        try {
            return Files.readAllBytes(manifestFile.toPath());
        } catch (IOException e) {
            throw new BundleException("cannot read " + manifestFile + ": " + e.getMessage(), e);
        }
    }

    /** Absolute file for a bundle-relative path that {@link #open} already checked. */
    public File file(String relativePath) {
        return new File(dir, relativePath);
    }

    public BertTokenizer tokenizer() throws BundleException {
        try (InputStream in = new FileInputStream(file(manifest.vocabFile))) {
            return new BertTokenizer(manifest.tokenizer, Vocab.read(in));
        } catch (IOException | IllegalArgumentException e) {
            throw new BundleException("cannot load the tokenizer: " + e.getMessage(), e);
        }
    }

    /** Total size of the files one runtime needs (trunk + every task), for the benchmark report. */
    public long bytesFor(RuntimeKind runtime) {
        long total = manifest.files.get(manifest.trunkFiles.get(runtime)).bytes;
        if (runtime == RuntimeKind.EXECUTORCH) {
            total += manifest.files.get(manifest.executorchProgram).bytes;
        }
        if (runtime == RuntimeKind.ONNXRUNTIME && manifest.onnxTrunkData != null) {
            total += manifest.files.get(manifest.onnxTrunkData).bytes;
        }
        Set<String> graphs = new LinkedHashSet<>();
        for (TaskSpec task : manifest.tasks) {
            total += manifest.files.get(task.files.get(runtime)).bytes;
            if (runtime == RuntimeKind.ONNXRUNTIME && !task.onnxModel.equals(manifest.trunkFiles.get(runtime))) {
                graphs.add(task.onnxModel);  // a graph of the task's own placement
            }
        }
        for (String graph : graphs) {
            total += manifest.files.get(graph).bytes;
        }
        return total;
    }

    private void checkTrunkHashes() throws BundleException {
        for (TaskSpec task : manifest.tasks) {
            if (!task.trunkSha256.equalsIgnoreCase(manifest.trunkSha256)) {
                throw new BundleException("task \"" + task.name + "\" was trained on another trunk"
                        + " (trunk_sha256 " + shortHash(task.trunkSha256) + ", bundle trunk "
                        + shortHash(manifest.trunkSha256) + ")");
            }
        }
    }

    /** Vocabulary, each runtime's trunk, and each task's file for every runtime present. */
    private Set<String> referencedFiles() throws BundleException {
        Set<String> paths = new LinkedHashSet<>();
        paths.add(manifest.vocabFile);
        for (RuntimeKind runtime : manifest.trunkFiles.keySet()) {
            paths.add(manifest.trunkFiles.get(runtime));
            if (runtime == RuntimeKind.EXECUTORCH) {
                paths.add(manifest.executorchProgram);
            }
            if (runtime == RuntimeKind.ONNXRUNTIME && manifest.onnxTrunkData != null) {
                paths.add(manifest.onnxTrunkData);  // ORT reads it beside the graph: check it too
            }
            for (TaskSpec task : manifest.tasks) {
                if (runtime == RuntimeKind.ONNXRUNTIME) {
                    paths.add(task.onnxModel);
                }
            }
            for (TaskSpec task : manifest.tasks) {
                String path = task.files.get(runtime);
                if (path == null) {
                    throw new BundleException("task \"" + task.name + "\" has no " + runtime.key
                            + " file although the bundle has that runtime");
                }
                paths.add(path);
            }
        }
        return paths;
    }

    private void verify(String path) throws BundleException {
        BundlePaths.requireInside(path);
        FileEntry expected = manifest.files.get(path);
        if (expected == null) {
            throw new BundleException(path + " is not listed in the manifest's files table");
        }
        File file = file(path);
        BundlePaths.requireNoSymlinkEscape(dir, file);
        if (!file.isFile()) {
            throw new BundleException("missing file " + path);
        }
        if (file.length() != expected.bytes) {
            throw new BundleException(path + " is " + file.length() + " bytes, manifest says "
                    + expected.bytes + " (incomplete copy?)");
        }
        String actual = Sha256.of(file);
        if (!actual.equalsIgnoreCase(expected.sha256)) {
            throw new BundleException(path + " is corrupt: SHA-256 " + shortHash(actual)
                    + " differs from the manifest's " + shortHash(expected.sha256));
        }
    }

    private static String shortHash(String hash) {
        return hash.length() > 12 ? hash.substring(0, 12) + "…" : hash;
    }
}
