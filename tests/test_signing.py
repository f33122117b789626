"""Signed bundles (runtime/signing.py): the OpenSSF Model Signing format, palkit's own verifier
against the model-signing package's, the app's golden vectors, and the host loading paths:
no runtime is reached with bytes the manifest, or the trusted signature, does not vouch for.

The bundles here are the golden layout (placeholder files): every loading path must refuse them
before a runtime opens a file, and a runtime stub records whether it was reached."""
from __future__ import annotations

import base64
import dataclasses
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from palkit.core.fileio import file_digest
from palkit.runtime.manifest import BundleError, FileEntry, read_manifest, write_manifest
from palkit.runtime.signing import (SIGNATURE_FILE, TRUST_KEY_ENV, SignatureError, generate_keypair,
                                   resolve_trust_key, sign_bundle, verify_bundle_signature)
from testing_utils import REPO

GOLDEN = REPO / "android_demo/core/src/test/resources/signing"
VECTORS = REPO / "tests/tools/make_signing_vectors.py"
KEYS = GOLDEN / "keys"
TRUSTED = KEYS / "signer.pub.pem"


def refusal(folder: Path, key: Path = TRUSTED, check_files: bool = True) -> SignatureError:
    with pytest.raises(SignatureError) as e:
        verify_bundle_signature(folder, key, check_files)
    assert "\n" not in str(e.value) and str(e.value.file) in str(e.value)
    return e.value


@pytest.fixture
def signed(tmp_path) -> Path:
    """A copy of the golden valid bundle, signed with the test signer key."""
    folder = tmp_path / "bundle"
    shutil.copytree(GOLDEN / "valid", folder)
    return folder


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def swap_and_repin(folder: Path, rel: str, data: bytes) -> None:
    """Replace a file and rewrite the manifest to match: every hash check then passes."""
    (folder / rel).write_bytes(data)
    manifest = read_manifest(folder)
    files = {**manifest.files, rel: FileEntry(*file_digest(folder / rel))}
    write_manifest(folder, dataclasses.replace(manifest, files=files))
    read_manifest(folder)


def reference_accepts(folder: Path, key: Path) -> bool:
    """The model-signing package's own verifier (every file hashed, extra files refused)."""
    import model_signing
    from cryptography.exceptions import InvalidSignature

    try:
        (model_signing.verifying.Config().use_elliptic_key_verifier(public_key=key)
         .verify(folder, folder / SIGNATURE_FILE))
        return True
    except (ValueError, InvalidSignature, FileNotFoundError):
        return False


# ---- signing and verifying -------------------------------------------------------------------

def test_signed_bundle_verifies_here_and_with_the_reference_verifier(tmp_path, signed):
    priv, pub = generate_keypair(tmp_path / "keys")
    (signed / SIGNATURE_FILE).unlink()
    assert sign_bundle(signed, priv) == signed / SIGNATURE_FILE
    verify_bundle_signature(signed, pub)
    verify_bundle_signature(signed, pub, check_files=False)
    assert reference_accepts(signed, pub)
    assert oct((tmp_path / "keys" / "palkit.key.pem").stat().st_mode & 0o777) == "0o600"


def test_signature_lists_every_file_and_only_the_signature_is_written(tmp_path, signed):
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in signed.rglob("*")
              if p.is_file() and p.name != SIGNATURE_FILE}
    sign_bundle(signed, KEYS / "signer.key.pem")        # as add_adapter re-signs a bundle
    after = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in before}
    assert after == before
    doc = json.loads((signed / SIGNATURE_FILE).read_bytes())
    statement = json.loads(base64.b64decode(doc["dsseEnvelope"]["payload"]))
    names = {r["name"] for r in statement["predicate"]["resources"]}
    assert names == {p.relative_to(signed).as_posix() for p in before}
    assert statement["predicate"]["serialization"]["ignore_paths"] == [SIGNATURE_FILE]


def test_unsigned_bundle(signed):
    (signed / SIGNATURE_FILE).unlink()
    e = refusal(signed)
    assert e.reason == "unsigned" and "not signed" in str(e)


