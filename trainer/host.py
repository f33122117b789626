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
    'aarch64, dot product' (`flags`: /proc/cpuinfo's, by default this machine's)."""
    flags = cpu_flags() if flags is None else flags
    arm = any(f.startswith("asimd") for f in flags) or platform.machine() == "aarch64"
    have = [name for flag, name in _INT8_FEATURES if flag in flags]
    if arm:
        return "aarch64, " + (", ".join(have) if have else "no dot product (ARMv8.0)")
    base = "AVX-512" if "avx512bw" in flags else "AVX2" if "avx2" in flags else "SSE"
    if not any(name in have for name in ("AVX-512 VNNI", "AVX-VNNI")):
        return f"x86-64, {base}, no VNNI (16-bit pairs)"
    return f"x86-64, {base}, " + ", ".join(have)


def machine_name() -> str:
    return f"host CPU: {cpu_model()}, {os.cpu_count()} cores"
