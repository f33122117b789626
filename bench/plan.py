"""The verdict's timing plan: how many worker processes time its paired ratios (bench/pairs.py).

A pass is one worker process per runtime, timing that runtime's ratios one after another, each
pass starting one ratio later so that none is always first. The plan runs at least
TimingPlan.min_processes passes; a quiet machine's intervals are then within TARGET_HALFWIDTH and
it stops. A noisy machine's are not, and only more processes narrow them: the between-process t
interval shrinks with the number of processes (its quantile and 1/sqrt(n)), not with more pairs
in each. So the plan adds passes, each timing only the ratios still wider than the target, until
every ratio is within it, `max_processes` is reached, or the next pass would run past
`max_seconds` of paired timing beyond the minimum: pyperf's calibration of its runs to the noise
it finds, at the level where the variation is. The bench file records the plan as `timing_plan`.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from palkit.bench.options import BenchOptions
from palkit.bench.pairs import TARGET_HALFWIDTH, Pair, log_halfwidth, paired_ratio, verdict_pairs
from palkit.ui.progress import say

Worker = Callable[[dict[str, Any], float], dict[str, Any]]  # (spec, timeout) -> its JSON


@dataclass(frozen=True)
class PairJob:
    """One worker process: a runtime's ratios, each timed as its two sides against each other."""
    index: int                   # which pass
    threads: int
    seq_len: int
    pairs: tuple[Pair, ...]
    sides: tuple[Any, ...]       # the subjects (bench/subjects.py) their sides run


def ratios_by_runtime(subjects: list[Any]) -> dict[str, list[Pair]]:
    """The verdict's ratios (bench/pairs.py), grouped by the runtime that runs them."""
    runtime_of = {s.name: s.runtime for s in subjects}
    by_runtime: dict[str, list[Pair]] = {}
    for p in verdict_pairs(subjects):
        by_runtime.setdefault(runtime_of[p.num.subject], []).append(p)
    return by_runtime


def pair_job(index: int, ratios: list[Pair], subjects: list[Any], threads: int,
             seq_len: int) -> PairJob:
    """Pass `index`'s process for one runtime's `ratios`, starting `index` ratios later."""
    k = index % len(ratios)
    turn = tuple(ratios[k:] + ratios[:k])
    names = {name for p in turn for name in (p.num.subject, p.den.subject)}
    return PairJob(index, threads, seq_len, turn, tuple(s for s in subjects if s.name in names))


def record_pairs(job: PairJob, data: dict[str, Any], o: BenchOptions, worker: Worker) -> None:
    """One process's paired timing of its ratios, added to data["pairs"] by id (`finish_pairs`
    turns them into estimates)."""
    r = worker({"mode": "pairs", "threads": job.threads, "seq_len": job.seq_len,
                "warmup": o.timing.warmup, "pairs": o.timing_plan.pairs,
                "block": o.timing.block,
                "subjects": {s.name: s.worker_subject() for s in job.sides},
                "ratios": [{"id": p.id, "num": asdict(p.num), "den": asdict(p.den)}
                           for p in job.pairs]},
               o.worker_timeout)
    for pair in job.pairs:
        entry = data["pairs"].setdefault(pair.id, {
            "id": pair.id, "kind": pair.kind, "what": pair.what, "num": asdict(pair.num),
            "den": asdict(pair.den), "threads": job.threads, "seq_len": job.seq_len,
            "timings": [], "errors": []})
        timing = r if "error" in r else r["ratios"][pair.id]
        if "error" in timing:
            entry["errors"].append(timing["error"])
            say(f"{pair.what} (process {job.index + 1}): not measured: {timing['error']}")
            continue
        entry["timings"].append(timing)
        own = paired_ratio([(timing["num_ms"], timing["den_ms"])])["ratio"]
        say(f"{pair.what} (process {job.index + 1}): {own:.3f}x")


