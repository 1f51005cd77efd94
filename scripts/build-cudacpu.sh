#!/usr/bin/env bash
# Builds kvlab's CPU emulator of the CUDA driver (tools/cudacpu/) into target/cudacpu/libcuda.so.
#
#   bash scripts/build-cudacpu.sh            the normal build
#   CUDACPU_ASAN=1 bash scripts/build-cudacpu.sh
#                                            the AddressSanitizer build, in target/cudacpu-asan/:
#                                            an out-of-bounds access is reported as kernels/x.cu:N
#   CUDACPU_KERNELS=DIR CUDACPU_OUT=DIR ...  other kernel sources (scripts/kernel-mutants.sh
#                                            builds each planted bug this way)
#
# Each kernels/*.cu becomes host C++ (tools/cudacpu/gen.py), compiled by g++ with the
# emulator's runtime into one libcuda.so. Put its folder first on LD_LIBRARY_PATH and any
# CUDA program that loads the driver at run time (cudarc does) runs its kernels on the CPU:
# scripts/test-cuda-cpu.sh does that for every GPU test. Needs only g++ and python3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KERNELS=${CUDACPU_KERNELS:-kernels}
FLAGS=(-std=c++17 -O2 -g -fPIC -mtls-dialect=gnu2 -ffp-contract=off -fvisibility=hidden -Itools/cudacpu)
if [ "${CUDACPU_ASAN:-0}" = 1 ]; then
    OUT=${CUDACPU_OUT:-target/cudacpu-asan}
    FLAGS+=(-fsanitize=address -fno-omit-frame-pointer --param asan-use-after-return=0 -DCUDACPU_ASAN=1)
else
    OUT=${CUDACPU_OUT:-target/cudacpu}
fi
command -v g++ >/dev/null || { echo "build-cudacpu: g++ is needed (apt-get install g++)" >&2; exit 1; }
mkdir -p "$OUT/gen" "$OUT/obj"

read -r -a generated <<<"$(python3 tools/cudacpu/gen.py "$KERNELS" "$OUT/gen")"
headers=(tools/cudacpu/*.h)
jobs=()
for f in "${generated[@]}"; do jobs+=("$OUT/gen/$f"); done
for f in tools/cudacpu/*.cpp; do jobs+=("$f"); done

# Compile what changed (a file newer than its object, or a header or this script newer),
# as many at a time as there are cores.
warn=(-Wall -Wextra -Wno-unused-parameter -Wno-unused-function -Wno-unused-variable -Wno-unknown-pragmas)
objects=()
pids=()
for src in "${jobs[@]}"; do
    obj="$OUT/obj/$(basename "${src%.cpp}").o"
    objects+=("$obj")
    stale=0
    [ "$obj" -nt "$src" ] && [ "$obj" -nt "$0" ] || stale=1
    for h in "${headers[@]}"; do [ "$obj" -nt "$h" ] || stale=1; done
    [ $stale = 1 ] || continue
    g++ "${FLAGS[@]}" "${warn[@]}" -c "$src" -o "$obj" &
    pids+=($!)
    if [ ${#pids[@]} -ge "$(nproc)" ]; then
        wait "${pids[0]}" || { echo "build-cudacpu: compiling $src failed" >&2; exit 1; }
        pids=("${pids[@]:1}")
    fi
done
for pid in "${pids[@]}"; do wait "$pid" || { echo "build-cudacpu: a compile failed" >&2; exit 1; }; done
g++ "${FLAGS[@]}" -shared -o "$OUT/libcuda.so" "${objects[@]}" -ldl -lpthread
realpath "$OUT/libcuda.so"
