package io.palkit.demo.runtime;

import io.palkit.core.bundle.RuntimeKind;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;

/**
 * RuntimeVersions on a plain JVM (tests/test_android_app.py compiles and runs it with javac; no
 * JUnit, which this machine cannot download). Prints one PASS/FAIL line per case, exits 1 on a
 * failure.
 */
public final class RuntimeVersionsTest {
    private static int failed;

    public static void main(String[] args) {
        Map<RuntimeKind, String> app = versions("1.5.1", "1.31.0");
        check("all equal", RuntimeVersions.differences(versions("1.5.1", "1.31.0"), app), List.of());
        check("patch differs", RuntimeVersions.differences(versions("1.5.1", "1.31.1"), app),
                List.of("onnxruntime: bundle exported with 1.31.1, app built with 1.31.0 "
                        + "(same 1.31 release, patch level differs)"));
        check("release differs", RuntimeVersions.differences(versions("1.4.1", "1.31.0"), app),
                List.of("executorch: bundle exported with 1.4.1, app built with 1.5.1: the runtime "
                        + "may refuse this bundle; export it with the app's version or rebuild "
                        + "the app with the bundle's"));
        check("both differ, in runtime order",
                RuntimeVersions.differences(versions("1.6.0", "1.32.0"), app).size(), 2);
        check("1.5 is not 1.50", RuntimeVersions.differences(versions("1.50.1", "1.31.0"), app)
                .get(0).endsWith("rebuild the app with the bundle's"), true);
        Map<RuntimeKind, String> onnxOnly = new EnumMap<>(RuntimeKind.class);
        onnxOnly.put(RuntimeKind.ONNXRUNTIME, "1.31.0");
        check("a runtime the bundle lacks is not compared",
                RuntimeVersions.differences(onnxOnly, app), List.of());
        check("a runtime the app lacks",
                RuntimeVersions.differences(versions("1.5.1", "1.31.0"), onnxOnly).get(0),
                "executorch: bundle exported with 1.5.1, app built with none: the runtime may "
                        + "refuse this bundle; export it with the app's version or rebuild the app "
                        + "with the bundle's");
        System.out.println(failed == 0 ? "all passed" : failed + " failed");
        System.exit(failed == 0 ? 0 : 1);
    }

    private static Map<RuntimeKind, String> versions(String executorch, String onnxruntime) {
        Map<RuntimeKind, String> out = new EnumMap<>(RuntimeKind.class);
        out.put(RuntimeKind.EXECUTORCH, executorch);
        out.put(RuntimeKind.ONNXRUNTIME, onnxruntime);
        return out;
    }

    private static void check(String name, Object actual, Object expected) {
        boolean ok = expected.equals(actual);
        if (!ok) {
            failed++;
        }
        System.out.println((ok ? "PASS " : "FAIL ") + name + (ok ? "" : ": got " + actual
                + ", expected " + expected));
    }
}
