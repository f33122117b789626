"""The int8 check on other CPUs: a bundle's tasks on both runtimes, run on another CPU model
(under qemu), against this host's int8 and the fp32 model.

Export's gate judges int8 on the host's kernels; other CPUs' kernels quantize and accumulate
differently (x86 without VNNI pairs uint8 x int8 products in 16 bits; ARM64 with or without dot
products: docs/int8-gate.md, "Every CPU"). Per task, on a stratified sample of the dev split, the
same token ids (encoded once in Python: only the arithmetic is compared) go through
- ExecuTorch: the Android app's own native path (its JNI and Java), built for the architecture
  (android_demo/host/native_host.py) and run by a JVM under qemu on the CPU model;
- ONNX Runtime: runtime/score_worker.py through palkit's runtime layer, in a Python of that
  architecture under qemu on the CPU model (this interpreter for x86-64 models; Debian's arm64
  Python with onnxruntime's aarch64 wheel, fetched by native_host.py, for aarch64);
and export/gate_stats.py's `compare` gives each record's `vs_host_int8`, `vs_fp32` (judged by the
gate) and `host_int8_vs_fp32` (the host's own change, to set beside it). verify.json keeps them
under `architectures["ARCH/CPU"]`, with the CPU's int8 features and the verifying machine's.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import shutil
import site
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import torch

import palkit
from palkit.android_demo.host import native_host
from palkit.core.errors import PalkitError
from palkit.core.host import ARM_PARTS, CPU_MODELS, NATIVE, cpu_int8, cpu_model, int8_features
from palkit.core.stats import CONFIDENCE
from palkit.export.gate import Gate
from palkit.export.gate_stats import compare, failure
from palkit.export.verify import (Encoded, encode_texts, encode_words, reference_batched,
                                  run_task, stack_rows)
from palkit.runtime.bundle import load_bundle
from palkit.runtime.engine import Engine
from palkit.trainer.checkpoint import load_model, resolve_model_dir
from palkit.trainer.data import read_examples

Log = Callable[[str], None]
Runner = Callable[[str, list[Encoded]], torch.Tensor]
STRATA = 10                     # score bins of a regression task's sample
SEED = 0
CHILD_TIMEOUT_S = 3600.0
RUNTIME_PATHS = {"executorch": "the app's JNI and Java (android_demo/host/native_host.py)",
                 "onnxruntime": "palkit's runtime layer in a Python of that CPU "
                                "(runtime/score_worker.py)"}


class ArchCheckError(PalkitError):
    """The check cannot run here or on this bundle (says what to do)."""


def default_cpu(arch: str) -> str:
    """This host's own CPU on its architecture; on aarch64 the native path's qemu model
    (android_demo/host/native_host.py: QEMU_CPU, or $PALKIT_QEMU_CPU)."""
    host = native_host
    if arch == host.HOST_ARCH:
        return NATIVE
    return os.environ.get(host.QEMU_CPU_ENV) or host.QEMU_CPU


def stratified_sample(gold: list[Any], n: int | None, regression: bool,
                      seed: int = SEED) -> list[int]:
    """Sorted indices of n of the examples (all when n is None or not smaller), each label (or
    each of STRATA score bins) keeping its share of the split, largest remainders rounded up."""
    if n is None or n >= len(gold):
        return list(range(len(gold)))
    if regression:
        rank = sorted(range(len(gold)), key=lambda i: gold[i])
        key = {i: r * STRATA // len(gold) for r, i in enumerate(rank)}
    else:
        key = {i: gold[i] for i in range(len(gold))}
    groups: dict[Any, list[int]] = {}
    for i in range(len(gold)):
        groups.setdefault(key[i], []).append(i)
    share = {k: n * len(g) / len(gold) for k, g in groups.items()}
    take = {k: int(s) for k, s in share.items()}
    for k in sorted(share, key=lambda k: take[k] - share[k])[:n - sum(take.values())]:
        take[k] += 1
    generator = torch.Generator().manual_seed(seed)
    chosen = [g[j] for k, g in sorted(groups.items())
              for j in torch.randperm(len(g), generator=generator)[:take[k]].tolist()]
    return sorted(chosen)


def native_logits(build, bundle: Path, task: str, encoded: list[Encoded],
                  trust_key: Path | None = None) -> torch.Tensor:
    """The app's native path's logits for every input (HostHarness `score`: one JVM); with
    `trust_key`, the app's own signature check runs first, as on the phone."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as inputs:
        for ids, _, types in encoded:
            inputs.write(json.dumps({"task": task, "input_ids": ids[0].tolist(),
                                     "token_type_ids": types[0].tolist()}) + "\n")
        inputs.flush()
        done = subprocess.run(build.command("score", str(bundle), "1", inputs.name,
                                            trust_key=trust_key),
                              capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise ArchCheckError(f"{bundle}: the app's native path on {build.arch} failed on "
                             f"{task}: {last}")
    return stack_rows([torch.tensor(r, dtype=torch.float32) for r in json.loads(done.stdout)])


@functools.lru_cache(maxsize=None)
def palkit_import_root() -> Path:
    """A folder holding this palkit as `palkit/`, for the PYTHONPATH of a Python that has not
    installed it: an installed palkit's site folder, or for a checkout (whose folder has another
    name) a link in the temp folder."""
    package = Path(palkit.__file__).resolve().parent
    if package.name == "palkit":
        return package.parent
    digest = hashlib.sha256(bytes(package)).hexdigest()[:12]
    root = Path(tempfile.gettempdir()) / f"palkit-import-{digest}"
    root.mkdir(exist_ok=True)
    link = root / "palkit"
    if not link.is_symlink() or link.resolve() != package:
        staged = root / f".palkit-{os.getpid()}"
        staged.unlink(missing_ok=True)
        staged.symlink_to(package, target_is_directory=True)
        os.replace(staged, link)
    return root


def host_python_under_qemu(cpu: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """This interpreter run by qemu-user on x86-64 CPU model `cpu` (Haswell: AVX2, no VNNI; TCG
    emulates no AVX-512), and the environment that gives it this process's packages."""
    qemu = native_host.host_qemu()
    if qemu is None or native_host.HOST_ARCH != "x86_64":
        raise ArchCheckError("running x86-64 CPU models needs an x86-64 host and qemu-user: "
                             "`apt-get install qemu-user-static`")
    # under qemu, /proc/self/exe is qemu itself: the packages come by path, not from the prefix
    paths = [str(palkit_import_root()), *site.getsitepackages()]
    return ((qemu, "-cpu", cpu, os.path.realpath(sys.executable)),
            {"PYTHONPATH": os.pathsep.join(paths)})


def arm64_python(cpu: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """Debian's arm64 Python with onnxruntime's aarch64 wheel (native_host.py fetch) under qemu
    on `cpu`. qemu 7.2 shows the guest the host's x86 /proc/cpuinfo, on which onnxruntime's CPU
    detection crashes: the guest sees the model's own, bind-mounted in a private mount namespace
    (`unshare`; as root, else in a user namespace)."""
    host = native_host
    folder = host.cross_python("aarch64")
    if host.qemu() is None or not folder.is_dir():
        raise ArchCheckError("ONNX Runtime on aarch64 needs qemu and an arm64 Python: `apt-get "
                             f"install {host.AARCH64_PACKAGES}`, `dpkg --add-architecture arm64 "
                             f"&& apt-get update`, then `{host.FETCH_COMMAND}`")
    if shutil.which("unshare") is None:
        raise ArchCheckError("ONNX Runtime on aarch64 needs util-linux's `unshare` (for the "
                             "guest's /proc/cpuinfo)")
    cpuinfo = folder / f"cpuinfo-{cpu}"
    if not cpuinfo.is_file():
        cpuinfo.write_text(f"processor\t: 0\nFeatures\t: {' '.join(CPU_MODELS['aarch64', cpu])}\n"
                           "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\n"
                           f"CPU part\t: {ARM_PARTS[cpu]}\nCPU revision\t: 0\n\n")
    usr = folder / "sysroot/usr"
    libraries = f"{usr / 'lib/aarch64-linux-gnu'}:{folder / 'sysroot/lib/aarch64-linux-gnu'}"
    namespace = private_mounts()
    return ((*namespace, "sh", "-c", 'mount --bind "$0" /proc/cpuinfo && exec "$@"', str(cpuinfo),
             host.qemu(), "-L", str(host.AARCH64_SYSROOT), "-cpu", cpu,
             "-E", f"LD_LIBRARY_PATH={libraries}", "-E", f"PYTHONHOME={usr}",
             "-E", f"PYTHONPATH={folder / 'site'}{os.pathsep}{palkit_import_root()}",
             str(usr / f"bin/python{host.CROSS_PYTHON}")), {})


@functools.lru_cache(maxsize=None)
def private_mounts() -> tuple[str, ...]:
    """`unshare` into a private mount namespace (as root; else in a user namespace), once tried
    here: a container without the right to it is named in one line."""
    namespace = ("unshare", "-m", "--propagation", "private") if os.geteuid() == 0 else \
        ("unshare", "-r", "-m", "--propagation", "private")
    done = subprocess.run([*namespace, "true"], capture_output=True, text=True)
    if done.returncode != 0:
        raise ArchCheckError("ONNX Runtime on aarch64 needs a private mount namespace for its "
                             f"/proc/cpuinfo, which this machine refuses ({' '.join(namespace)}: "
                             f"{(done.stderr.strip().splitlines() or ['no reason given'])[-1]})")
    return namespace


def python_for(arch: str, cpu: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """A Python running palkit's runtime layer on `arch` CPU model `cpu`, and its environment."""
    if cpu == NATIVE:
        return (sys.executable,), {}
    if arch == "x86_64":
        return host_python_under_qemu(cpu)
    if native_host.HOST_ARCH == "x86_64":
        return arm64_python(cpu)
    raise ArchCheckError(f"no Python for {arch} CPU models on a {native_host.HOST_ARCH} host")


def worker_logits(launcher: tuple[str, ...], env: dict[str, str], bundle: Path, runtime: str,
                  task: str, encoded: list[Encoded]) -> torch.Tensor:
    """The bundle's outputs for every input from runtime/score_worker.py, run by `launcher` (qemu
    on a CPU model and a Python of that architecture) with `env` added."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as inputs:
        for ids, _, types in encoded:
            inputs.write(json.dumps({"task": task, "input_ids": ids[0].tolist(),
                                     "token_type_ids": types[0].tolist()}) + "\n")
        inputs.flush()
        done = subprocess.run([*launcher, "-m", "palkit.runtime.score_worker", str(bundle), runtime,
                               inputs.name], capture_output=True, text=True,
                              timeout=CHILD_TIMEOUT_S, env={**os.environ, **env})
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        cpu = launcher[launcher.index("-cpu") + 1] if "-cpu" in launcher else "this CPU"
        raise ArchCheckError(f"{bundle}: {runtime} on {cpu} failed on {task}: {last}")
    return stack_rows([torch.tensor(r, dtype=torch.float32) for r in json.loads(done.stdout)])


def dev_sample(spec, tokenizer, max_len: int, data_dir: Path, n: int | None
               ) -> tuple[list[Encoded], list, str, list[list[int]] | None]:
    """The task's dev examples (a stratified sample of n: by label, label set, or score bin; a
    tagging task's at random), encoded, their labels, source and (tagging) each word's first
    token."""
    if "dev" not in spec.files:
        raise ArchCheckError(f"task '{spec.name}' has no dev split to check on; export a bundle "
                             "without it, or add one to its task file")
    if not (data_dir / spec.files["dev"]).is_file():
        raise ArchCheckError(f"task '{spec.name}': {data_dir / spec.files['dev']} not found; "
                             "give --data-dir the folder holding every task's dev split")
    examples = read_examples(spec, data_dir, "dev", bad_rows="skip")
    strata = [() if spec.is_tagging else tuple(sorted(e.label)) if spec.is_multi_label
              else e.label for e in examples]
    chosen = stratified_sample(strata, n, spec.is_regression)
    which = (f"all {len(examples)}" if len(chosen) == len(examples) else
             f"{len(chosen)} of {len(examples)} (stratified, seed {SEED})")
    gold, source = [examples[i].label for i in chosen], f"{which} dev examples from {data_dir}"
    if spec.is_tagging:
        encoded, firsts = encode_words(tokenizer, [examples[i].texts[0] for i in chosen], max_len)
        return encoded, gold, source, firsts
    return (encode_texts(tokenizer, [examples[i].texts for i in chosen], max_len), gold, source,
            None)


def missing_tools(runtime: str, arch: str, cpu: str) -> str | None:
    """Why `runtime` cannot run on `arch` CPU `cpu` here, in one line, or None (cheap: before
    the model loads)."""
    if runtime == "executorch":
        reason = native_host.missing_toolchain(arch)
        return f"cannot run the app's native path on {arch}: {reason}" if reason else None
    try:
        python_for(arch, cpu)
    except ArchCheckError as e:
        return str(e)
    return None


def runner(runtime: str, bundle: Path, arch: str, cpu: str,
           trust_key: Path | None = None) -> tuple[Runner, tuple[str, ...]]:
    """How `runtime` runs a task's inputs on `arch` CPU `cpu` (the native path built here), and
    its launcher (qemu and the JVM or Python it runs). The worker Pythons read a bundle whose
    signature `prepare` checked (an arm64 Python has no `cryptography`); the JVM checks again."""
    host = native_host
    if runtime == "executorch":
        try:
            build = host.build(arch, None if cpu == NATIVE else cpu)
        except host.NativeBuildError as e:
            raise ArchCheckError(f"cannot build the app's native path for {arch}: {e}") from None
        return (lambda task, encoded: native_logits(build, bundle, task, encoded, trust_key),
                tuple(map(str, build.launcher)))
    launcher, env = python_for(arch, cpu)
    return (lambda task, encoded: worker_logits(launcher, env, bundle, runtime, task, encoded),
            launcher)


def check_cpu(arch: str, cpu: str) -> None:
    """Refuse, in one line, a CPU model whose int8 features palkit does not know."""
    known = [c for a, c in CPU_MODELS if a == arch]
    if cpu != NATIVE and cpu not in known:
        raise ArchCheckError(f"no int8 facts for {arch} CPU model {cpu!r} here: choose "
                             f"{', '.join(known)}" + (" or leave --cpu out (this host's CPU)"
                                                      if arch == native_host.HOST_ARCH else ""))
    if cpu == NATIVE and arch != native_host.HOST_ARCH:
        raise ArchCheckError(f"{arch} is not this host's architecture: give --cpu "
                             f"{' or '.join(known)}")


def prepare(bundle: Path, run: Path, runtimes: list[str] | None, arch: str, cpu: str,
            trust_key: Path | None = None):
    """The bundle, the runtimes to check (None: the bundle's) and the fp32 model it was
    exported from; each refusal one line, the CPU model, the signature (with `trust_key`) and
    missing tools first."""
    check_cpu(arch, cpu)
    loaded = load_bundle(bundle, trust_key=trust_key)
    missing = sorted(set(runtimes or []) - set(loaded.runtimes))
    if missing:
        raise ArchCheckError(f"{bundle}: has no {' or '.join(missing)} files; give --runtimes "
                             f"{','.join(loaded.runtimes)}")
    runtimes = runtimes or list(loaded.runtimes)
    reason = next(filter(None, (missing_tools(rt, arch, cpu) for rt in runtimes)), None)
    if reason:
        raise ArchCheckError(reason)
    model, tokenizer, trunk_sha = load_model(resolve_model_dir(run), list(loaded.tasks))
    if trunk_sha != loaded.manifest.trunk.sha256:
        raise ArchCheckError(f"{run}: its trunk {trunk_sha[:12]}… is not the bundle's "
                             f"{loaded.manifest.trunk.sha256[:12]}…; give the run {bundle} was "
                             "exported from")
    return loaded, runtimes, model, tokenizer


def check_architecture(bundle: Path, run: Path, data_dir: Path, arch: str, cpu: str,
                       max_examples: int | None, runtimes: list[str] | None = None,
                       gate: Gate = Gate(), log: Log = print,
                       trust_key: Path | None = None) -> dict[str, Any]:
    """verify.json's `architectures["ARCH/CPU"]` record of the bundle (record_architecture
    writes it): every task's dev sample on each runtime on that CPU, the host's int8, and fp32.
    `trust_key`: a key the bundle must be signed by, checked here before anything runs it and
    by the app's native path as it loads."""
    bundle = Path(bundle)
    loaded, runtimes, model, tokenizer = prepare(bundle, run, runtimes, arch, cpu, trust_key)
    max_len = loaded.manifest.tokenizer.max_length
    samples = {t: dev_sample(model.tasks[t], tokenizer, max_len, data_dir, max_examples)
               for t in loaded.tasks}  # every task's data checked before minutes of running
    runners = {rt: runner(rt, bundle, arch, cpu, trust_key) for rt in runtimes}
    fp32 = {t: reference_batched(model, t, encoded) for t, (encoded, _, _, _) in samples.items()}
    records, failures = {}, []
    for rt, (run_on_cpu, launcher) in runners.items():
        engine, tasks = Engine(loaded, rt), {}
        for name, (encoded, gold, source, firsts) in samples.items():
            t0 = time.time()
            other = run_on_cpu(name, encoded)
            log(f"{rt}/{name}: {len(encoded)} examples on {arch} {cpu} in {time.time() - t0:.0f} s")
            host, _ = run_task(engine, name, encoded)
            spec = model.tasks[name]  # the CPU against the host's int8 and fp32; the host vs fp32
            tasks[name] = {"examples": len(encoded), "source": source,
                           "vs_host_int8": compare(spec, host, other, None, source, gate, firsts),
                           "vs_fp32": compare(spec, fp32[name], other, gold, source, gate, firsts),
                           "host_int8_vs_fp32": compare(spec, fp32[name], host, gold, source,
                                                        gate, firsts)}
        lost = [f for t, r in tasks.items()
                if (f := failure(r["vs_fp32"], f"{arch}/{cpu}/{rt}/{t}", True, gate))]
        records[rt] = {"path": RUNTIME_PATHS[rt], "launcher": shlex.join(launcher),
                       "host_int8": f"{rt} Python runtime on this host", "tasks": tasks,
                       "passed": not lost, "failures": lost}
        failures += lost
    qemu = next((a for _, launcher in runners.values() for a in launcher
                 if Path(a).name.startswith("qemu-")), None)
    return {"arch": arch, "cpu": cpu, "cpu_int8": cpu_int8(arch, cpu),
            "verifying_machine": f"{cpu_model()} ({int8_features()})",
            "qemu": ".".join(map(str, native_host.qemu_version(qemu))) if qemu else None,
            "gate": asdict(gate), "confidence": CONFIDENCE,
            "date": time.strftime("%Y-%m-%d", time.gmtime()), "runtimes": records,
            "passed": not failures, "failures": failures}
