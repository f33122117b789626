package io.palkit.core;

import io.palkit.core.json.Json;
import io.palkit.core.json.JsonException;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

public final class JsonTest {
    public static void testParsesEveryValueKind() throws Exception {
        Map<?, ?> m = (Map<?, ?>) Json.parse(
                " {\"s\": \"a\\\"b\\\\c\\n\", \"i\": -12, \"d\": 1.5e2, \"t\": true, \"f\": false,"
                + " \"n\": null, \"l\": [1, [], {}]} ");
        Check.equal("a\"b\\c\n", m.get("s"), "string escapes");
        Check.equal(-12L, m.get("i"), "integer");
        Check.equal(150.0, m.get("d"), "double");
        Check.equal(Boolean.TRUE, m.get("t"), "true");
        Check.equal(Boolean.FALSE, m.get("f"), "false");
        Check.isTrue(m.containsKey("n") && m.get("n") == null, "null");
        Check.equal(3, ((List<?>) m.get("l")).size(), "list");
    }

    public static void testSurrogatePairEscapeBecomesOneCodePoint() throws Exception {
        String s = (String) Json.parse("\"\\ud83d\\ude42\"");
        Check.equal(1L, s.codePoints().count(), "code points");
        Check.equal(0x1F642, s.codePointAt(0), "emoji");
    }

    public static void testRejectsMalformedInput() {
        for (String bad : Arrays.asList("", "{", "[1,]", "{\"a\" 1}", "tru", "\"x", "1 2",
                "{\"a\":1,\"a\":2}", "\"\\q\"", "-")) {
            Check.fails(JsonException.class, () -> Json.parse(bad));
        }
    }

    public static void testWriteThenParseRoundTrips() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("text", "tab\there \"quoted\" \u0001 é 🙂");
        m.put("n", 3L);
        m.put("x", 0.25);
        m.put("list", Arrays.asList(1L, "two", null, true));
        m.put("empty", new LinkedHashMap<>());
        Check.equal(m, Json.parse(Json.write(m)), "round trip");
    }

    // Found by the fuzzer (CoreFuzz manifest, seed 11): deep nesting overflowed the stack.
    public static void testDeepNestingIsAParseErrorNotAStackOverflow() throws Exception {
        Check.failsMentioning(JsonException.class, "nesting deeper than 256 levels",
                () -> Json.parse("[".repeat(100_000)));
        String deepest = "[".repeat(Json.MAX_DEPTH) + "]".repeat(Json.MAX_DEPTH);
        Check.isTrue(Json.parse(deepest) instanceof List, "256 levels parse");
    }
}
