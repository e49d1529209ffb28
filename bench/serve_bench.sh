#!/usr/bin/env bash
# Open-loop serving benchmark (vLLM's benchmark_serving conventions): bench/serve_bench sends
# Poisson arrivals with ShareGPT-like lognormal lengths to `strata serve` on loopback and
# reports TTFT/TPOT/ITL percentiles and goodput (requests/s meeting both SLOs). Two scenarios:
#
#   SCENARIO=goodput  the batch-1 decode step STEP is measured first (mode one, short prompts:
#     its TPOT p50); SLOs: TTFT p99 <= SLO_TTFT, TPOT p99 <= TPOT_FACTOR x STEP. Then each rate
#     of RATES is sent for DURATION seconds (rate x DURATION requests, at least REQUESTS: a
#     rate is sustained only if the server keeps up with it for that long, not just drains a
#     short burst within the TTFT SLO) to one server, released three ways: continuous (each request at its
#     arrival), static (batches of BATCH padded to their longest prompt and output, the next
#     when the last has finished) and one (one request at a time). A mode's goodput in a round
#     is the best goodput_req_s among the rates where it met the SLOs (0 if none); a mode that
#     misses them at a rate skips the higher rates of that round (they only take longer to
#     miss). Rows: each mode's goodput, continuous/static and continuous/one (paired by round;
#     a round whose denominator is 0 is left out and said so), and the batch-1 decode step.
#   SCENARIO=prefix   REQUESTS requests sharing a SHARED_PREFIX-token system prompt, all at
#     once, continuous, to two servers from the same checkpoint: one with the prefix cache,
#     one with serve.prefix_cache=false. Rows: TTFT p50 uncached/cached, output tokens/s
#     cached/uncached, identical outputs (1 when both servers' output hashes agree in every
#     round) and the cached server's hit rate.
#
#   bench/serve_bench.sh [BUILD_DIR]     (default: build; needs targets strata, serve_bench)
#
# Environment knobs (defaults per scenario, goodput / prefix):
#   SCENARIO=goodput ROUNDS=3 REQUESTS=32/64 MAX_SECONDS=300  scenario, rounds, bounds
#   DURATION=10        goodput: seconds of arrivals per run
#   RATES="..." BATCH=8 SLO_TTFT=2 TPOT_FACTOR=10 STEP_REQUESTS=8   goodput sweep and SLOs
#   SHARED_PREFIX=0/512                                         system prompt tokens
#   PROMPT_MEAN PROMPT_SIGMA PROMPT_MIN PROMPT_MAX            own prompt lengths (lognormal)
#   OUTPUT_MEAN OUTPUT_SIGMA OUTPUT_MIN OUTPUT_MAX            output lengths (lognormal)
#   D_MODEL=256 N_LAYERS=4 N_HEADS=8 SEQ_LEN=256/1024 VOCAB=256 THREADS=2   model and threads
#   KV_CACHE_MB=1024/4096                                     each server's KV cache pool
#   SERVE_BENCH=PATH   the serve_bench binary to use instead of BUILD_DIR/bench/serve_bench
#   KEEP=DIR           keep the checkpoint, server logs and JSON lines in DIR
#   SERVE_SETS="key=value ..."   goodput: config overrides for the server (e.g.
#                      serve.max_batch_tokens=64)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init serve_bench "${1:-build}"
if [[ -n ${SERVE_BENCH:-} ]]; then
  [[ -x $SERVE_BENCH ]] || { echo "serve_bench: SERVE_BENCH=$SERVE_BENCH is not executable" >&2; exit 2; }
  client=$SERVE_BENCH
else
  bench_binary serve_bench
  client=$binary
fi
SCENARIO=${SCENARIO:-goodput}
case $SCENARIO in
  goodput)
    REQUESTS=${REQUESTS:-32} SHARED_PREFIX=${SHARED_PREFIX:-0} SEQ_LEN=${SEQ_LEN:-256}
    PROMPT_MEAN=${PROMPT_MEAN:-32} PROMPT_MAX=${PROMPT_MAX:-128}
    OUTPUT_MEAN=${OUTPUT_MEAN:-32} OUTPUT_MAX=${OUTPUT_MAX:-96} KV_CACHE_MB=${KV_CACHE_MB:-1024} ;;
  prefix)
    REQUESTS=${REQUESTS:-64} SHARED_PREFIX=${SHARED_PREFIX:-512} SEQ_LEN=${SEQ_LEN:-1024}
    PROMPT_MEAN=${PROMPT_MEAN:-32} PROMPT_MAX=${PROMPT_MAX:-128}
    OUTPUT_MEAN=${OUTPUT_MEAN:-16} OUTPUT_MAX=${OUTPUT_MAX:-64} KV_CACHE_MB=${KV_CACHE_MB:-4096} ;;
  *) echo "serve_bench: SCENARIO=$SCENARIO; allowed: goodput, prefix" >&2; exit 2 ;;
