#!/usr/bin/env bash
# One serving engine step alone (bench/serve_step: GPT::forward_paged over S decoding
# sequences), as rows bench/record.sh can record: per S the median step time over the rounds,
# and the fit of step time = fixed + S x per-sequence that decides how much continuous
# batching can gain over static batching (docs/serving.md), and (with S 1 among the counts) the
# batch-1 step over the time to read every weight once at the memory bandwidth serve_step
# measures.
#
#   bench/serve_step.sh [BUILD_DIR] [serve_step flags...]   e.g. --sequences 1,8,16 --rounds 5
#
# Environment knobs: THREADS=2 (the engine's threads).
#   BASE=OTHER_BUILD_DIR  a change against its parent: the two builds' serve_step run in turn
#                         for ROUNDS=3 rounds (the order swapped each round, each run its own
#                         warm-up and the flags' --rounds), and the rows are per S the step
#                         time of this build over BASE's (median of the rounds' ratios, with
#                         their spread) and each build's median step time.
#   THIS_FLAGS=..., BASE_FLAGS=...  flags for one side only (BASE defaults to this build when
#                         either is set): THIS_FLAGS="--dtype bf16" BASE_FLAGS="--dtype fp32"
#                         compares a bf16 step with a float32 one, side by side.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build_arg=build
if [[ $# -gt 0 && $1 != --* ]]; then build_arg=$1; shift; fi
bench_init serve_step "$build_arg"
bench_binary serve_step
THREADS=${THREADS:-2}
bench_header
bench_workdir
if [[ -z ${BASE:-} && ( -n ${THIS_FLAGS:-} || -n ${BASE_FLAGS:-} ) ]]; then BASE=$build; fi
if [[ -z ${BASE:-} ]]; then
  "$binary" --threads "$THREADS" "$@" | tee "$work/steps.jsonl"
  $python - "$work/steps.jsonl" <<'PY'
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
rows = []
for r in lines:
    if "sequences" in r:
        rows.append({"name": f"S {r['sequences']}", "metric": f"seconds per decode step (context {r['context']})",
                     "value": r["step_s"], "spread": [r["min_s"], r["max_s"]]})
    elif "weight_bytes" in r:
        rows.append({"name": "weight stream", "metric": "seconds to read every weight once at the measured bandwidth",
                     "value": r["weight_stream_s"], "weight_bytes": r["weight_bytes"],
                     "bandwidth_gb_per_s": r["bandwidth_bytes_per_s"] / 1e9})
        if r["step_1_over_stream"] > 0:
            rows.append({"name": "S 1 / weight stream", "metric": "decode step at batch 1 over the weight stream time",
                         "value": r["step_1_over_stream"]})
        rows.append({"name": "weight read", "metric": "seconds to sum every weight tensor once, next to each round's steps",
                     "value": r["weight_read_s"]})
        if r["step_1_over_weight_read"] > 0:
            rows.append({"name": "S 1 / weight read", "metric": "decode step at batch 1 over the same round's weight read (median of rounds)",
                         "value": r["step_1_over_weight_read"]})
    else:
        rows.append({"name": "fixed", "metric": "seconds per step, fitted fixed part", "value": r["fixed_s"]})
        rows.append({"name": "per sequence", "metric": "seconds per step and sequence, fitted",
                     "value": r["per_sequence_s"]})
print(json.dumps({"rows": rows}))
PY
  exit 0
fi

base_binary="$(cd "$BASE" 2>/dev/null && pwd)/bench/serve_step"
[[ -x $base_binary ]] || { echo "serve_step: no bench/serve_step in BASE=$BASE" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
echo "this build: $binary ${THIS_FLAGS:-}"
echo "base:       $base_binary ${BASE_FLAGS:-}"
for ((round = 0; round < ROUNDS; ++round)); do
  order=(new base)
  ((round % 2)) && order=(base new)
  for which in "${order[@]}"; do
    run=$binary flags=${THIS_FLAGS:-}
    [[ $which == base ]] && run=$base_binary flags=${BASE_FLAGS:-}
    echo "round $round: $which $flags"
    # shellcheck disable=SC2086  # the flags split into words
    "$run" --threads "$THREADS" "$@" $flags | tee "$work/$which.$round.jsonl"
  done
done
$python - "$work" "$ROUNDS" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def steps(which, r):
    lines = [json.loads(line) for line in open(f"{work}/{which}.{r}.jsonl") if line.startswith("{")]
    return {l["sequences"]: (l["step_s"], l["context"]) for l in lines if "sequences" in l}
new = [steps("new", r) for r in range(rounds)]
base = [steps("base", r) for r in range(rounds)]
rows = []
for S in sorted(new[0]):
    ratios = [new[r][S][0] / base[r][S][0] for r in range(rounds)]
    context = new[0][S][1]
    rows.append({"name": f"S {S} this/base", "metric": f"decode step time ratio (context {context})",
                 "value": statistics.median(ratios), "rounds": ratios})
    for which, runs in (("this", new), ("base", base)):
        times = [run[S][0] for run in runs]
        rows.append({"name": f"S {S} {which}", "metric": f"seconds per decode step (context {context})",
                     "value": statistics.median(times), "rounds": times})
print(json.dumps({"rows": rows}))
PY
