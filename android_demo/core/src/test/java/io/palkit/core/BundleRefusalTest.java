package io.palkit.core;

import io.palkit.core.bundle.Bundle;
import io.palkit.core.bundle.BundleException;
import io.palkit.core.bundle.Manifest;
import java.io.File;
import java.nio.file.Files;
import java.util.Map;

/** Everything BUNDLE.md says a loader must refuse, refused with a message worth showing. */
public final class BundleRefusalTest {
    private static void refused(TestBundle fixture, String fragment) throws Exception {
        fixture.writeManifest();
        Check.failsMentioning(BundleException.class, fragment, () -> Bundle.open(fixture.dir));
    }

    public static void testUnknownVersion() throws Exception {
        TestBundle fixture = new TestBundle();
        fixture.manifest.put("version", Manifest.VERSION + 1);
        refused(fixture, "unsupported bundle version " + (Manifest.VERSION + 1));
    }

    public static void testFormatOneBundleIsRefusedSayingWhatToDo() throws Exception {
        TestBundle fixture = new TestBundle();
        fixture.manifest.put("version", 1L);
        refused(fixture, "unsupported bundle version 1; this app reads version " + Manifest.VERSION + " (re-export");
    }

    public static void testUnknownFormat() throws Exception {
        TestBundle fixture = new TestBundle();
        fixture.manifest.put("format", "something-else");
        refused(fixture, "not a palkit bundle");
    }

    public static void testTaskTrainedOnAnotherTrunk() throws Exception {
        TestBundle fixture = new TestBundle();
        fixture.task(1).put("trunk_sha256", "cd".repeat(32));
        refused(fixture, "\"stsb\" was trained on another trunk");
    }

    public static void testMissingFileOnDisk() throws Exception {
        TestBundle fixture = new TestBundle();
        Files.delete(new File(fixture.dir, "onnx/sst.onnx_adapter").toPath());
        refused(fixture, "missing file onnx/sst.onnx_adapter");
    }

    public static void testFileMissingFromFilesTable() throws Exception {
        TestBundle fixture = new TestBundle();
        fixture.section("files").remove("executorch/trunk.ptd");
        refused(fixture, "executorch/trunk.ptd is not listed");
    }

    public static void testSizeMismatch() throws Exception {
        TestBundle fixture = new TestBundle();
        Files.write(new File(fixture.dir, "executorch/trunk.ptd").toPath(), "trunk".getBytes());
        refused(fixture, "manifest says");
    }

    public static void testShaMismatchWithSameSize() throws Exception {
        TestBundle fixture = new TestBundle();
        Files.write(new File(fixture.dir, "onnx/trunk.onnx").toPath(), "trunk GRAPH".getBytes());
        refused(fixture, "onnx/trunk.onnx is corrupt");
    }

    public static void testPathsEscapingTheFolder() throws Exception {
        for (String path : new String[] {"../outside.pte", "/etc/passwd", "executorch/../../x",
                "executorch//sst.pte", "./sst.pte", "executorch\\sst.pte", ""}) {
            TestBundle fixture = new TestBundle();
            ((Map<String, Object>) fixture.task(0).get("files")).put("executorch", path);
            refused(fixture, "escapes the bundle folder");
        }
    }

    public static void testSymlinkEscapingTheFolder() throws Exception {
        TestBundle fixture = new TestBundle();
        File outside = File.createTempFile("palkit-outside", ".onnx");
        Files.write(outside.toPath(), "trunk graph".getBytes());
        File link = new File(fixture.dir, "onnx/trunk.onnx");
        Files.delete(link.toPath());
        Files.createSymbolicLink(link.toPath(), outside.toPath());
        refused(fixture, "escapes the bundle folder");
    }

    public static void testTaskLackingAFileForAPresentRuntime() throws Exception {
        TestBundle fixture = new TestBundle();
        ((Map<String, Object>) fixture.task(0).get("files")).remove("executorch");
        refused(fixture, "has no executorch file");
    }

    public static void testMissingManifestKeyIsNamed() throws Exception {
        TestBundle fixture = new TestBundle();
        fixture.task(1).remove("kind");
        refused(fixture, "missing tasks[1].kind");
    }

    public static void testInvalidJson() throws Exception {
        TestBundle fixture = new TestBundle();
        Files.write(new File(fixture.dir, "manifest.json").toPath(), "{\"format\": ".getBytes());
        Check.failsMentioning(BundleException.class, "not valid JSON", () -> Bundle.open(fixture.dir));
    }

    // Found by the fuzzer (CoreFuzz manifest): max_length 3 opened, then every encode threw.
    public static void testTokenizerSettingsThatCannotEncodeAreRefused() throws Exception {
        for (long maxLength : new long[] {3L, 4294967300L}) { // the second wrapped to 4
            TestBundle fixture = new TestBundle();
            fixture.section("tokenizer").put("max_length", maxLength);
            refused(fixture, "tokenizer.max_length is " + maxLength + "; it must be 4 or more");
        }
        TestBundle fixture = new TestBundle();
        fixture.task(0).put("num_outputs", 0L);
        refused(fixture, "tasks[0].num_outputs is 0");
    }
}
