# Shared set-up of the bench/ scripts; source it, then call these in order.
#   bench_init NAME [BUILD_DIR]   sets repo, build (absolute), strata and python; exits 2 with a
#                                 message when the build or its strata binary is missing
#   bench_binary NAME             sets binary to BUILD_DIR/bench/NAME; exits 2 when it is missing
#   bench_workdir                 sets work: $KEEP if given (kept), else a temp dir removed on exit
#   bench_header                  prints the machine, date and load lines every record starts with
#   bench_serve_checkpoint        trains the one-step checkpoint of the benchmark GPT that the
#                                 serving benchmarks serve, in $work; sets checkpoint
# shellcheck shell=bash

bench_init() {
  bench_name=$1
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  build=${2:-build}
  [[ -d $build ]] || build="$repo/$build"
  build=$(cd "$build" 2>/dev/null && pwd) || { echo "$bench_name: no build dir ${2:-build}" >&2; exit 2; }
  strata="$build/src/strata"
  [[ -x $strata ]] || { echo "$bench_name: $strata missing; ninja -C $build strata" >&2; exit 2; }
  python=/usr/bin/python3  # Debian's python3-torch, the same libtorch that strata links
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}

bench_binary() {
  binary="$build/bench/$1"
  [[ -x $binary ]] || { echo "$bench_name: $binary missing; cmake --build $build --target $1" >&2; exit 2; }
}

# bench_workdir: $work, a temporary directory removed at exit (or KEEP=DIR, kept). Scripts add
# their own exit steps (stopping a server) with bench_on_exit, which run before the removal:
# one EXIT trap for all of them, as a second `trap ... EXIT` would replace the first.
bench_exit_steps=()
bench_on_exit() { bench_exit_steps+=("$1"); }
bench_exit() {
  local step
  for step in "${bench_exit_steps[@]}"; do eval "$step" || true; done
  [[ -n ${KEEP:-} || -z ${work:-} ]] || rm -rf "$work"
}
bench_workdir() {
  if [[ -n ${KEEP:-} ]]; then
    work=$KEEP
    mkdir -p "$work"
  else
    work=$(mktemp -d)
  fi
  trap bench_exit EXIT
}

# bench_server_port LOG PID: waits up to 120 s for the `strata serve` started in the background
# as PID, its output going to LOG, to print its port and "ready:"; sets `port`. Returns 1 if the
# server exits first or the time runs out. LOG may not exist yet: the background shell creates
# it, and on a loaded machine it may not have run when the first look comes.
bench_server_port() {
  local log=$1 pid=$2
  port=""
  for _ in $(seq 1200); do
    if [[ -f $log ]]; then
      port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log")
      if [[ -n $port ]] && grep -q "ready:" "$log"; then return 0; fi
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

bench_header() {
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/^Mem:/ { print $2 }') GiB"
  echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC')   load average: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# The [model] table of the dense benchmark GPT (GPT-2 style: learned positions, LayerNorm,
# GELU, tied head) sized by D_MODEL, N_LAYERS, N_HEADS, SEQ_LEN and VOCAB.
bench_model_section() {
  cat <<TOML
[model]
vocab_size = $VOCAB
d_model = $D_MODEL
n_layers = $N_LAYERS
n_heads = $N_HEADS
seq_len = $SEQ_LEN
pos = "learned"
norm = "layernorm"
activation = "gelu"
tie_embeddings = true
TOML
}

# The checkpoint a serving benchmark serves: the benchmark GPT after one synthetic step (its
# weights only have to be some weights), trained on THREADS threads in $work.
bench_serve_checkpoint() {
  {
    bench_model_section
    cat <<TOML
[train]
steps = 1
global_batch = 1
micro_batch = 1
warmup_steps = 0
threads = $THREADS
[data]
source = "synthetic"
[log]
progress = "none"
dir = "$work/log"
[checkpoint]
dir = "$work/ckpt"
TOML
  } >"$work/model.toml"
  "$strata" train "$work/model.toml" >"$work/train.log" 2>&1
  checkpoint="$work/ckpt/step_00000001"
}
