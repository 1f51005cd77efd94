#!/usr/bin/env bash
# The GPU check: kvlab's CUDA backend on a real NVIDIA GPU, from binaries built elsewhere.
#
# Two halves, because the GPU machine has no internet and no Rust toolchain:
#
#   bash scripts/gpu-check.sh prepare     HERE (x86-64, no GPU needed): builds the `kvlab`
#       binary and every GPU test binary (tests/cuda_*.rs; release, --features cuda), strips them into
#       target/gpu-check/ (a few MB), and prints how to carry them.
#
#   bash scripts/gpu-check.sh             THERE (a machine with an NVIDIA GPU), from the
#       repository root, with target/gpu-check/ carried along:
#         1. the GPU and its driver (nvidia-smi)
#         2. finds libnvrtc.so.13 (beside its libnvrtc-builtins) and cuda_bf16.h, preferring an
#            NVRTC no newer than the driver, and exports LD_LIBRARY_PATH and CUDA_INCLUDE_DIR
#        2b. the roofs seen by a peer: PyTorch's read (x.sum), copy and f32 matmul (no TF32)
#         3. the CUDA tests: every kernel version against its CPU twin (max error, then time),
#            fused == unfused bit for bit, GPU naive == cached bit for bit, GPU logits vs CPU
#            logits, graph replay == eager, greedy tokens GPU == CPU; then every "max error"
#            line again, as one list
#         4. the benchmark, f32 and bf16, each kernel plan (unfused v1/v2/v3, fused, fused +
#            CUDA graphs) at 128/512/1024/2048 tokens of context (KVLAB_BENCH_CONTEXTS=...):
#            kvlab's own roofs first (read bandwidth, f32 FMA: src/cuda/roof.rs), then
#            prefill tokens/s, decode tokens/s, naive vs cached step (the gap), fraction of
#            the read roof, of the FMA roof and of the launch roof (launches x latency);
#            the --json reports land in $OUT/gpu-bench-{f32,bf16}.json
#         5. `kvlab demo --device cuda` in f32 and bf16: naive vs cached through the CLI
#         6. `kvlab generate --device cuda` with `--cache paged` and `--kv int8` against the same
#            command on the CPU: equal tokens and KV bytes
#         7. Gemma 3 (random weights of its shape: the model folder is too big to carry) on the
#            GPU against the CPU, with a 600-token prompt, past its local layers' 512 window:
#            equal tokens, for the contiguous, paged and int8 caches
#       Everything is also written to $OUT/gpu-check.log when $OUT is set. Back here,
#       `python3 scripts/gpu-figures.py record DIR` turns DIR (what came back) into the book's
#       record of the run (book/src/figures/data/gpu-h200.json and gpu-h200.log).
#
# With the project's device tool: run(command="bash scripts/gpu-check.sh",
#                                     carry=["target/gpu-check"], timeout_s=540)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUNDLE=target/gpu-check
# Every GPU test binary: the same list scripts/test-cuda-cpu.sh runs under the CPU emulator.
GPU_TESTS=(cuda_kernels cuda_fused cuda_paths cuda_caches cuda_quant cuda_speculative cuda_bench)

prepare() {
    set -e
    echo "== building (release, --features cuda)"
    cargo build --release --features cuda
    mkdir -p "$BUNDLE"
    # The commit the binaries are built from (+changes when src/ or kernels/ differ from it):
    # the record of the run names it, as the book's stamps name theirs.
    local dirty=""
    git diff --quiet HEAD -- src kernels build.rs Cargo.toml Cargo.lock tests || dirty="+changes"
    echo "$(git rev-parse --short HEAD)$dirty" >"$BUNDLE/COMMIT"
    cp target/release/kvlab "$BUNDLE/kvlab"
    local t test_bin
    for t in "${GPU_TESTS[@]}"; do
        test_bin=$(cargo test --release --features cuda --test "$t" --no-run 2>&1 |
            tee /dev/stderr | sed -n "s/.*Executable tests\/$t.rs (\(.*\))\$/\1/p" | tail -1)
        if [ -z "$test_bin" ] || [ ! -x "$test_bin" ]; then
            echo "could not find the tests/$t.rs binary in cargo's output" >&2
            exit 1
        fi
        cp "$test_bin" "$BUNDLE/${t//_/-}"
    done
    strip "$BUNDLE"/kvlab "$BUNDLE"/cuda-*
    echo "== $BUNDLE:"
    ls -l "$BUNDLE"
    local glibc
    glibc=$(objdump -T "$BUNDLE"/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
    echo "needs glibc >= ${glibc#GLIBC_} on the GPU machine; $(du -sh "$BUNDLE" | cut -f1) to carry (limit 64 MiB with the tree)"
    echo "now: run(command=\"bash scripts/gpu-check.sh\", carry=[\"$BUNDLE\"], timeout_s=540)"
}

# ---------------------------------------------------------------------------------------------

step_status=()
record() { step_status+=("$1: $2"); }

# Prints the major.minor of the NVRTC in folder $1, from its builtins library's file name
# (libnvrtc-builtins.so.13.0 in a wheel, libnvrtc-builtins.so.13.0.88 in a toolkit).
nvrtc_version_in() {
    local f
    f=$(ls "$1"/libnvrtc-builtins.so.* 2>/dev/null | head -1)
    [ -n "$f" ] && basename "$f" | sed -n 's/^libnvrtc-builtins\.so\.\([0-9]*\.[0-9]*\).*/\1/p'
}

# "13.0" <= "13.0" ? (major.minor)
version_le() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }

