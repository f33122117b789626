package io.palkit.core.bundle;

import io.palkit.core.json.Json;
import io.palkit.core.json.JsonException;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.AlgorithmParameters;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PublicKey;
import java.security.Signature;
import java.security.SignatureException;
import java.security.interfaces.ECPublicKey;
import java.security.spec.ECGenParameterSpec;
import java.security.spec.ECParameterSpec;
import java.security.spec.X509EncodedKeySpec;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.LinkedHashMap;
import java.util.Objects;
import java.util.TreeMap;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * A bundle's {@code model.sig}: an OpenSSF Model Signing signature (Sigstore bundle v0.3, DSSE
 * envelope, ECDSA P-256 over SHA-256), checked with {@code java.security} only. The format and
 * the steps are those of runtime/BUNDLE.md's "model.sig" section, in the same order and with the
 * same reason codes and messages, so that the app and {@code palkit verify} refuse a bundle for
 * the same reason; the golden vectors in core/src/test/resources/signing/ hold both to it.
 *
 * <pre>
 * 1. model.sig missing: unsigned; not a Sigstore bundle with one DSSE signature: bad_format
 * 2. key hint present and not the trusted key's: wrong_key
 * 3. ECDSA over the DSSE PAE of the payload bytes fails: bad_signature
 * 4. statement not an in-toto model-signing v1.0 sha256 file list: bad_format
 * 5. SHA-256 of manifest.json not the signed one: manifest_changed
 * 6. a manifest "files" entry unsigned or with another SHA-256: manifest_changed
 * 7. (full check only) signed file missing / changed: file_missing / file_changed; a file the
 *    statement does not list: file_unsigned
 * </pre>
 *
 * A loader runs 1-6 ({@link #verifiedManifest}) and parses the very bytes that were verified; the
 * authentic manifest then pins every other file's size and SHA-256, which {@link Bundle#open}
 * checks before any runtime opens a file.
 */
public final class BundleSignature {
    public static final String SIGNATURE_FILE = "model.sig";
    static final String MANIFEST_FILE = "manifest.json";
    static final String BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json";
    static final String PAYLOAD_TYPE = "application/vnd.in-toto+json";
    static final String STATEMENT_TYPE = "https://in-toto.io/Statement/v1";
    static final String PREDICATE_TYPE = "https://model_signing/signature/v1.0";

    private BundleSignature() {}

    /** The ECDSA P-256 public key in PEM text ({@code palkit keygen}'s .pub.pem). */
    public static PublicKey readTrustedKey(InputStream pem, File source) throws BundleException {
        PublicKey key;
        try {
            String text = new String(readAll(pem), StandardCharsets.US_ASCII);
            String body = text.replace("-----BEGIN PUBLIC KEY-----", "")
                    .replace("-----END PUBLIC KEY-----", "");
            if (body.length() == text.length()) {
                throw new IllegalArgumentException("no PUBLIC KEY block");
            }
            byte[] der = Base64.getMimeDecoder().decode(body);
            key = KeyFactory.getInstance("EC").generatePublic(new X509EncodedKeySpec(der));
        } catch (IOException e) {
            throw new BundleSignatureException(source, "bad_key", "cannot read it ("
                    + e.getMessage() + "); give the signer's public key (a .pub.pem file)");
        } catch (IllegalArgumentException | GeneralSecurityException e) {
            throw new BundleSignatureException(source, "bad_key", "not a PEM public key; give the "
                    + "signer's .pub.pem file");
        }
        if (!isP256(key)) {
            throw new BundleSignatureException(source, "bad_key", "not an ECDSA P-256 public key; "
                    + "palkit bundles are signed with P-256 keys (palkit keygen)");
        }
        return key;
    }

    /** Steps 1-7: the whole folder is exactly what the trusted key signed. */
    public static void verify(File dir, PublicKey trusted) throws BundleException {
        Map<String, String> signed = signedDigests(dir, trusted);
        checkManifest(dir, signed);
        checkSignedFiles(dir, signed);
    }

    /**
     * Steps 1-6, reading manifest.json once: returns its bytes, authentic when this returns, for
     * the caller to parse (no second read that a swap of the file could slip between).
     */
    public static byte[] verifiedManifest(File dir, PublicKey trusted) throws BundleException {
        return checkManifest(dir, signedDigests(dir, trusted));
    }

    /** Steps 5-6: manifest.json's bytes, once they match the signature. */
    private static byte[] checkManifest(File dir, Map<String, String> signed)
            throws BundleException {
        File manifestFile = new File(dir, MANIFEST_FILE);
        byte[] manifest = manifestFile.isFile() ? readAll(manifestFile) : null;
        if (manifest == null || !signed.containsKey(MANIFEST_FILE)
                || !Sha256.of(manifest).equals(signed.get(MANIFEST_FILE))) {
            throw new BundleSignatureException(manifestFile, "manifest_changed", "not the signed "
                    + "manifest (edited or replaced after signing); get the bundle again");
        }
        checkManifestEntries(manifestFile, manifest, signed);
        return manifest;
    }

    /** Steps 1-4: {relative path: hex SHA-256} as signed by the trusted key. */
    private static Map<String, String> signedDigests(File dir, PublicKey trusted)
            throws BundleException {
        File sigFile = new File(dir, SIGNATURE_FILE);
        if (!sigFile.isFile()) {
            throw new BundleSignatureException(sigFile, "unsigned", "missing: the bundle is not "
                    + "signed; sign it (palkit export --sign-key) or drop --trust-key");
        }
        Envelope envelope = Envelope.read(sigFile, readAll(sigFile));
        if (!envelope.hint.isEmpty() && !envelope.hint.equals(Sha256.of(publicPem(trusted)))) {
            throw new BundleSignatureException(sigFile, "wrong_key", "signed by another key than "
                    + "the trusted one; get the bundle from its publisher or trust their key");
        }
        if (!ecdsaVerifies(trusted, envelope.signature, pae(envelope.payload))) {
            throw new BundleSignatureException(sigFile, "bad_signature", "the signature does not "
                    + "verify with the trusted key (model.sig edited, or another key); get the "
                    + "bundle again");
        }
        return statementDigests(sigFile, envelope.payload);
    }

    /** model.sig's key hint, payload bytes and DER signature (step 1's format check). */
    static final class Envelope {
        final String hint;
        final byte[] payload;
        final byte[] signature;

        private Envelope(String hint, byte[] payload, byte[] signature) {
            this.hint = hint;
            this.payload = payload;
            this.signature = signature;
        }

        static Envelope read(File sigFile, byte[] bytes) throws BundleSignatureException {
            try {
                Map<?, ?> doc = object(Json.parse(new String(bytes, StandardCharsets.UTF_8)));
                Map<?, ?> env = object(field(doc, "dsseEnvelope"));
                Map<?, ?> publicKey = object(field(object(field(doc, "verificationMaterial")),
                        "publicKey"));
                Object hint = publicKey.containsKey("hint") ? publicKey.get("hint") : "";
                Object signatures = field(env, "signatures");
                if (!BUNDLE_MEDIA_TYPE.equals(field(doc, "mediaType"))
                        || !PAYLOAD_TYPE.equals(field(env, "payloadType"))
                        || !(signatures instanceof List) || ((List<?>) signatures).size() != 1
                        || !(hint instanceof String)) {
                    throw new IllegalArgumentException("not the expected envelope");
                }
                return new Envelope((String) hint, base64(field(env, "payload")),
                        base64(field(object(((List<?>) signatures).get(0)), "sig")));
            } catch (JsonException | IllegalArgumentException e) {
                throw new BundleSignatureException(sigFile, "bad_format", "not an OpenSSF model "
                        + "signature (Sigstore bundle with a DSSE envelope); sign the bundle again");
            }
        }
    }

    /** DSSE v1 pre-authentication encoding: what the signature covers. */
    static byte[] pae(byte[] payload) {
        byte[] header = ("DSSEv1 " + PAYLOAD_TYPE.length() + " " + PAYLOAD_TYPE + " "
                + payload.length + " ").getBytes(StandardCharsets.US_ASCII);
        byte[] out = new byte[header.length + payload.length];
        System.arraycopy(header, 0, out, 0, header.length);
        System.arraycopy(payload, 0, out, header.length, payload.length);
        return out;
    }

    /** The key as Python's cryptography writes it: its SHA-256 is model.sig's key hint. */
    static byte[] publicPem(PublicKey key) {
        String body = Base64.getMimeEncoder(64, "\n".getBytes(StandardCharsets.US_ASCII))
                .encodeToString(key.getEncoded());
        return ("-----BEGIN PUBLIC KEY-----\n" + body + "\n-----END PUBLIC KEY-----\n")
                .getBytes(StandardCharsets.US_ASCII);
    }

    private static boolean ecdsaVerifies(PublicKey key, byte[] signature, byte[] message) {
        try {
            Signature ecdsa = Signature.getInstance("SHA256withECDSA");
            ecdsa.initVerify(key);
            ecdsa.update(message);
            return ecdsa.verify(signature);
        } catch (SignatureException malformedDer) {
            return false;
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("SHA256withECDSA is part of every Java platform", e);
        }
    }

    /** Step 4: the signed statement's files, checked to be sha256 'files' resources. */
    private static Map<String, String> statementDigests(File sigFile, byte[] payload)
            throws BundleSignatureException {
        try {
            Map<?, ?> statement = object(Json.parse(new String(payload, StandardCharsets.UTF_8)));
            Map<?, ?> predicate = object(field(statement, "predicate"));
            Map<?, ?> serialization = object(field(predicate, "serialization"));
            if (!STATEMENT_TYPE.equals(field(statement, "_type"))
                    || !PREDICATE_TYPE.equals(field(statement, "predicateType"))
                    || !"files".equals(field(serialization, "method"))
                    || !"sha256".equals(field(serialization, "hash_type"))
                    || !(field(predicate, "resources") instanceof List)) {
                throw new IllegalArgumentException("not a model-signing file list");
            }
            Map<String, String> digests = new TreeMap<>();
            for (Object item : (List<?>) predicate.get("resources")) {
                Map<?, ?> resource = object(item);
                Object name = field(resource, "name");
                if (!"sha256".equals(field(resource, "algorithm")) || !(name instanceof String)) {
                    throw new IllegalArgumentException("not a sha256 resource");
                }
                digests.put((String) name, String.valueOf(field(resource, "digest")));
            }
            return digests;
        } catch (JsonException | IllegalArgumentException e) {
            throw new BundleSignatureException(sigFile, "bad_format", "the signed statement is "
                    + "not an OpenSSF model-signing v1.0 file list with SHA-256 digests; sign again");
        }
    }

    /** Step 6: every file the (signed) manifest pins carries the same digest in the statement. */
    private static void checkManifestEntries(File manifestFile, byte[] manifest,
            Map<String, String> signed) throws BundleSignatureException {
        Map<String, Object> pinned = new LinkedHashMap<>();
        try {
            Map<?, ?> files = object(field(object(
                    Json.parse(new String(manifest, StandardCharsets.UTF_8))), "files"));
            for (Map.Entry<?, ?> entry : files.entrySet()) {
                pinned.put((String) entry.getKey(), field(object(entry.getValue()), "sha256"));
            }
        } catch (JsonException | IllegalArgumentException e) {
            throw new BundleSignatureException(manifestFile, "bad_format", "has no readable "
                    + "'files' table; re-export the bundle");
        }
        for (Map.Entry<String, Object> entry : pinned.entrySet()) {
            if (!Objects.equals(signed.get(entry.getKey()), entry.getValue())) {
                throw new BundleSignatureException(manifestFile, "manifest_changed", "'"
                        + entry.getKey() + "' is not pinned with the signed SHA-256; sign the "
                        + "bundle again");
            }
        }
    }

    /** Step 7: the folder holds exactly the signed files, each with its signed SHA-256. */
    private static void checkSignedFiles(File dir, Map<String, String> signed)
            throws BundleException {
        for (Map.Entry<String, String> entry : signed.entrySet()) {
            String rel = entry.getKey();
            if (rel.startsWith("/") || Arrays.asList(rel.split("/", -1)).contains("..")) {
                throw new BundleSignatureException(new File(dir, SIGNATURE_FILE), "bad_format",
                        "signs a path outside the bundle ('" + rel + "'); refusing it");
            }
            File file = new File(dir, rel);
            if (!file.isFile()) {
                throw new BundleSignatureException(file, "file_missing", "signed but missing; "
                        + "copy the whole bundle again");
            }
            if (!Sha256.of(file).equals(entry.getValue())) {
                throw new BundleSignatureException(file, "file_changed", "SHA-256 differs from "
                        + "the signed one (altered after signing); get the bundle again");
            }
        }
        for (Path path : filesIn(dir.toPath())) {
            String rel = dir.toPath().relativize(path).toString().replace(File.separatorChar, '/');
            if (!rel.equals(SIGNATURE_FILE) && !signed.containsKey(rel)) {
                throw new BundleSignatureException(path.toFile(), "file_unsigned", "not covered by "
                        + "the signature (added after signing); remove it or sign the bundle again");
            }
        }
    }

    /** Every file and symlink under dir, not following links, in path order. */
    private static List<Path> filesIn(Path dir) throws BundleException {
        try (Stream<Path> walk = Files.walk(dir)) {
            return walk.filter(p -> Files.isRegularFile(p) || Files.isSymbolicLink(p))
                    .sorted().collect(Collectors.toList());
        } catch (IOException e) {
            throw new BundleException("cannot list " + dir + ": " + e.getMessage(), e);
        }
    }

    private static boolean isP256(PublicKey key) {
        if (!(key instanceof ECPublicKey)) {
            return false;
        }
        try {
            AlgorithmParameters params = AlgorithmParameters.getInstance("EC");
            params.init(new ECGenParameterSpec("secp256r1"));
            ECParameterSpec p256 = params.getParameterSpec(ECParameterSpec.class);
            ECParameterSpec actual = ((ECPublicKey) key).getParams();
            return actual.getCurve().equals(p256.getCurve())
                    && actual.getGenerator().equals(p256.getGenerator())
                    && actual.getOrder().equals(p256.getOrder());
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("every Java platform knows secp256r1", e);
        }
    }

    /** InputStream.readAllBytes is Android API 33; the app runs from API 26. */
    private static byte[] readAll(InputStream in) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] buffer = new byte[8192];
        int n;
        while ((n = in.read(buffer)) > 0) {
            out.write(buffer, 0, n);
        }
        return out.toByteArray();
    }

    private static byte[] readAll(File file) throws BundleException {
        try {
            return Files.readAllBytes(file.toPath());
        } catch (IOException e) {
            throw new BundleException("cannot read " + file + ": " + e.getMessage(), e);
        }
    }

    // JSON shape checks: any mismatch is an IllegalArgumentException the callers turn into
    // bad_format, as Python's KeyError/TypeError are.
    private static Map<?, ?> object(Object value) {
        if (!(value instanceof Map)) {
            throw new IllegalArgumentException("not a JSON object");
        }
        return (Map<?, ?>) value;
    }

    private static Object field(Map<?, ?> object, String key) {
        if (!object.containsKey(key)) {
            throw new IllegalArgumentException("no " + key);
        }
        return object.get(key);
    }

    /** Strict base64, as Python's b64decode(validate=True): padded, nothing outside the alphabet. */
    private static byte[] base64(Object value) {
        if (!(value instanceof String) || ((String) value).length() % 4 != 0) {
            throw new IllegalArgumentException("not padded base64 text");
        }
        return Base64.getDecoder().decode((String) value);
    }
}
