"""verify.json's `architectures` section: what `palkit verify-arch` found on each CPU model,
one record per "ARCH/CPU" key. Written here (the check's runner: export/arch_check.py) and read
here for bench and the report, records of older forms brought to the current one. Light: no
torch, so `palkit report` reads them without loading it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from palkit.core.fileio import write_json
from palkit.core.host import NATIVE, cpu_int8
from palkit.runtime.manifest import VERIFY_FILE

SECTION = "architectures"


def record_key(record: dict[str, Any]) -> str:
    return f"{record['arch']}/{record['cpu']}"


def _read_verify(bundle: Path) -> dict[str, Any]:
    path = Path(bundle) / VERIFY_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def record_architecture(bundle: Path, record: dict[str, Any]) -> Path:
    """Put `record` into the bundle's verify.json under architectures["ARCH/CPU"] (atomic; the
    other keys kept). A signed bundle's verify.json is signed too: the caller re-signs."""
    report = _read_verify(bundle)
    report.setdefault(SECTION, {})[record_key(record)] = record
    write_json(Path(bundle) / VERIFY_FILE, report)
    return Path(bundle) / VERIFY_FILE


def cpu_checks(bundle: Path, runtime: str) -> dict[str, Any]:
    """The bundle's `palkit verify-arch` records (verify.json's architectures) of `runtime`,
    for the report."""
    records = _read_verify(bundle).get(SECTION, {})
    records = {key: cpu_record(r) for key, r in records.items()}
    return {key: {**r, "runtimes": {runtime: r["runtimes"][runtime]}}
            for key, r in records.items() if runtime in r["runtimes"]}


def cpu_record(record: dict[str, Any]) -> dict[str, Any]:
    """A verify-arch record in its current form; one written before it took a CPU model (its
    ExecuTorch results at the top, keyed by architecture) moved into that form."""
    if "runtimes" in record:
        return record
    launcher = record.get("launcher", "").split()
    cpu = launcher[launcher.index("-cpu") + 1] if "-cpu" in launcher else NATIVE
    checked = {k: record[k] for k in ("path", "launcher", "tasks", "passed", "failures")
               if k in record}
    return {**{k: v for k, v in record.items() if k not in checked}, "cpu": cpu,
            "cpu_int8": cpu_int8(record["arch"], cpu),
            "verifying_machine": "a machine not recorded",
            "runtimes": {record.get("runtime", "executorch"): checked}}


def architecture_table(record: dict[str, Any]) -> str:
    """A Markdown table of one CPU's record: a row per runtime and task."""
    cpu = f"{record['arch']} {record['cpu']}"
    lines = [f"| runtime | task | examples | agreement with host int8 [95%] | largest logit diff "
             f"vs host | agreement with fp32 | metric change vs fp32 [95%] ({cpu}) "
             f"| host int8's change [95%] |", "|---|---|---:|---|---:|---:|---|---|"]
    for runtime, checked in record["runtimes"].items():
        for name, r in checked["tasks"].items():
            host, fp32, own = r["vs_host_int8"], r["vs_fp32"], r["host_int8_vs_fp32"]
            lo, hi = host["agreement_interval"]
            lines.append(f"| {runtime} | {name} | {r['examples']} | {host['agreement']:.4f} "
                         f"[{lo:.4f}, {hi:.4f}] | {host['max_abs_diff']:.2e} "
                         f"| {fp32['agreement']:.4f} | {_arch_change(fp32)} "
                         f"| {_arch_change(own)} |")
    return "\n".join(lines)


def _arch_change(r: dict[str, Any]) -> str:
    low, high = r["metric_change_interval"]
    return f"{r['metric']} {r['metric_change']:+.2f} [{low:+.2f}, {high:+.2f}]"
