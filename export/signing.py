"""Signed bundles: an OpenSSF Model Signing signature (`model.sig`) that a loader checks before
any runtime, or even the manifest parser, sees a byte of the bundle.

    priv, pub = generate_keypair(Path("keys"))            # ECDSA P-256, PEM files
    sign_bundle(Path("bundles/NAME"), priv)              # writes bundles/NAME/model.sig
    verify_bundle_signature(Path("bundles/NAME"), pub)   # every file hashed; SignatureError
    verify_bundle_signature(folder, pub, check_files=False)  # loaders: manifest only (below)

Signing uses the `model-signing` package (OpenSSF Model Signing 1.1, elliptic-key signer,
`pip install 'palkit[sign]'`). Verifying needs only `cryptography`: it is the format below,
written out, so that the Android app checks the very same steps with `java.security`
(`android_demo/core/src/test/resources/signing/` holds the golden vectors both sides test).

The format of `model.sig` (a Sigstore bundle, v0.3, JSON):

    {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
     "verificationMaterial": {"publicKey": {"hint": HINT}, "tlogEntries": []},
     "dsseEnvelope": {"payloadType": "application/vnd.in-toto+json",
                      "payload": base64(STATEMENT),
                      "signatures": [{"sig": base64(DER ECDSA signature), "keyid": ""}]}}

* HINT: hex SHA-256 of the signer's public key as PEM text: "-----BEGIN PUBLIC KEY-----\\n",
  the base64 of its X.509 SubjectPublicKeyInfo DER in lines of 64 characters, each ending in
  "\\n", then "-----END PUBLIC KEY-----\\n" (Java: `Base64.getMimeEncoder(64, "\\n".getBytes())`
  of `PublicKey.getEncoded()`, plus a final "\\n").
* The signature is ECDSA on P-256 with SHA-256 (Java `SHA256withECDSA`, DER-encoded) over the
  DSSE pre-authentication encoding of the payload *bytes as carried*:
  PAE = "DSSEv1 28 application/vnd.in-toto+json " + len(STATEMENT) + " " + STATEMENT.
  No JSON canonicalization is involved: the verifier decodes the base64 and verifies those bytes.
* STATEMENT (an in-toto Statement v1) has "_type": "https://in-toto.io/Statement/v1",
  "predicateType": "https://model_signing/signature/v1.0" and a predicate with
  "serialization": {"method": "files", "hash_type": "sha256", "ignore_paths": ["model.sig"],
  "allow_symlinks": false} and "resources": [{"name": relative '/' path, "algorithm":
  "sha256", "digest": hex}] — one per file of the bundle folder except model.sig.

Verification, in this order (each failure is one SignatureError line naming a file, with a
`reason` code the Java side reports too):

1. `model.sig` missing -> "unsigned"; not the JSON above -> "bad_format".
2. HINT present and not the trusted key's -> "wrong_key".
3. ECDSA over PAE fails with the trusted key -> "bad_signature" (model.sig edited).
4. Statement types, serialization and algorithms as above, else "bad_format".
5. SHA-256 of manifest.json's bytes != its signed digest -> "manifest_changed".
6. An entry of manifest.json's "files" absent from the statement, or with another digest
   -> "manifest_changed" (the manifest and the signature disagree).
7. Only when `check_files`: each signed file hashed -> "file_missing" / "file_changed"; a file
   in the folder that the statement does not list -> "file_unsigned".

A loader runs 1-6 (one 8 KiB hash and one ECDSA check, ~1 ms) before reading the manifest: the
manifest is then authentic, and it pins every file's size and SHA-256, which the loader checks
before a runtime opens each file. `palkit verify` runs 1-7.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from export.manifest import MANIFEST_FILE, BundleError
from trainer.config import TRUST_KEY_ENV
from trainer.fileio import file_digest, write_bytes

SIGNATURE_FILE = "model.sig"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"


class SignatureError(BundleError):
    """A bundle's signature is missing, foreign or does not match its files."""

    def __init__(self, file: Path, reason: str, message: str):
        super().__init__(f"{file}: {message}")
        self.file, self.reason = file, reason


# ---- keys ------------------------------------------------------------------------------------

