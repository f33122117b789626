package io.palkit.core.fuzz;

import io.palkit.core.bundle.BundleException;
import io.palkit.core.bundle.BundleSignature;
import io.palkit.core.bundle.BundleSignatureException;
import io.palkit.core.bundle.Manifest;
import io.palkit.core.bundle.ManifestParser;
import io.palkit.core.json.Json;
import io.palkit.core.json.JsonException;
import io.palkit.core.tokenizer.BertTokenizer;
import io.palkit.core.tokenizer.Encoding;
import io.palkit.core.tokenizer.TokenizerConfig;
import io.palkit.core.tokenizer.Vocab;
import java.io.ByteArrayInputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.PublicKey;
import java.security.Signature;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.UnaryOperator;
import java.util.stream.Stream;

/**
 * What each fuzz target feeds the core, which exception it documents (anything else is a
 * crash), and the invariants checked on the inputs it accepts.
 *
 * <ul>
 * <li>json: {@link Json#parse} throws only JsonException; what it accepts survives
 *     write-then-parse unchanged.
 * <li>manifest: {@link ManifestParser#parse} throws only BundleException; the tokenizer built
 *     from an accepted manifest refuses its settings with IllegalArgumentException (which
 *     Bundle.tokenizer() reports) or encodes within max_length.
 * <li>signature: {@link BundleSignature#verify} on a bundle whose model.sig is mutated text, or a
 *     mutated statement signed with the test key (so steps 4-7 are reached), throws only
 *     BundleSignatureException.
 * <li>tokenizer: encode/encodePair on mutated text throw nothing and give [CLS] ... [SEP] within
 *     max_length, ids inside the vocabulary, token types 0 then 1.
 * </ul>
 * Seeds: the signature golden vectors (palkit.signing), the tokenizer golden texts
 * (palkit.golden) and the MiniLM vocabulary (palkit.vocab).
 */
final class FuzzTargets {
    static final List<String> NAMES = List.of("json", "manifest", "signature", "tokenizer");

    private static final String[] JSON_TOKENS = {"{", "}", "[", "]", "\"", ":", ",", "\\",
        "\\u", "\\ud800", "\\udc00", "\\u00e9", "1e999", "-1e-999", "9223372036854775808", "-0",
        "0.", ".5", "1e", "true", "false", "null", "nul", " ", "\t", "\n", "\u0000", "\"\":",
        "{\"a\":", "[[[[", "]]]]", "\"files\"", "\"sha256\"", "\"bytes\"", "\"tasks\"", "\"kind\"",
        "\"max_length\": 2", "\"max_length\": 4294967297", "\"num_outputs\": -1",
        "\"max_input_chars_per_word\": 0", "\"pair_regression\"", "\"score_range\": [1]"};
    private static final String[] TEXT_TOKENS = {"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]",
        "[cls]", "[SEP", " ", "\t", "\n", "\u00a0", "\u3000", "\u200b", "\u0301", "\u0307",
        "\u0130", "\u00df", "\u03a3", "e\u0301", "\ud83d\ude42", "\ud83d", "\ude42", "\u4e2d\u6587",
        "\ud840\udc00", "\u0000", "\u001f", "\u007f", "\ufffd", "\ufeff", "##", "##s", "a", "the",
        "movie", "!", "...", "'", "-", "\u0e01\u0e32", "\u0627\u0644", "x".repeat(101)};

    private FuzzTargets() {}

    abstract static class Target {
        final String name;
        final Mutator mutator;

        Target(String name, Mutator mutator) {
            this.name = name;
            this.mutator = mutator;
        }

        /** Feeds one input; true when the core accepted it (a parent for later mutations). */
        abstract boolean run(String input) throws Exception;

        /** Whether this exception is the target's documented way of refusing an input. */
        abstract boolean documents(Throwable thrown);
    }

    static Target create(String name, Random random) throws Exception {
        switch (name) {
            case "json":
                return json(random);
            case "manifest":
                return manifest(random);
            case "signature":
                return signature(random);
            default:
                return tokenizer(random);
        }
    }

    private static File golden() {
        return new File(System.getProperty("palkit.signing"));
    }

    private static String read(File file) throws IOException {
        return new String(Files.readAllBytes(file.toPath()), StandardCharsets.UTF_8);
    }

    private static List<String> jsonSeeds() throws IOException {
        List<String> seeds = new ArrayList<>();
        for (String name : new String[] {"expected.json", "valid/manifest.json",
                "valid/model.sig", "tampered_signature/model.sig"}) {
            seeds.add(read(new File(golden(), name)));
        }
        seeds.add("[1, -2.5e3, \"\\ud83d\\ude42\", {\"a\": [null, true, false]}]");
        return seeds;
    }

