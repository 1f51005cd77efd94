#!/usr/bin/env bash
# llama.cpp's token ids for Gemma 3 270M on English, code, Chinese, emoji, whitespace runs,
# special tokens, rare characters and a 2,000-token text: the fixture
# tests/fixtures/gemma-3-270m-llamacpp-ids.json that kvlab's rebuilt tokenizer must match
# (tests/reference_gemma3.rs). Uses node-llama-cpp's prebuilt llama.cpp (npm, no build),
# installed outside the repo:
#
#   bash scripts/fetch-gemma3.sh && bash scripts/gemma3-llamacpp-ids.sh [WORK_DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
WORK=${1:-$REPO/../llamacpp-node}
GGUF=$REPO/models/.cache/gemma3/gemma-3-270m-q4_k_m.gguf
mkdir -p "$WORK"
python3 - "$WORK/texts.json" <<'PY'
import json, sys
texts = [
    ("english", "The quick brown fox jumps over the lazy dog."),
    ("code", "fn main() {\n    let x: Vec<u32> = (0..10).collect();\n    println!(\"{x:?}\");\n}\n"),
    ("chinese", "大语言模型的第一个词元为什么慢？因为预填充要处理整个提示。"),
    ("emoji", "KV cache 🚀🔥 makes decoding fast 😀👍🏽"),
    ("whitespace", "a  b   c\t\td\n\n\ne    \n  end"),
    ("numbers", "In 2026, 3.14159 and 1,000,000 tokens cost $12.50."),
    ("special", "<start_of_turn>user\nHi<end_of_turn>\n"),
    ("leading_space", "  hello world"),
    ("rare", "Ünïcödé ñ ß Ω ∑ 𝔘 \u0000 end"),
]
with open("tests/fixtures/eval/gpl-3-head.txt", encoding="utf-8", newline="") as f:
    texts.append(("gpl3", f.read()))
json.dump(texts, open(sys.argv[1], "w"), ensure_ascii=True)
PY
cd "$WORK"
[[ -f package.json ]] || npm init -y > /dev/null
npm i -E node-llama-cpp@3.21.1 > /dev/null
cp "$REPO/scripts/llamacpp/gemma3-ids.mjs" .
node gemma3-ids.mjs "$GGUF" texts.json "$REPO/tests/fixtures/gemma-3-270m-llamacpp-ids.json"
echo "wrote tests/fixtures/gemma-3-270m-llamacpp-ids.json"
