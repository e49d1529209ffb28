#!/usr/bin/env bash
# Load balancing evidence: configs/moe.toml (8 experts, top-2, every other layer, ep = 2 on
# 2 ranks) trained on the real corpus (data.source = "corpus") with the Switch loss on
# (model.moe.aux_loss_coef = COEF) and off (0), everything else equal. Prints, per run, the
# expert-load imbalance (max / mean tokens per expert, averaged over MoE layers) of the first
# and the last LAST steps, the dropped fraction and the final loss, from metrics.jsonl.
#
#   bench/moe_balance.sh [BUILD_DIR]     (default: build; needs target strata)
#
# Environment knobs: STEPS=200 LAST=20 COEF=0.01 CAPACITY=1.25   KEEP=DIR keeps the runs
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init moe_balance "${1:-build}"
STEPS=${STEPS:-200} LAST=${LAST:-20} COEF=${COEF:-0.01} CAPACITY=${CAPACITY:-1.25}
bench_workdir

bench_header
echo "run:     configs/moe.toml, $STEPS steps, capacity_factor $CAPACITY, 2 ranks (ep 2), corpus data"
for coef in 0.0 "$COEF"; do
  dir="$work/aux$coef"
  "$strata" train "$repo/configs/moe.toml" --nproc 2 --set train.steps="$STEPS" \
    --set train.warmup_steps=10 --set train.eval_every=0 --set model.moe.aux_loss_coef="$coef" \
    --set model.moe.capacity_factor="$CAPACITY" --set log.dir="$dir" --set log.progress=none \
    --set checkpoint.dir="" --set checkpoint.every=0 > "$dir.log" 2>&1 ||
    { echo "moe_balance: run failed, see $dir.log" >&2; cat "$dir.log" >&2; exit 1; }
done

$python - "$work" "$COEF" "$LAST" <<'PY'
import json, sys
work, coef, last = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for c in ("0.0", coef):
    steps = [json.loads(l) for l in open(f"{work}/aux{c}/metrics.jsonl")]
    steps = [s for s in steps if "loss" in s]
    mean = lambda rows, key: sum(r["moe"][key] for r in rows) / len(rows)
    first, final = steps[:last], steps[-last:]
    print(f"aux_loss_coef {c:>5}: imbalance first {last} steps {mean(first, 'load_imbalance'):.3f}, "
          f"last {last} steps {mean(final, 'load_imbalance'):.3f}; dropped {mean(final, 'dropped_fraction'):.3f}; "
          f"aux_loss {mean(final, 'aux_loss'):.3f}; loss {sum(s['loss'] for s in final) / len(final):.3f}")
    rows.append({"name": f"aux {c}", "metric": f"load imbalance (max/mean), last {last} steps",
                 "value": mean(final, "load_imbalance"), "first_steps": mean(first, "load_imbalance"),
                 "dropped_fraction": mean(final, "dropped_fraction"),
                 "loss": sum(s["loss"] for s in final) / len(final)})
print(json.dumps({"rows": rows}))  # the rows bench/record.sh records
PY
