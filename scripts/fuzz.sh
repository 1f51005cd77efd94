#!/usr/bin/env bash
# Long fuzzing runs of the loaders (tests/fuzz_loaders.rs) until SECONDS are up.
#
#   bash scripts/fuzz.sh 120          # two minutes
#   BATCH=500 bash scripts/fuzz.sh 600
#
# Each batch runs every proptest target with PROPTEST_CASES=$BATCH cases and a fresh
# random seed; a failure stops the run and prints proptest's minimal failing input.
set -euo pipefail
cd "$(dirname "$0")/.."
budget=${1:?usage: scripts/fuzz.sh SECONDS}
batch=${BATCH:-200}
targets=7   # proptest! targets in tests/fuzz_loaders.rs
cargo build --release --tests --quiet
start=$(date +%s)
batches=0
while (( $(date +%s) - start < budget )); do
    PROPTEST_CASES=$batch cargo test --release --quiet --test fuzz_loaders >/tmp/kvlab-fuzz.log 2>&1 || {
        cat /tmp/kvlab-fuzz.log
        echo "fuzz: FAILED in batch $((batches + 1)) after $(( $(date +%s) - start )) s"
        exit 1
    }
    batches=$((batches + 1))
done
elapsed=$(( $(date +%s) - start ))
echo "fuzz: $batches batches x $targets targets x $batch cases = $((batches * targets * batch)) cases in ${elapsed} s, no failure"
