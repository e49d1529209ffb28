#!/usr/bin/env bash
# The whole benchmark suite, each benchmark recorded by bench/record.sh into bench/results/ with
# the targets the issues set, then docs/performance.md regenerated (bench/report.py). About 25
# minutes on an idle 2-core machine; run it on an idle machine (records taken while other
# processes use more than half a core are marked "loaded" and do not count against targets).
#
#   bench/all.sh [BUILD_DIR]        (default build; needs strata and the bench/ programs built)
#   ONLY="layouts dp_d512" bench/all.sh    run only the named records
#   SMOKE=1 bench/all.sh   every record on a tiny model, into a temporary results directory and
#                          a temporary page: checks the suite end to end (ctest bench.smoke), not speed
#
# The peers link Debian's OpenBLAS, which does not recognise this Xeon and falls back to SSE3
# kernels; OPENBLAS_CORETYPE=SkylakeX gives them the AVX-512 kernels, so strata (oneDNN) is
# compared against a peer with a fair BLAS (docs/performance.md, "The peers").
set -euo pipefail

bench=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-build}
[[ -d $build ]] || build="$bench/../$build"
build=$(cd "$build" 2>/dev/null && pwd) || { echo "all: no build dir ${1:-build}" >&2; exit 2; }
for binary in src/strata bench/matmul_peak bench/serve_load bench/serve_bench bench/serve_step bench/onebit_allreduce; do
  [[ -x $build/$binary ]] || { echo "all: $build/$binary missing; cmake --build $build" >&2; exit 2; }
done

tiny=()
report_args=()
export IDLE_WAIT_S=${IDLE_WAIT_S:-600}  # each record waits up to 10 min for an idle machine
if [[ -n ${SMOKE:-} ]]; then
  # Later knobs win: these shrink every record's model and run; nothing lands in bench/results/.
  tiny=(ROUNDS=2 STEPS=2 WARMUP=1 D_MODEL=64 N_HEADS=2 N_LAYERS=2 SEQ_LEN=32 BATCH=4
        REQUESTS=8 PROMPT_MIN=4 PROMPT_MAX=12 SHORT_TOKENS=4 LONG_TOKENS=12 ELEMENTS=65536 CALLS=2
        OUTPUT_MAX=12 SHARED_PREFIX=8 'RATES=16 64' DURATION=1 KV_CACHE_MB=64)
  smoke_dir=$(mktemp -d)
  trap 'rm -rf "$smoke_dir"' EXIT
  mkdir "$smoke_dir/logs"
  smoke_failed=()
  export RESULTS=$smoke_dir/results SAMPLE_S=1 IDLE_WAIT_S=0
  report_args=(--results "$smoke_dir/results" --output "$smoke_dir/performance.md")
fi

# Knobs that win over the smoke run's (a record whose layout needs more layers than its model).
smoke_extra=()
wanted() { [[ -z ${ONLY:-} || " $ONLY " == *" $1 "* ]]; }
record() {  # LABEL ARGS... : bench/record.sh LABEL ARGS..., when ONLY allows it
  wanted "$1" || return 0
  echo "== $1 ($(date -u +%H:%M:%S))" >&2
  local label=$1
  shift
  local options=()
  while [[ $1 == --* ]]; do options+=("$1" "$2"); shift 2; done
  local knobs=()
  while [[ $1 == [A-Z_]*=* ]]; do knobs+=("$1"); shift; done
  if [[ -z ${SMOKE:-} ]]; then
    "$bench/record.sh" "$label" "${options[@]}" "${knobs[@]}" "$@"
    return
  fi
  # The smoke run keeps each record's output in a log and goes on past a failure, so ctest's
  # output (which CI shortens) ends with one line per record and the failures' own tails.
  local log=$smoke_dir/logs/$label.log status=0 started=$SECONDS
  "$bench/record.sh" "$label" "${options[@]}" "${knobs[@]}" "${tiny[@]}" "${smoke_extra[@]}" "$@" \
    >"$log" 2>&1 || status=$?
  if ((status == 0)); then
    echo "   ok ($((SECONDS - started)) s)" >&2
  else
    smoke_failed+=("$label")
    echo "   FAILED (exit $status, $((SECONDS - started)) s); the last 40 lines of its output (each cut at 400 characters):" >&2
    tail -n 40 "$log" | cut -c1-400 | sed "s/^/   | /" >&2
  fi
}

