#!/usr/bin/env bash
# Installs every package Loom needs on Debian 12, skipping what is already present.
# Idempotent: a second run installs nothing and does not touch the network.
set -euo pipefail

packages=(
  build-essential g++ cmake pkg-config
  libtomlplusplus-dev doctest-dev nlohmann-json3-dev
  libboost-dev libboost-program-options-dev
  libopenblas-dev libopenblas-openmp-dev libomp-dev
  libgloo-dev libopenmpi-dev openmpi-bin
  slurmctld slurmd slurm-client
  chromium
  fortunes-min fortunes
  python3-torch python3-numpy  # the PyTorch reference in tests/reference (Debian's python3)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "[install] all ${#packages[@]} packages present"
  exit 0
fi

echo "[install] installing: ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
