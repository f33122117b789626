"""What machine this process runs on, as results name it."""
from __future__ import annotations

import os
import platform
from pathlib import Path

_CPUINFO = Path("/proc/cpuinfo")


def cpu_model() -> str:
    """The CPU's model name (x86 'model name', Arm 'Hardware'), else what platform knows."""
    try:
        for line in _CPUINFO.read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "processor\t: arm")):
                value = line.split(":", 1)[1].strip()
                if value and not value.isdigit():
                    return value
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_flags() -> list[str]:
    """The CPU's vector and matrix extensions (AVX-512 VNNI and the like): they set the int8 rate."""
    try:
        for line in _CPUINFO.read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = set(line.split(":", 1)[1].split())
                return sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "asimd",
                                                                "i8mm", "sve", "dotprod",
                                                                "vnni")) or "vnni" in f)
    except OSError:
        pass
    return []


# What each int8 instruction set means for a uint8 x int8 product (quant/weights.py's
# ProductRanges): VNNI and dot products add into 32 bits; x86 without them pairs in 16.
_INT8_FEATURES = (("avx512_vnni", "AVX-512 VNNI"), ("avx_vnni", "AVX-VNNI"),
                  ("amx_int8", "AMX-INT8"), ("asimddp", "dot product"), ("i8mm", "i8mm"))


def int8_features(flags: list[str] | None = None) -> str:
    """The CPU's int8 instructions in words, e.g. 'x86-64, AVX2, no VNNI (16-bit pairs)' or
    'aarch64, dot product', from /proc/cpuinfo's `flags` (None: this machine's)."""
    if flags is None:
        flags = cpu_flags()
        if not flags:
            return f"{platform.machine()}, int8 features unknown"
    if not flags:
        return "int8 features unknown"
    have = [name for flag, name in _INT8_FEATURES if flag in flags]
    if any(f.startswith("asimd") for f in flags):
        return "aarch64, " + (", ".join(have) if have else "no dot product (ARMv8.0)")
    base = "AVX-512" if "avx512bw" in flags else "AVX2" if "avx2" in flags else "SSE"
    if not any(name in have for name in ("AVX-512 VNNI", "AVX-VNNI")):
        return f"x86-64, {base}, no VNNI (16-bit pairs)"
    return f"x86-64, {base}, " + ", ".join(have)


NATIVE = "native"  # `palkit verify-arch`'s name for this host's own CPU (no qemu)
# The qemu CPU models `palkit verify-arch` checks, by their Linux feature flags; for aarch64
# also the CPU part number of the /proc/cpuinfo its guest is shown.
CPU_MODELS: dict[tuple[str, str], tuple[str, ...]] = {
    ("x86_64", "Haswell"): ("avx", "avx2", "fma"),
    ("aarch64", "cortex-a53"): ("fp", "asimd", "evtstrm", "crc32", "cpuid"),
    ("aarch64", "cortex-a76"): ("fp", "asimd", "evtstrm", "crc32", "atomics", "fphp", "asimdhp",
                                "cpuid", "asimdrdm", "lrcpc", "dcpop", "asimddp"),
    ("aarch64", "neoverse-n1"): ("fp", "asimd", "evtstrm", "crc32", "atomics", "fphp", "asimdhp",
                                 "cpuid", "asimdrdm", "lrcpc", "dcpop", "asimddp"),
}
ARM_PARTS = {"cortex-a53": "0xd03", "cortex-a76": "0xd0b", "neoverse-n1": "0xd0c"}


def cpu_int8(arch: str, cpu: str) -> str:
    """The int8 instructions of CPU model `cpu` (NATIVE: this host's) in words."""
    if cpu == NATIVE:
        return int8_features()
    flags = CPU_MODELS.get((arch, cpu))
    return int8_features(list(flags)) if flags else f"{arch} {cpu} (int8 features not on record)"


def machine_name() -> str:
    return f"host CPU: {cpu_model()}, {os.cpu_count()} cores"
