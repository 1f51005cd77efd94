#!/usr/bin/env bash
# CI check of the learner's flow through the exercise checker, in a throwaway clone of this
# checkout's last commit (so nothing here is touched): the learner's first command copies
# every stub to exercises/mine/ and git sees no change; a learner's edit to a copy is theirs alone (the
# stub stays as committed); `reset N` puts the stub back and keeps their version; `list`
# reports progress on the copies.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q . "$tmp/k"
cd "$tmp/k"
n=$(ls -d exercises/[0-9][0-9]_*/ | wc -l)  # every exercise folder: the count the checker must report
checker() { cargo run -q --manifest-path exercises/Cargo.toml -- "$@"; }
fail() { echo "learner flow: $*" >&2; exit 1; }

# A learner's first command (here `run 3`, the unsolved stub: it fails) makes the copies.
if checker run 3 > "$tmp/first.log" 2>&1; then fail "the stub of 03 passes"; fi
grep -q "Made your copies of $n exercise(s) in exercises/mine/" "$tmp/first.log" || fail "no copies made: $(head -3 "$tmp/first.log")"
[ -z "$(git status --porcelain)" ] || fail "git status is not clean after the copies: $(git status --porcelain | head -3)"
cmp -s exercises/03_rope/rope.rs exercises/mine/03_rope/rope.rs || fail "the copy of 03 is not the stub"

# The learner solves 03 in their copy: list shows it done, and git still sees nothing.
cp exercises/solutions/03_rope/rope.rs exercises/mine/03_rope/rope.rs
checker list > "$tmp/list.log"
grep -Eq "^  03  rope +\[x\] done +exercises/mine/03_rope/rope.rs " "$tmp/list.log" || fail "list does not show 03 done: $(grep ' 03 ' "$tmp/list.log")"
grep -Eq "^  24  window_ring +\[ \] tests fail +exercises/mine/24_window_ring/window_ring.rs +Eviction and sliding windows$" "$tmp/list.log" || fail "list does not give 24 its chapter: $(grep ' 24 ' "$tmp/list.log")"
grep -q "Progress: 1/$n exercises pass." "$tmp/list.log" || fail "list's progress is not 1/$n"
[ -z "$(git status --porcelain)" ] || fail "git status is not clean after editing a copy"

# reset: the stub again, the learner's version kept.
checker reset 3 > "$tmp/reset.log"
cmp -s exercises/03_rope/rope.rs exercises/mine/03_rope/rope.rs || fail "reset 3 did not put the stub back"
cmp -s exercises/solutions/03_rope/rope.rs exercises/target/reset/03_rope/rope.rs || fail "reset 3 did not keep the learner's version"
echo "learner flow: check copies $n stubs to exercises/mine/ with git status clean; a solved copy passes and shows in list; reset puts the stub back and keeps yours"
