#!/usr/bin/env bash
# Measured pipeline bubble against the simulator's prediction for the same measured costs,
# and step time per schedule. Each schedule trains with log.trace = true; from the Chrome
# trace this takes, per step, every stage's compute time (its F, B/Bi and W slices) and the
# pipeline span (first compute start to last compute end over all stages), so
#   measured bubble = max over stages (span - busy) / span          (the simulator's definition)
# then feeds each stage's mean F, B, W per microbatch to `strata simulate --costs` (one group
# per stage, transfer time 0) and prints both. Schedules run alternately, ROUNDS times.
#
#   bench/pipeline_bubble.sh [BUILD_DIR]
#
# Environment knobs:
#   PP=2 MICROBATCHES=8 SCHEDULES="1f1b zb-h1" (also zb-v, and interleaved-1f1b with VPP=2)
#   ROUNDS=2 STEPS=6 WARMUP=2 THREADS=1
#   D_MODEL=256 N_LAYERS=8 N_HEADS=8 SEQ_LEN=128 VOCAB=256 MICRO=1
#   KEEP=DIR   keep logs, traces and metrics in DIR
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init pipeline_bubble "${1:-build}"

PP=${PP:-2} MICROBATCHES=${MICROBATCHES:-8} SCHEDULES=${SCHEDULES:-"1f1b zb-h1"} ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-6} WARMUP=${WARMUP:-2} THREADS=${THREADS:-1} MICRO=${MICRO:-1}
D_MODEL=${D_MODEL:-256} N_LAYERS=${N_LAYERS:-8} N_HEADS=${N_HEADS:-8} SEQ_LEN=${SEQ_LEN:-128}
VOCAB=${VOCAB:-256}
if ((STEPS <= WARMUP)); then echo "pipeline_bubble: STEPS ($STEPS) must exceed WARMUP ($WARMUP)" >&2; exit 2; fi

bench_workdir
bench_header
echo "model:   d_model $D_MODEL, $N_LAYERS layers, $N_HEADS heads, seq $SEQ_LEN, vocab $VOCAB;" \
     "pp $PP on $PP ranks x $THREADS threads, $MICROBATCHES microbatches of $MICRO;" \
     "$STEPS steps (first $WARMUP dropped), $ROUNDS rounds"

cat >"$work/bench.toml" <<EOF
[model]
vocab_size = $VOCAB
d_model = $D_MODEL
n_layers = $N_LAYERS
n_heads = $N_HEADS
seq_len = $SEQ_LEN

[parallel]
pp = $PP

[train]
steps = $STEPS
global_batch = $((MICROBATCHES * MICRO))
micro_batch = $MICRO
threads = $THREADS
warmup_steps = $WARMUP
eval_every = 0

[data]
source = "synthetic"

[log]
progress = "none"
trace = true
EOF

# Model chunks per rank: zb-v runs two (a V), interleaved-1f1b $VPP, the others one.
vpp_of() { case $1 in zb-v) echo 2 ;; interleaved-1f1b) echo "${VPP:-2}" ;; *) echo 1 ;; esac; }

for ((round = 1; round <= ROUNDS; ++round)); do
  for schedule in $SCHEDULES; do
    dir="$work/$schedule-$round"
    start=$SECONDS
    "$strata" train "$work/bench.toml" --nproc "$PP" --set "parallel.schedule=$schedule" \
      --set "parallel.vpp=$(vpp_of "$schedule")" \
      --set "log.dir=$dir" >"$dir.log" 2>&1 ||
      { cat "$dir.log" >&2; echo "pipeline_bubble: $schedule failed" >&2; exit 1; }
    echo "round $round $schedule: $((SECONDS - start)) s wall"
  done
done

# Per schedule: measured bubble and per-stage costs from the traces, then the simulator.
for schedule in $SCHEDULES; do
  $python - "$work" "$schedule" "$ROUNDS" "$WARMUP" "$PP" "$MICROBATCHES" >"$work/$schedule.json" <<'EOF'
