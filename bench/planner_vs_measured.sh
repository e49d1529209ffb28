#!/usr/bin/env bash
# The planner against the runtime: for each local layout this release can run, calibrates this
# machine (`strata plan calibrate`, 2 ranks), predicts the step time on that profile
# (`strata plan --layout ... --json`) and measures it (`strata train --nproc 2`, median
# step_time_s of the steps after the first). Calibrating right before each run keeps the two
# under the same load on a shared machine. ROUNDS rounds (default 3), the layouts' order
# reversed every other round; each layout's row is the median of its per-round ratios, with
# their spread (one calibration and one run each vary by about 10% on a shared VM). Prints a
# table and writes it to OUT/results.md.
# Model: bench/plan_model.toml (d_model 512). docs/planner.md records the results.
#
#   bench/planner_vs_measured.sh [BUILD_DIR]        (default: build)
#   env: STRATA (the binary; default BUILD_DIR/src/strata), STEPS (default 6), ROUNDS (default 3),
#        OUT (default runs/planner_vs_measured), NICE (e.g. -10: run calibration and training
#        at that niceness; negative values need root)
# Run it on a quiet machine. Ranks that share their cores with other processes wait for the
# scheduler at every collective, which no profile captures: on a busy machine NICE=-10
# approximates a quiet one.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
strata=${STRATA:-$build/src/strata}
steps=${STEPS:-6}
rounds=${ROUNDS:-3}
out=${OUT:-runs/planner_vs_measured}
model=$root/bench/plan_model.toml
global_batch=16  # train.global_batch and train.micro_batch of bench/plan_model.toml
micro_batch=4

[ -x "$strata" ] || { echo "no strata binary at $strata; build it or set STRATA" >&2; exit 2; }
run=()
[ -n "${NICE:-}" ] && run=(nice -n "$NICE")
rm -rf "$out"
mkdir -p "$out"


# name | --set overrides for strata train | --layout for strata plan
layouts=(
  "dp2|parallel.dp=2|dp=2"
  "dp2 zero1|parallel.dp=2 parallel.zero=1|dp=2,zero=1"
  "tp2|parallel.tp=2|tp=2"
  "tp2+sp|parallel.tp=2 parallel.sequence_parallel=true|tp=2,sequence_parallel=true"
  "dp2 zero2|parallel.dp=2 parallel.zero=2|dp=2,zero=2"
  "dp2 zero3|parallel.dp=2 parallel.zero=3|dp=2,zero=3"
  "dp2 selective|parallel.dp=2 train.recompute=\"selective\"|dp=2,recompute=selective"
  "dp2 full|parallel.dp=2 train.recompute=\"full\"|dp=2,recompute=full"
  "pp2 1f1b|parallel.pp=2 parallel.schedule=\"1f1b\"|pp=2,schedule=1f1b"
  "pp2 zb-h1|parallel.pp=2 parallel.schedule=\"zb-h1\"|pp=2,schedule=zb-h1"
)

json_value() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

# Median step_time_s of a metrics.jsonl, the first step (warm-up) left out.
median_step() {
  python3 - "$1" <<'EOF'
import json, statistics, sys
times = [json.loads(line)["step_time_s"] for line in open(sys.argv[1]) if '"step_time_s"' in line]
print(statistics.median(times[1:] if len(times) > 1 else times))
EOF
}

for ((round = 0; round < rounds; ++round)); do
  order=("${layouts[@]}")
  if ((round % 2 == 1)); then
    order=()
    for ((i = ${#layouts[@]} - 1; i >= 0; --i)); do order+=("${layouts[i]}"); done
  fi
  for entry in "${order[@]}"; do
    IFS='|' read -r name overrides layout <<<"$entry"
    dir="$out/round$round/${name// /_}"
    mkdir -p "$(dirname "$dir")"
    echo "== round $round, $name: calibrating (load $(cut -d' ' -f1-3 /proc/loadavg))"
    "${run[@]}" "$strata" plan calibrate --nproc 2 --out "$dir.local.toml" | tee "$dir.calibration.txt"
    gflops=$(python3 -c "import re; print(1e3 * float(re.search(r'peak_tflops = (\S+)', open('$dir.local.toml').read()).group(1)))")
    prediction=$("$strata" plan --model "$model" --cluster "$dir.local.toml" --global-batch "$global_batch" \
                   --layout "$layout,micro_batch=$micro_batch" --json)
    echo "$prediction" >"$dir.prediction.json"
    predicted=$(echo "$prediction" | json_value '["step_time_s"]')
    sets=(--set train.steps="$steps" --set "log.dir=\"$dir\"")
    for override in $overrides; do sets+=(--set "$override"); done
    echo "== round $round, $name: predicted ${predicted} s; training $steps steps (load $(cut -d' ' -f1-3 /proc/loadavg))"
    "${run[@]}" "$strata" train "$model" --nproc 2 "${sets[@]}" >"$dir.train.log" 2>&1
    measured=$(median_step "$dir/metrics.jsonl")
    echo "== round $round, $name: measured $measured s, predicted / measured $(python3 -c "print(f'{$predicted / $measured:.3f}')")"
    echo "$name|$gflops|$predicted|$measured" >>"$out/rows.txt"
  done
done

# The table, and the rows bench/record.sh records: per layout the median over the rounds of the
# planner's predicted step time over the measured one, with the rounds' ratios.
python3 - "$out/rows.txt" "$out/results.md" <<'EOF'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, gflops, predicted, measured = line.rstrip("\n").split("|")
    rows.setdefault(name, []).append((float(gflops), float(predicted), float(measured)))
table = ["| layout | matmul GFLOP/s per rank (calibrated, median) | predicted step (s, median) | measured step (s, median) | predicted / measured (median) | spread over rounds |",
         "|---|---|---|---|---|---|"]
out = []
for name, runs in rows.items():
    ratios = [p / m for _, p, m in runs]
    median = statistics.median(ratios)
    table.append(f"| {name} | {statistics.median(g for g, _, _ in runs):.1f} | "
                 f"{statistics.median(p for _, p, _ in runs):.3f} | {statistics.median(m for _, _, m in runs):.3f} | "
                 f"{median:.2f} | {min(ratios):.2f}–{max(ratios):.2f} |")
    out.append({"name": name, "metric": "predicted / measured step time", "value": median, "rounds": ratios,
                "predicted_s": [p for _, p, _ in runs], "measured_s": [m for _, _, m in runs],
                "calibrated_gflops": [g for g, _, _ in runs]})
text = "\n".join(table)
print()
print(text)
open(sys.argv[2], "w").write(text + "\n")
print(json.dumps({"rows": out}))
EOF