def test_bundle_signed_by_another_key(tmp_path, signed):
    _, other_pub = generate_keypair(tmp_path / "keys", "other")
    e = refusal(signed, other_pub)
    assert e.reason == "wrong_key" and e.file == signed / SIGNATURE_FILE
    assert not reference_accepts(signed, other_pub)


def test_hint_swapped_to_the_trusted_key_is_caught_by_ecdsa(tmp_path, signed):
    other_priv, _ = generate_keypair(tmp_path / "keys", "other")
    sign_bundle(signed, other_priv)
    doc = json.loads((signed / SIGNATURE_FILE).read_bytes())
    trusted_doc = json.loads((GOLDEN / "valid" / SIGNATURE_FILE).read_bytes())
    doc["verificationMaterial"] = trusted_doc["verificationMaterial"]
    (signed / SIGNATURE_FILE).write_text(json.dumps(doc))
    assert refusal(signed).reason == "bad_signature"


def test_manifest_rewritten_to_match_a_swapped_file(signed):
    """The attack hashes alone cannot stop: a file swapped and the manifest updated to match."""
    swap_and_repin(signed, "executorch/sst-program.bin", b"another program\n")
    for check_files in (True, False):
        e = refusal(signed, check_files=check_files)
        assert e.reason == "manifest_changed" and e.file == signed / "manifest.json"


def test_tampered_file_named(signed):
    flip_byte(signed / "onnx" / "sst-adapter.bin")
    e = refusal(signed)
    assert e.reason == "file_changed" and e.file == signed / "onnx" / "sst-adapter.bin"
    verify_bundle_signature(signed, TRUSTED, check_files=False)  # the loader's hash check's job


def test_missing_and_added_files(signed):
    (signed / "extra.txt").write_text("added later")
    e = refusal(signed)
    assert e.reason == "file_unsigned" and e.file == signed / "extra.txt"
    (signed / "extra.txt").unlink()
    (signed / "vocab.txt").unlink()
    e = refusal(signed)
    assert e.reason == "file_missing" and e.file == signed / "vocab.txt"


@pytest.mark.parametrize("edit", [
    lambda d: "{",
    lambda d: json.dumps({**d, "mediaType": "application/json"}),
    lambda d: json.dumps({**d, "dsseEnvelope": {**d["dsseEnvelope"], "payload": "%%%"}}),
    lambda d: json.dumps({**d, "dsseEnvelope": {**d["dsseEnvelope"], "signatures": []}}),
    lambda d: json.dumps([d]),
])
def test_malformed_signature_file(signed, edit):
    path = signed / SIGNATURE_FILE
    path.write_text(edit(json.loads(path.read_bytes())))
    assert refusal(signed).reason == "bad_format"


def test_trusted_key_must_be_a_p256_public_key(tmp_path, signed):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    p384 = tmp_path / "p384.pub.pem"
    p384.write_bytes(ec.generate_private_key(ec.SECP384R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key")
    for key in (p384, garbage, tmp_path / "absent.pem", KEYS / "signer.key.pem"):
        assert refusal(signed, key).reason == "bad_key"


def test_signing_key_must_be_a_p256_private_key(tmp_path, signed):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    p384 = tmp_path / "p384.key.pem"
    p384.write_bytes(ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"x")))
    for key in (p384, TRUSTED, tmp_path / "absent.pem"):
        with pytest.raises(SignatureError) as e:
            sign_bundle(signed, key)
        assert e.value.reason == "bad_key" and str(key) in str(e.value)
    assert json.loads((signed / SIGNATURE_FILE).read_bytes()) == \
        json.loads((GOLDEN / "valid" / SIGNATURE_FILE).read_bytes())  # left as it was


def test_trust_key_from_option_then_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(TRUST_KEY_ENV, raising=False)
    assert resolve_trust_key(None) is None
    monkeypatch.setenv(TRUST_KEY_ENV, str(tmp_path / "env.pem"))
    assert resolve_trust_key(None) == tmp_path / "env.pem"
    assert resolve_trust_key(tmp_path / "opt.pem") == tmp_path / "opt.pem"


# ---- golden vectors for the app --------------------------------------------------------------