esac
ROUNDS=${ROUNDS:-3} MAX_SECONDS=${MAX_SECONDS:-300} THREADS=${THREADS:-2}
RATES=${RATES:-8 16 24 32 48 64 96 128 192} BATCH=${BATCH:-8} SLO_TTFT=${SLO_TTFT:-2} DURATION=${DURATION:-10}
TPOT_FACTOR=${TPOT_FACTOR:-10} STEP_REQUESTS=${STEP_REQUESTS:-8}
PROMPT_SIGMA=${PROMPT_SIGMA:-0.8} PROMPT_MIN=${PROMPT_MIN:-4}
OUTPUT_SIGMA=${OUTPUT_SIGMA:-0.8} OUTPUT_MIN=${OUTPUT_MIN:-2}
D_MODEL=${D_MODEL:-256} N_LAYERS=${N_LAYERS:-4} N_HEADS=${N_HEADS:-8} VOCAB=${VOCAB:-256}
if ((SHARED_PREFIX + PROMPT_MAX + OUTPUT_MAX > SEQ_LEN)); then
  echo "serve_bench: SHARED_PREFIX ($SHARED_PREFIX) + PROMPT_MAX ($PROMPT_MAX) + OUTPUT_MAX ($OUTPUT_MAX)" \
    "exceed SEQ_LEN ($SEQ_LEN): the server would refuse the longest requests; shorten them or raise SEQ_LEN" >&2
  exit 2
fi
shape=(--prompt-mean "$PROMPT_MEAN" --prompt-sigma "$PROMPT_SIGMA" --prompt-min "$PROMPT_MIN"
  --prompt-max "$PROMPT_MAX" --output-mean "$OUTPUT_MEAN" --output-sigma "$OUTPUT_SIGMA"
  --output-min "$OUTPUT_MIN" --output-max "$OUTPUT_MAX" --shared-prefix "$SHARED_PREFIX"
  --max-seconds "$MAX_SECONDS")

# requests_at RATE: the requests of one goodput run, RATE x DURATION and at least REQUESTS.
requests_at() {
  python3 -c "print(max($REQUESTS, round($1 * $DURATION)))"
}
most_requests=$REQUESTS
if [[ $SCENARIO == goodput ]]; then
  for rate in $RATES; do
    ((most_requests < $(requests_at "$rate"))) && most_requests=$(requests_at "$rate")
  done
fi

bench_workdir
servers=()
bench_on_exit 'for server in "${servers[@]}"; do kill "$server" 2>/dev/null; done'
bench_on_exit 'for server in "${servers[@]}"; do wait "$server" 2>/dev/null; done'
bench_header
bench_serve_checkpoint

# start_server NAME [SET...]: starts `strata serve` on the checkpoint with the extra config
# overrides and sets `port` once it is ready. The queue is as long as the workload, so an
# overloaded server queues (and misses the SLOs) rather than refusing with 429.
start_server() {
  local name=$1 sets=()
  shift
  for set in "$@"; do sets+=(--set "$set"); done
  "$strata" serve --checkpoint "$checkpoint" --port 0 --set "serve.threads=$THREADS" \
    --set "serve.kv_cache_mb=$KV_CACHE_MB" --set "serve.max_queue=$((most_requests + 16))" \
    "${sets[@]}" >"$work/serve_$name.log" 2>&1 &
  servers+=($!)
  bench_server_port "$work/serve_$name.log" "${servers[-1]}" && return 0
  echo "serve_bench: the $name server did not start:" >&2
  cat "$work/serve_$name.log" >&2
  exit 1
}

# warm_up PORT: a few requests of the workload's shape on seed 0 (a system prompt no round
# uses), so one-time costs (first kernels, first touch of the KV pool) fall outside the rounds.
warm_up() {
  "$client" --port "$1" --mode continuous --requests 8 --seed 0 "${shape[@]}" >/dev/null
}