find_nvrtc() {
    echo "== 2. NVRTC and the CUDA headers"
    local driver_cuda="$1" dirs=() d
    IFS=: read -r -a from_env <<<"${LD_LIBRARY_PATH:-}"
    dirs+=("${from_env[@]}")
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 \
        /usr/local/cuda-13*/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
        dirs+=("$d")
    done
    # Python wheels (nvidia-cuda-nvrtc): every python3 on the PATH, and the image's torch venv.
    for py in python3 /opt/torch/.venv/bin/python3; do
        command -v "$py" >/dev/null 2>&1 || continue
        while read -r sp; do
            dirs+=("$sp/nvidia/cu13/lib" "$sp/nvidia/cuda_nvrtc/lib")
        done < <("$py" -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
    done
    # Nothing in the usual places: search the file system (bounded: a minute at most).
    local any=""
    for d in "${dirs[@]}"; do [ -n "$d" ] && [ -e "$d/libnvrtc.so.13" ] && any=1 && break; done
    if [ -z "$any" ]; then
        echo "   not in the usual places; searching / for libnvrtc.so.13 ..."
        while read -r f; do dirs+=("$(dirname "$f")"); done < <(timeout 60 find / -xdev \
            -name 'libnvrtc.so.13*' -not -path '/proc/*' 2>/dev/null | head -20)
    fi

    local seen=" " best="" best_v="" v
    for d in "${dirs[@]}"; do
        [ -n "$d" ] && [ -e "$d/libnvrtc.so.13" ] || continue
        d=$(cd "$d" && pwd -P)
        case "$seen" in *" $d "*) continue ;; esac
        seen="$seen$d "
        v=$(nvrtc_version_in "$d")
        echo "   found libnvrtc.so.13 in $d (builtins ${v:-MISSING})"
        [ -n "$v" ] || continue # libnvrtc without its builtins fails at the first compile
        # Prefer the newest NVRTC that is no newer than the driver; else the oldest found.
        if [ -z "$best" ]; then
            best=$d best_v=$v
        elif version_le "$v" "$driver_cuda" && { ! version_le "$best_v" "$driver_cuda" || version_le "$best_v" "$v"; }; then
            best=$d best_v=$v
        elif ! version_le "$best_v" "$driver_cuda" && version_le "$v" "$best_v"; then
            best=$d best_v=$v
        fi
    done
    if [ -z "$best" ]; then
        echo "   no libnvrtc.so.13 with its builtins found: the CUDA tests cannot compile kernels"
        record "2. NVRTC" "NOT FOUND"
        return 1
    fi
    echo "   using NVRTC $best_v from $best (driver supports CUDA ${driver_cuda:-?})"
    if [ -n "$driver_cuda" ] && ! version_le "$best_v" "$driver_cuda"; then
        echo "   NVRTC $best_v is newer than the driver's CUDA $driver_cuda: kvlab will compile CUBIN instead of PTX"
    fi
    export LD_LIBRARY_PATH="$best${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

    local inc=""
    for d in "${CUDA_INCLUDE_DIR:-}" "$best/../include" /usr/local/cuda/include; do
        if [ -n "$d" ] && [ -f "$d/cuda_bf16.h" ]; then inc=$(cd "$d" && pwd -P) && break; fi
    done
    if [ -z "$inc" ]; then
        inc=$(timeout 60 find / -xdev -name cuda_bf16.h -not -path '/proc/*' 2>/dev/null | head -1)
        inc=${inc%/cuda_bf16.h}
    fi
    echo "   cuda_bf16.h in: ${inc:-NOT FOUND}"
    [ -n "$inc" ] && export CUDA_INCLUDE_DIR="$inc"
    echo "   LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "   CUDA_INCLUDE_DIR=${CUDA_INCLUDE_DIR:-}"
    record "2. NVRTC" "$best_v ($best)"
}

find_binary() { # $1: bundle name, $2: glob under target/release
    if [ -x "$BUNDLE/$1" ]; then
        echo "$BUNDLE/$1"
    else
        ls -t $2 2>/dev/null | while read -r f; do
            [ -x "$f" ] && [ -f "$f" ] && echo "$f" && break
        done
    fi
}

