#!/usr/bin/env bash
# GEMM rates behind the precision and MFU numbers: bench/matmul_peak in float32 and bfloat16,
# alternating over ROUNDS rounds, at THREADS threads and the benchmark model's shapes. Rows per
# dtype: strata's product (parallel/linear.h, along the route the product probe chose at start-up:
# oneDNN's sgemm, or for bf16 oneDNN's bf16 GEMM or its sgemm on float32 copies) and ATen's matmul
# (OpenBLAS in float32, oneDNN's bf16 GEMM in bfloat16), each the median over rounds of its best
# shape, in GFLOP/s.
#
#   bench/matmul.sh [BUILD_DIR]
#
# Environment knobs: ROUNDS=3 THREADS=2 TOKENS=2048 D_MODEL=768
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init matmul "${1:-build}"
binary="$build/bench/matmul_peak"
[[ -x $binary ]] || { echo "matmul: $binary missing; cmake --build $build --target matmul_peak" >&2; exit 2; }
ROUNDS=${ROUNDS:-3} THREADS=${THREADS:-2} TOKENS=${TOKENS:-2048} D_MODEL=${D_MODEL:-768}
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
bench_workdir
bench_header
echo "run:     matmul_peak at $THREADS threads, $TOKENS tokens x d_model $D_MODEL shapes and 1024^3, $ROUNDS alternating rounds"

for ((round = 1; round <= ROUNDS; ++round)); do
  order="fp32 bf16"
  ((round % 2)) || order="bf16 fp32"
  for dtype in $order; do
    "$binary" --threads "$THREADS" --tokens "$TOKENS" --d-model "$D_MODEL" --dtype "$dtype" >"$work/$dtype-$round.jsonl"
  done
done

$python - "$work" "$ROUNDS" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
rows = []
for dtype in ("fp32", "bf16"):
    for kind, label in (("strata", "strata linear"), ("aten", "ATen matmul")):
        best = []
        for r in range(1, rounds + 1):
            runs = [json.loads(l) for l in open(f"{work}/{dtype}-{r}.jsonl")]
            best.append(max(x["gflops"] for x in runs
                            if "gflops" in x and x["shape"].startswith("aten-") == (kind == "aten")))
        rows.append({"name": f"{kind} {dtype}", "metric": f"{label} GFLOP/s (best shape)",
                     "value": statistics.median(best), "rounds": best})
for row in rows:
    print(f"{row['name']:>12}: {row['value']:.1f} GFLOP/s (per round {', '.join(f'{x:.1f}' for x in row['rounds'])})")
print(json.dumps({"rows": rows}))
PY
