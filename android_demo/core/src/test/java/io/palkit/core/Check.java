package io.palkit.core;

import java.util.Arrays;
import java.util.Objects;

/** Assertions for {@link TestMain}. */
public final class Check {
    private Check() {}

    public interface Action {
        void run() throws Exception;
    }

    public static void equal(Object expected, Object actual, String what) {
        if (!Objects.equals(expected, actual)) {
            throw new AssertionError(what + ": expected <" + expected + "> but got <" + actual + ">");
        }
    }

    public static void equal(long[] expected, long[] actual, String what) {
        if (!Arrays.equals(expected, actual)) {
            throw new AssertionError(what + ":\n  expected " + Arrays.toString(expected)
                    + "\n  actual   " + Arrays.toString(actual));
        }
    }

    public static void isTrue(boolean condition, String what) {
        if (!condition) {
            throw new AssertionError(what);
        }
    }

    /** Runs the action, requires it to throw {@code type}, returns the exception's message. */
    public static String fails(Class<? extends Exception> type, Action action) {
        try {
            action.run();
        } catch (Exception e) {
            if (type.isInstance(e)) {
                return e.getMessage();
            }
            throw new AssertionError("expected " + type.getSimpleName() + " but got " + e, e);
        }
        throw new AssertionError("expected " + type.getSimpleName() + " but nothing was thrown");
    }

    /** Like {@link #fails} and also requires the message to mention {@code fragment}. */
    public static void failsMentioning(Class<? extends Exception> type, String fragment, Action action) {
        String message = fails(type, action);
        if (message == null || !message.contains(fragment)) {
            throw new AssertionError("message <" + message + "> does not mention <" + fragment + ">");
        }
    }
}
