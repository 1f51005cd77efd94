#!/usr/bin/env python3
"""The reference for Gemma 3 270M (issue 21): Hugging Face transformers' own Gemma 3
(Gemma3ForCausalLM, float32, eager attention, on the CPU) on the GGUF's weights, which
transformers dequantizes itself with gguf-py (its GGUF loader, independent of kvlab's
importer), and its own tokenizer converted from the GGUF's SentencePiece vocabulary.

    python scripts/gemma3-reference.py \
        [--gguf models/.cache/gemma3/gemma-3-270m-q4_k_m.gguf] \
        [--out tests/fixtures/gemma-3-270m.json]

Writes one JSON fixture, which tests/reference_gemma3.rs pins kvlab to:
- `cases`: prompts (token ids, BOS first, as transformers tokenizes them), the greedy
  continuation, and the top-5 logits of the first 4 greedy steps; one prompt is longer than
  the 512-token window of the local layers, so that the window matters;
- `window_matters`: the same long prompt's last-position top-5 when every layer attends to
  the whole prefix (transformers with `sliding_window` set past the prompt), so the test can
  show that a model without the window gives other logits;
- `tokenizer`: texts (English, code, Chinese, emoji, whitespace runs) and their ids;
- `perplexity`: of tests/fixtures/eval/gpl-3-head.txt (BOS first), transformers' own
  `labels=input_ids` loss and the same in float64 from the logits.

Needs torch, transformers (>= 5), gguf and sentencepiece in a venv outside the repo:
    python3 -m venv ../refenv && ../refenv/bin/pip install torch transformers gguf sentencepiece protobuf
"""
import argparse
import json
import math
import os

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

TOKENIZER_TEXTS = [
    ("english", "The quick brown fox jumps over the lazy dog."),
    ("code", "fn main() {\n    let x: Vec<u32> = (0..10).collect();\n    println!(\"{x:?}\");\n}\n"),
    ("chinese", "大语言模型的第一个词元为什么慢？因为预填充要处理整个提示。"),
    ("emoji", "KV cache 🚀🔥 makes decoding fast 😀👍🏽"),
    ("whitespace", "a  b   c\t\td\n\n\ne    \n  end"),
    ("numbers", "In 2026, 3.14159 and 1,000,000 tokens cost $12.50."),
]

PROMPTS = [
    ("fox", "The quick brown fox"),
    ("capital", "The capital of France is"),
    ("code", "def fibonacci(n):\n    "),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default="models/.cache/gemma3/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--out", default="tests/fixtures/gemma-3-270m.json")
    ap.add_argument("--text-file", default="tests/fixtures/eval/gpl-3-head.txt")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    args = ap.parse_args()

    torch.set_grad_enabled(False)
    folder, name = os.path.split(os.path.abspath(args.gguf))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    cfg = model.config

    with open(args.text_file, encoding="utf-8") as f:
        long_text = f.read()
    cases = []
    prompts = list(PROMPTS)
    # Longer than the 512-position window: the local layers must drop the oldest keys.
    prompts.append(("long", long_text[:3000]))
    for case_name, text in prompts:
        ids = tokenizer(text)["input_ids"]
        cases.append(greedy_case(model, case_name, text, ids, args.max_new_tokens))
    long_ids = cases[-1]["prompt_ids"]
    assert len(long_ids) > cfg.sliding_window, (len(long_ids), cfg.sliding_window)

    # The same long prompt with no window anywhere: what a model that ignores it computes.
    window = cfg.sliding_window
    for layer in model.model.layers:
        layer.self_attn.sliding_window = None
    model.config.sliding_window = 1 << 20
    no_window = model(input_ids=torch.tensor([long_ids])).logits[0, -1]
    model.config.sliding_window = window
    for layer, kind in zip(model.model.layers, cfg.layer_types):
        layer.self_attn.sliding_window = window if kind == "sliding_attention" else None
    check = model(input_ids=torch.tensor([long_ids])).logits[0, -1]
    first = cases[-1]["top5_logits_first_4_steps"][0]
    assert abs(check[first[0][0]].item() - first[0][1]) < 1e-4, "window not restored"

    ppl_ids = tokenizer(long_text)["input_ids"]
    fixture = {
        "about": "transformers Gemma3ForCausalLM, float32, eager attention, CPU, on the weights of "
        "gemma-3-270m-q4_k_m.gguf as transformers' GGUF loader dequantizes them (gguf-py); "
        "made by scripts/gemma3-reference.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gguf_sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "config": {
            "layer_types": list(cfg.layer_types),
            "sliding_window": cfg.sliding_window,
            "query_pre_attn_scalar": cfg.query_pre_attn_scalar,
            "hidden_activation": cfg.hidden_activation,
            "rope_parameters": getattr(cfg, "rope_parameters", None),
        },
        "max_new_tokens": args.max_new_tokens,
        "cases": cases,
        "window_matters": {
            "case": "long",
            "n_prompt_tokens": len(long_ids),
            "top5_without_window": top5(no_window),
        },
        "tokenizer": [
            {"name": n, "text": t, "ids": tokenizer(t, add_special_tokens=False)["input_ids"]}
            for n, t in TOKENIZER_TEXTS
        ],
        "perplexity": {"text_file": args.text_file, **perplexity(model, ppl_ids)},
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}: {len(cases)} cases, perplexity {fixture['perplexity']['perplexity']:.6f}")


def top5(logits):
    values, ids = torch.topk(logits, 5)
    return [[int(i), float(v)] for i, v in zip(ids, values)]


def greedy_case(model, name, text, ids, max_new):
    """Greedy decoding with the full sequence each step (no cache: the plainest reference)."""
    seq = list(ids)
    tops = []
    for step in range(max_new):
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
        if step < 4:
            tops.append(top5(logits))
        seq.append(int(torch.argmax(logits)))
    return {
        "name": name,
        "prompt_text": text,
        "prompt_ids": ids,
        "greedy_ids": seq[len(ids):],
        "top5_logits_first_4_steps": tops,
    }


def perplexity(model, ids):
    input_ids = torch.tensor([ids])
    out = model(input_ids=input_ids, labels=input_ids)
    logp = torch.log_softmax(out.logits[0].double(), dim=-1)
    nll = -sum(logp[i, ids[i + 1]].item() for i in range(len(ids) - 1)) / (len(ids) - 1)
    return {
        "n_tokens": len(ids),
        "perplexity": math.exp(out.loss.item()),
        "perplexity_f64": math.exp(nll),
        "ids": ids,
    }


if __name__ == "__main__":
    main()
