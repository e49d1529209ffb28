#!/usr/bin/env bash
# The attention kernel alone (bench/attention_kernel: blockwise against eager attention, forward
# + backward, alternating), as rows bench/record.sh can record: per sequence length the median
# of the per-round speedups (eager time / blockwise time) and the blockwise rate in GFLOP/s.
#
#   bench/attention.sh [BUILD_DIR] [attention_kernel flags...]   e.g. --seq 256,1024 --rounds 5
#
# Environment knobs: THREADS=2 (the kernel's threads, also OMP_NUM_THREADS).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build_arg=build
if [[ $# -gt 0 && $1 != --* ]]; then build_arg=$1; shift; fi
bench_init attention "$build_arg"
bench_binary attention_kernel
THREADS=${THREADS:-2}
export OMP_NUM_THREADS=$THREADS
bench_header
bench_workdir
"$binary" --threads "$THREADS" "$@" | tee "$work/attention.jsonl"
$python - "$work/attention.jsonl" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
rows = []
for r in runs:
    rows.append({"name": f"seq {r['seq']}", "metric": "eager time / blockwise time", "value": r["speedup_median"],
                 "spread": [r["speedup_min"], r["speedup_max"]], "blockwise_gflops": r["blockwise_gflops"],
                 "blockwise_saved_bytes": r["blockwise_saved_bytes"], "eager_saved_bytes": r["eager_saved_bytes"]})
    rows.append({"name": f"seq {r['seq']} GFLOP/s", "metric": "blockwise kernel GFLOP/s (causal work)",
                 "value": r["blockwise_gflops"]})
print(json.dumps({"rows": rows}))
PY
