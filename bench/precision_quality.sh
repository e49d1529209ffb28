#!/usr/bin/env bash
# Mixed precision's quality: the README demo's GPT (configs/demo.toml: d_model 128, 4 layers,
# RoPE, RMSNorm, SwiGLU) trained 300 steps on the English corpus in fp32, bf16 and fp16, on one
# rank and with tp = 2; reports the final held-out loss of each and its ratio to fp32 on the
# same layout. Issue #13 asks bf16 within 3% and fp16 within 5% of fp32.
#
#   bench/precision_quality.sh [BUILD_DIR]
#
# Environment knobs: STEPS=300 (train.steps; evaluation at the end), KEEP=DIR (keep the runs).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init precision_quality "${1:-build}"
STEPS=${STEPS:-300}
bench_workdir
bench_header
echo "model:   configs/demo.toml's [model], global batch 16 x 128 tokens, $STEPS steps, corpus data"

run() {  # $1 = precision, $2 = tp
  local dir="$work/$1-tp$2"
  local nproc=()
  (($2 > 1)) && nproc=(--nproc "$2")
  local start=$SECONDS
  "$strata" train "$repo/configs/demo.toml" "${nproc[@]}" \
    --set parallel.pp=1 --set "parallel.tp=$2" --set parallel.dp=1 --set parallel.zero=0 \
    --set "train.precision=\"$1\"" --set "train.steps=$STEPS" --set "train.eval_every=$STEPS" \
    --set "train.threads=$((2 / $2))" --set 'checkpoint.dir=""' --set checkpoint.every=0 --set 'log.progress="none"' \
    --set "log.dir=\"$dir\"" >"$dir.log" 2>&1 || { cat "$dir.log" >&2; exit 1; }
  echo "$1 tp $2: $((SECONDS - start)) s" >&2
}
for tp in 1 2; do
  for precision in fp32 bf16 fp16; do run "$precision" "$tp"; done
done

$python - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def final(name):
    lines = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
    steps = [l for l in lines if "tokens_per_s" in l]
    evals = [l for l in lines if "eval_loss" in l]
    skipped = steps[-1].get("skipped_steps", 0)
    return evals[-1]["eval_loss"], steps[-1]["loss"], skipped, steps[-1].get("loss_scale")
print()
print("| layout | precision | final eval loss | vs fp32 | last train loss | skipped steps | loss scale |")
print("| --- | --- | --- | --- | --- | --- | --- |")
rows = {}
for tp in (1, 2):
    base = final(f"fp32-tp{tp}")[0]
    for p in ("fp32", "bf16", "fp16"):
        ev, tr, skipped, scale = final(f"{p}-tp{tp}")
        rows[f"{p}-tp{tp}"] = {"eval_loss": ev, "ratio": ev / base, "train_loss": tr,
                               "skipped_steps": skipped, "loss_scale": scale}
        print(f"| tp {tp} | {p} | {ev:.4f} | {ev / base:.4f} | {tr:.4f} | {skipped} | {scale or '-'} |")
# The rows bench/record.sh records: each run's final held-out loss over fp32's on its layout.
print(json.dumps({"rows": [{"name": name, "metric": "eval loss / fp32 eval loss", "value": r["ratio"], **r}
                           for name, r in rows.items()]}))
PY