run_check() {
    local test_bins=() t b kvlab
    for t in "${GPU_TESTS[@]}"; do
        t=${t//_/-}
        b=$(find_binary "$t" "target/release/deps/${t//-/_}-*")
        [ -n "$b" ] && test_bins+=("$b")
    done
    kvlab=$(find_binary kvlab 'target/release/kvlab')
    echo "== kvlab GPU check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), in $PWD"
    echo "   built from kvlab $(cat "$BUNDLE/COMMIT" 2>/dev/null || echo 'unknown (no target/gpu-check/COMMIT)')"
    echo "   test binaries: ${test_bins[*]:-NOT FOUND}   kvlab: ${kvlab:-NOT FOUND}"

    echo "== 1. the GPU"
    local driver_cuda=""
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm,clocks.max.mem --format=csv
        driver_cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9]*\.[0-9]*\).*/\1/p' | head -1)
        echo "   driver supports CUDA $driver_cuda"
        record "1. GPU" "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), CUDA $driver_cuda"
    else
        echo "   nvidia-smi not found"
        record "1. GPU" "nvidia-smi not found"
    fi
    ldconfig -p 2>/dev/null | grep -E 'libcuda\.so' | head -3

    find_nvrtc "$driver_cuda"

    echo "== 2b. the roofs by a peer: PyTorch on the same GPU (read, copy, f32 matmul without TF32)"
    # kvlab measures its own roofs (src/cuda/roof.rs, step 4); this is the same machine seen
    # through cuBLAS and PyTorch's kernels, so the two can be compared side by side.
    if timeout 90 python3 - <<'PY' 2>&1; then record "2b. peer roofs" "done"; else record "2b. peer roofs" "FAIL (no torch?)"; fi
import json, os, torch
torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")
def best(f, reps=10):
    f(); torch.cuda.synchronize()
    out = float("inf")
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); f(); b.record(); torch.cuda.synchronize()
        out = min(out, a.elapsed_time(b) / 1e3)
    return out
x = torch.ones(2 << 28, device=dev)  # 2 GiB of f32
y = torch.empty_like(x)
read = x.numel() * 4 / best(lambda: x.sum())
copy = 2 * x.numel() * 4 / best(lambda: y.copy_(x))
del x, y
n = 8192
a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
sgemm = 2 * n**3 / best(lambda: a @ b, 5)
r = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
     "read_bytes_per_s": read, "copy_bytes_per_s_read_plus_written": copy,
     "f32_matmul_flop_per_s_no_tf32": sgemm}
print(f"   torch {r['torch']} on {r['gpu']}: read (x.sum over 2 GiB) {read/1e9:.0f} GB/s, "
      f"copy {copy/1e9:.0f} GB/s (read + written), f32 matmul 8192^3 without TF32 {sgemm/1e12:.1f} TFLOP/s")
if os.environ.get("OUT"):
    json.dump(r, open(os.path.join(os.environ["OUT"], "peer-roofs.json"), "w"), indent=1)
