#!/usr/bin/env bash
# Configures and builds strata into a build directory (default: build/).
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
# STRATA_BUILD_TARGET=name builds only that target (default: everything).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
else
  cmake -S "$root" -B "$build" "$@" >/dev/null
fi
cmake --build "$build" -j "$(nproc)" ${STRATA_BUILD_TARGET:+--target "$STRATA_BUILD_TARGET"}
