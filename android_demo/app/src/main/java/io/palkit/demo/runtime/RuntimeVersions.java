package io.palkit.demo.runtime;

import io.palkit.core.bundle.RuntimeKind;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The runtime versions a bundle was exported with (its manifest) against the ones this app was
 * built with (BuildConfig, from gradle/libs.versions.toml). Plain Java, so it is tested on a JVM.
 */
public final class RuntimeVersions {
    private RuntimeVersions() {}

    /**
     * One line to show per runtime of the bundle whose version differs from the app's, in
     * {@link RuntimeKind} order; empty when every runtime matches.
     */
    public static List<String> differences(Map<RuntimeKind, String> exported,
            Map<RuntimeKind, String> built) {
        List<String> lines = new ArrayList<>();
        for (RuntimeKind runtime : RuntimeKind.values()) {
            String bundle = exported.get(runtime);
            String app = built.get(runtime);
            if (bundle == null || bundle.equals(app)) {
                continue;
            }
            String line = runtime.key + ": bundle exported with " + bundle + ", app built with "
                    + (app == null ? "none" : app);
            if (app != null && release(bundle).equals(release(app))) {
                lines.add(line + " (same " + release(app) + " release, patch level differs)");
            } else {
                lines.add(line + ": the runtime may refuse this bundle; export it with the "
                        + "app's version or rebuild the app with the bundle's");
            }
        }
        return lines;
    }

    /** "1.31" of "1.31.1"; a version without two dots stands for itself. */
    private static String release(String version) {
        int first = version.indexOf('.');
        int second = first < 0 ? -1 : version.indexOf('.', first + 1);
        return second < 0 ? version : version.substring(0, second);
    }
}
