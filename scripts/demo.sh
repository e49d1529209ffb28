#!/usr/bin/env bash
# The demo: installs what is missing, builds, trains a small GPT on real English text
# (the Debian `fortunes` corpus, byte-level) on 8 local ranks (dp 2 x pp 2 x tp 2, ZeRO-1),
# then prints a sample generated from the final checkpoint.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/install-deps.sh
bash scripts/build.sh build
run="runs/demo"
rm -rf "$run"
./build/src/strata train configs/demo.toml --nproc 8 --set log.dir="\"$run\"" \
  --set checkpoint.dir="\"$run/checkpoints\"" "$@"
checkpoint="$(ls -d "$run"/checkpoints/step_* | tail -n 1)"
echo
echo "=== sample from $checkpoint ==="
./build/src/strata generate --checkpoint "$checkpoint" --prompt "The " --max-new-tokens 300 \
  --temperature 0.8 --top-k 40 --seed 7