    private static Target json(Random random) throws IOException {
        return new Target("json", new Mutator(random, jsonSeeds(), JSON_TOKENS)) {
            @Override
            boolean run(String input) throws JsonException {
                Object value = Json.parse(input);
                String written;
                try {
                    written = Json.write(value);
                } catch (IllegalArgumentException nonFinite) {
                    if (!input.contains("e") && !input.contains("E")) {
                        throw new AssertionError("write refused a parsed value: " + nonFinite);
                    }
                    return true; // 1e999 parses to Infinity, which JSON cannot write back
                }
                if (!Json.parse(written).equals(value)) {
                    throw new AssertionError("write-then-parse changed the value");
                }
                return true;
            }

            @Override
            boolean documents(Throwable thrown) {
                return thrown instanceof JsonException;
            }
        };
    }

    private static Target manifest(Random random) throws IOException {
        Vocab vocab = Vocab.read(new ByteArrayInputStream(
                "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nfilm\n".getBytes(StandardCharsets.UTF_8)));
        List<String> seeds = List.of(read(new File(golden(), "valid/manifest.json")));
        UnaryOperator<String> valueSwap = text -> swapOneValue(text, random);
        return new Target("manifest", new Mutator(random, seeds, JSON_TOKENS, valueSwap)) {
            @Override
            boolean run(String input) throws BundleException {
                Manifest manifest = ManifestParser.parse(input);
                TokenizerConfig config = manifest.tokenizer;
                BertTokenizer tokenizer;
                try {
                    tokenizer = new BertTokenizer(config, vocab);
                } catch (IllegalArgumentException refusedSettings) {
                    return true; // Bundle.tokenizer() turns this into a BundleException
                }
                checkEncoding(tokenizer.encodePair("a film [SEP] a", "film"), config, vocab, true);
                return true;
            }

            @Override
            boolean documents(Throwable thrown) {
                return thrown instanceof BundleException;
            }
        };
    }

    private static Target signature(Random random) throws Exception {
        Path dir = Files.createTempDirectory("palkit-fuzz-signature");
        copyTree(new File(golden(), "valid").toPath(), dir);
        File sigFile = dir.resolve(BundleSignature.SIGNATURE_FILE).toFile();
        PublicKey trusted = readPublic(new File(golden(), "keys/signer.pub.pem"));
        PrivateKey signer = readPrivate(new File(golden(), "keys/signer.key.pem"));
        String validSig = read(sigFile);
        Map<?, ?> envelope = (Map<?, ?>) Json.parse(validSig);
        String payload = new String(Base64.getDecoder().decode((String)
                ((Map<?, ?>) envelope.get("dsseEnvelope")).get("payload")), StandardCharsets.UTF_8);
        List<String> seeds = List.of(validSig, read(new File(golden(), "wrong_key/model.sig")),
                "STATEMENT" + payload);
        return new Target("signature", new Mutator(random, seeds, JSON_TOKENS)) {
            @Override
            boolean run(String input) throws Exception {
                // Inputs starting with STATEMENT are signed statements: they pass steps 1-3.
                String sig = input.startsWith("STATEMENT")
                        ? signedEnvelope(input.substring("STATEMENT".length()), signer, validSig)
                        : input;
                Files.write(sigFile.toPath(), sig.getBytes(StandardCharsets.UTF_8));
                try {
                    BundleSignature.verify(dir.toFile(), trusted);
                    return true;
                } catch (BundleSignatureException e) {
                    if (!e.reason.equals("bad_format")) {
                        mutator.keep(input); // it got past the format checks: worth mutating
                    }
                    throw e;
                }
            }

            @Override
            boolean documents(Throwable thrown) {
                return thrown instanceof BundleSignatureException;
            }
        };
    }

    private static Target tokenizer(Random random) throws Exception {
        Vocab vocab;
        try (InputStream in = new FileInputStream(System.getProperty("palkit.vocab"))) {
            vocab = Vocab.read(in);
        }
        int[] maxLengths = {4, 8, 16, 128, 512};
        TokenizerConfig[] configs = new TokenizerConfig[maxLengths.length];
        BertTokenizer[] tokenizers = new BertTokenizer[maxLengths.length];
        for (int i = 0; i < maxLengths.length; i++) {
            configs[i] = TokenizerConfig.bertUncased(maxLengths[i]);
            tokenizers[i] = new BertTokenizer(configs[i], vocab);
        }
        List<String> seeds = new ArrayList<>();
        Map<?, ?> golden = (Map<?, ?>) Json.parse(read(new File(System.getProperty("palkit.golden"))));
        for (Object item : (List<?>) golden.get("cases")) {
            seeds.add((String) ((Map<?, ?>) item).get("text"));
        }
        return new Target("tokenizer", new Mutator(random, seeds, TEXT_TOKENS)) {
            @Override
            boolean run(String input) {
                int which = Math.floorMod(input.hashCode(), maxLengths.length);
                int split = input.isEmpty() ? 0 : Math.floorMod(input.hashCode() >>> 3, input.length());
                boolean pair = (input.hashCode() & 1) == 1;
                Encoding encoding = pair
                        ? tokenizers[which].encodePair(input.substring(0, split), input.substring(split))
                        : tokenizers[which].encode(input);
                checkEncoding(encoding, configs[which], vocab, pair);
                return true;
            }

            @Override
            boolean documents(Throwable thrown) {
                return false; // encoding text never fails
            }
        };
    }

