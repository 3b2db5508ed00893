#!/usr/bin/env bash
# Installs what fp8moe needs from Debian's packages, only what is missing (idempotent).
# CUDA is optional: the CUDA toolkit, when present at /usr/local/cuda, enables the GPU backend.
# clang, its sanitizer/libFuzzer runtimes (libclang-rt-dev) and its OpenMP (libomp-dev) build the
# fuzz targets (scripts/fuzz.sh); the main build stays gcc.
# CUTLASS (the cuda-cutlass backend, built only with CUDA): its C++ headers from the pinned
# nvidia-cutlass wheel on PyPI (Debian has no package), checked against its sha256 and unpacked
# into .deps/cutlass-VERSION (git-ignored; FP8MOE_DEPS_DIR moves it). Without network or CUDA the
# step is skipped with a note, and the build goes on without that backend.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config
  libeigen3-dev libboost-program-options-dev libhdf5-dev libfmt-dev doctest-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin
  clang libclang-rt-dev libomp-dev
  python3 python3-pip python3-h5py python3-numpy
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

cutlass_version=4.2.0.0
cutlass_sha256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
deps=${FP8MOE_DEPS_DIR:-$PWD/.deps}
dest=$deps/cutlass-$cutlass_version
if [[ -f $dest/include/cutlass/version.h && -f $dest/tools/util/include/cutlass/util/packed_stride.hpp ]]; then
  echo "setup: CUTLASS $cutlass_version headers present ($dest)" >&2
elif ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: no nvcc: skipping CUTLASS (the cuda-cutlass backend needs CUDA)" >&2
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  whl=$tmp/nvidia_cutlass-$cutlass_version-py3-none-any.whl
  if python3 -m pip download -q --no-deps --only-binary=:all: "nvidia-cutlass==$cutlass_version" -d "$tmp" >&2 &&
     [[ -f $whl ]]; then
    got=$(sha256sum "$whl" | cut -d' ' -f1)
    if [[ $got != "$cutlass_sha256" ]]; then
      echo "setup: nvidia-cutlass $cutlass_version wheel has sha256 $got, expected $cutlass_sha256: not installed" >&2
      exit 1
    fi
    python3 -m zipfile -e "$whl" "$tmp/x"
    mkdir -p "$deps"
    rm -rf "$dest.partial"
    mkdir -p "$dest.partial/tools/util"
    mv "$tmp/x/cutlass_library/source/include" "$dest.partial/include"
    mv "$tmp/x/cutlass_library/source/tools/util/include" "$dest.partial/tools/util/include"
    mv "$dest.partial" "$dest"  # appears whole or not at all
    echo "setup: CUTLASS $cutlass_version headers in $dest" >&2
  else
    echo "setup: could not download nvidia-cutlass==$cutlass_version from PyPI: building without cuda-cutlass" >&2
  fi
fi
