#!/usr/bin/env bash
# Context parallelism at a fixed sequence length: the same GPT trained with cp = 1, 2 and 4
# (cp ranks, one thread each) and each exchange (ring, all-gather, all-to-all). Reports, from
# rank 0's metrics.jsonl, the per-rank activation peak (mem.activations_peak), the
# point-to-point / all-gather + reduce-scatter / all-to-all bytes a rank sends per step, and
# the median step time. Memory and bytes are deterministic; step times on an oversubscribed
# machine (4 ranks on 2 cores) are not a speed measurement, only a sanity check.
#
#   bench/context_parallel.sh [BUILD_DIR]     (default: build; needs target strata)
#
# Environment knobs: SEQ_LEN=4096 D_MODEL=128 N_LAYERS=2 N_HEADS=4 KV_HEADS=4 STEPS=3
#                    CPS="1 2 4" EXCHANGES="ring all-gather all-to-all"   KEEP=DIR keeps logs
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init context_parallel "${1:-build}"

SEQ_LEN=${SEQ_LEN:-4096} D_MODEL=${D_MODEL:-128} N_LAYERS=${N_LAYERS:-2} N_HEADS=${N_HEADS:-4}
KV_HEADS=${KV_HEADS:-4} STEPS=${STEPS:-3} CPS=${CPS:-"1 2 4"}
EXCHANGES=${EXCHANGES:-"ring all-gather all-to-all"}
bench_workdir

cat > "$work/cp.toml" <<TOML
[model]
vocab_size = 256
d_model = $D_MODEL
n_layers = $N_LAYERS
n_heads = $N_HEADS
n_kv_heads = $KV_HEADS
seq_len = $SEQ_LEN
[train]
steps = $STEPS
warmup_steps = 1
global_batch = 1
micro_batch = 1
eval_every = 0
threads = 1
[data]
source = "synthetic"
[log]
progress = "none"
TOML

bench_header
echo "model:   d_model $D_MODEL, $N_LAYERS layers, $N_HEADS heads ($KV_HEADS kv), seq $SEQ_LEN, batch 1, float32"
printf '%-4s %-11s %15s %7s %13s %10s %8s %8s\n' cp exchange activations_MB vs_cp1 send_recv_MB gather_MB a2a_MB step_s
base=""
for cp in $CPS; do
  for exchange in $EXCHANGES; do
    if ((cp == 1)) && [[ $exchange != "${EXCHANGES%% *}" ]]; then continue; fi
    dir="$work/cp${cp}_$exchange"
    "$strata" train "$work/cp.toml" --nproc "$cp" --set parallel.cp="$cp" --set parallel.dp=1 \
      --set parallel.cp_comm="$exchange" --set log.dir="$dir" > "$dir.log" 2>&1 ||
      { echo "context_parallel: cp $cp $exchange failed; see $dir.log" >&2; exit 1; }
    read -r activations send_recv gather a2a step_s < <($python - "$dir/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if '"loss"' in line]
last = rows[-1]
comm = last.get("comm_bytes", {})
step = statistics.median(r["step_time_s"] for r in rows[1:] or rows)
print(last["mem"]["activations_peak"], comm.get("send_recv", 0),
      comm.get("all_gather", 0) + comm.get("reduce_scatter", 0), comm.get("all_to_all", 0), step)
PY
)
    [[ -n $base ]] || base=$activations
    echo "$cp $exchange $activations $send_recv $gather $a2a $step_s" >>"$work/rows.txt"
    awk -v cp="$cp" -v ex="$exchange" -v a="$activations" -v b="$base" -v s="$send_recv" \
      -v g="$gather" -v t="$a2a" -v st="$step_s" 'BEGIN {
        printf "%-4s %-11s %15.1f %7.2f %13.2f %10.2f %8.2f %8.2f\n", cp, ex, a / 1e6, b / a,
               s / 1e6, g / 1e6, t / 1e6, st }'
  done
done
# The rows bench/record.sh records: per layout, the activation peak as a fraction of cp = 1's
# (one run each: memory does not drift with load), with its bytes and step time alongside.
$python - "$work/rows.txt" <<'PY'
import json, sys
runs = [line.split() for line in open(sys.argv[1])]
base = float(runs[0][2])
rows = [{"name": f"cp{cp}_{exchange}", "metric": "activations peak / cp 1", "value": float(a) / base,
         "activations_peak_bytes": float(a), "send_recv_bytes": float(s), "gather_bytes": float(g),
         "all_to_all_bytes": float(t), "step_time_s": float(st)}
        for cp, exchange, a, s, g, t, st in runs]
print(json.dumps({"rows": rows}))
PY
