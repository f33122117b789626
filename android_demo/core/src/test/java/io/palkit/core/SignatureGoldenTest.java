package io.palkit.core;

import io.palkit.core.bundle.Bundle;
import io.palkit.core.bundle.BundleException;
import io.palkit.core.bundle.BundleSignature;
import io.palkit.core.bundle.BundleSignatureException;
import io.palkit.core.json.Json;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.KeyPairGenerator;
import java.security.PublicKey;
import java.security.spec.ECGenParameterSpec;
import java.util.Base64;
import java.util.Map;
import java.util.stream.Stream;

/**
 * BundleSignature against the golden vectors tests/tools/make_signing_vectors.py wrote
 * (palkit.signing = their folder): every case gives the verdict expected.json records for the full check and for the
 * loader's manifest-only check, naming the same file; then the loader itself.
 */
public final class SignatureGoldenTest {
    private static File golden() {
        return new File(System.getProperty("palkit.signing"));
    }

    private static PublicKey key(String name) throws Exception {
        File pem = new File(golden(), "keys/" + name);
        try (InputStream in = new FileInputStream(pem)) {
            return BundleSignature.readTrustedKey(in, pem);
        }
    }

    /** "ok", or the reason code, for one check of one case; the refused file is checked too. */
    private static String verdict(String name, boolean full, Map<?, ?> expected) throws Exception {
        File dir = new File(golden(), name);
        try {
            if (full) {
                BundleSignature.verify(dir, key("signer.pub.pem"));
            } else {
                BundleSignature.verifiedManifest(dir, key("signer.pub.pem"));
            }
            return "ok";
        } catch (BundleSignatureException e) {
            String rel = dir.toPath().relativize(e.file.toPath()).toString();
            Check.equal(expected.get("file"), rel, name + ": the refused file");
            Check.isTrue(e.getMessage().startsWith(e.file + ": ") && !e.getMessage().contains("\n"),
                    name + ": one line naming the file: " + e.getMessage());
            return e.reason;
        }
    }

    public static void testEveryGoldenCaseGivesPythonsVerdicts() throws Exception {
        Map<?, ?> cases = (Map<?, ?>) Json.parse(new String(Files.readAllBytes(
                new File(golden(), "expected.json").toPath()), StandardCharsets.UTF_8));
        Check.equal(6, cases.size(), "golden cases");
        for (Map.Entry<?, ?> entry : cases.entrySet()) {
            String name = (String) entry.getKey();
            Map<?, ?> expected = (Map<?, ?>) entry.getValue();
            Check.equal(expected.get("full"), verdict(name, true, expected), name + " (full)");
            Check.equal(expected.get("manifest_only"), verdict(name, false, expected),
                    name + " (manifest only)");
        }
    }

    public static void testLoaderRefusesEachTamperedCaseBeforeParsingOrHashing() throws Exception {
        PublicKey trusted = key("signer.pub.pem");
        Check.equal(1, Bundle.open(new File(golden(), "valid"), trusted).manifest.tasks.size(),
                "the valid bundle opens with the trusted key");
        String[][] refusals = {
            {"unsigned", "model.sig: missing: the bundle is not signed"},
            {"wrong_key", "model.sig: signed by another key than the trusted one"},
            {"tampered_signature", "model.sig: the signature does not verify with the trusted key"},
            {"tampered_manifest", "manifest.json: not the signed manifest"},
        };
        for (String[] refusal : refusals) {
            Check.failsMentioning(BundleSignatureException.class, refusal[1],
                    () -> Bundle.open(new File(golden(), refusal[0]), trusted));
        }
        // Its manifest is authentic, and pins the file's SHA-256: the hash check refuses it.
        Check.failsMentioning(BundleException.class, "executorch/sst-program.bin is corrupt",
                () -> Bundle.open(new File(golden(), "tampered_file"), trusted));
    }