import collections, json, statistics, sys
work, schedule, rounds, warmup, pp, m = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
compute = {"F": "F", "B": "B", "Bi": "B", "W": "W"}
bubbles, spans, steps_s, round_bubbles, peaks, round_peaks = [], [], [], [], [], []
cost = collections.defaultdict(list)  # (stage, F|B|W) -> per-step totals / m
for r in range(1, rounds + 1):
    events = [e for e in json.load(open(f"{work}/{schedule}-{r}/trace.json"))["traceEvents"]
              if e["ph"] == "X"]
    by_step = collections.defaultdict(list)
    first = len(bubbles)
    for e in events:
        if e["name"] in compute and e["args"]["step"] >= warmup:
            by_step[e["args"]["step"]].append(e)
    for step, evs in by_step.items():
        begin = min(e["ts"] for e in evs)
        end = max(e["ts"] + e["dur"] for e in evs)
        span = end - begin
        busy = collections.Counter()
        totals = collections.Counter()
        for e in evs:
            busy[e["tid"]] += e["dur"]
            totals[(e["tid"], compute[e["name"]])] += e["dur"]
        bubbles.append(max((span - busy[s]) / span for s in range(pp)))
        spans.append(span / 1e6)
        for s in range(pp):
            for k in "FBW":
                cost[(s, k)].append(totals[(s, k)] / m / 1e6)
    round_bubbles.append(statistics.median(bubbles[first:]))
    metrics = [json.loads(l) for l in open(f"{work}/{schedule}-{r}/metrics.jsonl")]
    steps_s += [s["step_time_s"] for s in metrics if "step_time_s" in s][warmup:]
    # Rank 0's (stage 0 holds the most in flight under 1F1B, ZB-H1 and ZB-V alike).
    mine = [s["mem"]["activations_peak"] for s in metrics if "mem" in s][warmup:]
    peaks += mine
    round_peaks.append(statistics.median(mine))
med = statistics.median
costs = "/".join(",".join(f"{med(cost[(s, k)]):.6f}" for k in "FBW") for s in range(pp))
print(json.dumps({"measured_bubble": med(bubbles), "span_s": med(spans), "step_time_s": med(steps_s),
                  "costs": costs, "round_bubbles": round_bubbles,
                  "activations_peak": med(peaks), "round_peaks": round_peaks}))
EOF
  costs=$($python -c "import json,sys; print(json.load(open(sys.argv[1]))['costs'])" "$work/$schedule.json")
  "$strata" simulate --pp "$PP" --microbatches "$MICROBATCHES" --schedule "$schedule" \
    --vpp "$(vpp_of "$schedule")" --costs "$costs" --json >"$work/$schedule.sim.json"
done

$python - "$work" $SCHEDULES <<'EOF'
import json, sys
work, schedules = sys.argv[1], sys.argv[2:]
print()
print("| schedule | step time (s) | pipeline span (s) | simulated span (s) | measured bubble | simulated bubble | difference | rank 0 activations peak (MiB) | per-stage F,B,W (s) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
out = {}
for s in schedules:
    measured = json.load(open(f"{work}/{s}.json"))
    sim = json.load(open(f"{work}/{s}.sim.json"))
    b_meas, b_sim = measured["measured_bubble"], sim["bubble_fraction"]["overall"]
    out[s] = {**measured, "simulated_bubble": b_sim, "simulated_step_s": sim["step_time"]}
    print(f"| {s} | {measured['step_time_s']:.3f} | {measured['span_s']:.3f} | {sim['step_time']:.3f} | "
          f"{100 * b_meas:.1f}% | {100 * b_sim:.1f}% | {100 * (b_meas - b_sim):+.1f} pp | "
          f"{measured['activations_peak'] / 2**20:.1f} | {measured['costs']} |")
if len(schedules) == 2:
    a, b = schedules
    print(f"\nstep time {b} / {a}: {out[b]['step_time_s'] / out[a]['step_time_s']:.3f}")
# The rows bench/record.sh records: per schedule, how far the measured bubble lies from the
# simulator's, in percentage points (per round: that round's median measured bubble).
rows = [{"name": s, "metric": "|measured - simulated bubble| (points)",
         "value": 100 * abs(out[s]["measured_bubble"] - out[s]["simulated_bubble"]),
         "rounds": [100 * abs(b - out[s]["simulated_bubble"]) for b in out[s]["round_bubbles"]],
         "measured_bubble": out[s]["measured_bubble"], "simulated_bubble": out[s]["simulated_bubble"]}
        for s in schedules]
# And each schedule's rank 0 activations peak against the first schedule's (e.g. 1f1b).
first = schedules[0]
rows += [{"name": f"{s} activations peak / {first}", "metric": "ratio",
          "value": out[s]["activations_peak"] / out[first]["activations_peak"],
          "rounds": [p / q for p, q in zip(out[s]["round_peaks"], out[first]["round_peaks"])]}
         for s in schedules[1:]]
print(json.dumps({"rows": rows, "schedules": out}))
EOF
