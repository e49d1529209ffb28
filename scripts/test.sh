#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with warnings as errors, runs every
# test (single-process and multi-rank under mpirun), then rebuilds the single-process tests
# of the libraries with AddressSanitizer + UndefinedBehaviorSanitizer and runs them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/install-deps.sh
bash scripts/npm-test-data.sh  # the tokenizer tests' reference data and encoders
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export STRATA_CACHE_DIR="${STRATA_CACHE_DIR:-$root/build/cache}"

clang-format --dry-run --Werror $(git ls-files '*.h' '*.cpp')

bash scripts/build.sh build -DSTRATA_WERROR=ON
ctest --test-dir build --output-on-failure -j 2 --timeout 900

# -O1: sanitizer instrumentation of ATen-heavy code at -O3 compiles several times slower.
# The sanitizer build makes the libraries' single-process tests (label "sanitize"; see
# tests/CMakeLists.txt) and the binary two of the Hugging Face tests drive.
STRATA_BUILD_TARGET=strata_sanitizer_tests \
  bash scripts/build.sh build-sanitize -DSTRATA_WERROR=ON -DSTRATA_SANITIZE=ON \
  -DCMAKE_CXX_FLAGS_RELEASE=-O1
# libtorch and OpenMPI are not built with the sanitizers: their one-time allocations are
# reported as leaks, so leak checking is off; every other ASan/UBSan check stays on.
ASAN_OPTIONS=detect_leaks=0:detect_odr_violation=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-sanitize -L sanitize --output-on-failure -j 2 --timeout 900
