package io.palkit.core.bundle;

/** A bundle the app must refuse; the message is meant for the screen. */
public class BundleException extends Exception {
    public BundleException(String message) {
        super(message);
    }

    public BundleException(String message, Throwable cause) {
        super(message, cause);
    }
}
