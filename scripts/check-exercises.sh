#!/usr/bin/env bash
# CI check for the rustlings-style exercises (see exercises/README.md).
#
# Every stub in exercises/NN_*/ must compile and FAIL its tests (an exercise that passes
# before the learner touches it teaches nothing), every solution in exercises/solutions/
# must compile warning-free and PASS, keep exactly the stub's tests, and be rustfmt- and
# clippy-clean, and every mutant in exercises/mutants.toml (a planted wrong answer) must
# compile and FAIL, which proves the tests catch it. The checker is a dependency-free
# crate, so this takes seconds, not the
# minutes of building kvlab itself. Exits non-zero, with one line per problem, on failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec cargo run --quiet --manifest-path exercises/Cargo.toml -- verify "$@"