# run_client LINES_FILE ARGS...: one serve_bench run, its JSON line appended to LINES_FILE.
# A run with failed requests still reports (its SLOs count as missed); one without a report
# stops the benchmark.
run_client() {
  local lines=$1 line status=0
  shift
  line=$("$client" "$@") || status=$?
  [[ $line == "{"* ]] || { echo "serve_bench: serve_bench $* gave no report (exit $status)" >&2; exit 1; }
  ((status == 0)) || echo "serve_bench: warning: failed requests in: serve_bench $*" >&2
  echo "$line" | tee -a "$lines"
}

echo "model:   d_model $D_MODEL, $N_LAYERS layers, $N_HEADS heads, seq_len $SEQ_LEN; $THREADS threads;" \
  "KV cache $KV_CACHE_MB MiB"
echo "load:    $REQUESTS requests x $ROUNDS rounds; own prompts lognormal mean $PROMPT_MEAN sigma $PROMPT_SIGMA" \
  "in [$PROMPT_MIN, $PROMPT_MAX]; outputs mean $OUTPUT_MEAN sigma $OUTPUT_SIGMA in [$OUTPUT_MIN, $OUTPUT_MAX];" \
  "shared prefix $SHARED_PREFIX tokens"

if [[ $SCENARIO == goodput ]]; then
  # shellcheck disable=SC2086  # SERVE_SETS is a list of overrides
  start_server main ${SERVE_SETS:-}
  warm_up "$port"
  # The batch-1 decode step: short prompts one at a time; TPOT excludes the prefill. Within
  # PROMPT_MAX and OUTPUT_MAX, which the SEQ_LEN check above has let through.
  step_prompt=$((PROMPT_MAX < 8 ? PROMPT_MAX : 8)) step_output=$((OUTPUT_MAX < 32 ? OUTPUT_MAX : 32))
  run_client "$work/step.jsonl" --port "$port" --mode one --requests "$STEP_REQUESTS" --seed 0 \
    --prompt-mean "$step_prompt" --prompt-sigma 0 --prompt-min "$step_prompt" --prompt-max "$step_prompt" \
    --output-mean "$step_output" --output-sigma 0 --output-min "$step_output" --output-max "$step_output" \
    --max-seconds "$MAX_SECONDS" >/dev/null
  step=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["tpot_p50_s"])' "$work/step.jsonl")
  slo_tpot=$(python3 -c "print($TPOT_FACTOR * $step)")
  echo "slo:     batch-1 decode step $step s; TTFT p99 <= $SLO_TTFT s, TPOT p99 <= $slo_tpot s ($TPOT_FACTOR steps)"
  echo "rates:   $RATES requests/s, each for $DURATION s (at least $REQUESTS requests); static batch $BATCH"
  for round in $(seq "$ROUNDS"); do
    modes=(continuous static one)
    ((round % 2 == 0)) && modes=(one static continuous)  # the order reversed every other round
    missed=" "
    for rate in $RATES; do
      for mode in "${modes[@]}"; do
        [[ $missed == *" $mode "* ]] && continue
        line=$(run_client "$work/rounds.jsonl" --port "$port" --mode "$mode" --rate "$rate" \
          --batch "$BATCH" --requests "$(requests_at "$rate")" --seed "$round" --slo-ttft "$SLO_TTFT" \
          --slo-tpot "$slo_tpot" "${shape[@]}")
        echo "$line" | python3 -c "import json, sys; r = json.load(sys.stdin); print(f\"round $round rate $rate $mode:\"
          f\" goodput {r['goodput_req_s']:.3g} req/s, TTFT p99 {r['ttft_p99_s']:.3g} s, TPOT p99 {r['tpot_p99_s']:.3g} s,\"
          f\" {r['output_tokens_per_s']:.4g} tok/s, slo_met {r['slo_met']}\")"
        [[ $line == *'"slo_met":true'* ]] || missed+="$mode "
      done
    done
  done
  python3 - "$work/rounds.jsonl" "$step" "$ROUNDS" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
step, rounds = float(sys.argv[2]), int(sys.argv[3])
modes = ("continuous", "static", "one")
# Per round and mode: the best goodput among the rates whose run met the SLOs.
goodput = {mode: [max([r["goodput_req_s"] for r in runs
                       if r["mode"] == mode and r["seed"] == round and r["slo_met"]], default=0.0)
                  for round in range(1, rounds + 1)] for mode in modes}
