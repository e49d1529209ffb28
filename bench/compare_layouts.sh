#!/usr/bin/env bash
# Side-by-side step time of strata layouts of one model and global batch: the layouts run
# alternately (the first layout's order swapped each round), so drifting machine load hits all
# alike. Reports per layout the median step time and its ratio to the first layout, tokens/s,
# the share of the step spent blocked in communication (comm_share), bytes sent per step,
# pipeline bubble, per-rank parameter bytes and peak activation bytes (rank 0), from metrics.jsonl.
#
#   bench/compare_layouts.sh [BUILD_DIR] LAYOUT [LAYOUT...]
#     LAYOUT = name[@OTHER_BUILD_DIR]:RANKS:THREADS[:key=value[,key=value...]]   e.g.
#     bench/compare_layouts.sh build tp1:1:2 tp2:2:1:parallel.tp=2
#     bench/compare_layouts.sh build new:1:2 old@../base/build:1:2   (one layout, two builds:
#                                                                      a change against its parent)
#
# Environment knobs (defaults = the d_model 768 model of docs/performance.md):
#   ROUNDS=3 STEPS=5 WARMUP=2 BATCH=8 MICRO=BATCH   rounds, steps per run (first WARMUP
#                                                   dropped), global batch, micro batch
#   D_MODEL=768 N_LAYERS=6 N_HEADS=12 SEQ_LEN=256 VOCAB=256   the model
#   KEEP=DIR   keep logs and metrics in DIR instead of a deleted temp dir
#   NICE=N     run strata at that niceness (e.g. -10, as root) on a machine shared with other
#              work, so the ranks are not descheduled at every collective
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build_arg=build
if [[ $# -gt 0 && $1 != *:* ]]; then build_arg=$1; shift; fi
bench_init compare_layouts "$build_arg"
(($# >= 1)) || { echo "usage: bench/compare_layouts.sh [BUILD_DIR] name:RANKS:THREADS[:k=v,...] ..." >&2; exit 2; }
run=()
[[ -n ${NICE:-} ]] && run=(nice -n "$NICE")

ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-5} WARMUP=${WARMUP:-2} BATCH=${BATCH:-8} MICRO=${MICRO:-$BATCH}
D_MODEL=${D_MODEL:-768} N_LAYERS=${N_LAYERS:-6} N_HEADS=${N_HEADS:-12} SEQ_LEN=${SEQ_LEN:-256}
VOCAB=${VOCAB:-256}
if ((STEPS <= WARMUP)); then echo "compare_layouts: STEPS ($STEPS) must exceed WARMUP ($WARMUP)" >&2; exit 2; fi

bench_workdir

names=()
declare -A binaries  # per layout name: the strata binary it runs
for layout in "$@"; do
  IFS=: read -r name ranks threads sets <<<"$layout"
  [[ -n $name && $ranks =~ ^[0-9]+$ && $threads =~ ^[0-9]+$ ]] ||
    { echo "compare_layouts: '$layout' is not name[@BUILD_DIR]:RANKS:THREADS[:k=v,...]" >&2; exit 2; }
  binaries[${name%%@*}]=$strata
  if [[ $name == *@* ]]; then
    binaries[${name%%@*}]="$(cd "${name#*@}" 2>/dev/null && pwd)/src/strata"
    [[ -x ${binaries[${name%%@*}]} ]] || { echo "compare_layouts: no strata binary in ${name#*@}/src" >&2; exit 2; }
  fi
  names+=("${name%%@*}")
done

bench_header
echo "model:   d_model $D_MODEL, $N_LAYERS layers, $N_HEADS heads, seq $SEQ_LEN, vocab $VOCAB;" \
     "global batch $BATCH, micro batch $MICRO; $STEPS steps (first $WARMUP dropped), $ROUNDS rounds"

{
  bench_model_section
  cat <<EOF

[train]
steps = $STEPS
global_batch = $BATCH
micro_batch = $MICRO
warmup_steps = $WARMUP
eval_every = 0

[data]
source = "synthetic"

[log]
progress = "none"
EOF
} >"$work/bench.toml"

run_layout() {  # $1 = layout spec, $2 = round
  local name ranks threads sets
  IFS=: read -r name ranks threads sets <<<"$1"
  name=${name%%@*}
  local dir="$work/$name-$2" args=()
  IFS=, read -ra pairs <<<"${sets:-}"
  for pair in "${pairs[@]}"; do args+=(--set "$pair"); done
  "${run[@]}" "${binaries[$name]}" train "$work/bench.toml" --nproc "$ranks" --set "train.threads=$threads" \
    --set "log.dir=$dir" "${args[@]}" >"$dir.log" 2>&1 ||
    { cat "$dir.log" >&2; echo "compare_layouts: layout $name failed" >&2; exit 1; }
}

for ((round = 1; round <= ROUNDS; ++round)); do
  order=("$@")
  if ((round % 2 == 0)); then  # reverse the order every other round
    order=()
    for ((i = $#; i >= 1; --i)); do order+=("${!i}"); done
  fi
  for layout in "${order[@]}"; do
    start=$SECONDS
    run_layout "$layout" "$round"
    echo "round $round ${layout%%[:@]*}: $((SECONDS - start)) s wall"
  done
done

$python - "$work" "$ROUNDS" "$WARMUP" "${names[@]}" <<'EOF'
import json, statistics, sys
work, rounds, warmup, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def steps(name, r):
    lines = [json.loads(l) for l in open(f"{work}/{name}-{r}/metrics.jsonl")]
    return [s for s in lines if "step_time_s" in s][warmup:]
med = statistics.median
rows = {}
for name in names:
    runs = [steps(name, r) for r in range(1, rounds + 1)]
    pooled = [s for run in runs for s in run]
    rows[name] = {
        "step_time_s": med(s["step_time_s"] for s in pooled),
        "round_medians": [med(s["step_time_s"] for s in run) for run in runs],
        "tokens_per_s": med(s["tokens_per_s"] for s in pooled),
        "comm_share": med(s.get("comm_share", 0.0) for s in pooled),
        "comm_wait_s": {k: med(s.get("comm_wait_s", {}).get(k, 0.0) for s in pooled)
                        for k in sorted({k for s in pooled for k in s.get("comm_wait_s", {})})},
        "comm_bytes": med(sum(s["comm_bytes"].values()) for s in pooled),
        "bubble_fraction": med(s["bubble_fraction"] for s in pooled),
        "param_bytes": pooled[0]["mem"]["params"],
        "activation_bytes": max(s["mem"]["activations_peak"] for s in pooled),
        "loss_last": runs[0][-1]["loss"],
    }
base = rows[names[0]]
for name in names:  # per-round ratios cancel most load drift between rounds
    r = rows[name]
    r["ratio"] = r["step_time_s"] / base["step_time_s"]
    r["round_ratios"] = [a / b for a, b in zip(r["round_medians"], base["round_medians"])]
    r["ratio_paired"] = med(r["round_ratios"])
print()
print(f"| layout | step time (s) | vs {names[0]} (paired) | tokens/s | comm share | MB sent/step | bubble | param MB (rank 0) | activations peak MB (rank 0) | loss at last step |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for name in names:
    r = rows[name]
    print(f"| {name} | {r['step_time_s']:.3f} | {r['ratio']:.3f} ({r['ratio_paired']:.3f}) | "
          f"{r['tokens_per_s']:.0f} | {100 * r['comm_share']:.1f}% | {r['comm_bytes'] / 1e6:.1f} | "
          f"{100 * r['bubble_fraction']:.1f}% | {r['param_bytes'] / 1e6:.1f} | "
          f"{r['activation_bytes'] / 1e6:.1f} | {r['loss_last']:.5f} |")
# The rows bench/record.sh records: the first layout's step time, then each other layout's step
# time as a ratio to it (median of the per-round ratios, and those ratios as the spread).
records = [{"name": names[0], "metric": "step time (s)", "value": base["step_time_s"],
            "rounds": base["round_medians"], "tokens_per_s": base["tokens_per_s"]}]
records += [{"name": name, "metric": f"step time / {names[0]}", "value": rows[name]["ratio_paired"],
             "rounds": rows[name]["round_ratios"], "step_time_s": rows[name]["step_time_s"],
             "tokens_per_s": rows[name]["tokens_per_s"], "comm_share": rows[name]["comm_share"],
             "bubble_fraction": rows[name]["bubble_fraction"]} for name in names[1:]]
print(json.dumps({"rows": records, "layouts": rows}))
EOF
