#!/usr/bin/env bash
# Serving under load: continuous batching against static batching (a batch of CONCURRENCY
# requests fixed until all of them finish), the same generated workload of mixed lengths sent
# by bench/serve_load to one `strata serve` on loopback, alternately for ROUNDS rounds each.
# Reports each round's JSON line, then per mode the median and the range (min..max) of output
# tokens/s, TTFT p50/p99, TPOT p50 and request latency p50, the throughput ratio, and the KV
# utilization (tokens stored / tokens the used blocks reserve).
#
#   bench/serve_load.sh [BUILD_DIR]          (default: build; needs targets strata, serve_load)
#
# Environment knobs:
#   ROUNDS=3 REQUESTS=64 CONCURRENCY=8 MAX_SECONDS=300   rounds per mode, workload, bounds
#   PROMPT_MIN=8 PROMPT_MAX=48                            prompt lengths of the mix (tokens)
#   SHORT_TOKENS=8 LONG_TOKENS=96 LONG_SHARE=0.2          completion lengths of the mix
#   D_MODEL=256 N_LAYERS=4 N_HEADS=8 SEQ_LEN=256 VOCAB=256 THREADS=2   model and threads
#   KEEP=DIR       keep the checkpoint, server log and JSON lines in DIR
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init serve_load "${1:-build}"
bench_binary serve_load
load=$binary
ROUNDS=${ROUNDS:-3} REQUESTS=${REQUESTS:-64} CONCURRENCY=${CONCURRENCY:-8}
MAX_SECONDS=${MAX_SECONDS:-300} SHORT_TOKENS=${SHORT_TOKENS:-8} LONG_TOKENS=${LONG_TOKENS:-96}
LONG_SHARE=${LONG_SHARE:-0.2} THREADS=${THREADS:-2} PROMPT_MIN=${PROMPT_MIN:-8} PROMPT_MAX=${PROMPT_MAX:-48}
D_MODEL=${D_MODEL:-256} N_LAYERS=${N_LAYERS:-4} N_HEADS=${N_HEADS:-8} SEQ_LEN=${SEQ_LEN:-256}
VOCAB=${VOCAB:-256}
if ((PROMPT_MAX + LONG_TOKENS > SEQ_LEN)); then
  echo "serve_load: PROMPT_MAX ($PROMPT_MAX) + LONG_TOKENS ($LONG_TOKENS) exceed SEQ_LEN ($SEQ_LEN):" \
    "the server would refuse the longest requests; shorten them or raise SEQ_LEN" >&2
  exit 2
fi

bench_workdir
bench_header
bench_serve_checkpoint

"$strata" serve --checkpoint "$checkpoint" --port 0 --set "serve.threads=$THREADS" >"$work/serve.log" 2>&1 &
server=$!
bench_on_exit 'kill $server 2>/dev/null; wait $server 2>/dev/null'
bench_server_port "$work/serve.log" "$server" ||
  { echo "serve_load: the server did not start:" >&2; cat "$work/serve.log" >&2; exit 1; }
echo "model:   d_model $D_MODEL, $N_LAYERS layers, $N_HEADS heads, seq_len $SEQ_LEN; $THREADS threads"
echo "load:    $REQUESTS requests x $ROUNDS rounds per mode, $CONCURRENCY clients;" \
  "prompts $PROMPT_MIN to $PROMPT_MAX tokens; completions $SHORT_TOKENS tokens, or $LONG_TOKENS with probability $LONG_SHARE"

for round in $(seq "$ROUNDS"); do
  modes="continuous static"
  ((round % 2 == 0)) && modes="static continuous"  # the order reversed every other round
  for mode in $modes; do
    "$load" --port "$port" --mode "$mode" --requests "$REQUESTS" --concurrency "$CONCURRENCY" \
      --prompt-min "$PROMPT_MIN" --prompt-max "$PROMPT_MAX" \
      --short-tokens "$SHORT_TOKENS" --long-tokens "$LONG_TOKENS" --long-share "$LONG_SHARE" \
      --max-seconds "$MAX_SECONDS" --seed "$round" | tee -a "$work/rounds.jsonl"
  done
done

python3 - "$work/rounds.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def summary(mode, key):
    values = [row[key] for row in rows if row["mode"] == mode]
    return statistics.median(values), min(values), max(values)
for mode in ("continuous", "static"):
    parts = []
    for key, unit in (("output_tokens_per_s", "tok/s"), ("ttft_p50_s", "s"), ("ttft_p99_s", "s"),
                      ("tpot_p50_s", "s"), ("latency_p50_s", "s"), ("kv_utilization", "")):
        median, low, high = summary(mode, key)
        parts.append(f"{key} {median:.4g} ({low:.4g}..{high:.4g}){' ' + unit if unit else ''}")
    print(f"{mode}: " + "; ".join(parts))
# The rows bench/record.sh records: per round (the two modes ran back to back on the same seed)
# continuous over static in throughput and in request latency p50, and the KV utilization.
pairs = [{row["mode"]: row for row in rows[i:i + 2]} for i in range(0, len(rows) - 1, 2)]
def paired(name, metric, key):
    values = [r["continuous"][key] / r["static"][key] for r in pairs]
    return {"name": name, "metric": metric, "value": statistics.median(values), "rounds": values}
out = [paired("continuous/static", "output tokens/s, continuous / static", "output_tokens_per_s"),
       paired("latency p50 continuous/static", "request latency p50, continuous / static",
              "latency_p50_s")]
print(f"throughput continuous / static (median of the paired rounds): {out[0]['value']:.2f}x")
for mode in ("continuous", "static"):
    values = [row["kv_utilization"] for row in rows if row["mode"] == mode]
    out.append({"name": f"kv_utilization {mode}", "metric": "tokens stored / tokens reserved",
                "value": statistics.median(values), "rounds": values})
print(json.dumps({"rows": out}))
PY
