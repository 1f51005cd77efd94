#!/usr/bin/env bash
# NVRTC (NVIDIA's run-time CUDA C++ compiler) and the CUDA headers, from PyPI, into .venv/.
#
# kvlab's CUDA backend (`--features cuda`) compiles its kernels (kernels/*.cu) at run time
# with NVRTC. No GPU and no CUDA toolkit is needed for that: NVRTC is a library, and the
# two wheels below hold it and the headers (`cuda_bf16.h`) that the kernels include.
#
# Why 13.0 exactly: the PTX NVRTC writes carries a version, and a GPU driver rejects PTX
# newer than itself (CUDA_ERROR_UNSUPPORTED_PTX_VERSION). The H200 this project is checked
# on runs driver 580 = CUDA 13.0, so the compiler must be no newer than 13.0.
#
# Usage:  bash scripts/setup-nvrtc.sh     then paste the two `export` lines it prints.
# LD_LIBRARY_PATH must be set before the program starts: glibc reads it once, at start-up,
# so setting it from inside kvlab would not help.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

NVRTC_VERSION=13.0.88
RUNTIME_VERSION=13.0.96

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet \
    "nvidia-cuda-nvrtc==${NVRTC_VERSION}" "nvidia-cuda-runtime==${RUNTIME_VERSION}"

# CUDA 13 wheels put everything under site-packages/nvidia/cu13/{lib,include}.
SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
CU13="$SITE/nvidia/cu13"
for f in "$CU13/lib/libnvrtc.so.13" "$CU13/include/cuda_bf16.h"; do
    if [ ! -e "$f" ]; then
        echo "setup-nvrtc: expected $f after the install, but it is missing" >&2
        exit 1
    fi
done
# libnvrtc loads libnvrtc-builtins from its own folder ($ORIGIN): keep them together.
ls "$CU13/lib" | grep -q '^libnvrtc-builtins' || {
    echo "setup-nvrtc: libnvrtc-builtins is missing beside libnvrtc in $CU13/lib" >&2
    exit 1
}

echo "NVRTC ${NVRTC_VERSION} and the CUDA ${RUNTIME_VERSION} headers are in $CU13"
echo "Now run (or add to your shell profile):"
echo
echo "export LD_LIBRARY_PATH=$CU13/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
echo "export CUDA_INCLUDE_DIR=$CU13/include"
