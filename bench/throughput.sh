#!/usr/bin/env bash
# Side-by-side training throughput: strata against the same GPT and step in PyTorch eager
# (bench/peer_gpt.py), on one rank with the same thread count, synthetic tokens for both,
# run alternately so drifting machine load hits both alike. Reports median tokens/s of each,
# the ratio strata/peer, and MFU against a measured matmul peak (bench/matmul_peak).
#
#   bench/throughput.sh [BUILD_DIR]        (default: build; needs targets strata, matmul_peak)
#
# Environment knobs (defaults = the foundation benchmark of docs/performance.md):
#   ROUNDS=3 STEPS=5 WARMUP=2 BATCH=8 THREADS=2   runs per system, steps per run (the first
#                                                 WARMUP dropped), sequences per step, threads
#   D_MODEL=768 N_LAYERS=6 N_HEADS=12 SEQ_LEN=256 VOCAB=256   the model (smaller for a smoke run)
#   PRECISION=fp32 strata's train.precision; bf16 runs the peer under torch.autocast(bfloat16)
#   BLAS_DIR=DIR   put DIR first on LD_LIBRARY_PATH for both (e.g. an unpacked OpenBLAS)
#   KEEP=DIR       keep the logs and per-run JSON in DIR instead of a deleted temp dir
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init throughput "${1:-build}"
peak_binary="$build/bench/matmul_peak"
[[ -x $peak_binary ]] || { echo "throughput: $peak_binary missing; ninja -C $build matmul_peak" >&2; exit 2; }
$python -c "import torch" 2>/dev/null || { echo "throughput: $python lacks torch; run scripts/install-deps.sh" >&2; exit 2; }

ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-5} WARMUP=${WARMUP:-2} BATCH=${BATCH:-8} THREADS=${THREADS:-2}
if ((STEPS <= WARMUP)); then echo "throughput: STEPS ($STEPS) must exceed WARMUP ($WARMUP)" >&2; exit 2; fi
# The model of the foundation issue: GPT-2-small width, 6 layers, byte-level vocabulary.
D_MODEL=${D_MODEL:-768} N_LAYERS=${N_LAYERS:-6} N_HEADS=${N_HEADS:-12} SEQ_LEN=${SEQ_LEN:-256}
VOCAB=${VOCAB:-256} PRECISION=${PRECISION:-fp32}
case $PRECISION in
  fp32) autocast=none ;;
  bf16) autocast=bf16 ;;
  *) echo "throughput: PRECISION must be fp32 or bf16 (the peer's autocast has no CPU fp16)" >&2; exit 2 ;;
esac

bench_workdir
if [[ -n ${BLAS_DIR:-} ]]; then export LD_LIBRARY_PATH="$BLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
# Both programs get the same thread settings; strata's train.threads and the peer's
# torch.set_num_threads then pin ATen's pool to the same count.
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

blas=$(ldd "$strata" | awk '$1 == "libblas.so.3" { print $3 }')
blas=$(readlink -f "$blas")
bench_header
echo "blas:    $blas"
if [[ $blas == */blas/libblas.so* ]]; then
  echo "warning: libtorch resolves BLAS to Debian's netlib reference BLAS (~3 GFLOP/s, one thread);" \
       "a step of this model then takes minutes. Install libopenblas0-openmp or set BLAS_DIR" \
       "(docs/performance.md)."
fi
echo "model:   d_model $D_MODEL, $N_LAYERS layers, $N_HEADS heads, seq $SEQ_LEN, vocab $VOCAB (bytes)," \
     "learned positions, LayerNorm, GELU, tied head, $PRECISION (peer: autocast $autocast)"
echo "run:     batch $BATCH x $SEQ_LEN tokens, $STEPS steps (first $WARMUP dropped), $THREADS threads," \
     "1 rank, $ROUNDS alternating rounds"

"$peak_binary" --threads "1,$THREADS" --tokens $((BATCH * SEQ_LEN)) --d-model $D_MODEL \
  --dtype "$PRECISION" >"$work/peak.jsonl"

