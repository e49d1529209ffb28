#!/usr/bin/env bash
# How long an elastic restart takes: from the loss of a host to the first step after the
# restart, split into detection (the loss until the supervisor sees the job fail), re-planning
# (the host probe and the relaunch), reload (MPI start, the planner's choice, the checkpoint
# resharded into the new layout) and warm-up (the first step). Three hosts made by
# scripts/netns-cluster.sh, one rank each (dp 3); rank 2 is stopped by fault injection before
# step STOP_STEP, then its host h3 is lost:
#   lost  its link cut and every process on it killed (a power failure)
#   cut   its link cut, its processes left running (a partition)
# The job goes on on h1 and h2 (dp 2, the planner's layout). Rounds alternate the scenarios.
#
#   bench/elastic_recovery.sh [BUILD_DIR]     (default: build; needs root and ip netns)
#
# Environment knobs: ROUNDS=3 ELASTIC_STEPS=12 STOP_STEP=7 COMM_TIMEOUT=10, the model as in
#   bench/throughput.sh but smaller by default (D_MODEL=256 N_LAYERS=4 N_HEADS=4 SEQ_LEN=128
#   VOCAB=256), ELASTIC_BATCH=12 (a multiple of 6: dp 3, then dp 2); KEEP=DIR keeps the runs.
# Its step count, batch and stop have their own names: all.sh's smoke run shrinks STEPS and BATCH.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init elastic_recovery "${1:-build}"
ROUNDS=${ROUNDS:-3} STEPS=${ELASTIC_STEPS:-12} STOP_STEP=${STOP_STEP:-7} COMM_TIMEOUT=${COMM_TIMEOUT:-10}
# A checkpoint (every 2 steps) before the stop, and steps after it to time.
((STOP_STEP >= 2 && STOP_STEP < STEPS)) ||
  { echo "elastic_recovery: STOP_STEP ($STOP_STEP) must be in [2, ELASTIC_STEPS = $STEPS)" >&2; exit 2; }
D_MODEL=${D_MODEL:-256} N_LAYERS=${N_LAYERS:-4} N_HEADS=${N_HEADS:-4} SEQ_LEN=${SEQ_LEN:-128}
VOCAB=${VOCAB:-256} BATCH=${ELASTIC_BATCH:-12}
((BATCH % 6 == 0)) || { echo "elastic_recovery: ELASTIC_BATCH ($BATCH) must divide among 3 and 2 ranks (a multiple of 6)" >&2; exit 2; }
cluster="$repo/scripts/netns-cluster.sh"
bash "$cluster" check >&2 || exit 2

bench_workdir
hosts="$work/hosts"
bench_on_exit 'bash "$cluster" down "$hosts" >/dev/null 2>&1'
bench_header
echo "model:   d_model $D_MODEL, $N_LAYERS layers, seq $SEQ_LEN, vocab $VOCAB; batch $BATCH;" \
     "3 hosts of 1 rank -> 2; rank 2 stopped before step $((STOP_STEP + 1)); comm_timeout_s" \
     "$COMM_TIMEOUT; $ROUNDS rounds of each scenario, alternating"
{
  bench_model_section
  cat <<TOML

[train]
steps = $STEPS
global_batch = $BATCH
micro_batch = 1
warmup_steps = 1

[parallel]
comm_timeout_s = $COMM_TIMEOUT

[data]
source = "synthetic"

[checkpoint]
every = 2
keep = 2

[fault]
restart_backoff_s = 0.0
elastic = true
min_hosts = 2

[log]
progress = "lines"
TOML
} >"$work/bench.toml"

# Each line of stdin with the time it arrived, seconds since the epoch.
stamp() { "$python" -u -c 'import sys, time
for line in sys.stdin: print(f"{time.time():.3f} {line}", end="", flush=True)'; }

# The time of the first line matching $2 in file $1 (after the line at time $3, if given).
time_of() { awk -v re="$2" -v after="${3:-0}" '$1 > after && $0 ~ re { print $1; exit }' "$1"; }

# A process on host $1 stopped by SIGSTOP, or nothing.
stopped_on() {
  local pid
  for pid in $(ip netns pids "strata-$1"); do
    grep -q ') T' "/proc/$pid/stat" 2>/dev/null && { echo "$pid"; return; }
  done
}

run() {  # $1 = scenario (lost|cut), $2 = round; appends a JSON line to $work/times.jsonl
  local dir="$work/$1-$2"
  SLOTS=1 bash "$cluster" up 3 "$hosts" >/dev/null
  # shellcheck disable=SC1091
  source "$hosts/env"
  (STRATA_INJECT_FAULT="STOP step $STOP_STEP 2" "$strata" train "$work/bench.toml" \
    --hosts h1:1,h2:1,h3:1 --set "log.dir=$dir" --set "checkpoint.dir=$dir/ckpt" 2>&1 |
    stamp >"$dir.log") &
  local job=$! deadline=$((SECONDS + 300))
  until [[ -n $(stopped_on h3) ]]; do
    ((SECONDS < deadline)) || { cat "$dir.log" >&2; echo "elastic_recovery: rank 2 never stopped" >&2; exit 1; }
    sleep 0.05
  done
  local lost
  lost=$(date +%s.%N)
  bash "$cluster" cut h3 "$hosts"
  [[ $1 == cut ]] || bash "$cluster" kill h3 "$hosts"
  wait "$job" || { cat "$dir.log" >&2; echo "elastic_recovery: the job failed" >&2; exit 1; }
  bash "$cluster" down "$hosts" >/dev/null
  local failed starting resumed first
  failed=$(time_of "$dir.log" "supervisor: the job failed")
  starting=$(time_of "$dir.log" "supervisor: starting 2 ranks")
  resumed=$(time_of "$dir.log" "resumed from step")
  first=$(time_of "$dir.log" " step [0-9]+/" "$resumed")
  [[ -n $failed && -n $starting && -n $resumed && -n $first ]] ||
    { cat "$dir.log" >&2; echo "elastic_recovery: a phase is missing from the log" >&2; exit 1; }
  "$python" -c "import json, sys
lost, failed, starting, resumed, first = map(float, sys.argv[2:])
print(json.dumps({'scenario': sys.argv[1], 'detection_s': failed - lost,
                  'replanning_s': starting - failed, 'reload_s': resumed - starting,
                  'warmup_s': first - resumed, 'total_s': first - lost}))" \
    "$1" "$lost" "$failed" "$starting" "$resumed" "$first" >>"$work/times.jsonl"
  tail -1 "$work/times.jsonl"
}

for ((round = 1; round <= ROUNDS; ++round)); do
  if ((round % 2)); then order=(lost cut); else order=(cut lost); fi
  for scenario in "${order[@]}"; do run "$scenario" "$round"; done
done

"$python" - "$work/times.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
rows = []
for scenario in ("lost", "cut"):
    mine = [r for r in runs if r["scenario"] == scenario]
    for phase in ("detection_s", "replanning_s", "reload_s", "warmup_s", "total_s"):
        values = [r[phase] for r in mine]
        rows.append({"name": f"{scenario} host: {phase[:-2]}", "metric": "s",
                     "value": round(statistics.median(values), 3),
                     "rounds": [round(v, 3) for v in values]})
        print(f"{scenario:5} {phase[:-2]:11} median {statistics.median(values):7.3f} s"
              f"  rounds {' '.join(f'{v:.3f}' for v in values)}")
print(json.dumps({"rows": rows}))
PY
