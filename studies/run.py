"""Train and score a study's jobs side by side, and keep DIR/study.json current.

Each job runs palkit's own commands in a child process, so every number a study reports comes
from a command a user can type: `palkit train --config RUN/train.json --out RUN`, then
`palkit evaluate RUN --split dev|test --out RUN/<split>.json`. A job whose run already finished
is not trained again, and one that stopped part-way continues with --resume, so a study that
was interrupted is started again with the same command.
"""
from __future__ import annotations

import datetime
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palkit.core.fileio import write_json
from palkit.studies.plan import Job
from palkit.trainer.checkpoint import run_finished, write_run_config
from palkit.ui.progress import say

CLI = ("-m", "palkit.cli")  # the installed palkit, wherever it is
SPLITS = ("dev", "test")


def job_commands(job: Job) -> list[list[str]]:
    """The palkit commands that make a job's results (the run's config is written beforehand)."""
    commands = []
    if job.trains and not run_finished(job.out):
        # A job killed at any point, even before its first checkpoint, continues from its run.
        resume = ["--resume"] if (job.out / "config.json").is_file() else []
        commands.append([sys.executable, *CLI, "train", "--config", str(config_file(job)),
                         "--out", str(job.out), *resume])
    if job.score:
        commands += [[sys.executable, *CLI, "evaluate", str(job.out), "--split", split,
                      "--data-dir", str(job.config.data_dir),
                      "--out", str(job.out / f"{split}.json")]
                     for split in SPLITS if not (job.out / f"{split}.json").is_file()]
    return commands


def config_file(job: Job) -> Path:
    """Beside the run folder, not in it: `palkit train` wants an empty folder to start in."""
    return job.out.with_name(job.out.name + ".train.json")


def log_file(job: Job) -> Path:
    return job.out.with_name(job.out.name + ".log")


@dataclass
class Running:
    job: Job
    commands: list[list[str]]
    process: subprocess.Popen | None = None
    log: Any = None
    started: float = field(default_factory=time.time)


def run_study(jobs: list[Job], out: Path, parallel: int, threads_per_job: int | None) -> bool:
    """Run every job, at most `parallel` at once, in dependency order. True when all succeed."""
    out.mkdir(parents=True, exist_ok=True)
    for job in jobs:
        job.out.parent.mkdir(parents=True, exist_ok=True)
        if job.trains:
            write_json(config_file(job), job.config.to_dict())
        else:
            # a separate run's folder holds its config beside models/, as train writes it
            job.out.mkdir(exist_ok=True)
            write_run_config(job.out, job.config.to_dict())
    status = {job.key: "pending" for job in jobs}
    running: dict[str, Running] = {}
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if threads_per_job:
        env.update(OMP_NUM_THREADS=str(threads_per_job), MKL_NUM_THREADS=str(threads_per_job))
    while any(s in ("pending", "running") for s in status.values()):
        for key, r in list(running.items()):
            code = r.process.poll() if r.process else 0
            if code is None:
                continue
            if code == 0 and r.commands:
                _start_next(r, env)
                continue
            if code != 0:
                why = f"killed by {signal.Signals(-code).name}" if code < 0 else str(code)
                status[key] = f"failed ({why}); log {log_file(r.job)}"
                say(f"study: {key} {status[key]}")
            else:
                status[key] = "done"
                say(f"study: {key} done in {(time.time() - r.started) / 60:.1f} min")
            r.log.close()
            del running[key]
        for job in jobs:
            if len(running) >= parallel:
                break
            if status[job.key] != "pending":
                continue
            if any(status[a].startswith("failed") for a in job.after):
                status[job.key] = "failed (a job it needs failed)"
            elif all(status[a] == "done" for a in job.after):
                commands = job_commands(job)
                if not commands:   # trained and scored by an earlier start of the study
                    status[job.key] = "done"
                    continue
                r = Running(job, commands, log=open(log_file(job), "a"))
                status[job.key] = "running"
                running[job.key] = r
                _start_next(r, env)
        write_json(out / "study.json", study_record(jobs, status))
        time.sleep(2)
    return all(s == "done" for s in status.values())


def _start_next(r: Running, env: dict[str, str]) -> None:
    command = r.commands.pop(0)
    r.log.write(f"$ {shlex.join(command)}\n")
    r.log.flush()
    r.process = subprocess.Popen(command, stdout=r.log, stderr=subprocess.STDOUT, env=env)


def study_record(jobs: list[Job], status: dict[str, str]) -> dict[str, Any]:
    return {"updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "jobs": [{"key": j.key, "run": j.run, "seed": j.seed, "out": str(j.out),
                      "status": status[j.key], "after": list(j.after)} for j in jobs]}
