"""The training recipe, as plain code: config in, run directory out (see trainer/checkpoint.py).

Read it top to bottom:

  train()          --mode separate trains one run per task; otherwise one Run
  Run.__init__     devices, options, tasks and phases; the model, fresh (trainer/run_setup.py) or
                   from RUN/last to resume; each task's data
  Run.train        the phases in order (trainer/phases.py: JointPhase, then with
                   --tune-adapters-after one TunePhase per task), then the run is marked finished
  Run.run_phase    the phase begins, its optimizers and data streams are built, its epochs run,
                   it ends
  Run.run_epoch    a fixed number of steps (trainer/step.py; with --grad-surgery, surgery_step),
                   then end_epoch (dev scores, the metrics line, the best model) and a checkpoint

Each phase has its own optimizers and warmup-then-linear-decay schedule. Resumption is exact:
the data order is a pure function of the seed (trainer/sampling.py) and a checkpoint holds
everything else that moves (weights, AdamW's moments, RNG state, stream positions, metrics), so
a kill at any instant resumes to the same final folder.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from palkit.core.errors import PalkitError
from palkit.core.fileio import kill_point, write_json
from palkit.trainer.checkpoint import (TRUNK_WEIGHTS, Checkpoint, TrainingState, link_run_files,
                                       load_checkpoint, load_model, mark_finished, read_json,
                                       runs_beside, save_best, save_checkpoint, tidy_run,
                                       upgrade_legacy_run, write_run_config)
from palkit.trainer.config import TrainConfig, resolve_step
from palkit.trainer.data import IGNORED
from palkit.trainer.devices import loss_sync_interval, setup_distributed
from palkit.trainer.distill import Teachers, distill_loss, teacher_weight
from palkit.trainer.evaluate import evaluate_model
from palkit.trainer.model import regression_score
from palkit.trainer.phases import Phase, PhaseContext, plan_phases, trainable_parameters
from palkit.trainer.run_setup import encode_task_data, fresh_model, read_task_examples
from palkit.trainer.sampling import (LengthBuckets, TaskStream, epoch_task_schedule, sampling_alpha,
                                     task_probabilities)
from palkit.trainer.step import Graphs, PhaseOptimizers, TrainStep, lr_at, width_for
from palkit.trainer.surgery import GradVac, pcgrad
from palkit.trainer.tasks import TaskSpec, resolve_tasks
from palkit.ui.progress import StepBar, say

# Options that do not change what is computed, so a resumed run may set them differently.
RESUME_MAY_CHANGE = {"device", "precision", "data_dir", "out", "eval_batch_size", "compile",
                     "compile_mode", "cuda_graphs"}
# With --compile, batch widths are rounded up to this, so the graph is built for few shapes.
COMPILE_PAD_MULTIPLE = 16


class TrainingError(PalkitError, RuntimeError):
    """Training cannot go on (bad loss, incompatible resume); the message says what to do."""


def train(cfg: TrainConfig, resume: bool = False) -> Path:
    """Train as configured; --mode separate trains one full single-task model per task."""
    out = Path(cfg.out)
    if not resume and out.exists() and any(out.iterdir()):
        raise TrainingError(f"{out} already holds a run; pass --resume to continue it or choose "
                            "another --out")
    if resume and not (out / "config.json").is_file():
        raise TrainingError(f"{out}: no run to resume there (runs in {out.parent}: "
                            f"{', '.join(runs_beside(out)) or 'none'}); check --out, or drop "
                            "--resume to start a new run")
    if cfg.mode != "separate":
        return Run(cfg, resume).train()
    out.mkdir(parents=True, exist_ok=True)
    write_run_config(out, cfg.to_dict())
    for task in cfg.tasks:
        sub = cfg.replace(mode="shared", tasks=(task,), out=str(out / "models" / task))
        Run(sub, resume and (Path(sub.out) / "last").exists()).train()
    return out


def task_loss(spec: TaskSpec, raw: torch.Tensor, labels: torch.Tensor, sts_loss: str) -> torch.Tensor:
    raw = raw.float()
    if spec.is_tagging:   # only each word's first piece carries a tag; the rest are IGNORED
        return F.cross_entropy(raw.flatten(0, 1), labels.flatten().long(), ignore_index=IGNORED)
    if spec.is_multi_label:
        # summed over labels (a mean over them would scale each label's gradient by 1/labels
        # against a softmax's; on ATIS's 21 intents it learned them several times slower)
        return F.binary_cross_entropy_with_logits(raw, labels, reduction="none").sum(-1).mean()
    if not spec.is_regression:
        return F.cross_entropy(raw, labels.long())
    if sts_loss == "bce":
        low, high = spec.score_range  # type: ignore[misc]
        return F.binary_cross_entropy_with_logits(raw.squeeze(-1), (labels - low) / (high - low))
    return F.mse_loss(regression_score(spec, raw), labels)


class Run:
    """One training run: model, data, optimiser state and the run directory it writes."""

    # ---- setting up ---------------------------------------------------------------------------

    def __init__(self, cfg: TrainConfig, resume: bool):
        self.dist = setup_distributed(cfg)
        if cfg.grad_surgery != "none" and self.dist.world > 1:
            raise TrainingError("--grad-surgery with several processes is not supported; run it "
                                "in one process")
        if cfg.cuda_graphs and self.dist.world > 1:
            raise TrainingError("--cuda-graphs records one process's step; run it without "
                                "torchrun, or drop --cuda-graphs to train with several processes")
        self.log = say if self.dist.main else (lambda *a, **k: None)
        # config.json keeps the options as given, so that a resumed run or add-task resolves the
        # defaults again on its own device; model/summary.json records what ran (self.cfg).
        self.options = cfg
        self.cfg, fallback = resolve_step(cfg, self.dist.device.type == "cuda", self.dist.world)
        cfg = self.cfg
        if fallback:
            self.log(fallback)
        self.out = Path(cfg.out)
        examples = read_task_examples(cfg, resolve_tasks(cfg.tasks, list(cfg.custom_tasks)))
        self.specs = examples.specs
        if cfg.distill_from and any(s.is_tagging or s.is_multi_label for s in self.specs):
            raise TrainingError("--distill-from teaches one-label, pair and score tasks; train "
                                "multi_label and token_tagging tasks without it")
        self.phases = plan_phases(cfg, self.specs)
        self.state = TrainingState()
        self.optimizer_state: dict[str, torch.Tensor] = {}
        self.metrics: list[str] = []         # metrics.jsonl's lines, saved with each checkpoint
        self._examples_seen: list[str] = []  # filled under DDP only, for the rank report
        self.bar: StepBar | None = None
        self.last_dev = ""                   # the latest dev score, shown on the bar
        self.pending_losses: list[torch.Tensor] = []   # step losses not yet read to the host
        self.loss_sync_every = loss_sync_interval(self.dist.device)
        self.pad_multiple = COMPILE_PAD_MULTIPLE if cfg.compile else 1
        self.graphs = Graphs()               # every phase's CUDA graphs share one memory pool
        torch.manual_seed(cfg.seed)
        last = self.out / "last"
        if resume and self.dist.main and self.out.is_dir():
            tidy_run(self.out)               # what a kill left half-written or unreferenced
        if resume and last.exists():
            self.resume_from(last)
        else:
            self.model, self.tokenizer, self.frozen_trunk_file = fresh_model(
                cfg, self.specs, self.dist.device, examples.train)
        self.teachers = (Teachers(Path(cfg.distill_from), [s.name for s in self.specs],
                                  self.tokenizer, self.dist.device) if cfg.distill_from else None)
        data = encode_task_data(cfg, examples, self.tokenizer, self.dist.device, self.pad_multiple)
        self.train_data, self.dev_data, self.pad_id = data.train, data.dev, data.pad_id
        self.train_splits = data.held
        self.pad_widths = cfg.pad_widths()

    def resume_from(self, ckpt: Path) -> None:
        """The model, loop position, optimizer state, RNG state and metrics of RUN/last."""
        saved = TrainConfig.from_dict(read_json(self.out / "config.json")).to_dict()
        diff = {k for k, v in self.cfg.to_dict().items()
                if k not in RESUME_MAY_CHANGE and saved[k] != v}
        if diff:
            raise TrainingError(f"{self.out}: --resume with different options ({sorted(diff)}); "
                                "resume with the run's own config.json or start a new --out")
        self.model, self.tokenizer, _ = load_model(ckpt, [s.name for s in self.specs])
        self.model.to(self.dist.device).train()
        # A frozen trunk is copied byte for byte from whatever checkpoint `last` names when a
        # snapshot is written (it resolves to a whole one at every instant).
        self.frozen_trunk_file = ckpt / "trunk" / TRUNK_WEIGHTS if self.cfg.freeze_trunk else None
        if self.dist.main:
            upgrade_legacy_run(self.out)
        held = load_checkpoint(ckpt)
        self.state, self.optimizer_state, self.metrics = held.state, held.optimizer, held.metrics
        torch.set_rng_state(held.rng_state)
        if not self.state.finished:
            self.log(f"resuming {self.out} at phase {self.phases[self.state.phase].name}, "
                     f"epoch {self.state.epoch + 1}, step {self.state.step}")

    # ---- the run: its phases in order ---------------------------------------------------------

    def train(self) -> Path:
        st = self.state
        if st.finished:
            self.log(f"{self.out} already finished; nothing to do")
            return self.out
        if self.dist.main:
            self.out.mkdir(parents=True, exist_ok=True)
            write_run_config(self.out, self.options.to_dict())
            link_run_files(self.out)
        counts = self.model.param_counts()
        self.log(f"mode={self.cfg.mode} tasks={','.join(self.cfg.tasks)} params: trunk "
                 f"{counts['params_trunk']:,}, task-specific {counts['params_task_specific']:,} "
                 f"(+{100 * counts['params_task_specific'] / counts['params_trunk']:.2f}%)")
        self.bar = self._progress_bar()
        try:
            while st.phase < len(self.phases):
                self.run_phase(self.phases[st.phase])
                st.next_phase()
        finally:
            if self.bar is not None:
                self.bar.close()
        if self.dist.main:
            mark_finished(self.out, st)
        if self.dist.world > 1:
            self._write_rank_report()
        return self.out

    def run_phase(self, phase: Phase) -> None:
        st = self.state
        phase.begin(self.model, self.out, self.specs, fresh=st.epoch == 0 and st.step == 0)
        ctx = self.phase_context(phase)
        while st.epoch < phase.epochs:
            self.run_epoch(ctx)
        phase.end(self.model, self.out)

    def phase_context(self, phase: Phase) -> PhaseContext:
        """The phase's trainable parameters, optimizers (restored when resuming), model wrapper,
        data streams and step."""
        params = trainable_parameters(self.model, phase)
        name_of = {id(p): n for n, p in params.items()}
        task_params = {t: [p for p in self.model.task_parameters(t).values() if p.requires_grad]
                       for t in phase.tasks}
        task_of = {name_of[id(p)]: t for t, own in task_params.items() for p in own}
        capture = self.cfg.cuda_graphs and self.dist.device.type == "cuda"
        opts = PhaseOptimizers(params, task_of, self.cfg, self.dist.device, capture)
        if self.optimizer_state:
            opts.restore(self.optimizer_state)
            self.optimizer_state = {}
        model = self.model
        if self.dist.world > 1:
            model = torch.nn.parallel.DistributedDataParallel(
                self.model, find_unused_parameters=True,
                device_ids=[self.dist.device.index] if self.dist.device.type == "cuda" else None)
        if self.cfg.compile:
            model = torch.compile(model, mode=self.cfg.compile_mode)
        specs = [s for s in self.specs if s.name in phase.tasks]
        streams = {s.name: TaskStream(len(self.train_data[s.name]), self.cfg.seed, index,
                                      self.state.streams.get(s.name, 0), self._buckets(s.name))
                   for index, s in enumerate(self.specs) if s.name in phase.tasks}
        gradvac = GradVac(len(specs)) if self.cfg.grad_surgery == "gradvac" else None
        if gradvac is not None and self.state.gradvac_targets is not None:
            gradvac.targets = torch.tensor(self.state.gradvac_targets, dtype=torch.float64)
        ctx = PhaseContext(phase, specs, [len(self.train_data[s.name]) for s in specs],
                           self.cfg.sampling if len(specs) > 1 else "round-robin", streams,
                           gradvac, opts, model)
        ctx.step = TrainStep(
            lambda spec, batch, position: self.forward_loss(ctx, spec, batch, position), opts,
            task_params, [p for n, p in params.items() if n.startswith("trunk.")],
            phase.epochs * self.cfg.steps_per_epoch, self.cfg, self.dist.device,
            self.pad_widths, capture, self.graphs)
        return ctx

    def _buckets(self, task: str) -> LengthBuckets | None:
        if not self.cfg.length_buckets:
            return None
        lengths = [len(ids) for ids in self.train_data[task].input_ids]
        per_step = self.cfg.batch_size * self.dist.world   # every rank slices one global batch
        return LengthBuckets(lengths, per_step, self.cfg.length_buckets)

    # ---- one epoch: its steps, then dev scores and a checkpoint -------------------------------

    def run_epoch(self, ctx: PhaseContext) -> None:
        cfg, st, phase = self.cfg, self.state, ctx.phase
        epoch = st.epoch + 1
        schedule = epoch_task_schedule(ctx.sampling, ctx.sizes, epoch, phase.epochs,
                                       cfg.steps_per_epoch, cfg.seed + st.phase)
        started = time.time()
        while st.step < cfg.steps_per_epoch:
            position = (epoch - 1) * cfg.steps_per_epoch + st.step   # within the phase
            if cfg.grad_surgery != "none" and len(ctx.specs) > 1:
                loss = self.surgery_step(ctx, position)
            else:
                spec = ctx.specs[schedule[st.step]]
                loss = ctx.step(spec, self.batch(spec, ctx.streams[spec.name]), position)
            kill_point("step")
            self._count_step(ctx, loss, epoch)
            if cfg.save_every and st.step % cfg.save_every == 0 and st.step < cfg.steps_per_epoch:
                st.elapsed_s += time.time() - started
                started = time.time()
                self.save_checkpoint(ctx)
        self._sync_losses(ctx)
        st.elapsed_s += time.time() - started
        self.end_epoch(ctx, epoch)
        st.end_epoch()
        self.save_checkpoint(ctx)
        if self.dist.world > 1:
            dist.barrier()

    def batch(self, spec: TaskSpec, stream: TaskStream) -> dict[str, torch.Tensor]:
        """This rank's share of a global batch (every rank draws the same indices and keeps its
        slice), gathered from the task's split on the device. With graph widths it is written
        into its (task, width)'s input tensors, which that graph reads."""
        b = self.cfg.batch_size
        indices = stream.take(b * self.dist.world)[self.dist.rank * b:(self.dist.rank + 1) * b]
        if self.dist.world > 1:
            self._examples_seen.append(f"{spec.name}:{','.join(map(str, indices))}")
        split, rows = self.train_splits[spec.name], torch.tensor(indices)
        width = split.width(rows, self.pad_multiple)
        if self.pad_widths is None:
            return split.gather(rows, width)
        key = (spec.name, width_for(width, self.pad_widths))
        inputs = self.graphs.inputs
        inputs[key] = split.gather(rows, key[1], inputs.get(key))
        return inputs[key]

    def forward_loss(self, ctx: PhaseContext, spec: TaskSpec, batch: dict[str, torch.Tensor],
                     position: torch.Tensor) -> torch.Tensor:
        """The task's loss on a batch at the phase's 0-based step `position` (a device tensor,
        so that the teacher's weight can change inside a recorded graph)."""
        distilling = self.teachers is not None and ctx.phase.distills
        with torch.autocast(self.dist.device.type, dtype=torch.bfloat16,
                            enabled=self.cfg.precision == "bf16"):
            raw = ctx.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                            task=spec.name)
            teacher = self.teachers.outputs(spec.name, batch) if distilling else None
        if teacher is None:
            return task_loss(spec, raw, batch["labels"], self.cfg.sts_loss)
        weight = teacher_weight(position, ctx.phase.epochs * self.cfg.steps_per_epoch)
        return distill_loss(spec, raw, batch["labels"], teacher, weight, self.cfg.sts_loss)

    def surgery_step(self, ctx: PhaseContext, position: int) -> torch.Tensor:
        """One batch of every task; de-conflict the trunk's per-task gradients, then step every
        optimizer of the phase (eager only: --cuda-graphs refuses grad surgery)."""
        shared = [p for p in self.model.trunk.parameters() if p.requires_grad]
        torch._foreach_zero_([p.grad for p in ctx.opts.order])
        at = torch.tensor(float(position), dtype=torch.float64, device=self.dist.device)
        ctx.opts.lr.copy_(lr_at(at, ctx.phase.epochs * self.cfg.steps_per_epoch, self.cfg))
        per_task, losses = [], []
        for spec in ctx.specs:
            loss = self.forward_loss(ctx, spec, self.batch(spec, ctx.streams[spec.name]), at)
            loss.backward()
            per_task.append(torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p))
                                       .flatten() for p in shared]))
            for p in shared:
                p.grad = None
            losses.append(loss.detach())
        if shared:
            gen = torch.Generator().manual_seed(self.cfg.seed * 31 + self.state.step)
            combined = (ctx.gradvac(per_task, gen) if ctx.gradvac is not None
                        else pcgrad(per_task, gen))
            for p, grad in zip(shared, combined.split([p.numel() for p in shared])):
                p.grad = grad.view_as(p).clone()
        if self.cfg.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(ctx.opts.order, self.cfg.max_grad_norm)
        for opt in ctx.opts.opts.values():
            opt.step()
        return torch.stack(losses).mean()

    def _count_step(self, ctx: PhaseContext, loss: torch.Tensor, epoch: int) -> None:
        st = self.state
        st.step += 1
        self.pending_losses.append(loss)
        st.streams.update({n: s.drawn for n, s in ctx.streams.items()})
        if ctx.gradvac is not None:
            st.gradvac_targets = ctx.gradvac.targets.tolist()
        if len(self.pending_losses) >= self.loss_sync_every:
            self._sync_losses(ctx)
        if self.bar is not None:
            self.bar.update(f"{ctx.phase.name} epoch {epoch}/{ctx.phase.epochs} loss "
                            f"{st.loss_sum / max(1, st.loss_count):.4f}{self.last_dev}")

    def _sync_losses(self, ctx: PhaseContext) -> None:
        """Fold the steps' losses into the running mean with one host transfer, and stop at the
        first non-finite one. Called before anything is saved, so no checkpoint holds weights
        trained on a bad loss."""
        if not self.pending_losses:
            return
        st = self.state
        values = torch.stack(self.pending_losses).tolist()
        first_step = st.step - len(values) + 1
        self.pending_losses = []
        for offset, value in enumerate(values):
            if not math.isfinite(value):
                raise TrainingError(
                    f"loss became {value} in phase {ctx.phase.name} at epoch {st.epoch + 1}, "
                    f"step {first_step + offset}; the last good checkpoint is "
                    f"{self.out / 'last'} — lower --lr or check the data, then --resume")
            st.loss_sum += value
            st.loss_count += 1

    def end_epoch(self, ctx: PhaseContext, epoch: int) -> None:
        """Score dev, add the epoch's metrics line, write RUN/best-EEEE when the phase judges
        this epoch the best; the checkpoint that follows publishes both."""
        st = self.state
        if not self.dist.main:
            return
        dev = evaluate_model(self.model, ctx.specs, self.dev_data, self.pad_id,
                             self.cfg.eval_batch_size, self.dist.device)
        kill_point("dev")
        score, best = ctx.phase.judge(self.specs, dev, st.best, st.global_epoch + 1)
        improved = best is not st.best
        alpha = sampling_alpha(ctx.sampling, epoch, ctx.phase.epochs)
        record = {"phase": ctx.phase.name, "epoch": epoch, "global_epoch": st.global_epoch + 1,
                  "train_loss": st.loss_sum / max(1, st.loss_count), "alpha": alpha,
                  "task_probs": dict(zip([s.name for s in ctx.specs],
                                         task_probabilities(ctx.sizes, alpha))),
                  "dev": dev, "score": score, "is_best": improved,
                  "elapsed_s": round(st.elapsed_s, 1)}
        self.metrics.append(json.dumps(record, sort_keys=True))
        kill_point("metrics")
        shown = " ".join(f"{k}={100 * v:.2f}" for k, v in dev.items())  # points, as evaluate
        self.log(f"[{ctx.phase.name} epoch {epoch}] loss={record['train_loss']:.4f} dev: {shown}"
                 f"{'  (best)' if improved else ''}")
        self.last_dev = f" | dev avg {100 * dev['avg']:.2f} (epoch {st.global_epoch + 1})"
        if improved:
            st.best = best
            save_best(self.out, st.global_epoch + 1, self.model, self.tokenizer,
                      self.frozen_trunk_file, {**best, "params": self.model.param_counts(),
                                               "config": self.cfg.to_dict(),
                                               "wall_time_s": round(st.elapsed_s, 1)})

    def save_checkpoint(self, ctx: PhaseContext) -> None:
        """RUN/last: the model plus the optimiser's state, the RNG state and the loop's position."""
        self._sync_losses(ctx)
        if self.dist.main:
            ckpt = Checkpoint(self.state, ctx.opts.state_tensors(), torch.get_rng_state(),
                              self.metrics)
            save_checkpoint(self.out, self.model, self.tokenizer, self.frozen_trunk_file, ckpt)

    # ---- around the run -----------------------------------------------------------------------

    def _progress_bar(self) -> StepBar | None:
        """One bar over every step of every phase, so its ETA is the whole run's."""
        if not self.dist.main:
            return None
        per_epoch, st = self.cfg.steps_per_epoch, self.state
        total = sum(p.epochs for p in self.phases) * per_epoch
        done = (sum(p.epochs for p in self.phases[:st.phase]) + st.epoch) * per_epoch + st.step
        return StepBar(f"training {self.out.name}", total, done)

    def _write_rank_report(self) -> None:
        """RUN/rank<N>.json under DDP: what this rank saw and its weights, to check ranks agree."""
        weights = hashlib.sha256()
        for name, t in sorted(self.model.state_dict().items()):
            weights.update(name.encode())
            weights.update(t.detach().cpu().contiguous().numpy().tobytes())
        write_json(self.out / f"rank{self.dist.rank}.json", {
            "rank": self.dist.rank, "world": self.dist.world,
            "examples_seen": self._examples_seen, "weights_sha256": weights.hexdigest()})
