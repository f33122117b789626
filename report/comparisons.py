"""Every host file's figures side by side: each PAL bundle against each other subject, condition by
condition (p50 / p50, unpaired), and the fraction of the machine's measured GEMM ceiling each
configuration reaches."""
from __future__ import annotations

from dataclasses import dataclass, field

from palkit.bench.schema import measurement_id, p50_id
from palkit.report.model import INTERNAL, BenchFile, Measurements
from palkit.report.selection import ratio, total_bytes


@dataclass(frozen=True)
class PairwiseRow:
    """A PAL bundle / another subject: bytes, and p50 by condition (`CONFIG tT sS`)."""
    pal: str
    other: str
    other_role: str | None
    size_ratio: float | None
    latency: dict[str, float]


@dataclass(frozen=True)
class CeilingShare:
    """Matmul FLOPs of one inference / p50, against the machine's measured GEMM ceiling."""
    id: str
    subject: str | None
    config: str
    threads: int
    seq_len: int
    matmul_gflop: float
    achieved_gflops: float
    ceiling: float | None
    ceiling_kind: str
    fraction: float | None
    bench_file: str = field(metadata=INTERNAL)   # the host file it was measured in


def pairwise(hosts: list[BenchFile], m: Measurements) -> list[PairwiseRow]:
    out = []
    for bench in hosts:
        prefix = bench.prefix
        for pal in [n for n, s in bench.subjects.items() if s.role == "pal"]:
            for other, s in bench.subjects.items():
                if other == pal:
                    continue
                latency = {}
                for row in bench.results:
                    if row.subject != pal or row.p50_ms is None:
                        continue
                    r = ratio(row.p50_ms, m.get(p50_id(prefix, other, row.config, row.threads,
                                                       row.seq_len)))
                    if r is not None:
                        latency[f"{row.config} t{row.threads} s{row.seq_len}"] = r
                out.append(PairwiseRow(pal, other, s.role or None,
                                       ratio(total_bytes(m, prefix, pal),
                                             total_bytes(m, prefix, other)), latency))
    return out


def ceiling_fraction(hosts: list[BenchFile], m: Measurements) -> list[CeilingShare]:
    out = []
    for bench in hosts:
        for row in bench.results:
            if not row.matmul_flops or not row.p50_ms:
                continue
            subject = bench.subjects.get(row.subject or "")
            kind = "int8" if subject and subject.precision == "int8" else "fp32"
            ceiling = m.get(measurement_id(bench.prefix, "ceiling", kind, f"t{row.threads}"))
            achieved = row.matmul_flops / (row.p50_ms / 1e3) / 1e9
            out.append(CeilingShare(f"{bench.prefix}{row.id}", row.subject, row.config,
                                    row.threads, row.seq_len, row.matmul_flops / 1e9, achieved,
                                    ceiling, kind, achieved / ceiling if ceiling else None,
                                    bench.path))
    return out
