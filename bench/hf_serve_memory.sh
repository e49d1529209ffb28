#!/usr/bin/env bash
# Serving a Hugging Face model straight from its directory: the resident memory each rank
# adds and the time loading takes, against reading the file once. A random Llama-shaped model
# of about 1 GB in bf16 (tests/support/hf_models.py make) is served on NPROC ranks with tp =
# NPROC in bf16; each rank's VmRSS is sampled every 20 ms from launch until `ready:` and then
# held for HOLD_S seconds, and compared with the same server on a tiny model of the same shape
# family (the baseline: libraries, MPI, the KV cache pool). The load time is the time between
# the server's `listening` and `ready:` lines; the file read is `cat FILE >/dev/null`. Both
# start from a cold page cache (`echo 3 > /proc/sys/vm/drop_caches` before each, as root; where
# that is refused, both read a warm cache and the output says so). ROUNDS rounds (an even
# number), alternately "read, big, tiny" and "tiny, big, read": the read and the big model's
# load each come right after the other in half the rounds. On a VM whose disk the host caches,
# whichever of the two comes second runs up to twice as fast (docs/models.md), so a fixed order
# would favour one side. The ratio is median load over median read, over all rounds.
#
#   bench/hf_serve_memory.sh [BUILD_DIR]          (default: build; needs target strata)
#
# Environment knobs:
#   ROUNDS=4 NPROC=2 HOLD_S=2 KV_CACHE_MB=64
#   HIDDEN=1536 LAYERS=16 HEADS=12 INTERMEDIATE=4096 VOCAB=32000   the model (~0.5 B parameters)
#   KEEP=DIR   keep the models and logs in DIR (and reuse a model already there)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init hf_serve_memory "${1:-build}"
ROUNDS=${ROUNDS:-4} NPROC=${NPROC:-2} HOLD_S=${HOLD_S:-2} KV_CACHE_MB=${KV_CACHE_MB:-64}
((ROUNDS >= 2 && ROUNDS % 2 == 0)) ||
  { echo "hf_serve_memory: ROUNDS ($ROUNDS) must be even: each order of the read and the load runs in half the rounds" >&2; exit 2; }
HIDDEN=${HIDDEN:-1536} LAYERS=${LAYERS:-16} HEADS=${HEADS:-12} INTERMEDIATE=${INTERMEDIATE:-4096}
VOCAB=${VOCAB:-32000}
bench_workdir
bench_header

make_model() {  # DIR then --set FIELD=JSON...
  local dir=$1
  shift
  [[ -f $dir/model.safetensors ]] && return 0
  "$python" "$repo/tests/support/hf_models.py" make --arch llama --dtype bf16 --out "$dir" \
    --set max_position_embeddings=256 "$@"
}
make_model "$work/big" --set "hidden_size=$HIDDEN" --set "num_hidden_layers=$LAYERS" \
  --set "num_attention_heads=$HEADS" --set "num_key_value_heads=$HEADS" \
  --set "head_dim=$((HIDDEN / HEADS))" --set "intermediate_size=$INTERMEDIATE" \
  --set "vocab_size=$VOCAB"
make_model "$work/tiny" --set "num_attention_heads=$NPROC" --set "num_key_value_heads=$NPROC" \
  --set "head_dim=$((64 / NPROC))"
file_bytes=$(stat -c %s "$work/big/model.safetensors")
echo "model:   llama, hidden $HIDDEN, $LAYERS layers, $HEADS heads, intermediate $INTERMEDIATE," \
  "vocab $VOCAB: $((file_bytes / 1000000)) MB bf16; served on $NPROC ranks, tp $NPROC, bf16"

now() { date +%s.%N; }

