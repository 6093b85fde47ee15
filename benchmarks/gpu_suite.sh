#!/usr/bin/env bash
# Every accelerator measurement of issue #7 (and issue #32's Spider pipeline, below) in one command, for the few
# minutes a lent GPU is held (the device tool's `run`): kernel vs reference speed-ups (flash fwd / fwd+bwd, decode
# GB/s), train-step MFU of a 0.5B model at a batch big enough to fill the chip, and the sampler's decode step against
# the HBM roofline. Run from the repo root:
#
#     bash benchmarks/gpu_suite.sh            # writes the log to $OUT/gpu_suite.log (or ./gpu_suite.log)
#
# HBM_GBPS (default 4800, an H200; 3350 for an H100) and PEAK_TFLOPS (default 989, dense bf16 H100/H200) set
# the roofline and MFU denominators. Paste the log under a dated heading in benchmarks/RESULTS.md.
#
# Last, the Reward-SQL pipeline on Spider from SmolLM2-135M (configs/spider_pretrained.py, unchanged, on the whole dev
# set: data.max_eval=0) for at most SPIDER_TIMEOUT seconds (default 540); its stages resume, so running the suite
# again on the same machine continues it in SPIDER_RUN (default runs/spider_pretrained_gpu). SPIDER_ROOT (default
# ../shared/data/spider) is the Spider folder; each finished stage's metrics.json is copied to $OUT/spider_pretrained/.
# SKIP_KERNELS=1 runs the Spider pipeline alone.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
LOG="${OUT:-.}/gpu_suite.log"
HBM_GBPS=${HBM_GBPS:-4800}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
SPIDER_RUN=${SPIDER_RUN:-runs/spider_pretrained_gpu}
SPIDER_ROOT=${SPIDER_ROOT:-../shared/data/spider}
{
  echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null)"
  $PY -c "import jax; print('jax', jax.__version__, jax.devices())"
  if [ -z "${SKIP_KERNELS:-}" ]; then
    echo "== kernels vs reference: python benchmarks/kernel_speed.py --iters 20"
    timeout 240 $PY benchmarks/kernel_speed.py --iters 20
    echo "== train-step MFU: python benchmarks/train_step.py --shape 0.5B --batch 8 --seq 1024 --dtype bfloat16 --no-torch"
    timeout 180 $PY benchmarks/train_step.py --shape 0.5B --batch 8 --seq 1024 --dtype bfloat16 --no-torch \
      --iters 10 --peak-tflops "$PEAK_TFLOPS"
    echo "== decode vs HBM roofline: python benchmarks/sampler.py --no-hf --batch 64 --hbm-gbps $HBM_GBPS"
    timeout 180 $PY benchmarks/sampler.py --no-hf --batch 64 --prompt-len 512 --new-tokens 128 --hbm-gbps "$HBM_GBPS"
  fi
  echo "== Spider from SmolLM2-135M: python launch/run.py --config configs/spider_pretrained.py data.max_eval=0"
  timeout "${SPIDER_TIMEOUT:-540}" $PY launch/run.py --config configs/spider_pretrained.py data.max_eval=0 \
    data.root="$SPIDER_ROOT" run_dir="$SPIDER_RUN"
  mkdir -p "${OUT:-.}/spider_pretrained"
  for stage in cold_start sft prm_labels prm rl inference evaluate; do
    if [ -f "$SPIDER_RUN/$stage/metrics.json" ]; then
      cp "$SPIDER_RUN/$stage/metrics.json" "${OUT:-.}/spider_pretrained/$stage.json"
    fi
  done
} 2>&1 | tee "$LOG"
