"""The minimal reproducers of docs/records/runtime-crashes.md, runnable: one-byte edits of two tiny
ExecuTorch programs (a Linear(8, 4)), each loaded in a fresh process through the public
`executorch.runtime` API.

    python -m fuzz.repro_executorch /tmp/et-repro      # builds the programs once (~30 s), then
                                                       # prints each case's exit and last log line
"""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

# Builds portable.pte + _default_external_constant.ptd (weights outside the program) and
# xnnpack.pte (one XNNPACK-delegated linear). Same bytes on every run (seeded, deterministic).
MAKE = """
import torch
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
torch.manual_seed(0)
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
    def forward(self, x):
        return self.linear(x)
ep = torch.export.export(M().eval(), (torch.randn(1, 8),))
prog = to_edge_transform_and_lower(ep).to_executorch(
    ExecutorchBackendConfig(external_constants=True))
open("portable.pte", "wb").write(prog.buffer)
prog.write_tensor_data_to_file(".")
prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
open("xnnpack.pte", "wb").write(prog.buffer)
"""

# Loads PTE (with PTD unless "-") at verification level LEVEL and runs it once.
LOAD = """
import sys, torch
from executorch.runtime import Runtime, Verification
pte, ptd, level = sys.argv[1], None if sys.argv[2] == "-" else sys.argv[2], sys.argv[3]
program = Runtime.get().load_program(pte, data_path=ptd, verification=getattr(Verification, level))
print(program.load_method("forward").execute([torch.ones(1, 8)]))
"""

PTD = "_default_external_constant.ptd"
# What MAKE wrote with executorch 1.5.1 / torch 2.13.0: the offsets below are into these bytes.
SHA256 = {"portable.pte": "d1c016735d72f294e520271aa6d96c7d46708317cd0f946488a565d8c074ef81",
          PTD: "81d4f8b981c62dcc170d229c8d043ccfb823d8339f07c9f4c9d06c7246e714c8",
          "xnnpack.pte": "1cfbcbf4716678ad8798d625f6e12be0b5c9923ab7db71e5685a6c9a80e8bc1a"}
# (report id, file edited, offset, new byte, program, data file, verification)
CASES = [
    ("ET-1", PTD, 0, 0xFF, "portable.pte", PTD, "InternalConsistency"),
    ("ET-2", PTD, 131, 0xFF, "portable.pte", PTD, "InternalConsistency"),
    ("ET-3", "portable.pte", 452, 0xFF, "portable.pte", PTD, "InternalConsistency"),
    ("ET-4", "portable.pte", 1095, 0xFF, "portable.pte", PTD, "InternalConsistency"),
    ("ET-5", "xnnpack.pte", 1846, 0xFF, "xnnpack.pte", "-", "InternalConsistency"),
    ("ET-5", "xnnpack.pte", 1850, 0xFF, "xnnpack.pte", "-", "InternalConsistency"),
    ("ET-6", PTD, 4, 0xFF, "portable.pte", PTD, "InternalConsistency"),
    ("ET-6", "portable.pte", 4, 0xFF, "portable.pte", PTD, "InternalConsistency"),
    ("ET-6", "xnnpack.pte", 1284, 0xFF, "xnnpack.pte", "-", "InternalConsistency"),
]


def run_case(folder: Path, case: tuple) -> str:
    report, edited, offset, value, pte, ptd, level = case
    data = bytearray((folder / edited).read_bytes())
    data[offset] = value
    bad = folder / f"bad-{edited}"
    bad.write_bytes(bytes(data))
    args = [str(bad if pte == edited else folder / pte),
            "-" if ptd == "-" else str(bad if ptd == edited else folder / ptd), level]
    proc = subprocess.run([sys.executable, "-c", LOAD, *args], capture_output=True, text=True,
                          errors="replace", timeout=120)
    outcome = (signal.Signals(-proc.returncode).name if proc.returncode < 0
               else f"exit {proc.returncode}")
    logged = [line for line in proc.stderr.splitlines()
              if line.startswith("[") and "cpuinfo" not in line or "Error" in line]
    return f"{report} {edited}[{offset}] = {value:#04x} ({level}): {outcome}; " \
           f"{logged[-1] if logged else 'nothing logged'}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[0])
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "xnnpack.pte").is_file():
        subprocess.run([sys.executable, "-c", MAKE], cwd=folder, check=True,
                       capture_output=True)
    from palkit.core.fileio import sha256_file
    for name, digest in SHA256.items():
        if sha256_file(folder / name) != digest:
            print(f"note: {name} differs from the documented bytes (another ExecuTorch or torch?);"
                  " the offsets may not hit the same fields", file=sys.stderr)
    for case in CASES:
        print(run_case(folder, case))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