fair_blas=OPENBLAS_CORETYPE=SkylakeX
short=(ROUNDS=3 STEPS=4 WARMUP=1)  # the d_model 768 step takes ~3 s here: 3 timed steps per run

if bash "$bench/../scripts/netns-cluster.sh" check >&2; then
  record elastic_recovery --title "Elastic restart: from a lost host to the first step on the 2 hosts left (3 namespace hosts)" \
    bench/elastic_recovery.sh "$build"
else
  echo "== elastic_recovery skipped: network namespaces are not available here (above)" >&2
fi

record layouts --title "Tensor, sequence and pipeline parallelism against one rank (d_model 768)" \
  --target 'tp2<=1.10' --target 'tp2_sp<=1.05' \
  "${short[@]}" bench/compare_layouts.sh "$build" one:1:2 tp2:2:1:parallel.tp=2 \
  tp2_sp:2:1:parallel.tp=2,parallel.sequence_parallel=true pp2:2:1:parallel.pp=2,train.micro_batch=1

# selective under the default blockwise kernel runs as none (it has no scores to drop: model/gpt.h);
# the eager rows show what selective recomputation of the s x s scores costs (eager_selective / eager).
record recompute_precision --title "Recomputation and bf16 against fp32 without recompute (d_model 768, 1 rank)" \
  --target 'selective<=1.05' --target 'full<=1.40' --target 'bf16<=0.50' \
  "${short[@]}" bench/compare_layouts.sh "$build" none:1:2 selective:1:2:train.recompute=selective \
  full:1:2:train.recompute=full bf16:1:2:train.precision=bf16 eager:1:2:model.attention=eager \
  eager_selective:1:2:model.attention=eager,train.recompute=selective

record pipeline_bubble --title "Pipeline bubble measured against the simulator (pp 2, 8 microbatches, d_model 768)" \
  --target '1f1b<=3' --target 'zb-h1<=3' \
  ROUNDS=3 STEPS=3 WARMUP=1 D_MODEL=768 N_LAYERS=6 N_HEADS=12 SEQ_LEN=256 bench/pipeline_bubble.sh "$build"

# ZB-V against 1F1B at pp 4 (issue 36): 4 ranks share the 2 cores, so step times say little;
# the bubbles (against the simulator fed the measured costs) and rank 0's activations do.
smoke_extra=(N_LAYERS=8)  # pp 4 x 2 chunks
record pipeline_bubble_zbv --title "ZB-V against 1F1B, measured against the simulator (pp 4, 8 microbatches, d_model 768)" \
  --target '1f1b<=3' --target 'zb-v<=3' --target 'zb-v activations peak / 1f1b<=1.00' \
  ROUNDS=3 STEPS=3 WARMUP=1 PP=4 'SCHEDULES=1f1b zb-v' D_MODEL=768 N_LAYERS=8 N_HEADS=12 SEQ_LEN=256 \
  bench/pipeline_bubble.sh "$build"
# The same model on pp 2, one core per rank: what the simulator reproduces when no rank waits
# for a core (the pp 4 record's ranks share the two cores).
record pipeline_bubble_zbv_pp2 --title "ZB-V against 1F1B, measured against the simulator (pp 2, one core per rank, 8 microbatches, d_model 768)" \
  --target '1f1b<=3' --target 'zb-v<=3' --target 'zb-v activations peak / 1f1b<=1.00' \
  ROUNDS=3 STEPS=3 WARMUP=1 PP=2 'SCHEDULES=1f1b zb-v' D_MODEL=768 N_LAYERS=8 N_HEADS=12 SEQ_LEN=256 \
  bench/pipeline_bubble.sh "$build"
