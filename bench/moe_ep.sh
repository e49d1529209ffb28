#!/usr/bin/env bash
# Expert parallelism against replicated experts: the same MoE GPT trained on 2 ranks (dp = 2)
# with ep = 2 (each rank holds half of every layer's experts; tokens travel by all-to-all)
# and with ep = 1 (every rank holds all experts), run alternately so drifting machine load
# hits both alike. Reports median tokens/s, per-rank parameter bytes (mem.params of rank 0)
# and all-to-all bytes per step, from each run's metrics.jsonl.
#
#   bench/moe_ep.sh [BUILD_DIR]          (default: build; needs target strata)
#
# Environment knobs: ROUNDS=3 STEPS=8 WARMUP=3 EXPERTS=8 TOP_K=2 D_MODEL=256 N_LAYERS=4
#                    SEQ_LEN=128 BATCH=8 THREADS=1 (per rank)   KEEP=DIR keeps the run logs
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init moe_ep "${1:-build}"

ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-8} WARMUP=${WARMUP:-3} EXPERTS=${EXPERTS:-8} TOP_K=${TOP_K:-2}
D_MODEL=${D_MODEL:-256} N_LAYERS=${N_LAYERS:-4} SEQ_LEN=${SEQ_LEN:-128} BATCH=${BATCH:-8}
THREADS=${THREADS:-1}
if ((STEPS <= WARMUP)); then echo "moe_ep: STEPS ($STEPS) must exceed WARMUP ($WARMUP)" >&2; exit 2; fi
bench_workdir

cat > "$work/moe.toml" <<TOML
[model]
vocab_size = 256
d_model = $D_MODEL
n_layers = $N_LAYERS
n_heads = 4
seq_len = $SEQ_LEN
[model.moe]
num_experts = $EXPERTS
top_k = $TOP_K
capacity_factor = 0.0
[train]
steps = $STEPS
global_batch = $BATCH
micro_batch = $((BATCH / 2))
warmup_steps = 1
threads = $THREADS
[data]
source = "synthetic"
[log]
progress = "none"
TOML

bench_header
echo "model:   d_model $D_MODEL, $N_LAYERS layers (all MoE), $EXPERTS experts top-$TOP_K dropless," \
     "seq $SEQ_LEN, batch $BATCH, float32; 2 ranks (dp 2), $THREADS thread(s) per rank"
echo "run:     $STEPS steps (first $WARMUP dropped), $ROUNDS alternating rounds"

for round in $(seq 1 "$ROUNDS"); do
  order="1 2"
  ((round % 2)) || order="2 1"  # reverse the order every other round
  for ep in $order; do
    dir="$work/ep$ep-round$round"
    "$strata" train "$work/moe.toml" --nproc 2 --set parallel.ep=$ep --set log.dir="$dir" \
      > "$dir.log" 2>&1 || { echo "moe_ep: run failed, see $dir.log" >&2; cat "$dir.log" >&2; exit 1; }
  done
done

$python - "$work" "$ROUNDS" "$WARMUP" <<'PY'
import json, statistics, sys
work, rounds, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
med = statistics.median
result = {}
for ep in (1, 2):
    round_rates, params, a2a = [], None, []
    for r in range(1, rounds + 1):
        lines = [json.loads(l) for l in open(f"{work}/ep{ep}-round{r}/metrics.jsonl")]
        steps = [l for l in lines if "loss" in l][warmup:]
        round_rates.append(med(l["tokens_per_s"] for l in steps))
        params = steps[-1]["mem"]["params"]
        a2a += [l["comm_bytes"].get("all_to_all", 0) for l in steps]
    result[ep] = {"rates": round_rates, "params": params, "a2a": med(a2a)}
    print(f"ep={ep}: median {med(round_rates):.0f} tokens/s, per-rank parameters "
          f"{params / 2**20:.2f} MiB, all_to_all {result[ep]['a2a'] / 2**20:.2f} MiB/step (rank 0)")
ratios = [a / b for a, b in zip(result[2]["rates"], result[1]["rates"])]
param_ratio = result[2]["params"] / result[1]["params"]
print(f"ep=2 / ep=1: tokens/s x{med(ratios):.2f}, per-rank parameter bytes x{param_ratio:.3f}")
# The rows bench/record.sh records.
rows = [{"name": f"ep{ep}", "metric": "tokens/s", "value": med(result[ep]["rates"]), "rounds": result[ep]["rates"],
         "param_bytes": result[ep]["params"], "all_to_all_bytes": result[ep]["a2a"]} for ep in (1, 2)]
rows += [{"name": "ep2/ep1", "metric": "tokens/s ratio", "value": med(ratios), "rounds": ratios},
         {"name": "ep2/ep1 params", "metric": "per-rank parameter bytes ratio", "value": param_ratio}]
print(json.dumps({"rows": rows}))
PY
