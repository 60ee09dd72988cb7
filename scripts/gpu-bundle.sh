#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on a GPU machine that has the CUDA toolkit but none of
# Loom's Debian dependencies and no network: the CUDA build's binaries and plugins, the shared
# libraries they load from Debian packages (not glibc's, not CUDA's), and the tokenised fortunes
# corpus, into .gpu/ (git-ignored; carry it to the machine).
# It builds into build-bundle/ with CUDA and without -march=native (the GPU machine's CPU may
# lack this one's vector extensions).
#   scripts/gpu-bundle.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-bundle
bash "$root/scripts/install-deps.sh"
# OpenBLAS's CPU GEMM: oneDNN's library alone is 40 MB, and the bundle travels under 64 MiB.
cmake -S "$root" -B "$build" -DLOOM_WITH_CUDA=ON -DLOOM_NATIVE=OFF -DLOOM_CPU_GEMM=openblas \
  -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$build" -j"$(nproc)"
bash "$root/scripts/fortunes.sh" "$build" > /dev/null
out=$root/.gpu
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/data"
cp "$build/bin/loom" "$build/bin/cuda_tests" "$out/bin/"
cp -a "$build/lib/." "$out/lib/"
cp "$root"/data/fortunes/*.bin "$out/data/"
# Libraries from Debian packages; the GPU image brings its own C library and CUDA.
find "$out/bin" "$out/lib" -type f \( -name '*.so*' -o -perm -u+x \) -print0 | xargs -0 ldd 2>/dev/null |
  awk '/=> \// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|libcuda\.so|libcudart|libcublas|libnccl|libcudnn|/lib/loom' |
  xargs -r cp -L -t "$out/lib/"
du -sh "$out"
