package io.palkit.core.bundle;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Typed access to one parsed JSON object; errors name the full key path, e.g. tasks[1].kind. */
final class JsonFields {
    private final Map<?, ?> object;
    private final String path;

    JsonFields(Object value, String path) throws BundleException {
        if (!(value instanceof Map)) {
            throw new BundleException("manifest: " + (path.isEmpty() ? "document" : path)
                    + " must be an object");
        }
        this.object = (Map<?, ?>) value;
        this.path = path;
    }

    boolean has(String key) {
        return object.get(key) != null;
    }

    Iterable<? extends Map.Entry<?, ?>> entries() {
        return object.entrySet();
    }

    String where(String key) {
        return path.isEmpty() ? key : path + "." + key;
    }

    Object raw(String key) throws BundleException {
        Object value = object.get(key);
        if (value == null) {
            throw new BundleException("manifest: missing " + where(key));
        }
        return value;
    }

    String string(String key) throws BundleException {
        return cast(key, String.class, "a string");
    }

    boolean bool(String key) throws BundleException {
        return cast(key, Boolean.class, "true or false");
    }

    long integer(String key) throws BundleException {
        return cast(key, Long.class, "an integer");
    }

    /** An integer from min to Integer.MAX_VALUE (a plain cast would wrap 2^32 + 4 to 4). */
    int intAtLeast(String key, int min) throws BundleException {
        long value = integer(key);
        if (value < min || value > Integer.MAX_VALUE) {
            throw new BundleException("manifest: " + where(key) + " is " + value + "; it must be "
                    + min + " or more (and fit in 32 bits)");
        }
        return (int) value;
    }

    JsonFields object(String key) throws BundleException {
        return new JsonFields(raw(key), where(key));
    }

    List<Object> list(String key) throws BundleException {
        List<?> items = cast(key, List.class, "a list");
        return new ArrayList<>(items);
    }

    List<String> strings(String key) throws BundleException {
        List<String> out = new ArrayList<>();
        List<Object> items = list(key);
        for (int i = 0; i < items.size(); i++) {
            if (!(items.get(i) instanceof String)) {
                throw new BundleException("manifest: " + where(key) + "[" + i + "] must be a string");
            }
            out.add((String) items.get(i));
        }
        return out;
    }

    private <T> T cast(String key, Class<T> type, String what) throws BundleException {
        Object value = raw(key);
        if (!type.isInstance(value)) {
            throw new BundleException("manifest: " + where(key) + " must be " + what);
        }
        return type.cast(value);
    }
}