smoke_extra=()

# Stages balanced by time (parallel.pp_layers = "auto") against the even split (issue 36): the
# head and loss of a 32000-token vocabulary outweigh several d_model 256 layers.
smoke_extra=(N_LAYERS=4)  # room for the split
record pipeline_split --title "Stages balanced by time (pp_layers = \"auto\") against the even split (pp 2, vocabulary 32000, d_model 256)" \
  --target 'auto/even<=0.90' --target 'auto prediction error<=0.15' \
  ROUNDS=3 STEPS=6 WARMUP=2 bench/pipeline_split.sh "$build"
smoke_extra=()

sizes=(256 512 768)
[[ -n ${SMOKE:-} ]] && sizes=(256)
# Steps of 0.3-0.5 s on a 2-core VM move 10-30% from round to round: 5 rounds of 10 steps keep
# the medians steadier than 3 of 6 did (12-06: ZeRO-2/ZeRO-0 rounds 0.87-1.29 with 3 of 6).
# From d_model 512 the targets are issue 37's (dp 2 within 0.8x of DDP's step, ZeRO-3 1.10x).
for d in "${sizes[@]}"; do
  targets=(--target 'dp2/ddp<=1.00')
  ((d >= 512)) && targets=(--target 'dp2/ddp<=0.80' --target 'zero2/zero0<=1.05' --target 'zero3/zero0<=1.10')
  heads=$((d / 64))
  record "dp_d$d" --title "Data parallelism and ZeRO against PyTorch DDP (dp 2, d_model $d)" "${targets[@]}" \
    $fair_blas ROUNDS=5 STEPS=10 WARMUP=2 D_MODEL=$d N_HEADS=$heads bench/data_parallel.sh "$build"
done

record throughput_fp32 --title "One rank against PyTorch eager, fp32 (d_model 768)" \
  --target 'strata/peer>=1.5' \
  $fair_blas "${short[@]}" bench/throughput.sh "$build"

# issue 37: strata bf16 / PyTorch bf16 autocast >= 1.3 (the AMX Xeon record: 1.33)
record throughput_bf16 --title "One rank against PyTorch eager with bf16 autocast (d_model 768)" \
  --target 'strata/peer>=1.3' \
  $fair_blas "${short[@]}" PRECISION=bf16 bench/throughput.sh "$build"

# Communication compression's step time on dp 2, over shared memory and over Open MPI's TCP
# transport (compression.start_step 0, 1 for onebit: every timed step compresses).
compression=(none:2:1:parallel.dp=2 bf16:2:1:parallel.dp=2,compression.gradients=bf16
  powersgd:2:1:parallel.dp=2,compression.gradients=powersgd,compression.start_step=0
  onebit:2:1:parallel.dp=2,compression.gradients=onebit,compression.start_step=1)
compression_model=(ROUNDS=3 STEPS=6 WARMUP=2 D_MODEL=256 N_LAYERS=4 N_HEADS=4 SEQ_LEN=128 BATCH=8 MICRO=2)
record compression_shm --title "Gradient compression's step time, dp 2 over shared memory (d_model 256)" \
  "${compression_model[@]}" bench/compare_layouts.sh "$build" "${compression[@]}"
record compression_tcp --title "Gradient compression's step time, dp 2 over TCP (d_model 256)" \
  OMPI_MCA_btl=tcp,self "${compression_model[@]}" bench/compare_layouts.sh "$build" "${compression[@]}"

# Serving: continuous batching against static batching on one server (docs/serving.md).
serve_targets=(--target 'continuous/static>=2.0' --target 'latency p50 continuous/static<=1.0'
  --target 'kv_utilization continuous>=0.90')
record serve_load --title "Serving under load: continuous against static batching (d_model 256, 1 rank x 2 threads)" \
  "${serve_targets[@]}" ROUNDS=5 REQUESTS=256 bench/serve_load.sh "$build"
