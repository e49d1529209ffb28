#!/usr/bin/env bash
# 1-bit Adam's compressed all-reduce against the float32 all-reduce it replaces, on 2 ranks
# over shared memory and over Open MPI's TCP transport (bench/onebit_allreduce, one JSON line
# per run), alternating the two transports for ROUNDS rounds, as rows bench/record.sh can
# record: per transport the median over rounds of each time and of their ratio.
#
#   bench/onebit_allreduce.sh [BUILD_DIR]      (default: build; needs target onebit_allreduce)
#
# Environment knobs: ROUNDS=3 ELEMENTS=3200000 CALLS=20
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init onebit_allreduce "${1:-build}"
bench_binary onebit_allreduce
ROUNDS=${ROUNDS:-3} ELEMENTS=${ELEMENTS:-3200000} CALLS=${CALLS:-20}
bench_header
bench_workdir
echo "model:   $ELEMENTS floats, $CALLS calls per run, 2 ranks x 1 thread; $ROUNDS rounds"
for ((round = 1; round <= ROUNDS; ++round)); do
  transports="shm tcp"
  ((round % 2 == 0)) && transports="tcp shm"  # the order reversed every other round
  for transport in $transports; do
    btl=()
    [[ $transport == tcp ]] && btl=(--mca btl tcp,self)
    line=$(OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 "${btl[@]}" "$binary" "$ELEMENTS" "$CALLS" | tail -1)
    echo "round $round $transport: $line"
    echo "$transport $line" >>"$work/runs.txt"
  done
done
$python - "$work/runs.txt" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    transport, text = line.split(" ", 1)
    runs.setdefault(transport, []).append(json.loads(text))
rows = []
for transport, results in runs.items():
    ratios = [r["onebit_ms"] / r["float32_all_reduce_ms"] for r in results]
    onebit = [r["onebit_ms"] for r in results]
    float32 = [r["float32_all_reduce_ms"] for r in results]
    print(f"{transport}: onebit {statistics.median(onebit):.2f} ms, float32 all-reduce "
          f"{statistics.median(float32):.2f} ms, ratio {statistics.median(ratios):.2f}")
    rows.append({"name": f"{transport} onebit/float32", "metric": "time per call, onebit / float32 all-reduce",
                 "value": statistics.median(ratios), "rounds": ratios})
    rows.append({"name": f"{transport} onebit ms", "metric": "1-bit all-reduce, ms per call",
                 "value": statistics.median(onebit), "rounds": onebit})
    rows.append({"name": f"{transport} float32 ms", "metric": "float32 all-reduce, ms per call",
                 "value": statistics.median(float32), "rounds": float32})
print(json.dumps({"rows": rows}))
PY
