#!/usr/bin/env bash
# One serving engine step alone (bench/serve_step: GPT::forward_paged over S decoding
# sequences), as rows bench/record.sh can record: per S the median step time over the rounds,
# and the fit of step time = fixed + S x per-sequence that decides how much continuous
# batching can gain over static batching (docs/serving.md).
#
#   bench/serve_step.sh [BUILD_DIR] [serve_step flags...]   e.g. --sequences 1,8,16 --rounds 5
#
# Environment knobs: THREADS=2 (the engine's threads).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build_arg=build
if [[ $# -gt 0 && $1 != --* ]]; then build_arg=$1; shift; fi
bench_init serve_step "$build_arg"
bench_binary serve_step
THREADS=${THREADS:-2}
bench_header
bench_workdir
"$binary" --threads "$THREADS" "$@" | tee "$work/steps.jsonl"
$python - "$work/steps.jsonl" <<'PY'
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
rows = []
for r in lines:
    if "sequences" in r:
        rows.append({"name": f"S {r['sequences']}", "metric": f"seconds per decode step (context {r['context']})",
                     "value": r["step_s"], "spread": [r["min_s"], r["max_s"]]})
    else:
        rows.append({"name": "fixed", "metric": "seconds per step, fitted fixed part", "value": r["fixed_s"]})
        rows.append({"name": "per sequence", "metric": "seconds per step and sequence, fitted",
                     "value": r["per_sequence_s"]})
print(json.dumps({"rows": rows}))
PY
