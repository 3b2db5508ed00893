#!/usr/bin/env bash
# Installs what fp8moe needs from Debian's packages, only what is missing (idempotent).
# CUDA is optional: the CUDA toolkit, when present at /usr/local/cuda, enables the GPU backend.
# clang, its sanitizer/libFuzzer runtimes (libclang-rt-dev) and its OpenMP (libomp-dev) build the
# fuzz targets (scripts/fuzz.sh); the main build stays gcc.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libeigen3-dev libboost-program-options-dev libhdf5-dev libfmt-dev doctest-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin
  clang libclang-rt-dev libomp-dev
  python3 python3-h5py python3-numpy
  python3-pandas python3-matplotlib python3-xarray python3-h5netcdf
  python3-nbformat python3-nbclient python3-nbconvert python3-ipykernel jupyter-nbconvert
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
else
  echo "setup: all packages present" >&2
fi