PY

    echo "== 3. CUDA tests (kernels vs CPU twins, fused == unfused, naive == cached, GPU vs CPU, graphs)"
    if [ "${#test_bins[@]}" -eq "${#GPU_TESTS[@]}" ]; then
        local failed=0 log
        log=$(mktemp)
        for b in "${test_bins[@]}"; do
            echo "-- $b"
            KVLAB_REQUIRE_GPU=1 timeout 150 "$b" --test-threads=1 --nocapture 2>&1 | tee -a "$log"
            [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
        done
        echo "-- every kernel version's max error against its CPU twin (from the tests above)"
        grep -E 'max error|exact|bitwise|of the bound|argmax' "$log" | grep -v panicked | sed 's/^ */   /'
        rm -f "$log"
        if [ "$failed" -eq 0 ]; then
            record "3. tests" "PASS"
        else
            record "3. tests" "FAIL"
        fi
    else
        record "3. tests" "test binaries missing (run \`bash scripts/gpu-check.sh prepare\` where cargo is)"
    fi

    echo "== 4. benchmark: kvlab bench --device cuda (random SmolLM2-shaped model)"
    if [ -n "$kvlab" ]; then
        local dtype
        local json
        for dtype in f32 bf16; do
            # --json, kept whole in $OUT (the book's figures are made from it: scripts/gpu-figures.py),
            # and shown here as a table.
            json=${OUT:-/tmp}/gpu-bench-$dtype.json
            if timeout 240 "$kvlab" bench --device cuda --gpu-dtype "$dtype" --random-weights \
                --contexts "${KVLAB_BENCH_CONTEXTS:-128,512,1024,2048}" --json >"$json"; then
                record "4. bench $dtype" "done"
                python3 scripts/gpu-figures.py table "$json" || cat "$json"
            else
                record "4. bench $dtype" "FAIL (exit $?)"
                cat "$json"
            fi
        done
    fi

    echo "== 5. kvlab demo --device cuda (random SmolLM2-shaped model, 100-token prompt, 32 tokens)"
    if [ -n "$kvlab" ]; then
        local dtype
        for dtype in f32 bf16; do
            echo "-- --gpu-dtype $dtype"
            if timeout 120 "$kvlab" demo --device cuda --gpu-dtype "$dtype" --max-new-tokens 32; then
                record "5. demo $dtype" "PASS"
            else
                record "5. demo $dtype" "FAIL (exit $?)"
            fi
        done
    else
        record "5. demo" "no kvlab binary"
    fi

    echo "== 6. the GPU's other caches through the CLI: kvlab generate --device cuda against --device cpu"
    if [ -n "$kvlab" ]; then
        local opts name
        for opts in "--cache paged --block-size 16" "--kv int8"; do
            name=${opts%% --block-size*}
            echo "-- $opts (random SmolLM2-shaped model, 100-token prompt, 32 tokens)"
            # shellcheck disable=SC2086
            if timeout 120 "$kvlab" generate --random-weights --prompt-len 100 --max-new-tokens 32 $opts \
                --device cuda --json >/tmp/kvlab-gen-cuda.json &&
                timeout 120 "$kvlab" generate --random-weights --prompt-len 100 --max-new-tokens 32 $opts \
                    --json >/tmp/kvlab-gen-cpu.json &&
                python3 - /tmp/kvlab-gen-cuda.json /tmp/kvlab-gen-cpu.json <<'PY'; then
import json, sys
gpu, cpu = (json.load(open(p)) for p in sys.argv[1:])
same = gpu["generated_ids"] == cpu["generated_ids"]
kv = (gpu["kv_cache_bytes"], gpu["kv_cache_bytes_used"]) == (cpu["kv_cache_bytes"], cpu["kv_cache_bytes_used"])
print(f"   tokens equal: {str(same).lower()}, KV bytes equal: {str(kv).lower()} "
      f"({gpu['kv_cache_bytes_used']:,} used); TPOT cuda {gpu['tpot_ms']:.2f} ms, cpu {cpu['tpot_ms']:.2f} ms")
sys.exit(0 if same and kv else 1)
PY
                record "6. generate $name" "PASS"
            else
                record "6. generate $name" "FAIL"
            fi
        done
    fi

    echo "== 7. Gemma 3 through the CLI: kvlab generate --device cuda against --device cpu"
    if [ -n "$kvlab" ]; then
        local gemma="--random-weights --random-shape gemma3 --prompt-len 600 --max-new-tokens 16"
        for opts in "" "--cache paged --block-size 16" "--kv int8"; do
            name=${opts%% --block-size*}
            echo "-- Gemma 3 270M shape ${opts:-(contiguous cache)}"
            # shellcheck disable=SC2086
            if timeout 240 "$kvlab" generate $gemma $opts --device cuda --json >/tmp/kvlab-gemma-cuda.json &&
                timeout 240 "$kvlab" generate $gemma $opts --json >/tmp/kvlab-gemma-cpu.json &&
                python3 - /tmp/kvlab-gemma-cuda.json /tmp/kvlab-gemma-cpu.json <<'PY'; then
import json, sys
gpu, cpu = (json.load(open(p)) for p in sys.argv[1:])
same = gpu["generated_ids"] == cpu["generated_ids"]
# The GPU keeps every row of a local layer (its window is a mask); the CPU's caches give
# rows back as the window slides, so the KV bytes are printed, not compared.
print(f"   tokens equal: {str(same).lower()}; KV bytes used cuda {gpu['kv_cache_bytes_used']:,}, "
      f"cpu {cpu['kv_cache_bytes_used']:,}; TPOT cuda {gpu['tpot_ms']:.2f} ms, cpu {cpu['tpot_ms']:.2f} ms")
sys.exit(0 if same else 1)
PY
                record "7. gemma ${name:-contiguous}" "PASS"
            else
                record "7. gemma ${name:-contiguous}" "FAIL"
            fi
        done
    fi

    echo "== summary"
    local s failed=0
    for s in "${step_status[@]}"; do
        echo "   $s"
        case "$s" in *FAIL* | *"NOT FOUND"* | *"no test binary"*) failed=1 ;; esac
    done
    return $failed
}

case "${1:-run}" in
prepare) prepare ;;
run)
    if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
        run_check 2>&1 | tee "$OUT/gpu-check.log"
        exit "${PIPESTATUS[0]}"
    fi
    run_check
    ;;
*)
    echo "usage: bash scripts/gpu-check.sh [prepare|run]" >&2
    exit 2
    ;;
esac
