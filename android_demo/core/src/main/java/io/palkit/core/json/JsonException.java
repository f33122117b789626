package io.palkit.core.json;

/** Malformed JSON text. */
public final class JsonException extends Exception {
    public JsonException(String message) {
        super(message);
    }
}
