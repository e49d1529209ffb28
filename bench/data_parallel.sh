#!/usr/bin/env bash
# Data-parallel benchmarks, side by side in one session (docs/performance.md):
#   1. strata dp = 2 (2 ranks x 1 thread) against strata on 1 rank x 2 threads, same global batch
#   2. strata ZeRO-2 and ZeRO-3 against ZeRO-0 at dp = 2
#   3. strata dp = 2 against PyTorch DistributedDataParallel (gloo, bench/peer_ddp.py), 2 x 1
# Runs alternate over ROUNDS rounds, so drifting load on a shared machine hits all alike.
# Reports the median step time of each and the ratios.
#
#   bench/data_parallel.sh [BUILD_DIR]     (default: build; needs the strata target)
#
# Knobs: ROUNDS=3 STEPS=8 WARMUP=2 BATCH=8 (global batch, sequences)
#        D_MODEL=256 N_LAYERS=4 N_HEADS=4 SEQ_LEN=128 VOCAB=256   KEEP=DIR (keep logs)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init data_parallel "${1:-build}"

ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-8} WARMUP=${WARMUP:-2} BATCH=${BATCH:-8}
D_MODEL=${D_MODEL:-256} N_LAYERS=${N_LAYERS:-4} N_HEADS=${N_HEADS:-4} SEQ_LEN=${SEQ_LEN:-128}
VOCAB=${VOCAB:-256}
bench_workdir
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive

bench_header
echo "model:   d_model $D_MODEL, $N_LAYERS layers, $N_HEADS heads, seq $SEQ_LEN, vocab $VOCAB," \
     "learned positions, LayerNorm, GELU, tied head, float32; global batch $BATCH"
echo "run:     $STEPS steps (first $WARMUP dropped), $ROUNDS alternating rounds"

{
  bench_model_section
  cat <<EOF

[train]
steps = $STEPS
global_batch = $BATCH
warmup_steps = $WARMUP
eval_every = 0

[data]
source = "synthetic"

[checkpoint]
dir = ""

[log]
progress = "none"
EOF
} >"$work/bench.toml"

median_step() {  # metrics.jsonl -> median step_time_s after WARMUP
  $python - "$1" "$WARMUP" <<'EOF'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
print(statistics.median([s["step_time_s"] for s in steps if "step_time_s" in s][int(sys.argv[2]):]))
EOF
}

run_strata() {  # name nproc threads zero
  local dir="$work/$1-$round"
  OMP_NUM_THREADS=$3 OPENBLAS_NUM_THREADS=$3 "$strata" train "$work/bench.toml" --nproc "$2" \
    --set train.threads="$3" --set train.micro_batch=$((BATCH / $2)) --set parallel.zero="$4" \
    --set "log.dir=\"$dir\"" >"$dir.log" 2>&1 || { cat "$dir.log" >&2; exit 1; }
  median_step "$dir/metrics.jsonl" >"$work/$1-$round.time"
}

run_ddp() {
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $python "$repo/bench/peer_ddp.py" --nproc 2 --threads 1 \
    --d-model $D_MODEL --n-layers $N_LAYERS --n-heads $N_HEADS --seq-len $SEQ_LEN --vocab $VOCAB \
    --micro-batch $((BATCH / 2)) --steps $STEPS --warmup-steps $WARMUP --lr-warmup $WARMUP \
    >"$work/ddp-$round.out" 2>"$work/ddp-$round.log" || { cat "$work/ddp-$round.log" >&2; exit 1; }
  $python -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['step_time_s'])" \
    "$work/ddp-$round.out" >"$work/ddp-$round.time"
}

systems=(one_rank dp2 dp2_zero2 dp2_zero3 ddp)
for ((round = 1; round <= ROUNDS; ++round)); do
  order=("${systems[@]}")
  if ((round % 2 == 0)); then order=(ddp dp2_zero3 dp2_zero2 dp2 one_rank); fi
  for system in "${order[@]}"; do
    case $system in
      one_rank) run_strata one_rank 1 2 0 ;;
      dp2) run_strata dp2 2 1 0 ;;
      dp2_zero2) run_strata dp2_zero2 2 1 2 ;;
      dp2_zero3) run_strata dp2_zero3 2 1 3 ;;
      ddp) run_ddp ;;
    esac
    echo "round $round $system: median step $(cat "$work/$system-$round.time") s (load $(cut -d' ' -f1 /proc/loadavg))"
  done
done

$python - "$work" "$ROUNDS" <<'EOF'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
t = {s: [float(open(f"{work}/{s}-{r}.time").read()) for r in range(1, rounds + 1)]
     for s in ("one_rank", "dp2", "dp2_zero2", "dp2_zero3", "ddp")}
names = {"one_rank": "strata 1 rank x 2 threads", "dp2": "strata dp=2 (2 ranks x 1 thread), zero 0",
         "dp2_zero2": "strata dp=2, zero 2", "dp2_zero3": "strata dp=2, zero 3",
         "ddp": "PyTorch DDP gloo, 2 ranks x 1 thread"}
print("\n| run | median step time (s) | per round |")
print("| --- | --- | --- |")
for s, name in names.items():
    print(f"| {name} | {statistics.median(t[s]):.3f} | {', '.join(f'{x:.3f}' for x in t[s])} |")
def ratios(a, b):  # the per-round ratios a/b (neighbours in time)
    return [x / y for x, y in zip(t[a], t[b])]
rows = [{"name": s, "metric": "step time (s)", "value": statistics.median(t[s]), "rounds": t[s]}
        for s in names]
for name, a, b in (("dp2/ddp", "dp2", "ddp"), ("dp2/one_rank", "dp2", "one_rank"),
                   ("zero2/zero0", "dp2_zero2", "dp2"), ("zero3/zero0", "dp2_zero3", "dp2")):
    rows.append({"name": name, "metric": f"step time {a} / {b}", "value": statistics.median(ratios(a, b)),
                 "rounds": ratios(a, b)})
print()
for row in rows[len(names):]:
    print(f"{row['metric']}: {row['value']:.3f}  (per round {', '.join(f'{x:.3f}' for x in row['rounds'])})")
print(json.dumps({"rows": rows}))
EOF
