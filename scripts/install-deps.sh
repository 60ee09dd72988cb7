#!/usr/bin/env bash
# Installs every package Loom needs on Debian 12, skipping what is already present.
# Idempotent: a second run installs nothing and does not touch the network.
#   scripts/install-deps.sh [--bench]   --bench: also the baselines bench/ measures against (below)
set -euo pipefail

bench=0
for arg in "$@"; do
  case $arg in
    --bench) bench=1 ;;
    *) echo "install-deps: unknown option $arg (the one option is --bench)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential g++ cmake pkg-config
  libtomlplusplus-dev doctest-dev nlohmann-json3-dev
  libboost-dev libboost-program-options-dev
  libopenblas-dev libopenblas-openmp-dev libomp-dev
  libdnnl-dev  # oneDNN: the CPU GEMM (CMake LOOM_CPU_GEMM=auto, the default, takes it when present)
  libpcre2-dev  # the tokenizers' Unicode pre-tokenizer patterns
  zlib1g-dev libzstd-dev zstd libsimdjson-dev  # JSONL corpora, compressed, in `loom data prepare`
  libprotobuf-dev protobuf-compiler  # TensorBoard event files ([run] tensorboard)
  clang libclang-rt-14-dev  # scripts/fuzz.sh: libFuzzer with ASan and UBSan
  clang-format               # scripts/check-format.sh: the tree as .clang-format writes it
  libgloo-dev libopenmpi-dev openmpi-bin
  slurmctld slurmd slurm-client
  iproute2 util-linux ethtool  # scripts/local-cluster.sh: namespaces (ip), nsenter, unshare; offloads off for loom-netfault
  chromium
  fortunes-min fortunes
  python3-torch python3-numpy  # the PyTorch reference in tests/reference (Debian's python3)
  python3-venv python3-pip     # .venv: the Python references PyPI has and Debian does not
)

root=$(cd "$(dirname "$0")/.." && pwd)

# A virtual environment in which `import IMPORTS` works: left alone when it does (nothing is
# fetched), else made with `python3 -m venv FLAGS` and the packages installed.
#   ensure_venv DIR "IMPORTS" "FLAGS" PACKAGE...
ensure_venv() {
  local venv=$1 imports=$2 flags=$3
  shift 3
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import $imports" 2>/dev/null; then
    echo "[install] $imports present in $venv"
    return
  fi
  echo "[install] $imports into $venv"
  # shellcheck disable=SC2086  # FLAGS is a list of options, or nothing
  /usr/bin/python3 -m venv $flags "$venv"
  "$venv/bin/pip" install -q "$@"
}

# The references the tests compare against that Debian does not package (Hugging Face tokenizers,
# transformers, safetensors, and tensorboard, which reads back Loom's event files), in .venv beside
# Debian's python3-torch (1.13: transformers 4.44 is the newest that runs on it).
python_references() {
  ensure_venv "$root/.venv" "tokenizers, transformers, safetensors, tensorboard" --system-site-packages \
    "tokenizers>=0.19,<1" "transformers==4.44.2" "safetensors>=0.4" "tensorboard>=2.14,<3"
}

# The baselines bench/ compares Loom with that the tests do not need: PyTorch 2.15 from PyPI and
# transformers, in .venv-bench (bench/cpu_profile.sh). PyPI's Linux wheel is the CUDA build, about
# 3 GB with its NVIDIA libraries; on a CPU it runs its own MKL and oneDNN kernels, as a user's
# `pip install torch` does (Debian's 1.13 in .venv is a generic build, far slower). Only with --bench.
bench_baselines() {
  ensure_venv "$root/.venv-bench" "torch, transformers" "" "torch==2.15.0" "transformers==5.25.0"
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "[install] all ${#packages[@]} packages present"
  python_references
  [ "$bench" -eq 0 ] || bench_baselines
  exit 0
fi

echo "[install] installing: ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
python_references
[ "$bench" -eq 0 ] || bench_baselines
