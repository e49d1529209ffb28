#!/usr/bin/env bash
# How long a checkpoint blocks the training loop: synchronous saves against asynchronous ones
# (checkpoint.async = true), on the dense benchmark model of docs/performance.md, one rank,
# alternating sync and async runs (ABBA) so drifting machine load hits both alike. Each run
# saves after every step; reports checkpoint_stall_s (docs/metrics.md) per mode: the median
# over all saves and each round's median, and async / sync; and the loop's time per run (step
# times plus stalls), since the background writer takes cores from the steps it overlaps.
#
#   bench/checkpoint_stall.sh [BUILD_DIR]     (default: build; needs the strata binary)
#
# Environment knobs: ROUNDS=3 STEPS=4 THREADS=2, the model as in bench/throughput.sh
#   (D_MODEL=768 N_LAYERS=6 N_HEADS=12 SEQ_LEN=256 VOCAB=256), BATCH=8; KEEP=DIR keeps the runs.
# The checkpoints go to the work directory (a temp dir on the disk of $TMPDIR).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init checkpoint_stall "${1:-build}"
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-4} THREADS=${THREADS:-2} BATCH=${BATCH:-8}
D_MODEL=${D_MODEL:-768} N_LAYERS=${N_LAYERS:-6} N_HEADS=${N_HEADS:-12} SEQ_LEN=${SEQ_LEN:-256}
VOCAB=${VOCAB:-256}
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

bench_workdir
bench_header
echo "model:   d_model $D_MODEL, $N_LAYERS layers, seq $SEQ_LEN, vocab $VOCAB; batch $BATCH;" \
     "$STEPS steps, a save after each; $THREADS threads, 1 rank, $ROUNDS alternating rounds"
{
  bench_model_section
  cat <<TOML

[train]
steps = $STEPS
global_batch = $BATCH
micro_batch = $BATCH
threads = $THREADS
warmup_steps = 1

[data]
source = "synthetic"

[checkpoint]
every = 1
keep = 2
resume = "none"

[log]
progress = "none"
TOML
} >"$work/bench.toml"

run() {  # $1 = mode (sync|async), $2 = round
  local dir="$work/$1-$2"
  "$strata" train "$work/bench.toml" --set "log.dir=$dir" --set "checkpoint.dir=$dir/ckpt" \
    --set "checkpoint.async=$([[ $1 == async ]] && echo true || echo false)" >"$dir.log" 2>&1 ||
    { cat "$dir.log" >&2; echo "checkpoint_stall: strata failed" >&2; exit 1; }
  du -sh "$(ls -d "$dir"/ckpt/step_* | tail -1)" | cut -f1 >"$dir.size"
  rm -rf "$dir/ckpt"
}

for ((round = 1; round <= ROUNDS; ++round)); do
  if ((round % 2)); then order="sync async"; else order="async sync"; fi
  for mode in $order; do run "$mode" "$round"; done
done

$python - "$work" "$ROUNDS" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def steps(mode, r):
    return [json.loads(l) for l in open(f"{work}/{mode}-{r}/metrics.jsonl")]
def stalls(mode, r):
    return [l["checkpoint_stall_s"] for l in steps(mode, r) if "checkpoint_stall_s" in l]
result = {}
for mode in ("sync", "async"):
    runs = range(1, rounds + 1)
    result[mode] = {
        "median_s": statistics.median(s for r in runs for s in stalls(mode, r)),
        "round_medians_s": [round(statistics.median(stalls(mode, r)), 4) for r in runs],
        "loop_s_per_run": [round(sum(l["step_time_s"] + l.get("checkpoint_stall_s", 0)
                                     for l in steps(mode, r)), 2) for r in runs],
        "checkpoint_size": open(f"{work}/{mode}-1.size").read().strip()}
ratios = [a / b for a, b in zip(result["async"]["round_medians_s"], result["sync"]["round_medians_s"])]
result["async_over_sync"] = statistics.median(ratios)
print(json.dumps(result, indent=1))
# The rows bench/record.sh records: each mode's stall per checkpoint, then async over sync.
result["rows"] = [{"name": mode, "metric": "training stall per checkpoint (s)", "value": result[mode]["median_s"],
                   "rounds": result[mode]["round_medians_s"], "checkpoint_size": result[mode]["checkpoint_size"]}
                  for mode in ("sync", "async")]
result["rows"].append({"name": "async/sync", "metric": "stall ratio", "value": result["async_over_sync"],
                       "rounds": ratios})
print(json.dumps(result))
PY