    private static final Object[] ODD_VALUES = {null, "", "x", "../x", -1L, 0L, 1L, 2L, 3L, 4L,
        4294967297L, Long.MIN_VALUE, 1.5, -0.0, true, List.of(), List.of(1L), Map.of()};

    /**
     * The JSON text with one value somewhere in its tree (or one object key's value) replaced
     * by an odd one: reaches the manifest's typed fields, which text mutations rarely keep valid.
     */
    private static String swapOneValue(String text, Random random) {
        Object root;
        try {
            root = Json.parse(text);
        } catch (JsonException e) {
            return text;
        }
        List<Object> containers = new ArrayList<>();
        collectContainers(root, containers);
        Object target = containers.get(random.nextInt(containers.size()));
        Object value = ODD_VALUES[random.nextInt(ODD_VALUES.length)];
        if (target instanceof Map && !((Map<?, ?>) target).isEmpty()) {
            @SuppressWarnings("unchecked")
            Map<String, Object> map = (Map<String, Object>) target;
            List<String> keys = new ArrayList<>(map.keySet());
            map.put(keys.get(random.nextInt(keys.size())), value);
        } else if (target instanceof List && !((List<?>) target).isEmpty()) {
            @SuppressWarnings("unchecked")
            List<Object> list = (List<Object>) target;
            list.set(random.nextInt(list.size()), value);
        }
        try {
            return Json.write(root);
        } catch (IllegalArgumentException nonFinite) {
            return text;
        }
    }

    private static void collectContainers(Object value, List<Object> out) {
        if (value instanceof Map) {
            out.add(value);
            ((Map<?, ?>) value).values().forEach(v -> collectContainers(v, out));
        } else if (value instanceof List) {
            out.add(value);
            ((List<?>) value).forEach(v -> collectContainers(v, out));
        }
    }

    /** [CLS] a [SEP] (b [SEP]) within max_length, ids in the vocabulary, types 0 then 1. */
    static void checkEncoding(Encoding e, TokenizerConfig config, Vocab vocab, boolean pair) {
        int n = e.inputIds.length;
        if (n < 2 || n > config.maxLength || e.tokenTypeIds.length != n
                || e.attentionMask.length != n) {
            throw new AssertionError(n + " tokens for max_length " + config.maxLength);
        }
        if (e.inputIds[0] != vocab.id(config.clsToken) || e.inputIds[n - 1] != vocab.id(config.sepToken)) {
            throw new AssertionError("not [CLS] ... [SEP]");
        }
        for (int i = 0; i < n; i++) {
            long type = e.tokenTypeIds[i];
            boolean typeOk = type == 0 || (pair && type == 1);
            if (e.inputIds[i] < 0 || e.inputIds[i] >= vocab.size() || !typeOk
                    || (i > 0 && type < e.tokenTypeIds[i - 1]) || e.attentionMask[i] != 1) {
                throw new AssertionError("bad token " + i + ": id " + e.inputIds[i] + " type " + type);
            }
        }
    }

    /** model.sig carrying `statement` as its payload, signed with the test signer's key. */
    private static String signedEnvelope(String statement, PrivateKey signer, String template)
            throws GeneralSecurityException, JsonException {
        byte[] payload = statement.getBytes(StandardCharsets.UTF_8);
        byte[] header = ("DSSEv1 28 application/vnd.in-toto+json " + payload.length + " ")
                .getBytes(StandardCharsets.US_ASCII);
        Signature ecdsa = Signature.getInstance("SHA256withECDSA");
        ecdsa.initSign(signer);
        ecdsa.update(header);
        ecdsa.update(payload);
        @SuppressWarnings("unchecked")
        Map<String, Object> doc = (Map<String, Object>) Json.parse(template);
        @SuppressWarnings("unchecked")
        Map<String, Object> env = (Map<String, Object>) doc.get("dsseEnvelope");
        env.put("payload", Base64.getEncoder().encodeToString(payload));
        env.put("signatures", List.of(Map.of("sig",
                Base64.getEncoder().encodeToString(ecdsa.sign()), "keyid", "")));
        return Json.write(doc);
    }

    private static PublicKey readPublic(File pem) throws Exception {
        try (InputStream in = new FileInputStream(pem)) {
            return BundleSignature.readTrustedKey(in, pem);
        }
    }

    private static PrivateKey readPrivate(File pem) throws Exception {
        String body = read(pem).replace("-----BEGIN PRIVATE KEY-----", "")
                .replace("-----END PRIVATE KEY-----", "");
        return KeyFactory.getInstance("EC").generatePrivate(
                new PKCS8EncodedKeySpec(Base64.getMimeDecoder().decode(body)));
    }

    private static void copyTree(Path source, Path target) throws IOException {
        try (Stream<Path> walk = Files.walk(source)) {
            for (Path path : (Iterable<Path>) walk::iterator) {
                Path dest = target.resolve(source.relativize(path).toString());
                if (Files.isDirectory(path)) {
                    Files.createDirectories(dest);
                } else {
                    Files.copy(path, dest);
                }
            }
        }
    }
}
