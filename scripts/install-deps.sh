#!/usr/bin/env bash
# Installs the Debian 12 packages strata needs to build, test, run the demo and the
# benchmarks. Idempotent: installs only what is missing. Run as root (or with sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config clang-format
  libtorch-dev                        # tensors, autograd, kernels
  libopenblas0-openmp                 # fast BLAS for libtorch (the default reference BLAS is ~20x slower)
  libopenmpi-dev openmpi-bin          # all communication, and the launcher
  libtomlplusplus-dev nlohmann-json3-dev libcli11-dev
  libcpp-httplib-dev                  # strata serve's HTTP server (and the tests' client)
  zlib1g-dev libzstd-dev              # strata data prepare's .jsonl.gz and .jsonl.zst inputs
  libgtest-dev googletest
  fortunes                            # the demo's English text corpus
  libpcre2-dev                        # the tokenizers' split patterns (Unicode regexes, JIT)
  libicu-dev                          # NFC, the normalizer of Qwen2's tokenizer.json
  libsentencepiece-dev sentencepiece  # SentencePiece tokenizers; spm_train/spm_encode in tests
  python3 python3-torch               # the PyTorch peer in bench/, tests/support/hf_models.py
  python3-jinja2                      # the reference chat-template renderer (tests/data)
  iproute2 util-linux                 # ip netns, unshare, nsenter: scripts/netns-cluster.sh's hosts
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
