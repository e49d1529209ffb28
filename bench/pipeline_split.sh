#!/usr/bin/env bash
# parallel.pp_layers = "auto" against the even split (issue 36): a model whose head and loss
# (vocabulary 32000 x d_model 256) outweigh several layers, on pp 2. Measures this machine first
# (`strata plan calibrate --profile-layers`: the cluster profile and this model's layer, embedding
# and head times, into a cache directory of the run's own), prints the split "auto" resolves to
# (`strata config`), then trains the even split and "auto" alternately, ROUNDS times, and asks the
# planner for the auto split's step (`strata plan --cluster local --layout ...,pp_layers=auto`).
#
#   bench/pipeline_split.sh [BUILD_DIR]
#
# Environment knobs:
#   PP=2 BATCH=8 MICRO=1 (BATCH / MICRO microbatches) ROUNDS=3 STEPS=6 WARMUP=2 THREADS=1
#   D_MODEL=256 N_LAYERS=8 N_HEADS=8 SEQ_LEN=128 VOCAB=32000
#   KEEP=DIR   keep logs, metrics and the profiles in DIR
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init pipeline_split "${1:-build}"

PP=${PP:-2} BATCH=${BATCH:-8} MICRO=${MICRO:-1} ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-6}
WARMUP=${WARMUP:-2} THREADS=${THREADS:-1}
D_MODEL=${D_MODEL:-256} N_LAYERS=${N_LAYERS:-8} N_HEADS=${N_HEADS:-8} SEQ_LEN=${SEQ_LEN:-128}
VOCAB=${VOCAB:-32000}
if ((STEPS <= WARMUP)); then echo "pipeline_split: STEPS ($STEPS) must exceed WARMUP ($WARMUP)" >&2; exit 2; fi
if ((N_LAYERS % PP != 0)); then echo "pipeline_split: N_LAYERS ($N_LAYERS) must divide by PP ($PP) for the even split" >&2; exit 2; fi

bench_workdir
bench_header
echo "model:   d_model $D_MODEL, $N_LAYERS layers, $N_HEADS heads, seq $SEQ_LEN, vocab $VOCAB;" \
     "pp $PP on $PP ranks x $THREADS threads, $((BATCH / MICRO)) microbatches of $MICRO;" \
     "$STEPS steps (first $WARMUP dropped), $ROUNDS rounds"

{
  bench_model_section
  cat <<TOML
[parallel]
pp = $PP

[train]
steps = $STEPS
global_batch = $BATCH
micro_batch = $MICRO
threads = $THREADS
warmup_steps = $WARMUP
eval_every = 0

[data]
source = "synthetic"

[log]
progress = "none"
TOML
} >"$work/bench.toml"

# The run's own cache: the profiles measured now, under the load the runs see.
export STRATA_CACHE_DIR=$work/cache
"$strata" plan calibrate --nproc "$PP" --profile-layers "$work/bench.toml" >"$work/calibrate.log" 2>&1 ||
  { cat "$work/calibrate.log" >&2; echo "pipeline_split: calibrate failed" >&2; exit 1; }
sed -n '/^layers of/,$p' "$work/calibrate.log"
"$strata" config "$work/bench.toml" --ranks "$PP" --set parallel.pp_layers=auto >"$work/resolved.toml"
head -1 "$work/resolved.toml"
auto=$(sed -n 's/^pp_layers = //p' "$work/resolved.toml")
even="[$($python -c "import sys; p, n = map(int, sys.argv[1:]); print(', '.join([str(n // p)] * p))" "$PP" "$N_LAYERS")]"
echo "splits:  even $even, auto $auto"

# Alternating rounds; "auto" resolves itself at the start of its run, as any run does.
for ((round = 1; round <= ROUNDS; ++round)); do
  for split in even auto; do
    dir="$work/$split-$round"
    layers=$even
    [[ $split == auto ]] && layers=auto
    start=$SECONDS
    "$strata" train "$work/bench.toml" --nproc "$PP" --set "parallel.pp_layers=$layers" \
      --set "log.dir=$dir" >"$dir.log" 2>&1 ||
      { cat "$dir.log" >&2; echo "pipeline_split: $split failed" >&2; exit 1; }
    echo "round $round $split: $((SECONDS - start)) s wall"
  done
done
grep -h 'parallel.pp_layers = "auto"' "$work/auto-1.log" || true

"$strata" plan --model "$work/bench.toml" --cluster local --layout "pp=$PP,dp=1,pp_layers=auto" \
  --json >"$work/plan.json"

$python - "$work" "$ROUNDS" "$WARMUP" "$even" "$auto" <<'EOF'
import json, statistics, sys
work, rounds, warmup, even, auto = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
med = statistics.median
def steps(split, r):
    metrics = [json.loads(l) for l in open(f"{work}/{split}-{r}/metrics.jsonl")]
    return med([m["step_time_s"] for m in metrics if "step_time_s" in m][warmup:])
per_round = {s: [steps(s, r) for r in range(1, rounds + 1)] for s in ("even", "auto")}
plan = json.load(open(f"{work}/plan.json"))
predicted = plan["step_time_s"]
measured = {s: med(v) for s, v in per_round.items()}
ratios = [a / e for a, e in zip(per_round["auto"], per_round["even"])]
errors = [abs(predicted - a) / a for a in per_round["auto"]]
print()
print("| split | layers per stage | step time (s) | per round (s) |")
print("| --- | --- | --- | --- |")
for s, layers in (("even", even), ("auto", auto)):
    print(f"| {s} | {layers} | {measured[s]:.3f} | {', '.join(f'{t:.3f}' for t in per_round[s])} |")
print(f"\nstep time auto / even: {med(ratios):.3f}; the planner's step for the auto split "
      f"{predicted:.3f} s ({plan['split_source']}: {plan['stage_layers']}, bubble "
      f"{100 * plan['bubble_fraction']:.1f}%) against {measured['auto']:.3f} s measured")
rows = [{"name": "auto/even", "metric": "step time ratio", "value": med(ratios), "rounds": ratios,
         "even_split": even, "auto_split": auto},
        {"name": "auto prediction error", "metric": "abs(predicted - measured) / measured step",
         "value": abs(predicted - measured["auto"]) / measured["auto"], "rounds": errors,
         "predicted_step_s": predicted, "measured_step_s": measured["auto"],
         "predicted_split": plan["stage_layers"]}]
print(json.dumps({"rows": rows, "steps": per_round}))
EOF