# The same load on a model whose weights (340 MB) stream from memory at every decode step, as
# a served LLM's do, where a step's time grows slowly with its sequences (GPT-2 small's shape).
record serve_load_d768 --title "Serving under load: continuous against static batching (d_model 768, 12 layers, 1 rank x 2 threads)" \
  "${serve_targets[@]}" ROUNDS=5 REQUESTS=256 D_MODEL=768 N_LAYERS=12 N_HEADS=12 bench/serve_load.sh "$build"
# Open-loop serving (vLLM's benchmark_serving): goodput under TTFT and TPOT SLOs on a Poisson
# sweep, continuous batching against static batches and one request at a time; and the prefix
# cache against none on requests sharing a 512-token system prompt (docs/serving.md).
record serve_bench_goodput --title "Open-loop serving goodput: continuous against static batching and one at a time (d_model 256, 2 threads)" \
  --target 'continuous/static>=2.0' --target 'continuous/one>=4.0' \
  SCENARIO=goodput bench/serve_bench.sh "$build"
record serve_bench_goodput_d768 --title "Open-loop serving goodput: continuous against static batching and one at a time (d_model 768, 12 layers, 2 threads)" \
  --target 'continuous/static>=2.0' --target 'continuous/one>=4.0' \
  SCENARIO=goodput D_MODEL=768 N_LAYERS=12 N_HEADS=12 'RATES=1 2 3 4 6 8 12 16 20 24' bench/serve_bench.sh "$build"
record serve_bench_prefix_d768 --title "Prefix cache: 64 requests sharing a 512-token system prompt, cached against uncached (d_model 768, 12 layers, 2 threads)" \
  --target 'ttft p50 uncached/cached>=4.0' --target 'output tok/s cached/uncached>=1.5' --target 'identical outputs>=1' \
  SCENARIO=prefix ROUNDS=5 D_MODEL=768 N_LAYERS=12 N_HEADS=12 SEQ_LEN=1024 bench/serve_bench.sh "$build"

# The two pieces the serving and 1-bit Adam pages reason from: a decode step's fixed and
# per-sequence cost, and the 1-bit codec against the float32 all-reduce.
record serve_step --title "One serving engine step: decode time by batch size (d_model 256, 2 threads)" \
  bench/serve_step.sh "$build" --sequences 1,8,16
record serve_step_d768 --title "One serving engine step: decode time by batch size (d_model 768, 12 layers, 2 threads)" \
  --target 'S 1 / weight stream<=1.3' --target 'S 1 / weight read<=1.3' bench/serve_step.sh "$build" --d-model 768 --layers 12 --heads 12 --sequences 1,8,16 --steps 20
record serve_step_bf16_d768 --title "One serving engine step in bf16 against float32: decode time by batch size (d_model 768, 12 layers, 2 threads)" \
  --target 'S 1 this/base<=0.6' 'THIS_FLAGS=--dtype bf16' 'BASE_FLAGS=--dtype fp32' ROUNDS=5 bench/serve_step.sh "$build" --d-model 768 --layers 12 --heads 12 --sequences 1,8,16 --steps 20
record onebit_allreduce --title "1-bit compressed all-reduce against float32, 2 ranks, shared memory and TCP (3.2 M floats)" \
  bench/onebit_allreduce.sh "$build"

record matmul --title "GEMM rates: strata's product and ATen's matmul in fp32 and bf16 (2 threads)" \
  $fair_blas bench/matmul.sh "$build"

if [[ -n ${SMOKE:-} ]] && ((${#smoke_failed[@]})); then
  echo "all: smoke run FAILED in ${#smoke_failed[@]} record(s): ${smoke_failed[*]}" >&2
  exit 1
fi
python3 "$bench/report.py" "${report_args[@]}"
if [[ -n ${SMOKE:-} ]]; then
  grep -q '^## Targets' "$smoke_dir/performance.md" || { echo "all: the smoke report has no targets" >&2; exit 1; }
  echo "all: smoke run complete ($(ls "$smoke_dir/results" | wc -l) records)" >&2
else
  echo "all: docs/performance.md regenerated from bench/results/" >&2
fi
