package io.palkit.core;

import io.palkit.core.decode.Decoding;
import io.palkit.core.decode.Span;
import io.palkit.core.json.Json;
import io.palkit.core.tokenizer.BertTokenizer;
import io.palkit.core.tokenizer.TokenizerConfig;
import io.palkit.core.tokenizer.Vocab;
import io.palkit.core.tokenizer.Words;
import java.io.File;
import java.io.FileInputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/** The app decodes an intent and slots exactly as palkit's runtime does: the golden file
 *  (tests/tools/make_decoding_golden.py) holds a real ATIS bundle's outputs and palkit's
 *  words, pieces, label set, tags and spans for each utterance. */
public final class DecodingGoldenTest {
    public static void testDecodesARealBundlesOutputsAsPalkitDoes() throws Exception {
        File golden = new File(TokenizerGoldenTest.requiredProperty("palkit.decoding"));
        Map<?, ?> root = (Map<?, ?>) Json.parse(
                new String(Files.readAllBytes(golden.toPath()), StandardCharsets.UTF_8));
        BertTokenizer tokenizer;
        try (InputStream in = new FileInputStream(TokenizerGoldenTest.requiredProperty("palkit.vocab"))) {
            tokenizer = new BertTokenizer(TokenizerConfig.bertUncased(
                    ((Long) root.get("max_length")).intValue()), Vocab.read(in));
        }
        Map<?, ?> setTask = (Map<?, ?>) root.get("set_task");
        List<String> setLabels = strings(setTask.get("labels"));
        double threshold = ((Number) setTask.get("threshold")).doubleValue();
        List<String> tagLabels = strings(((Map<?, ?>) root.get("tag_task")).get("labels"));
        List<?> cases = (List<?>) root.get("cases");
        Check.isTrue(cases.size() >= 10, "the golden file has its cases");
        for (Object item : cases) {
            Map<?, ?> c = (Map<?, ?>) item;
            String what = "'" + c.get("text") + "'";
            Words words = tokenizer.encodeWords((String) c.get("text"));
            Check.equal(c.get("words"), words.words, "words of " + what);
            Check.equal(TokenizerGoldenTest.longs(c.get("input_ids")), words.encoding.inputIds, "input_ids of " + what);
            Check.equal(c.get("first_pieces"), boxed(words.firstPieces), "first pieces of " + what);
            List<String> tags = Decoding.wordTags(rows(c.get("token_rows")), words.firstPieces,
                    tagLabels, words.words.size());
            Check.equal(c.get("tags"), tags, "tags of " + what);
            List<Object> spans = new ArrayList<>();
            for (Span s : Decoding.bioSpans(tags)) {
                spans.add(Arrays.asList(s.type, (long) s.start, (long) s.end));
            }
            Check.equal(c.get("spans"), spans, "spans of " + what);
            Check.equal(c.get("labels"), Decoding.labelSet(floats(c.get("set_logits")), setLabels,
                    threshold), "labels of " + what);
        }
    }

    public static void testSpansFollowTheConllRule() {
        // an I- after O or after another type starts a span; B- always does
        Check.equal(Arrays.asList(new Span("a", 0, 2), new Span("b", 2, 3), new Span("a", 4, 5),
                new Span("a", 5, 6)),
                Decoding.bioSpans(Arrays.asList("B-a", "I-a", "I-b", "O", "I-a", "B-a")), "spans");
        Check.equal(Arrays.asList(), Decoding.bioSpans(Arrays.asList("O", "O")), "no spans");
    }

    public static void testNoLabelOverTheThresholdGivesTheTopOneAlone() {
        Check.equal(Arrays.asList("b"), Decoding.labelSet(new float[] {-3f, -1f, -2f},
                Arrays.asList("a", "b", "c"), 0.5), "top label");
        Check.equal(Arrays.asList("a", "c"), Decoding.labelSet(new float[] {2f, -1f, 0f},
                Arrays.asList("a", "b", "c"), 0.5), "labels at or over the threshold");
    }

    private static List<String> strings(Object list) {
        List<String> out = new ArrayList<>();
        for (Object o : (List<?>) list) {
            out.add((String) o);
        }
        return out;
    }

    private static List<Long> boxed(int[] values) {
        List<Long> out = new ArrayList<>();
        for (int v : values) {
            out.add((long) v);
        }
        return out;
    }

    private static float[] floats(Object list) {
        List<?> items = (List<?>) list;
        float[] out = new float[items.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ((Number) items.get(i)).floatValue();
        }
        return out;
    }

    private static float[][] rows(Object list) {
        List<?> items = (List<?>) list;
        float[][] out = new float[items.size()][];
        for (int i = 0; i < out.length; i++) {
            out[i] = floats(items.get(i));
        }
        return out;
    }
}
