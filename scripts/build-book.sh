#!/usr/bin/env bash
# Builds the book (book/ -> book/book) and fails on anything mdBook only warns about.
#
#   bash scripts/build-book.sh
#
# mdBook prints a warning and carries on when an `{{#include file:anchor}}` points at a
# missing file or anchor, which would let the book drift from src/ silently. This script:
#   1. finds mdbook (PATH, /tmp/mdbook-root/bin, ~/.cargo/bin) or installs 0.5.4;
#   2. runs `mdbook build book` and fails if its output mentions a failure;
#   3. checks every {{#include path:anchor}} itself: the file exists and holds both
#      `ANCHOR: anchor` and `ANCHOR_END: anchor`;
#   4. checks every relative link and image in book/src/*.md points at an existing file
#      (SUMMARY.md included; drafts have no target), and every #fragment pointing into a
#      page at one of its headings;
#   5. copies the live view's page (web/) to book/book/live/, for the replays the chapters
#      embed (`<iframe src="live/index.html?replay=../replays/NAME.json&embed=1">`), and
#      checks that every embedded replay's recording is in book/src/replays/ (written by
#      scripts/figures.sh with `kvlab record`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MDBOOK_VERSION=0.5.4

find_mdbook() {
    local candidate
    for candidate in "$(command -v mdbook 2>/dev/null || true)" /tmp/mdbook-root/bin/mdbook "$HOME/.cargo/bin/mdbook"; do
        if [[ -n $candidate && -x $candidate ]]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if ! MDBOOK=$(find_mdbook); then
    echo "mdbook not found: installing $MDBOOK_VERSION with cargo (a few minutes)..."
    cargo install mdbook --locked --version "$MDBOOK_VERSION" --no-default-features --features search
    MDBOOK=$(find_mdbook) || { echo "error: mdbook still not found after cargo install" >&2; exit 1; }
fi
echo "using $MDBOOK ($("$MDBOOK" --version))"

status=0
fail() {
    echo "error: $*" >&2
    status=1
}

# 1. Build, keeping the log: mdBook reports a broken include as a warning.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! "$MDBOOK" build book >"$log" 2>&1; then
    cat "$log"
    fail "mdbook build failed"
    exit 1
fi
cat "$log"
if grep -Eiq 'failed to|not found|error|could not|unable to' "$log"; then
    fail "mdbook reported a problem (see above)"
fi

# The live view's page beside the book, as `kvlab serve` serves it: the page asks for
# ui/kvview.js and ui/kvview.css relative to itself. The recordings it replays are in
# book/src/replays/, which mdBook copies to book/book/replays/ like any other file.
mkdir -p book/book/live/ui
cp web/index.html book/book/live/index.html
cp web/kvview.js web/kvview.css book/book/live/ui/

# 2 and 3. Includes and links, checked independently of mdBook.
python3 - <<'EOF' || status=1
import os
import re
import sys

SRC = "book/src"
problems = []

include_re = re.compile(r"\{\{#(include|rustdoc_include)\s+([^}\s]+)\s*\}\}")
# An embedded replay: the live view's page (copied to book/book/live/) and a recording.
replay_re = re.compile(r'<iframe[^>]*\ssrc="live/index\.html\?replay=\.\./replays/([\w.-]+)[&"]')
link_re = re.compile(r"!?\[[^\]]*\]\(([^)\s]*)\)")

def anchors_in(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    starts = set(re.findall(r"ANCHOR:\s*([\w-]+)", text))
    ends = set(re.findall(r"ANCHOR_END:\s*([\w-]+)", text))
    return starts, ends

def heading_ids(path):
    """The ids mdBook gives a page's headings (its normalize_id: keep alphanumerics,
    '_' and '-', lowercased; whitespace becomes '-'; repeats get -1, -2 ...), and the
    page's explicit `<a id>` anchors."""
    ids, seen, in_fence = set(), {}, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
                continue
            if not in_fence:  # explicit anchors: <a id="term"></a> (the glossary's)
                ids.update(re.findall(r'<a id="([^"]+)"></a>', line))
            m = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
            hid = "".join(
                ch.lower() if (ch.isalnum() or ch in "_-") else "-" if ch.isspace() else ""
                for ch in text
            )
            n = seen.get(hid, 0)
            seen[hid] = n + 1
            ids.add(hid if n == 0 else f"{hid}-{n}")
    return ids

md_files = []
for root, _, files in os.walk(SRC):
    for name in files:
        if name.endswith(".md"):
            md_files.append(os.path.join(root, name))

n_includes = n_links = 0
for md in sorted(md_files):
    with open(md, encoding="utf-8") as f:
        text = f.read()
    base = os.path.dirname(md)
    # Code spans and fences may show include syntax as an example; skip fenced blocks
    # only when they are not rust code including something (those are real includes).
    for m in include_re.finditer(text):
        n_includes += 1
        spec = m.group(2)
        parts = spec.split(":")
        path = os.path.normpath(os.path.join(base, parts[0]))
        where = f"{md}: {{{{#{m.group(1)} {spec}}}}}"
        if not os.path.isfile(path):
            problems.append(f"{where}: file {path} does not exist")
            continue
        if len(parts) == 2 and not parts[1].isdigit():
            anchor = parts[1]
            starts, ends = anchors_in(path)
            if anchor not in starts:
                problems.append(f"{where}: no 'ANCHOR: {anchor}' in {path}")
            if anchor not in ends:
                problems.append(f"{where}: no 'ANCHOR_END: {anchor}' in {path}")
    for m in replay_re.finditer(text):
        n_links += 1
        recording = os.path.join(SRC, "replays", m.group(1))
        if not os.path.isfile(recording):
            problems.append(f"{md}: embeds the replay {recording}, which does not exist "
                            f"(scripts/figures.sh records it: kvlab record SCENARIO --out {recording})")
    # Relative links and images (http(s), mailto and pure #fragments are not checked).
    in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for target in link_re.findall(line):
            if not target or re.match(r"^[a-z]+:", target):
                continue
            n_links += 1
            file_part, _, fragment = target.partition("#")
            path = os.path.normpath(os.path.join(base, file_part)) if file_part else md
            if not os.path.exists(path):
                problems.append(f"{md}: broken link '{target}' ({path} does not exist)")
            elif fragment and path.endswith(".md") and fragment not in heading_ids(path):
                problems.append(f"{md}: broken link '{target}' (no heading #{fragment} in {path})")

for p in problems:
    print(f"error: {p}", file=sys.stderr)
print(f"checked {n_includes} includes and {n_links} relative links in {len(md_files)} pages: "
      f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
EOF

if [[ $status -ne 0 ]]; then
    echo "book build FAILED" >&2
    exit 1
fi
echo "book built: book/book/index.html"
