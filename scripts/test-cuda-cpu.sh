#!/usr/bin/env bash
# Every GPU test binary, run on this CPU under kvlab's CUDA emulator (tools/cudacpu/).
#
#   bash scripts/test-cuda-cpu.sh            all of them in one fiber order, the kernel tests
#                                            in a second, then the AddressSanitizer build on
#                                            the kernel tests
#   ORDERS="forward" ASAN=0 bash scripts/test-cuda-cpu.sh       one quick pass
#   RECORD=1 bash scripts/test-cuda-cpu.sh   also writes what ran, on which commit and how
#                                            long it took, to book/src/figures/data/cuda-emulator.json
#                                            (the book's CUDA chapter quotes it)
#
# No GPU is needed: NVRTC (from PyPI, scripts/setup-nvrtc.sh) compiles the kernels to PTX as
# on a GPU machine, and the emulator's libcuda.so, first on LD_LIBRARY_PATH, runs the same
# kernels/*.cu as host C++, one fiber per CUDA thread. KVLAB_REQUIRE_GPU=1 makes a skipped
# test a failure, so every GPU test really runs; each prints the device it ran on
# ("on cpu emulator (kvlab tools/cudacpu) ..."). What the emulator checks, and what it
# cannot, is in the book's CUDA chapter ("The kernels on your CPU").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ORDERS=${ORDERS:-"forward random:2026"}
ASAN=${ASAN:-1}
# Longest first (the emulator runs one launch at a time per process, so a binary's time is
# the sum of its tests'): two cores then finish together. Measured one test at a time on a
# 2-core AMD EPYC (AVX2), 2026-12-07: cuda_paths 381 s, cuda_caches 276 s, cuda_fused
# 266 s, cuda_speculative 142 s, cuda_kernels 15 s, cuda_bench and cuda_quant 2 s each.
# In the order fused, paths, speculative, kernels, caches, the caches started last and this
# step took 642 s; 1084 s of work on 2 cores fits in 542.
TESTS=(cuda_paths cuda_caches cuda_fused cuda_speculative cuda_kernels cuda_bench cuda_quant)
# The later orders rerun the kernel tests only: a missing barrier is a kernel's bug, and the
# whole-model tests (the paths, graphs, speculation) add minutes but no new barrier.
KERNEL_TESTS=(cuda_fused cuda_kernels cuda_quant)
KERNEL_SKIP=(--skip gpu_fused_paths_naive_equals_cached_and_match_cpu --skip gpu_graph_decode_equals_eager_and_counts_one_launch)

bash scripts/setup-nvrtc.sh >/dev/null
SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
NVRTC_LIB="$SITE/nvidia/cu13/lib"
export CUDA_INCLUDE_DIR="$SITE/nvidia/cu13/include"
export KVLAB_REQUIRE_GPU=1 KVLAB_NO_TIMING=1

emulator=$(bash scripts/build-cudacpu.sh)
test_args=()
for t in "${TESTS[@]}"; do test_args+=(--test "$t"); done
# Build the test binaries and read each one's path, to run them directly: several at once,
# one per core. The emulator runs one launch at a time per process, so separate processes
# use the cores. (cargo's build progress still goes to stderr.)
declare -A BIN
while read -r name path; do BIN[$name]=$path; done < <(
    cargo test --release --features cuda "${test_args[@]}" --no-run --message-format=json |
        python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["target"]["name"], m["executable"])')
for t in "${TESTS[@]}"; do
    [ -n "${BIN[$t]:-}" ] || { echo "test-cuda-cpu: cargo built no binary for tests/$t.rs" >&2; exit 1; }
done

log=$(mktemp)
runs=$(mktemp)
logs=$(mktemp -d)
trap 'rm -rf "$log" "$runs" "$logs"' EXIT

