"""The golden signing vectors that the app's Java verifier and palkit's (runtime/signing.py) both
test against: `python tests/tools/make_signing_vectors.py OUT_DIR`. Committed under
android_demo/core/src/test/resources/signing/; the test keys are OUT_DIR/keys/, made when absent.

Each case is a bundle folder of placeholder files, signed (or not) and then damaged one way;
OUT_DIR/expected.json holds every case's verdicts, which tests/test_signing.py checks on both
the committed vectors and freshly made ones.
"""
from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
from pathlib import Path

from palkit.core.fileio import file_digest, write_bytes
from palkit.runtime.manifest import (IO, MANIFEST_FILE, ExecuTorchSection, FileEntry, Manifest,
                                     OnnxRuntimeSection, TaskEntry, TokenizerSettings, Trunk,
                                     write_manifest)
from palkit.runtime.signing import (SIGNATURE_FILE, SignatureError, generate_keypair, sign_bundle,
                                    verify_bundle_signature)

# Placeholders named .bin, not .pte/.ptd/.onnx*: no runtime may ever take them for models.
GOLDEN_FILES = {"vocab.txt": b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nfilm\n",
                "executorch/trunk-program.bin": b"golden vector: stands for trunk.pte\n",
                "executorch/trunk-data.bin": b"golden vector: stands for trunk.ptd\n",
                "executorch/sst-program.bin": b"golden vector: stands for a task's weights file\n",
                "onnx/trunk-graph.bin": b"golden vector: stands for trunk.onnx\n",
                "onnx/sst-adapter.bin": b"golden vector: stands for a task's .onnx_adapter\n"}


def golden_manifest(folder: Path) -> Manifest:
    """A valid manifest over GOLDEN_FILES."""
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
                                                    "onnxruntime": "onnx/sst-adapter.bin"}, {},
                         "argmax", None)],
        files={rel: FileEntry(*file_digest(folder / rel)) for rel in GOLDEN_FILES}, io=IO)


def write_golden(out: Path, keys: Path) -> dict[str, dict[str, str]]:
    """One bundle folder per case under `out`, signed with keys/signer.key.pem (wrong_key: with
    keys/other.key.pem), and each case's verdicts against keys/signer.pub.pem, also written to
    out/expected.json: {"full": reason, "manifest_only": reason, "file": path it names}.
    manifest_only "ok" for tampered_file: the loader's manifest hash check refuses that file."""
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
    """What verify_bundle_signature says of `folder`: with every file hashed, and as a loader."""
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
    if len(argv) != 1:
        print("usage: python tests/tools/make_signing_vectors.py OUT_DIR   (test keys: "
              "OUT_DIR/keys/, made when absent)", file=sys.stderr)
        return 2
    out = Path(argv[0])
    keys = out / "keys"
    if not (keys / "signer.key.pem").is_file():
        generate_keypair(keys, "signer")
        generate_keypair(keys, "other")
    for name, verdict in write_golden(out, keys).items():
        print(f"{name}: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