out = []
for mode in modes:
    values = goodput[mode]
    print(f"goodput {mode}: {statistics.median(values):.4g} req/s (rounds {', '.join(f'{v:.3g}' for v in values)})")
    out.append({"name": f"goodput {mode}", "metric": "requests/s meeting the TTFT and TPOT SLOs",
                "value": statistics.median(values), "rounds": values})
for other in ("static", "one"):
    pairs = list(zip(goodput["continuous"], goodput[other]))
    values = [c / o for c, o in pairs if o > 0]
    skipped = len(pairs) - len(values)
    if skipped:
        print(f"continuous/{other}: {skipped} of {len(pairs)} rounds left out, {other}'s goodput was 0")
    # With no round left the row still stands (bench/report.py needs every target's row),
    # at 0: the sweep's rates were too high to show the other mode's goodput.
    value = statistics.median(values) if values else 0.0
    print(f"continuous/{other}: {value:.3g}x")
    out.append({"name": f"continuous/{other}", "metric": f"goodput, continuous / {other}",
                "value": value, "rounds": values, "rounds_left_out": skipped})
out.append({"name": "batch-1 decode step", "metric": "seconds per output token, one request",
            "value": step, "rounds": [step]})
print(json.dumps({"rows": out}))
PY
else
  # Two servers, cached and not; each round uses a new system prompt (the seed draws it), so
  # the cached server's cache from earlier rounds cannot help, without restarting servers.
  start_server cached
  cached_port=$port
  start_server uncached serve.prefix_cache=false
  uncached_port=$port
  warm_up "$cached_port"
  warm_up "$uncached_port"
  for round in $(seq "$ROUNDS"); do
    order="cached uncached"
    ((round % 2 == 0)) && order="uncached cached"  # the order reversed every other round
    for server in $order; do
      server_port=$cached_port
      [[ $server == uncached ]] && server_port=$uncached_port
      line=$(run_client /dev/null --port "$server_port" --mode continuous --requests "$REQUESTS" \
        --seed "$round" "${shape[@]}")
      echo "{\"server\":\"$server\",${line#\{}" | tee -a "$work/rounds.jsonl"
    done
  done
  python3 - "$work/rounds.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
pairs = [{r["server"]: r for r in runs[i:i + 2]} for i in range(0, len(runs) - 1, 2)]
for server in ("cached", "uncached"):
    rows = [p[server] for p in pairs]
    print(f"{server}: TTFT p50 {statistics.median(r['ttft_p50_s'] for r in rows):.4g} s,"
          f" TTFT p99 {statistics.median(r['ttft_p99_s'] for r in rows):.4g} s,"
          f" TPOT p50 {statistics.median(r['tpot_p50_s'] for r in rows):.4g} s,"
          f" {statistics.median(r['output_tokens_per_s'] for r in rows):.4g} tok/s,"
          f" hit rate {statistics.median(r['prefix_cache_hit_rate'] for r in rows):.3g}")
def row(name, metric, values):
    return {"name": name, "metric": metric, "value": statistics.median(values), "rounds": values}
ttft = [p["uncached"]["ttft_p50_s"] / p["cached"]["ttft_p50_s"] for p in pairs]
rate = [p["cached"]["output_tokens_per_s"] / p["uncached"]["output_tokens_per_s"] for p in pairs]
same = [1.0 if p["cached"]["output_hash"] == p["uncached"]["output_hash"] else 0.0 for p in pairs]
hits = [p["cached"]["prefix_cache_hit_rate"] for p in pairs]
print(f"TTFT p50 uncached/cached {statistics.median(ttft):.3g}x; output tok/s cached/uncached"
      f" {statistics.median(rate):.3g}x; identical outputs in {int(sum(same))} of {len(same)} rounds")
out = [row("ttft p50 uncached/cached", "TTFT p50, uncached / cached", ttft),
       row("output tok/s cached/uncached", "output tokens/s, cached / uncached", rate),
       {"name": "identical outputs", "metric": "1 when both servers' outputs match in every round",
        "value": min(same), "rounds": same},
       row("prefix cache hit rate", "cached server's prefix cache hits / queries", hits)]
print(json.dumps({"rows": out}))
PY
fi
