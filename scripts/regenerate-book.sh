#!/usr/bin/env bash
# Regenerates everything the book and the README show from measurements, in one run of one
# commit, so that every stamp names the same code:
#
#   bash scripts/regenerate-book.sh
#
#   1. the figures and their data (scripts/figures.sh: every experiment with --json, then
#      `kvlab plot`);
#   2. every `$ kvlab ...` block of the book and the README (scripts/book_outputs.py);
#   3. the recorded GPU test run under the CPU emulator (RECORD=1 scripts/test-cuda-cpu.sh)
#      and the planted kernel bugs (RECORD=1 scripts/kernel-mutants.py).
#
# `scripts/check-book-prose.py` (in scripts/test.sh, so in CI) fails when the stamps differ,
# carry uncommitted changes, or are older than the last change to the code they measure
# (src/, build.rs, the kernels, the emulator, Cargo.*, the figure scripts): after changing any of
# those, commit, run this on a quiet machine (stop other builds: the timings show them),
# and commit what it wrote. About 55 minutes on a 2-core machine (about 30 for the
# figures, 17 for the blocks, 10 for the emulator's records). SKIP_EMULATOR=1 leaves
# step 3 out (its records then keep their older commit, and the check says so).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The pages read their blocks as runs of the fast kernels: W8A8 on AVX-512 BW + VNNI, bf16a
# on AVX-512 BF16, the f32 chain on AVX-512 (weight-formats.md; the flags are the ones
# src/simd/isa.rs, w8a8_kernels.rs and bf16a_kernels.rs test). On a CPU without them the
# blocks would show the fallbacks (bf16a's AVX2 emulation is several times slower than
# bf16), and every sentence about those sections would have to change with them. The
# deterministic blocks are the same bits on every ISA; the timed ones are not the same story.
missing=()
for flag in avx512f avx512bw avx512_vnni avx512_bf16; do
    grep -qw "$flag" /proc/cpuinfo 2> /dev/null || missing+=("$flag")
done
if [[ ${#missing[@]} -gt 0 && ${ALLOW_ISA:-0} != 1 ]]; then
    echo "error: this CPU lacks ${missing[*]}, and the book's timed blocks were measured with those kernels (W8A8, bf16a, the f32 chain): regenerate on a CPU that has them (AMD Zen 4, Intel Sapphire Rapids), or ALLOW_ISA=1 to do it anyway and then reread the weight-formats pages against the new blocks" >&2
    exit 1
fi

if ! git diff --quiet HEAD -- src build.rs kernels tools Cargo.toml Cargo.lock scripts; then
    echo "error: src/, kernels/, tools/, Cargo.* or scripts/ have uncommitted changes: commit them first, so that the stamps name the code that ran" >&2
    exit 1
fi
if compgen -G "exercises/mine/[0-9]*/*.rs" > /dev/null; then
    echo "error: exercises/mine/ holds your exercise copies, and --impl learner (build.rs) would compile them into the book's blocks: move them aside first (mkdir -p /tmp/mine && mv exercises/mine/[0-9]* /tmp/mine/)" >&2
    exit 1
fi
start=$SECONDS
cargo build --release
bash scripts/figures.sh
python3 scripts/book_outputs.py
if [[ ${SKIP_EMULATOR:-0} != 1 ]]; then
    RECORD=1 bash scripts/test-cuda-cpu.sh
    RECORD=1 python3 scripts/kernel-mutants.py
fi
python3 scripts/check-book-prose.py
echo "regenerate-book: done in $((SECONDS - start)) s; commit book/ and README.md"
