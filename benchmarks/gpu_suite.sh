#!/usr/bin/env bash
# Every accelerator measurement of issue #7 in one command, for the few minutes a lent GPU is held
# (the device tool's `run`): kernel vs reference speed-ups (flash fwd / fwd+bwd, decode GB/s), train-step MFU
# of a 0.5B model at a batch big enough to fill the chip, and the sampler's decode step against the HBM
# roofline. Run from the repo root:
#
#     bash benchmarks/gpu_suite.sh            # writes the log to $OUT/gpu_suite.log (or ./gpu_suite.log)
#
# HBM_GBPS (default 4800, an H200; 3350 for an H100) and PEAK_TFLOPS (default 989, dense bf16 H100/H200) set
# the roofline and MFU denominators. Paste the log under a dated heading in benchmarks/RESULTS.md.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
LOG="${OUT:-.}/gpu_suite.log"
HBM_GBPS=${HBM_GBPS:-4800}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
{
  echo "== $(date -u '+%Y-%m-%d %H:%M UTC') $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null)"
  $PY -c "import jax; print('jax', jax.__version__, jax.devices())"
  echo "== kernels vs reference: python benchmarks/kernels.py --iters 20"
  timeout 240 $PY benchmarks/kernels.py --iters 20
  echo "== train-step MFU: python benchmarks/train_step.py --shape 0.5B --batch 8 --seq 1024 --dtype bfloat16 --no-torch"
  timeout 180 $PY benchmarks/train_step.py --shape 0.5B --batch 8 --seq 1024 --dtype bfloat16 --no-torch \
    --iters 10 --peak-tflops "$PEAK_TFLOPS"
  echo "== decode vs HBM roofline: python benchmarks/sampler.py --no-hf --batch 64 --hbm-gbps $HBM_GBPS"
  timeout 180 $PY benchmarks/sampler.py --no-hf --batch 64 --prompt-len 512 --new-tokens 128 --hbm-gbps "$HBM_GBPS"
} 2>&1 | tee "$LOG"
