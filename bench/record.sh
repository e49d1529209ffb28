#!/usr/bin/env bash
# Runs one benchmark script and records its result as a JSON file in bench/results/, with what
# a reader needs to trust or reproduce it: the command and knobs, machine, commit, date, and how
# much CPU other processes took before, during and after the run. docs/performance.md is
# generated from these files (bench/report.py); nobody copies numbers by hand.
#
#   bench/record.sh LABEL [--title TEXT] [--target 'ROW<=X' | 'ROW>=X']... [KNOB=VALUE...] SCRIPT [ARGS...]
#     LABEL    names the record (a row of docs/performance.md keeps the latest record per label)
#     --title  one line saying what the record compares (the section heading)
#     --target a goal for the row named ROW of the script's result (checked by bench/report.py)
#     KNOB=VALUE  environment knobs for the script (recorded; e.g. D_MODEL=512 ROUNDS=3)
#     SCRIPT   a bench/*.sh script or bench binary; its last stdout line must be a JSON object
#              with "rows": [{"name", "metric", "value", "rounds"}...]: "value" the median, "rounds"
#              the per-round values it is the median of (or "spread": [min, max]), any other keys
#              kept as detail (bench/performance_intro.md)
#
# Load: other processes' CPU use, in cores, is sampled for SAMPLE_S seconds (default 5) before and
# after the run, and during it as the machine's busy time minus the benchmark's own (its reaped
# children's CPU time). A record where any of the three exceeds 0.5 core gets status "loaded":
# the report shows it, flagged, and does not count it against a target.
# Environment: RESULTS=DIR (default bench/results), SAMPLE_S=5, IDLE_WAIT_S=0 (wait up to that
# many seconds for other processes to drop to half a core before starting).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
results=${RESULTS:-$repo/bench/results}
sample_s=${SAMPLE_S:-5}
usage="usage: bench/record.sh LABEL [--title TEXT] [--target 'ROW<=X']... [KNOB=VALUE...] SCRIPT [ARGS...]"

(($# >= 2)) || { echo "$usage" >&2; exit 2; }
label=$1
shift
[[ $label =~ ^[a-z0-9_]+$ ]] || { echo "record: LABEL '$label' must be lowercase letters, digits and _" >&2; exit 2; }
title=$label
targets=()
knobs=()
while (($#)); do
  case $1 in
    --title) title=$2; shift 2 ;;
    --target)
      [[ $2 =~ ^[^\<\>]+(\<=|\>=)-?[0-9.]+$ ]] ||
        { echo "record: --target '$2' is not ROW<=NUMBER or ROW>=NUMBER" >&2; exit 2; }
      targets+=("$2"); shift 2 ;;
    [A-Z_]*=*) knobs+=("$1"); shift ;;
    *) break ;;
  esac
