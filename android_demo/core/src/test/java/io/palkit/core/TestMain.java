package io.palkit.core;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.Arrays;
import java.util.Comparator;

/**
 * A tiny test runner (no JUnit jar offline): runs every public static void test*() method of the
 * listed classes, prints one line per test, exits non-zero on any failure.
 *
 * <p>System properties: palkit.golden (tokenizer_golden.json), palkit.vocab (MiniLM vocab.txt),
 * palkit.signing (the signature golden vectors' folder), palkit.decoding (the ATIS decoding
 * golden file).
 */
public final class TestMain {
    private static final Class<?>[] TEST_CLASSES = {
        JsonTest.class, TokenizerGoldenTest.class, ManifestTest.class, BundleRefusalTest.class,
        BenchReportTest.class, SignatureGoldenTest.class, DecodingGoldenTest.class,
    };

    public static void main(String[] args) {
        int passed = 0;
        int failed = 0;
        for (Class<?> testClass : TEST_CLASSES) {
            Method[] methods = testClass.getDeclaredMethods();
            Arrays.sort(methods, Comparator.comparing(Method::getName));
            for (Method method : methods) {
                if (!isTest(method)) {
                    continue;
                }
                String name = testClass.getSimpleName() + "." + method.getName();
                try {
                    method.invoke(null);
                    passed++;
                    System.out.println("PASS " + name);
                } catch (InvocationTargetException e) {
                    failed++;
                    System.out.println("FAIL " + name + ": " + e.getCause());
                    e.getCause().printStackTrace(System.out);
                } catch (IllegalAccessException e) {
                    throw new IllegalStateException(e);
                }
            }
        }
        System.out.println(passed + " passed, " + failed + " failed");
        System.exit(failed == 0 && passed > 0 ? 0 : 1);
    }

    private static boolean isTest(Method m) {
        return m.getName().startsWith("test") && Modifier.isStatic(m.getModifiers())
                && Modifier.isPublic(m.getModifiers()) && m.getParameterCount() == 0;
    }
}