def _vectors():
    """tests/tools/make_signing_vectors.py, loaded by path (a script, not a test module)."""
    spec = importlib.util.spec_from_file_location("palkit_signing_vectors", VECTORS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_golden_vectors_give_their_verdicts():
    expected = json.loads((GOLDEN / "expected.json").read_text())
    assert set(expected) == {"valid", "unsigned", "wrong_key", "tampered_manifest",
                             "tampered_file", "tampered_signature"}
    for name, verdict in expected.items():
        assert _vectors().golden_verdicts(GOLDEN / name, TRUSTED) == verdict, name
        assert reference_accepts(GOLDEN / name, TRUSTED) == (verdict["full"] == "ok"), name


def test_regenerated_golden_vectors_give_the_same_verdicts(tmp_path):
    shutil.copytree(KEYS, tmp_path / "keys")
    regenerated = _vectors().write_golden(tmp_path, tmp_path / "keys")
    assert regenerated == json.loads((GOLDEN / "expected.json").read_text())
    # same files and manifests; only the ECDSA signatures (random nonce) differ
    for name in regenerated:
        assert (tmp_path / name / "manifest.json").read_bytes() == \
            (GOLDEN / name / "manifest.json").read_bytes()


# ---- no runtime reads unverified bytes (host paths) ------------------------------------------

@pytest.fixture
def runtimes_stubbed(monkeypatch):
    """ONNX Runtime's and ExecuTorch's file loaders replaced by stubs that record each call."""
    import onnxruntime

    opened: list[str] = []

    class Session:
        def __init__(self, path, *args, **kwargs):
            opened.append(str(path))

    class Adapter:
        def Load(self, path):
            opened.append(str(path))

    class Options:
        def add_active_adapter(self, adapter):
            pass

    monkeypatch.setattr(onnxruntime, "InferenceSession", Session)
    monkeypatch.setattr(onnxruntime, "LoraAdapter", Adapter)
    monkeypatch.setattr(onnxruntime, "RunOptions", Options)
    return opened


def runtime_bundle(tmp_path: Path) -> Path:
    """A copy of the golden valid bundle (its files are placeholders: only stubs open them)."""
    folder = tmp_path / "bundle"
    shutil.copytree(GOLDEN / "valid", folder)
    return folder


@pytest.fixture
def executorch_stubbed(monkeypatch, runtimes_stubbed):
    """ExecuTorch's pybindings replaced by a stub recording each program it is asked to load,
    and each task weights file read."""
    from palkit.runtime import runners
    class Program:
        def load_method(self, name):
            return name

    class Lib:
        class Verification:
            InternalConsistency = "InternalConsistency"

        def _load_program(self, path, data_path=None, **kwargs):
            runtimes_stubbed.append(str(path))
            return Program()

    def read_task_weights(path, names):  # a task's weights file, bound to the program
        runtimes_stubbed.append(str(path))
        return ()

    monkeypatch.setattr(runners, "executorch_lib", lambda: Lib())
    monkeypatch.setattr(runners, "read_task_weights", read_task_weights)
    return runtimes_stubbed


@pytest.mark.parametrize("runtime, task_file, trunk_file, trunk_at_load", [
    ("onnxruntime", "onnx/sst-adapter.bin", "onnx/trunk-graph.bin", False),
    ("executorch", "executorch/sst-program.bin", "executorch/trunk-program.bin", True)])
def test_engine_opens_only_checked_files(tmp_path, executorch_stubbed, runtime, task_file,
                                         trunk_file, trunk_at_load):
    """predict / demo / evaluate: load_bundle + Engine. A task file altered after loading is
    refused when first used, before the runtime; intact, the runtime is reached (so the stub
    can fail this test). ExecuTorch loads its program with the engine; ONNX Runtime opens the
    graph a task runs in when the task is first used (a hybrid bundle has several)."""
    from palkit.runtime.bundle import load_bundle
    from palkit.runtime.engine import Engine

    folder = runtime_bundle(tmp_path)
    engine = Engine(load_bundle(folder, runtime=runtime, tasks=[]), runtime)
    opened = [str(folder / trunk_file)] if trunk_at_load else []
    assert executorch_stubbed == opened
    original = (folder / task_file).read_bytes()
    flip_byte(folder / task_file)
    with pytest.raises(BundleError, match=f"{task_file.split('/')[1]}: SHA-256 differs"):
        engine.swap("sst")
    assert executorch_stubbed == opened
    (folder / task_file).write_bytes(original)
    engine.swap("sst")
    first_use = [str(folder / task_file)] + ([] if trunk_at_load else [str(folder / trunk_file)])
    assert executorch_stubbed == opened + first_use


def test_load_bundle_with_trusted_key_refuses_before_reading_the_manifest(
        tmp_path, runtimes_stubbed, monkeypatch):
    """A swapped file with a manifest rewritten to match passes every hash check; only the
    signature stops it, and it must stop it before a runtime (or the manifest parser) runs."""
    import palkit.runtime.bundle as runtime_module

    folder = runtime_bundle(tmp_path)
    load = runtime_module.load_bundle
    load(folder, runtime="onnxruntime", trust_key=TRUSTED)             # intact: accepted
    swap_and_repin(folder, "onnx/sst-adapter.bin", b"another adapter\n")
    load(folder, runtime="onnxruntime")                                  # hashes agree
    monkeypatch.setattr(runtime_module, "read_manifest",
                        lambda *a: pytest.fail("manifest parsed before the signature check"))
    with pytest.raises(SignatureError, match="manifest.json: not the signed manifest"):
        load(folder, runtime="onnxruntime", trust_key=TRUSTED)
    monkeypatch.setenv(TRUST_KEY_ENV, str(TRUSTED))
    with pytest.raises(SignatureError, match="manifest.json: not the signed manifest"):
        load(folder, runtime="onnxruntime")                              # key from the env
    assert runtimes_stubbed == []


def test_bench_worker_checks_files_before_the_runtime(tmp_path, runtimes_stubbed):
    """bench's worker loads bundle files itself: it must check them as load_bundle does."""
    from palkit.bench.worker import RuntimeRunner

    folder = runtime_bundle(tmp_path)
    flip_byte(folder / "onnx" / "sst-adapter.bin")
    runner = RuntimeRunner("onnxruntime", 1)
    with pytest.raises(BundleError, match="sst-adapter.bin"):
        runner.load("sst", {"format": "bundle", "bundle": str(folder), "task": "sst"})
    assert str(folder / "onnx" / "sst-adapter.bin") not in runtimes_stubbed


def test_bench_worker_checks_the_signature_with_the_key_in_its_spec(tmp_path, runtimes_stubbed,
                                                                     monkeypatch):
    """bench passes --trust-key to its workers in their spec: no environment variable."""
    from palkit.bench.worker import make_runner

    monkeypatch.delenv(TRUST_KEY_ENV, raising=False)
    folder = runtime_bundle(tmp_path)
    swap_and_repin(folder, "onnx/sst-adapter.bin", b"another adapter\n")  # hashes agree
    subject = {"runtime": "onnxruntime", "trust_key": str(TRUSTED)}
    with pytest.raises(SignatureError, match="manifest.json: not the signed manifest"):
        make_runner(subject, 1).load("sst", {"format": "bundle", "bundle": str(folder),
                                              "task": "sst"})
    make_runner({**subject, "trust_key": None}, 1).load(
        "sst", {"format": "bundle", "bundle": str(folder), "task": "sst"})
    assert runtimes_stubbed  # without a key the same bundle reaches the runtime


# ---- signing on export and when a task is added (export/bundle.py) ---------------------------

@pytest.fixture(scope="module")
def signed_onnx_bundle(tiny_pal_run, tiny_data, tmp_path_factory):
    from palkit.export.bundle import export_run
    from palkit.export.options import ExportOptions

    keys = tmp_path_factory.mktemp("keys")
    priv, pub = generate_keypair(keys)
    out = tmp_path_factory.mktemp("signed") / "onnx"
    export_run(tiny_pal_run, out,
               ExportOptions(target="onnx", quant="fp32", tasks=["sst"], data_dir=tiny_data, sign_key=priv),
               log=lambda *a: None)
    return out, priv, pub


def test_export_signs_the_bundle(signed_onnx_bundle):
    folder, _, pub = signed_onnx_bundle
    verify_bundle_signature(folder, pub)
    assert reference_accepts(folder, pub)


def test_adding_a_task_re_signs_and_leaves_the_trunk_alone(signed_onnx_bundle, tiny_pal_run,
                                                           tiny_data, tmp_path):
    from palkit.export.bundle import ExportError, add_adapter

    source, priv, pub = signed_onnx_bundle
    folder = tmp_path / "bundle"
    shutil.copytree(source, folder)
    trunk = folder / "onnx" / "trunk.onnx"
    before = (trunk.stat().st_ino, trunk.stat().st_mtime_ns)
    with pytest.raises(ExportError, match="signed"):  # re-signing needs the key
        add_adapter(tiny_pal_run, "quora", folder, data_dir=tiny_data, log=lambda *a: None)
    add_adapter(tiny_pal_run, "quora", folder, data_dir=tiny_data, log=lambda *a: None,
                sign_key=priv)
    verify_bundle_signature(folder, pub)
    assert "onnx/quora.onnx_adapter" in read_manifest(folder).files
    assert (trunk.stat().st_ino, trunk.stat().st_mtime_ns) == before


# ---- the trust key on every path of one command: bench --native and verify-arch --------------

@pytest.fixture
def nothing_starts(monkeypatch):
    """Any child process (a bench worker, the JVM, qemu) or native build fails the test: with a
    trusted key, an unsigned bundle must be refused before anything runs it."""
    import subprocess

    from palkit.android_demo.host import native_host

    def started(*args, **kwargs):
        raise AssertionError(f"started {args[0] if args else kwargs}")
    monkeypatch.setattr(subprocess, "run", started)
    monkeypatch.setattr(subprocess, "Popen", started)
    monkeypatch.setattr(native_host, "build", started)


def _refused_in_one_line(argv: list[str], bundle: Path, capsys) -> None:
    from palkit import cli

    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {bundle / SIGNATURE_FILE}: ") and "not signed" in err


def test_bench_native_refuses_an_unsigned_bundle_given_trust_key(
        et_fp32, tmp_path, monkeypatch, capsys, nothing_starts):
    monkeypatch.delenv(TRUST_KEY_ENV, raising=False)
    _, public = generate_keypair(tmp_path)
    _refused_in_one_line(["bench", str(et_fp32), "--native", "--trust-key", str(public),
                          "--peers", "none", "--no-accuracy", "--no-ceiling",
                          "--out", str(tmp_path / "bench.json")], et_fp32, capsys)
    assert not (tmp_path / "bench.json").exists()


def test_verify_arch_refuses_an_unsigned_bundle_given_trust_key(
        et_fp32, tiny_pal_run, tiny_data, tmp_path, monkeypatch, capsys, nothing_starts):
    from palkit.android_demo.host import native_host

    monkeypatch.delenv(TRUST_KEY_ENV, raising=False)
    _, public = generate_keypair(tmp_path)
    before = (et_fp32 / "verify.json").read_bytes()
    _refused_in_one_line(["verify-arch", str(et_fp32), "--run", str(tiny_pal_run), "--arch",
                          native_host.HOST_ARCH, "--trust-key", str(public), "--data-dir",
                          str(tiny_data)], et_fp32, capsys)
    assert (et_fp32 / "verify.json").read_bytes() == before  # nothing recorded


def test_the_native_path_is_given_the_trust_key_as_an_argument(tmp_path):
    """bench's native subject and verify-arch hand the key to the app's harness on its command
    line; the JVM reads no environment variable for it."""
    from palkit.android_demo.host.native_host import HostBuild

    build = HostBuild(tmp_path, tmp_path, ("java",))
    key = tmp_path / "signer.pub.pem"
    command = build.command("bench", "B", "1", "in.json", "3", "20", trust_key=key)
    harness = command.index("io.palkit.host.HostHarness")
    assert command[harness + 1:] == ["--trust-key", str(key), "bench", "B", "1", "in.json", "3",
                                     "20"]
    assert "--trust-key" not in build.command("bench", "B")
    source = (REPO / "android_demo/host/java/io/palkit/host/"
              "HostHarness.java").read_text()
    assert "getenv" not in source