def estimate(entry: dict[str, Any]) -> dict[str, Any] | None:
    """A ratio's estimate over the processes that timed it so far; None before any did."""
    timings = entry["timings"]
    return paired_ratio([(t["num_ms"], t["den_ms"]) for t in timings]) if timings else None


def unresolved(data: dict[str, Any], ratios: list[Pair]) -> list[Pair]:
    """The ratios whose interval is still wider than TARGET_HALFWIDTH, or that one process
    alone timed (no between-process interval yet); a ratio no process could time is left out:
    more processes would fail alike."""
    wide = []
    for p in ratios:
        entry = data["pairs"].get(p.id)
        est = estimate(entry) if entry else None
        if est is not None and (len(entry["timings"]) < 2
                                or log_halfwidth(est["interval"]) > TARGET_HALFWIDTH):
            wide.append(p)
    return wide


def time_pairs(subjects: list[Any], data: dict[str, Any], o: BenchOptions, worker: Worker,
               clock: Callable[[], float] = time.monotonic) -> None:
    """Time the verdict's ratios at the reference condition (the fewest threads, the longest
    input) by the plan; data["pairs"] becomes the list of their estimates and
    data["timing_plan"] what the plan did. Nothing to time (no separate models): neither."""
    by_runtime = ratios_by_runtime(subjects)
    if not by_runtime:
        finish_pairs(data)
        return
    plan, threads, seq_len = o.timing_plan, min(o.threads), max(o.seq_lens)
    start = clock()
    passes, minimum_done = 0, start
    last_pass, last_ratios = 0.0, 1  # the latest pass's seconds and ratios, to foresee the next
    while True:
        todo = by_runtime
        if passes >= plan.min_processes:
            todo = {rt: wide for rt, ratios in by_runtime.items()
                    if (wide := unresolved(data, ratios))}
            count = sum(map(len, todo.values()))
            stopped = why_stop(count, passes, clock() - minimum_done,
                               last_pass * count / last_ratios, o)
            if stopped:
                break
            say(f"paired timing: {count} ratio(s) wider than ±{TARGET_HALFWIDTH:.1%} after "
                f"{passes} processes: one more")
        began = clock()
        for ratios in todo.values():
            record_pairs(pair_job(passes, ratios, subjects, threads, seq_len), data, o, worker)
        passes += 1
        last_pass, last_ratios = clock() - began, sum(map(len, todo.values()))
        if passes == plan.min_processes:
            minimum_done = clock()
    data["timing_plan"] = {"processes": passes, "pairs": plan.pairs, "block": o.timing.block,
                           "min_processes": plan.min_processes,
                           "max_processes": plan.max_processes,
                           "max_seconds": float(plan.max_seconds),
                           "target_halfwidth": TARGET_HALFWIDTH, "stopped": stopped,
                           "seconds": clock() - start}
    say(f"paired timing: {passes} processes, stopped: {stopped} "
        f"({data['timing_plan']['seconds']:.0f} s)")
    finish_pairs(data)


def why_stop(unresolved_ratios: int, passes: int, spent: float, next_pass: float,
             o: BenchOptions) -> str | None:
    """Why the plan stops after `passes` (at least the minimum) with `spent` seconds beyond the
    minimum and a next pass foreseen to take `next_pass`; None to go on."""
    if not unresolved_ratios:
        return "resolved"
    if passes >= o.timing_plan.max_processes:
        return "max processes"
    if spent + next_pass > o.timing_plan.max_seconds:
        return "time cap"
    return None


def finish_pairs(data: dict[str, Any]) -> None:
    """Each ratio's estimate and interval over its processes; a ratio none of whose processes
    ran keeps the errors."""
    finished = []
    for entry in data["pairs"].values():
        errors = entry.pop("errors")
        est = estimate(entry)
        if est is not None:
            entry.update(est)
            low, high = entry["interval"]
            say(f"{entry['what']}: {entry['ratio']:.3f}x [{low:.3f}, {high:.3f}]")
        else:
            entry["error"] = errors[0]
        finished.append(entry)
    data["pairs"] = finished