{
  bench_model_section
  cat <<EOF

[train]
steps = $STEPS
global_batch = $BATCH
micro_batch = $BATCH
precision = "$PRECISION"
threads = $THREADS
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

run_strata() {  # $1 = round
  local dir="$work/strata-$1"
  "$strata" train "$work/bench.toml" --set "log.dir=\"$dir\"" >"$work/strata-$1.log" 2>&1 ||
    { cat "$work/strata-$1.log" >&2; echo "throughput: strata failed" >&2; exit 1; }
  $python - "$dir/metrics.jsonl" "$WARMUP" "$(cut -d' ' -f1 /proc/loadavg)" >"$work/strata-$1.json" <<'EOF'
import json, statistics, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
steps = [s for s in steps if "tokens_per_s" in s][int(sys.argv[2]):]
print(json.dumps({"tokens_per_s": [s["tokens_per_s"] for s in steps],
                  "step_time_s": [s["step_time_s"] for s in steps],
                  "mfu": [s["mfu"] for s in steps], "load": float(sys.argv[3])}))
EOF
}

run_peer() {  # $1 = round
  $python "$repo/bench/peer_gpt.py" --d-model $D_MODEL --n-layers $N_LAYERS --n-heads $N_HEADS \
    --seq-len $SEQ_LEN --vocab $VOCAB --micro-batch "$BATCH" --steps "$STEPS" \
    --warmup-steps "$WARMUP" --lr-warmup "$WARMUP" --threads "$THREADS" --autocast "$autocast" \
    >"$work/peer-$1.out" 2>"$work/peer-$1.log" ||
    { cat "$work/peer-$1.log" >&2; echo "throughput: peer failed" >&2; exit 1; }
  $python - "$work/peer-$1.out" "$WARMUP" "$BATCH" "$SEQ_LEN" "$(cut -d' ' -f1 /proc/loadavg)" \
    >"$work/peer-$1.json" <<'EOF'
import json, sys
out = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
times = out["step_times_s"][int(sys.argv[2]):]
tokens = int(sys.argv[3]) * int(sys.argv[4])
print(json.dumps({"tokens_per_s": [tokens / t for t in times], "step_time_s": times,
                  "load": float(sys.argv[5])}))
EOF
}

# Alternate, and swap who goes first each round (ABBA), so neither always runs warmer.
for ((round = 1; round <= ROUNDS; ++round)); do
  if ((round % 2)); then order="strata peer"; else order="peer strata"; fi
  for system in $order; do
    start=$SECONDS
    "run_$system" "$round"
    echo "round $round $system: $((SECONDS - start)) s wall, median tokens/s" \
      "$($python -c "import json,statistics,sys; print(round(statistics.median(json.load(open(sys.argv[1]))['tokens_per_s']), 1))" "$work/$system-$round.json")"
  done
done

$python - "$work" "$ROUNDS" "$D_MODEL" "$N_LAYERS" "$SEQ_LEN" "$VOCAB" "$THREADS" <<'EOF'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
C, L, T, V, threads = (int(x) for x in sys.argv[3:8])
# strata's training_flops_per_token (src/strata/model/gpt.cpp) for this dense GELU model.
flops_per_token = 6.0 * (L * 12 * C * C + V * C) + 12.0 * L * C * T
peaks = [p for p in map(json.loads, open(f"{work}/peak.jsonl")) if "gflops" in p]  # not the route rows
peak = max(p["gflops"] for p in peaks if p["threads"] == threads) * 1e9
runs = {s: [json.load(open(f"{work}/{s}-{r}.json")) for r in range(1, rounds + 1)]
        for s in ("strata", "peer")}
def pooled(system, key):
    return [v for run in runs[system] for v in run[key]]
summary = {"flops_per_token": flops_per_token, "matmul_peak_gflops": peak / 1e9,
           "matmul_peak": peaks}
for s in ("strata", "peer"):
    tps = statistics.median(pooled(s, "tokens_per_s"))
    summary[s] = {"tokens_per_s": tps, "step_time_s": statistics.median(pooled(s, "step_time_s")),
                  "round_medians": [statistics.median(r["tokens_per_s"]) for r in runs[s]],
                  "mfu": tps * flops_per_token / peak, "load": [r["load"] for r in runs[s]]}
summary["strata"]["mfu_self_reported"] = statistics.median(pooled("strata", "mfu"))
summary["ratio"] = summary["strata"]["tokens_per_s"] / summary["peer"]["tokens_per_s"]
# Each round's two runs sat next to each other in time, so their ratio cancels most of the
# machine's load drift: the median of those is the steadier number on a shared machine.
round_ratios = [a / b for a, b in zip(summary["strata"]["round_medians"], summary["peer"]["round_medians"])]
summary["ratio_paired"] = statistics.median(round_ratios)
# The rows bench/record.sh records: tokens/s of each, then strata's over the peer's per round.
summary["rows"] = [
    {"name": "strata", "metric": "tokens/s", "value": summary["strata"]["tokens_per_s"],
     "rounds": summary["strata"]["round_medians"], "mfu": summary["strata"]["mfu"]},
    {"name": "peer", "metric": "tokens/s", "value": summary["peer"]["tokens_per_s"],
     "rounds": summary["peer"]["round_medians"], "mfu": summary["peer"]["mfu"]},
    {"name": "strata/peer", "metric": "tokens/s ratio", "value": summary["ratio_paired"],
     "rounds": round_ratios},
]
print()
print(f"| system | tokens/s (median) | step time (s) | MFU vs {peak / 1e9:.1f} GFLOP/s | per-round medians |")
print("| --- | --- | --- | --- | --- |")
for s, name in (("strata", "strata"), ("peer", "PyTorch eager peer")):
    r = summary[s]
    rounds_text = ", ".join(f"{x:.1f}" for x in r["round_medians"])
    print(f"| {name} | {r['tokens_per_s']:.1f} | {r['step_time_s']:.2f} | {100 * r['mfu']:.1f}% | {rounds_text} |")
print(f"\nratio strata/peer: {summary['ratio']:.3f} (pooled medians), "
      f"{summary['ratio_paired']:.3f} (median of per-round ratios)   "
      f"strata's own mfu metric (vs its run-shape probe): {100 * summary['strata']['mfu_self_reported']:.1f}%")
print("matmul peak GFLOP/s: " + ", ".join(f"{p['shape']}@{p['threads']}t {p['gflops']:.1f}" for p in peaks))
print(json.dumps(summary))
EOF
