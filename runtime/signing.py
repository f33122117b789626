"""Signed bundles: an OpenSSF Model Signing signature (`model.sig`) that a loader checks before
any runtime, or even the manifest parser, sees a byte of the bundle.

Signing uses the `model-signing` package (`pip install 'palkit[sign]'`). Verifying needs only
`cryptography`: it is the format written out step by step (runtime/BUNDLE.md, "model.sig"), so
that the Android app checks the very same steps with `java.security`.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from palkit.core.env import TRUST_KEY_ENV
from palkit.core.fileio import file_digest, write_bytes
from palkit.runtime.manifest import MANIFEST_FILE, BundleError

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
