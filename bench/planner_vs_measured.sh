#!/usr/bin/env bash
# The planner against the runtime: calibrates this machine (`strata plan calibrate`, 2 ranks),
# then for each local layout this release can run predicts the step time on that profile
# (`strata plan --layout ... --json`) and measures it (`strata train --nproc 2`, median
# step_time_s of the steps after the first). Prints a table and writes it to OUT/results.md.
# Model: bench/plan_model.toml (d_model 512). docs/planner.md records the results.
#
#   bench/planner_vs_measured.sh [BUILD_DIR]        (default: build)
#   env: STRATA (the binary; default BUILD_DIR/src/strata), STEPS (default 6),
#        OUT (default runs/planner_vs_measured)
# Run it on a quiet machine: other processes slow the training runs but not the calibration
# taken before them, or the other way round.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
strata=${STRATA:-$build/src/strata}
steps=${STEPS:-6}
out=${OUT:-runs/planner_vs_measured}
model=$root/bench/plan_model.toml
global_batch=16  # train.global_batch and train.micro_batch of bench/plan_model.toml
micro_batch=4

[ -x "$strata" ] || { echo "no strata binary at $strata; build it or set STRATA" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out"

echo "== calibrating this machine (2 ranks)"
"$strata" plan calibrate --nproc 2 --out "$out/local.toml" | tee "$out/calibration.txt"

# name | --set overrides for strata train | --layout for strata plan
layouts=(
  "dp2|parallel.dp=2|dp=2"
  "tp2|parallel.tp=2|tp=2"
  "tp2+sp|parallel.tp=2 parallel.sequence_parallel=true|tp=2,sequence_parallel=true"
  "pp2 1f1b|parallel.pp=2 parallel.pp_schedule=\"1f1b\"|pp=2,schedule=1f1b"
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

table="| layout | predicted step (s) | measured step (s) | predicted / measured |
|---|---|---|---|"
for entry in "${layouts[@]}"; do
  IFS='|' read -r name overrides layout <<<"$entry"
  dir="$out/${name// /_}"
  prediction=$("$strata" plan --model "$model" --cluster "$out/local.toml" --global-batch "$global_batch" \
                 --layout "$layout,micro_batch=$micro_batch" --json)
  echo "$prediction" >"$dir.prediction.json"
  predicted=$(echo "$prediction" | json_value '["step_time_s"]')
  sets=(--set train.steps="$steps" --set "log.dir=\"$dir\"")
  for override in $overrides; do sets+=(--set "$override"); done
  echo "== $name: predicted ${predicted} s; training $steps steps (load $(cut -d' ' -f1-3 /proc/loadavg))"
  "$strata" train "$model" --nproc 2 "${sets[@]}" >"$dir.train.log" 2>&1
  measured=$(median_step "$dir/metrics.jsonl")
  ratio=$(python3 -c "print(f'{$predicted / $measured:.2f}')")
  row=$(python3 -c "print(f'| $name | {$predicted:.3f} | {$measured:.3f} | $ratio |')")
  echo "$row"
  table+=$'\n'"$row"
done

echo
echo "$table" | tee "$out/results.md"