    public static void testWithoutATrustedKeyOnlyTheManifestHashesCount() throws Exception {
        Bundle.open(new File(golden(), "unsigned"));
        Bundle.open(new File(golden(), "wrong_key"));
        // A manifest edited consistently passes without a key: what the signature is for.
        Bundle.open(new File(golden(), "tampered_manifest"));
        Check.failsMentioning(BundleException.class, "executorch/sst-program.bin is corrupt",
                () -> Bundle.open(new File(golden(), "tampered_file")));
    }

    public static void testFullCheckRefusesMissingAndAddedFiles() throws Exception {
        PublicKey trusted = key("signer.pub.pem");
        File missing = copyOf("valid");
        Files.delete(new File(missing, "onnx/trunk-graph.bin").toPath());
        Check.equal("file_missing", reason(() -> BundleSignature.verify(missing, trusted)),
                "a signed file deleted");
        BundleSignature.verifiedManifest(missing, trusted); // the loader's hash check finds it
        File added = copyOf("valid");
        Files.write(new File(added, "executorch/extra.pte").toPath(), new byte[] {1});
        Check.equal("file_unsigned", reason(() -> BundleSignature.verify(added, trusted)),
                "a file added after signing");
    }

    public static void testMalformedSignatureFileIsBadFormat() throws Exception {
        PublicKey trusted = key("signer.pub.pem");
        String valid = new String(Files.readAllBytes(
                new File(golden(), "valid/model.sig").toPath()), StandardCharsets.UTF_8);
        String[] broken = {"", "{}", "[]", valid.substring(0, valid.length() / 2),
            valid.replace("v0.3+json", "v0.2+json"),
            valid.replace("\"sig\":\"", "\"sig\":\"!"),
            valid.replace("\"hint\":\"", "\"hint\":7,\"x\":\"")};
        for (String text : broken) {
            File dir = copyOf("valid");
            Files.write(new File(dir, "model.sig").toPath(), text.getBytes(StandardCharsets.UTF_8));
            Check.equal("bad_format", reason(() -> BundleSignature.verifiedManifest(dir, trusted)),
                    "model.sig: " + text.substring(0, Math.min(60, text.length())));
        }
    }

    public static void testTrustedKeyMustBeAP256PublicKey() throws Exception {
        File privateKey = new File(golden(), "keys/signer.key.pem");
        Check.equal("bad_key", reason(() -> key("signer.key.pem")), privateKey.getName());
        KeyPairGenerator generator = KeyPairGenerator.getInstance("EC");
        generator.initialize(new ECGenParameterSpec("secp384r1"));
        byte[] der = generator.generateKeyPair().getPublic().getEncoded();
        String pem = "-----BEGIN PUBLIC KEY-----\n" + Base64.getMimeEncoder().encodeToString(der)
                + "\n-----END PUBLIC KEY-----\n";
        Check.failsMentioning(BundleSignatureException.class, "not an ECDSA P-256 public key",
                () -> BundleSignature.readTrustedKey(
                        new java.io.ByteArrayInputStream(pem.getBytes(StandardCharsets.US_ASCII)),
                        new File("p384.pub.pem")));
    }

    private static String reason(Check.Action action) {
        try {
            action.run();
        } catch (BundleSignatureException e) {
            return e.reason;
        } catch (Exception e) {
            throw new AssertionError("expected a BundleSignatureException, got " + e, e);
        }
        return "ok";
    }

    private static File copyOf(String name) throws IOException {
        Path source = new File(golden(), name).toPath();
        Path target = Files.createTempDirectory("palkit-signed");
        try (Stream<Path> walk = Files.walk(source)) {
            for (Path path : (Iterable<Path>) walk::iterator) {
                Path dest = target.resolve(source.relativize(path).toString());
                if (Files.isDirectory(path)) {
                    Files.createDirectories(dest);
                } else {
                    Files.copy(path, dest, StandardCopyOption.REPLACE_EXISTING);
                }
            }
        }
        return target.toFile();
    }
}