# run_binaries ORDER NAME...: every named test binary under the emulator, $(nproc) at a
# time, longest first (the order of TESTS); their output, binary by binary, into $log.
run_binaries() {
    local order=$1 t failed=0
    shift
    for t in "$@"; do
        while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
        (
            LD_LIBRARY_PATH="$(dirname "$emulator"):$NVRTC_LIB" CUDACPU_ORDER=$order \
                "${BIN[$t]}" --nocapture "${skip[@]}" >"$logs/$t.log" 2>&1
            echo $? >"$logs/$t.rc"
        ) &
    done
    wait
    : >"$log"
    for t in "$@"; do
        cat "$logs/$t.log" >>"$log"
        [ "$(cat "$logs/$t.rc")" = 0 ] || { echo "test-cuda-cpu: tests/$t.rs failed" >&2; failed=1; }
    done
    return $failed
}

first=1
for order in $ORDERS; do
    if [ $first = 1 ]; then
        binaries=("${TESTS[@]}") skip=()
        echo "== every GPU test under the CPU emulator, fiber order $order"
    else
        binaries=("${KERNEL_TESTS[@]}") skip=("${KERNEL_SKIP[@]}")
        echo "== the kernel tests again, fiber order $order"
    fi
    first=0
    start=$SECONDS
    if ! run_binaries "$order" "${binaries[@]}"; then
        cat "$log"
        echo "test-cuda-cpu: a GPU test failed under the emulator (order $order)" >&2
        exit 1
    fi
    grep -E '^test result|cudacpu:' "$log" || true
    grep -m1 -o 'on cpu emulator[^,]*' "$log" || { echo "test-cuda-cpu: no test said it ran on the emulator" >&2; exit 1; }
    if grep -q 'SKIPPED' "$log"; then
        grep 'SKIPPED' "$log"
        echo "test-cuda-cpu: a GPU test skipped under the emulator" >&2
        exit 1
    fi
    passed=$(grep -c '^test result: ok' "$log")
    [ "$passed" -eq "${#binaries[@]}" ] || { cat "$log"; echo "test-cuda-cpu: $passed of ${#binaries[@]} test binaries passed" >&2; exit 1; }
    tests_passed=$(sed -n 's/^test result: ok\. \([0-9]*\) passed.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
    echo "   ${#binaries[@]} test binaries, $tests_passed tests, passed in $((SECONDS - start)) s (order $order)"
    echo "{\"order\": \"$order\", \"binaries\": ${#binaries[@]}, \"tests\": $tests_passed, \"seconds\": $((SECONDS - start))}" >>"$runs"
done

if [ "$ASAN" = 1 ]; then
    echo "== the kernel tests under the AddressSanitizer build of the emulator"
    asan_lib=$(CUDACPU_ASAN=1 bash scripts/build-cudacpu.sh)
    start=$SECONDS
    for t in cuda_kernels cuda_quant; do
        # The test binary itself, not `cargo test`: only it should run under ASan.
        bin=${BIN[$t]}
        if ! LD_PRELOAD="$(g++ -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
            LD_LIBRARY_PATH="$(dirname "$asan_lib"):$NVRTC_LIB" "$bin" --nocapture >"$log" 2>&1; then
            cat "$log"
            echo "test-cuda-cpu: tests/$t.rs failed under AddressSanitizer" >&2
            exit 1
        fi
        grep -E '^test result' "$log"
    done
    echo "   passed in $((SECONDS - start)) s"
fi

if [ "${RECORD:-0}" = 1 ]; then
    commit=$(git rev-parse --short HEAD)
    git diff --quiet HEAD -- kernels tools src tests || commit="$commit+dirty"
    python3 - "$runs" "$commit" "$ASAN" "${TESTS[@]}" <<'PY'
import json, platform, subprocess, sys, datetime
runs = [json.loads(l) for l in open(sys.argv[1])]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
status = {
    "device": "cpu emulator (kvlab tools/cudacpu)",
    "commit": sys.argv[2],
    "date": datetime.date.today().isoformat(),
    "machine": f"{cpu}, {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores",
    "test_binaries": sys.argv[4:],
    "runs": runs,
    "asan_kernel_tests": sys.argv[3] == "1",
}
with open("book/src/figures/data/cuda-emulator.json", "w") as f:
    json.dump(status, f, indent=2)
    f.write("\n")
print("wrote book/src/figures/data/cuda-emulator.json")
PY
fi
