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


def machine_name() -> str:
    return f"host CPU: {cpu_model()}, {os.cpu_count()} cores"