done
(($# >= 1)) || { echo "$usage" >&2; exit 2; }
script=$1
shift
[[ -x $script ]] || script="$repo/$script"
[[ -x $script ]] || { echo "record: no executable benchmark '$script'" >&2; exit 2; }

ticks=$(getconf CLK_TCK)
busy_ticks() {  # all CPUs' busy time: user nice system irq softirq steal
  awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat
}
children_ticks() {  # this shell's reaped children's user + system time
  sed 's/^.*) //' "/proc/$$/stat" | awk '{ print $14 + $15 }'
}
other_cores_now() {  # other processes' cores over SAMPLE_S seconds while this shell sleeps
  local before after
  before=$(busy_ticks)
  sleep "$sample_s"
  after=$(busy_ticks)
  awk -v b="$before" -v a="$after" -v t="$ticks" -v s="$sample_s" 'BEGIN { printf "%.2f", (a - b) / t / s }'
}

loadavg_before=$(cut -d' ' -f1-3 /proc/loadavg)
other_before=$(other_cores_now)
wait_until=$((SECONDS + ${IDLE_WAIT_S:-0}))
while awk -v x="$other_before" 'BEGIN { exit !(x > 0.5) }' && ((SECONDS < wait_until)); do
  echo "record $label: other processes use $other_before cores; waiting for the machine to go idle" >&2
  loadavg_before=$(cut -d' ' -f1-3 /proc/loadavg)
  other_before=$(other_cores_now)
done
echo "record $label: other processes use $other_before cores before the run (load average $loadavg_before)" >&2

mkdir -p "$results"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
busy_start=$(busy_ticks)
children_start=$(children_ticks)
start_ns=$(date +%s%N)
env "${knobs[@]}" "$script" "$@" | tee "$out"
status=${PIPESTATUS[0]}
wall_s=$(awk -v a="$start_ns" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
busy_end=$(busy_ticks)
children_end=$(children_ticks)
((status == 0)) || { echo "record $label: $script failed (exit $status); nothing recorded" >&2; exit "$status"; }
other_during=$(awk -v b0="$busy_start" -v b1="$busy_end" -v c0="$children_start" -v c1="$children_end" \
  -v t="$ticks" -v w="$wall_s" 'BEGIN { x = ((b1 - b0) - (c1 - c0)) / t / w; if (x < 0) x = 0; printf "%.2f", x }')
other_after=$(other_cores_now)
loadavg_after=$(cut -d' ' -f1-3 /proc/loadavg)

commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
dirty=false
[[ -n $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]] && dirty=true
stamp=$(date -u +%Y%m%dT%H%M%SZ)
file="$results/$label-$stamp.json"

# The command as a shell reads it back: words with anything but plain characters in single
# quotes, a quote inside them as '\'' (a title like "The planner's ..." must paste and run).
shell_word() {
  if [[ $1 =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then
    printf '%s' "$1"
  else
    local quote="'" escaped="'\\''"
    printf "'%s'" "${1//$quote/$escaped}"
  fi
}
command_words=(bench/record.sh "$label")
[[ $title != "$label" ]] && command_words+=(--title "$title")
for target in "${targets[@]}"; do command_words+=(--target "$target"); done
command_words+=("${knobs[@]}" "${script#"$repo"/}" "$@")
command_text=
for word in "${command_words[@]}"; do command_text+="${command_text:+ }$(shell_word "$word")"; done
REC_LABEL=$label REC_TITLE=$title REC_COMMIT=$commit REC_DIRTY=$dirty REC_DATE=$stamp \
REC_WALL_S=$wall_s REC_OTHER="$other_before $other_during $other_after" \
REC_LOADAVG_BEFORE=$loadavg_before REC_LOADAVG_AFTER=$loadavg_after \
REC_CPU=$(lscpu | sed -n 's/^Model name: *//p') REC_CORES=$(nproc) \
REC_CPU_ID=$(lscpu | sed -n 's/^Vendor ID: *//p; s/^CPU family: *//p; s/^Model: *//p; s/^Stepping: *//p' | paste -sd' ') \
REC_MEMORY_GIB=$(free -g | awk '/^Mem:/ { print $2 }') \
REC_COMMAND=$command_text REC_TARGETS=$(printf '%s\n' "${targets[@]}") \
  python3 - "$out" "$file" <<'EOF'
import json, os, sys
env = os.environ
label = env["REC_LABEL"]
lines = open(sys.argv[1]).read().splitlines()
result = next((json.loads(l) for l in reversed(lines) if l.startswith("{")), None)
if not isinstance(result, dict) or not isinstance(result.get("rows"), list):
    sys.exit(f"record {label}: the benchmark's last JSON line has no 'rows' list; nothing recorded")
for row in result["rows"]:
    missing = {"name", "metric", "value"} - row.keys()
    if missing:
        sys.exit(f"record {label}: a row lacks {sorted(missing)}: {row}")
names = {row["name"] for row in result["rows"]}
targets = [t for t in env["REC_TARGETS"].splitlines() if t]
for target in targets:
    row = target.replace(">=", "<=").split("<=")[0]
    if row not in names:
        sys.exit(f"record {label}: --target '{target}' names no row; rows are {sorted(names)}")
before, during, after = (float(x) for x in env["REC_OTHER"].split())
other = {"before": before, "during": during, "after": after}
machine = {"cpu": env["REC_CPU"], "cores": int(env["REC_CORES"]),
           "memory_gib": int(env["REC_MEMORY_GIB"])}
# A VM may name its CPU only "AMD EPYC": the family and model tell its generation apart.
cpu_id = env["REC_CPU_ID"].split()
if len(cpu_id) == 4 and all(x.isdigit() for x in cpu_id[1:]):
    machine["cpu_id"] = {"vendor": cpu_id[0], "family": int(cpu_id[1]), "model": int(cpu_id[2]),
                         "stepping": int(cpu_id[3])}
record = {
    "label": label,
    "title": env["REC_TITLE"],
    "command": env["REC_COMMAND"],
    "targets": targets,
    "date": env["REC_DATE"],
    "commit": env["REC_COMMIT"],
    "dirty": env["REC_DIRTY"] == "true",
    "machine": machine,
    "wall_s": float(env["REC_WALL_S"]),
    "other_cores": other,
    "loadavg": {"before": env["REC_LOADAVG_BEFORE"], "after": env["REC_LOADAVG_AFTER"]},
    "status": "loaded" if max(other.values()) > 0.5 else "ok",
    "output": [l for l in lines if not l.startswith("{")],
    "result": result,
}
tmp = sys.argv[2] + ".tmp"
with open(tmp, "w") as f:
    json.dump(record, f, indent=1)
    f.write("\n")
os.replace(tmp, sys.argv[2])
print(f"record {label}: {record['status']} (other processes: before {before:.2f}, during {during:.2f}, "
      f"after {after:.2f} cores) -> {sys.argv[2]}", file=sys.stderr)
EOF