cache="cold"
if ! { sync && echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
  cache="warm"
  echo "page cache: cannot drop it (not root?): every read is warm" >&2
fi
drop_caches() { [[ $cache == warm ]] || { sync && echo 3 >/proc/sys/vm/drop_caches; }; }

# Serves DIR once; prints "LOAD_S RSS_MB... HWM_MB..." (per rank: resident after ready, and peak).
serve_once() {
  local dir=$1 log=$work/serve.$(basename "$1").log
  drop_caches
  "$strata" serve --checkpoint "$dir" --nproc "$NPROC" --port 0 --set train.precision=bf16 \
    --set "serve.kv_cache_mb=$KV_CACHE_MB" --set serve.threads=1 >"$log" 2>&1 &
  local server=$! listening="" ready="" t
  local -A rss=() hwm=()
  for _ in $(seq 3000); do
    t=$(now)
    [[ -z $listening ]] && grep -q "listening on" "$log" && listening=$t
    [[ -z $ready ]] && grep -q "ready:" "$log" && ready=$t && break
    kill -0 $server 2>/dev/null || { echo "hf_serve_memory: the server died:" >&2; cat "$log" >&2; exit 1; }
    sleep 0.02
  done
  [[ -n $ready ]] || { echo "hf_serve_memory: the server did not get ready:" >&2; cat "$log" >&2; exit 1; }
  sleep "$HOLD_S"
  local pid
  # The server execs mpirun (pid $server), whose children are the ranks.
  for pid in $(pgrep -P "$server"); do
    [[ $(ps -o comm= -p "$pid") == strata ]] || continue
    rss[$pid]=$(awk '/^VmRSS/ { print $2 / 1024 }' "/proc/$pid/status")
    hwm[$pid]=$(awk '/^VmHWM/ { print $2 / 1024 }' "/proc/$pid/status")
  done
  kill -INT $server 2>/dev/null || true
  wait $server 2>/dev/null || true
  echo "$(printf '%.4f' "$(echo "$ready - $listening" | bc -l)") ${rss[*]} ${hwm[*]}"
}

read_once() {
  local start
  drop_caches
  start=$(now)
  cat "$work/big/model.safetensors" >/dev/null
  printf '%.4f\n' "$(echo "$(now) - $start" | bc -l)"
}

: >"$work/rounds.jsonl"
for round in $(seq "$ROUNDS"); do
  order="read big tiny"
  ((round % 2 == 0)) && order="tiny big read"
  declare -A result=()
  for which in $order; do
    if [[ $which == read ]]; then read_s=$(read_once); else result[$which]=$(serve_once "$work/$which"); fi
  done
  echo "round $round: read ${read_s}s; big: ${result[big]}; tiny: ${result[tiny]}" >&2
  echo "{\"round\": $round, \"cache\": \"$cache\", \"read_s\": $read_s, \"big\": \"${result[big]}\", \"tiny\": \"${result[tiny]}\"}" >>"$work/rounds.jsonl"
done

"$python" - "$work/rounds.jsonl" "$NPROC" "$file_bytes" <<'PY'
import json, statistics, sys
rounds = [json.loads(line) for line in open(sys.argv[1])]
nproc, file_bytes = int(sys.argv[2]), int(sys.argv[3])
def fields(text):
    values = [float(v) for v in text.split()]
    return values[0], values[1:1 + nproc], values[1 + nproc:1 + 2 * nproc]
load_ratio, rss_added, hwm_added, load_s, read_s = [], [], [], [], []
for r in rounds:
    big_load, big_rss, big_hwm = fields(r["big"])
    _, tiny_rss, tiny_hwm = fields(r["tiny"])
    load_s.append(big_load); read_s.append(r["read_s"])
    load_ratio.append(big_load / r["read_s"])  # per round, for the spread
    rss_added.append(max(b - t for b, t in zip(sorted(big_rss), sorted(tiny_rss))) / 1024)
    hwm_added.append(max(b - t for b, t in zip(sorted(big_hwm), sorted(tiny_hwm))) / 1024)
def row(name, metric, values):
    return {"name": name, "metric": metric, "value": statistics.median(values), "rounds": values}
print(f"page cache {rounds[-1]['cache']}: load {statistics.median(load_s):.2f} s vs reading the file {statistics.median(read_s):.2f} s;"
      f" resident memory above baseline (most loaded rank) {statistics.median(rss_added):.3f} GB,"
      f" peak {statistics.median(hwm_added):.3f} GB; file {file_bytes / 1e9:.2f} GB")
ratio = statistics.median(load_s) / statistics.median(read_s)
print(json.dumps({"rows": [
    {"name": "load time / reading the file once", "metric": "median load / median read",
     "value": ratio, "rounds": load_ratio},
    row("resident memory added per rank (GiB, tp %d)" % nproc, "GiB", rss_added),
    row("peak resident memory added per rank (GiB)", "GiB", hwm_added),
    row("load time (s)", "s", load_s),
    row("reading the file once (s)", "s", read_s)]}))
PY