def generate_keypair(folder: Path, name: str = "palkit") -> tuple[Path, Path]:
    """A new ECDSA P-256 key pair: folder/NAME.key.pem (PKCS#8, unencrypted: keep it private)
    and folder/NAME.pub.pem (give this one to whoever verifies)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / f"{name}.key.pem", folder / f"{name}.pub.pem"
    write_bytes(private, key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    os.chmod(private, 0o600)
    write_bytes(public, public_pem(key.public_key()))
    return private, public


def public_pem(public_key) -> bytes:
    from cryptography.hazmat.primitives import serialization
    return public_key.public_bytes(serialization.Encoding.PEM,
                                   serialization.PublicFormat.SubjectPublicKeyInfo)


def load_trusted_key(path: Path):
    """The P-256 public key in a PEM file, or a one-line SignatureError."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = Path(path)
    if not path.is_file():
        raise SignatureError(path, "bad_key", "trusted key not found; give the signer's "
                             "public key (a .pub.pem file)")
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except ValueError:
        raise SignatureError(path, "bad_key", "not a PEM public key; give the signer's "
                             ".pub.pem file") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise SignatureError(path, "bad_key", "not an ECDSA P-256 public key; palkit bundles "
                             "are signed with P-256 keys")
    return key


def check_signing_key(path: Path) -> None:
    """Refuse a private key sign_bundle cannot use (call it before a long export)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = Path(path)
    if not path.is_file():
        raise SignatureError(path, "bad_key", "signing key not found; give the .key.pem file")
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError):  # not PEM, or encrypted
        raise SignatureError(path, "bad_key", "not an unencrypted PEM private key; give the "
                             ".key.pem file") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise SignatureError(path, "bad_key", "not an ECDSA P-256 private key; palkit bundles "
                             "are signed with P-256 keys")


def resolve_trust_key(option: Path | None) -> Path | None:
    """The trusted key a loader uses: the option, else $PALKIT_TRUST_KEY, else None."""
    if option is not None:
        return Path(option)
    env = os.environ.get(TRUST_KEY_ENV)
    return Path(env) if env else None


# ---- signing ---------------------------------------------------------------------------------

def sign_bundle(folder: Path, private_key: Path) -> Path:
    """Sign every file of the bundle folder (model.sig excepted); returns folder/model.sig.
    Only model.sig is written (atomically): re-signing after adding a task reads the trunk
    files but never rewrites them."""
    try:
        import model_signing
    except ImportError:
        raise SignatureError(Path(private_key), "no_signer", "signing needs the model-signing "
                             "package: pip install 'palkit[sign]'") from None
    folder, private_key = Path(folder), Path(private_key)
    check_signing_key(private_key)
    if not (folder / MANIFEST_FILE).is_file():
        raise SignatureError(folder / MANIFEST_FILE, "bad_format", "not found; sign a bundle "
                             "folder written by `palkit export`")
    hashing = model_signing.hashing.Config().set_ignored_paths(paths=[SIGNATURE_FILE],
                                                              ignore_git_paths=False)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / SIGNATURE_FILE
        (model_signing.signing.Config().use_elliptic_key_signer(private_key=private_key)
         .set_hashing_config(hashing).sign(folder, out))
        write_bytes(folder / SIGNATURE_FILE, out.read_bytes())
    return folder / SIGNATURE_FILE


# ---- verifying -------------------------------------------------------------------------------

def verify_bundle_signature(folder: Path, trusted_key: Path, check_files: bool = True) -> None:
    """Refuse the bundle unless model.sig is the trusted key's signature of its manifest and
    (check_files) of every file in the folder. Steps and reasons: the module docstring."""
    folder = Path(folder)
    key = load_trusted_key(trusted_key)
    signed = signed_digests(folder, key)
    manifest_path = folder / MANIFEST_FILE
    if MANIFEST_FILE not in signed or not manifest_path.is_file() \
            or file_digest(manifest_path)[0] != signed[MANIFEST_FILE]:
        raise SignatureError(manifest_path, "manifest_changed", "not the signed manifest "
                             "(edited or replaced after signing); get the bundle again")
    check_manifest_entries(manifest_path, signed)
    if check_files:
        check_signed_files(folder, signed)


def signed_digests(folder: Path, key) -> dict[str, str]:
    """Steps 1-4: {relative path: hex SHA-256} as signed by `key`."""
    sig_path = folder / SIGNATURE_FILE
    if not sig_path.is_file():
        raise SignatureError(sig_path, "unsigned", "missing: the bundle is not signed; sign it "
                             "(palkit export --sign-key) or drop --trust-key")
    envelope = read_envelope(sig_path)
    hint = envelope["hint"]
    if hint and hint != hashlib.sha256(public_pem(key)).hexdigest():
        raise SignatureError(sig_path, "wrong_key", "signed by another key than the trusted "
                             "one; get the bundle from its publisher or trust their key")
    if not ecdsa_verifies(key, envelope["sig"], pae(envelope["payload"])):
        raise SignatureError(sig_path, "bad_signature", "the signature does not verify with "
                             "the trusted key (model.sig edited, or another key); get the bundle "
                             "again")
    return statement_digests(sig_path, envelope["payload"])


def read_envelope(sig_path: Path) -> dict[str, Any]:
    """The hint, payload bytes and signature bytes of model.sig (step 1's format check)."""
    bad = SignatureError(sig_path, "bad_format", "not an OpenSSF model signature "
                         "(Sigstore bundle with a DSSE envelope); sign the bundle again")
    try:
        doc = json.loads(sig_path.read_bytes())
        env = doc["dsseEnvelope"]
        hint = doc["verificationMaterial"]["publicKey"].get("hint", "")
        if doc["mediaType"] != BUNDLE_MEDIA_TYPE or env["payloadType"] != PAYLOAD_TYPE \
                or len(env["signatures"]) != 1 or not isinstance(hint, str):
            raise bad
        return {"hint": hint, "payload": base64.b64decode(env["payload"], validate=True),
                "sig": base64.b64decode(env["signatures"][0]["sig"], validate=True)}
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
        raise bad from None


def pae(payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what the signature covers."""
    header = f"DSSEv1 {len(PAYLOAD_TYPE)} {PAYLOAD_TYPE} {len(payload)} "
    return header.encode("ascii") + payload


def ecdsa_verifies(key, signature: bytes, message: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        return True
    except InvalidSignature:
        return False


def statement_digests(sig_path: Path, payload: bytes) -> dict[str, str]:
    """Step 4: the signed in-toto statement's files, checked to be sha256 'files' resources."""
    bad = SignatureError(sig_path, "bad_format", "the signed statement is not an OpenSSF "
                         "model-signing v1.0 file list with SHA-256 digests; sign again")
    try:
        statement = json.loads(payload)
        predicate = statement["predicate"]
        serialization = predicate["serialization"]
        if statement["_type"] != STATEMENT_TYPE or statement["predicateType"] != PREDICATE_TYPE \
                or serialization["method"] != "files" or serialization["hash_type"] != "sha256":
            raise bad
        resources = predicate["resources"]
        if any(r["algorithm"] != "sha256" or not isinstance(r["name"], str) for r in resources):
            raise bad
        return {r["name"]: str(r["digest"]) for r in resources}
    except (ValueError, KeyError, TypeError):
        raise bad from None


def check_manifest_entries(manifest_path: Path, signed: dict[str, str]) -> None:
    """Step 6: every file the (signed) manifest pins carries the same digest in the statement."""
    try:
        files = json.loads(manifest_path.read_bytes())["files"]
        entries = {rel: e["sha256"] for rel, e in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise SignatureError(manifest_path, "bad_format", "has no readable 'files' table; "
                             "re-export the bundle") from None
    for rel, digest in entries.items():
        if signed.get(rel) != digest:
            raise SignatureError(manifest_path, "manifest_changed", f"'{rel}' is not pinned "
                                 "with the signed SHA-256; sign the bundle again")


def check_signed_files(folder: Path, signed: dict[str, str]) -> None:
    """Step 7: the folder holds exactly the signed files, each with its signed SHA-256."""
    for rel, digest in sorted(signed.items()):
        parts = PurePosixPath(rel)
        if not rel or parts.is_absolute() or ".." in parts.parts:
            raise SignatureError(folder / SIGNATURE_FILE, "bad_format", f"signs a path outside "
                                 f"the bundle ('{rel}'); refusing it")
        path = folder / Path(*parts.parts)
        if not path.is_file():
            raise SignatureError(path, "file_missing", "signed but missing; copy the whole "
                                 "bundle again")
        if file_digest(path)[0] != digest:
            raise SignatureError(path, "file_changed", "SHA-256 differs from the signed one "
                                 "(altered after signing); get the bundle again")
    for path in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(folder).as_posix()
        if rel != SIGNATURE_FILE and rel not in signed:
            raise SignatureError(path, "file_unsigned", "not covered by the signature (added "
                                 "after signing); remove it or sign the bundle again")


# ---- golden vectors for the app (python -m export.signing golden OUT_DIR) --------------------

# Placeholders named .bin, not .pte/.ptd/.onnx*: no runtime may ever take them for models.
GOLDEN_FILES = {"vocab.txt": b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nfilm\n",
                "executorch/trunk-program.bin": b"golden vector: stands for trunk.pte\n",
                "executorch/trunk-data.bin": b"golden vector: stands for trunk.ptd\n",
                "executorch/sst-program.bin": b"golden vector: stands for a task's weights file\n",
                "onnx/trunk-graph.bin": b"golden vector: stands for trunk.onnx\n",
                "onnx/sst-adapter.bin": b"golden vector: stands for a task's .onnx_adapter\n"}


def golden_manifest(folder: Path):
    """A valid manifest over GOLDEN_FILES (placeholders: no runtime ever loads them)."""
    from export.manifest import (IO, ExecuTorchSection, FileEntry, Manifest, OnnxRuntimeSection,
                                 TaskEntry, TokenizerSettings, Trunk)
    trunk_sha = hashlib.sha256(b"golden trunk").hexdigest()
    return Manifest(
        palkit_version="0.1.0", trunk=Trunk(trunk_sha, "golden", 8, 2, None),
        tokenizer=TokenizerSettings("vocab.txt", True, True, 16, "[CLS]", "[SEP]", "[PAD]",
                                    "[UNK]", "[MASK]", 100),
        quantization={"scheme": "fp32", "details": "none"},
        runtimes={"executorch": ExecuTorchSection("1.5.1", "2.13.0", "xnnpack",
                                                  "executorch/trunk-program.bin",
                                                  "executorch/trunk-data.bin", "forward",
                                                  ["head.out.weight_t"], 16,
                                                  {"min": 2, "max": 16, "dynamic": True}, None),
                  "onnxruntime": OnnxRuntimeSection("1.31.1", 17, "onnx/trunk-graph.bin", 16,
                                                    None, None)},
        tasks=[TaskEntry("sst", "single_classification", ["negative", "positive"], None,
                         "accuracy", 2, trunk_sha, {"executorch": "executorch/sst-program.bin",
                                                    "onnxruntime": "onnx/sst-adapter.bin"}, {})],
        files={rel: FileEntry(*file_digest(folder / rel)) for rel in GOLDEN_FILES}, io=IO)


def write_golden(out: Path, keys: Path) -> dict[str, dict[str, str]]:
    """One bundle folder per case under `out`, signed with keys/signer.key.pem (wrong_key: with
    keys/other.key.pem), and each case's verdicts against keys/signer.pub.pem, also written to
    out/expected.json: {"full": reason, "manifest_only": reason, "file": path it names}.
    manifest_only "ok" for tampered_file: the loader's manifest hash check refuses that file."""
    import shutil

    from export.manifest import write_manifest

    def fresh(name: str, key: Path | None) -> Path:
        folder = out / name
        shutil.rmtree(folder, ignore_errors=True)
        for rel, data in GOLDEN_FILES.items():
            write_bytes(folder / rel, data)
        write_manifest(folder, golden_manifest(folder))
        if key is not None:
            sign_bundle(folder, key)
        return folder

    signer, other = keys / "signer.key.pem", keys / "other.key.pem"
    fresh("valid", signer)
    fresh("unsigned", None)
    fresh("wrong_key", other)
    edited = fresh("tampered_manifest", signer) / MANIFEST_FILE
    write_bytes(edited, edited.read_bytes().replace(b'"positive"', b'"negative"', 1))
    changed = fresh("tampered_file", signer) / "executorch" / "sst-program.bin"
    write_bytes(changed, changed.read_bytes().replace(b"task", b"TASK"))
    sig = fresh("tampered_signature", signer) / SIGNATURE_FILE
    doc = json.loads(sig.read_bytes())   # a payload edit keeps the hint: only ECDSA catches it
    payload = base64.b64decode(doc["dsseEnvelope"]["payload"]).replace(b"sst-program", b"sst-programs")
    doc["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    write_bytes(sig, json.dumps(doc, indent=2).encode())
    cases = sorted(p.name for p in out.iterdir() if p.is_dir() and p.name != "keys")
    expected = {name: golden_verdicts(out / name, keys / "signer.pub.pem") for name in cases}
    write_bytes(out / "expected.json",
                (json.dumps(expected, indent=2, sort_keys=True) + "\n").encode())
    return expected


def golden_verdicts(folder: Path, trusted: Path) -> dict[str, str]:
    verdicts = {}
    for mode, check_files in (("full", True), ("manifest_only", False)):
        try:
            verify_bundle_signature(folder, trusted, check_files)
            verdicts[mode] = "ok"
        except SignatureError as e:
            verdicts[mode] = e.reason
            verdicts.setdefault("file", Path(e.file).relative_to(folder).as_posix())
    return verdicts


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "golden":
        print("usage: python -m export.signing golden OUT_DIR   (test keys: OUT_DIR/keys/, made "
              "when absent)", file=sys.stderr)
        return 2
    out = Path(argv[1])
    keys = out / "keys"
    if not (keys / "signer.key.pem").is_file():
        generate_keypair(keys, "signer")
        generate_keypair(keys, "other")
    for name, verdict in write_golden(out, keys).items():
        print(f"{name}: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
