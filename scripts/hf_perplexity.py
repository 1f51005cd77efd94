#!/usr/bin/env python3
"""Perplexity of a text under SmolLM2 with Hugging Face transformers: the independent
figure `kvlab eval --kv full` must match (tests/eval.rs pins it, book: kv-quantization.md).

    python scripts/hf_perplexity.py [--model models/smollm2-135m-instruct] \
        [--text-file tests/fixtures/eval/apache-2.0-head.txt]

Loads the weights with LlamaForCausalLM in float32, eager attention, on the CPU; tokenizes
the text with the model's own tokenizer (no special tokens added, as `kvlab eval`); and
prints one JSON object: n_tokens, perplexity (exp of the mean next-token cross-entropy over
the n_tokens - 1 predictions: transformers' own `labels=input_ids` loss), and the first ids.
Needs torch and transformers (a venv outside the repo: see the header of tests/eval.rs).
"""
import argparse
import json
import math

import torch
from transformers import AutoTokenizer, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/smollm2-135m-instruct")
    ap.add_argument("--text-file", default="tests/fixtures/eval/apache-2.0-head.txt")
    ap.add_argument(
        "--ids-json",
        help="also score these token ids (a JSON list: kvlab's tokenization of the text), "
        "so the model's arithmetic is compared even where the two tokenizers differ",
    )
    args = ap.parse_args()

    torch.set_grad_enabled(False)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = LlamaForCausalLM.from_pretrained(
        args.model, torch_dtype=torch.float32, attn_implementation="eager"
    ).eval()
    with open(args.text_file, encoding="utf-8") as f:
        text = f.read()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    report = {
        "model": args.model,
        "text_file": args.text_file,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "hf_tokens": score(model, ids),
    }
    if args.ids_json:
        with open(args.ids_json, encoding="utf-8") as f:
            given = json.load(f)
        report["given_ids"] = score(model, given)
        report["given_ids"]["ids_file"] = args.ids_json
        report["same_tokenization"] = given == ids
    print(json.dumps(report, indent=2))


def score(model, ids):
    """Perplexity of `ids`: transformers' own loss, and the same in float64 from the logits."""
    input_ids = torch.tensor([ids])
    out = model(input_ids=input_ids, labels=input_ids)
    logits = out.logits[0, :-1].double()
    nll = torch.nn.functional.cross_entropy(logits, input_ids[0, 1:], reduction="mean")
    return {
        "n_tokens": len(ids),
        "perplexity": math.exp(nll.item()),
        "perplexity_hf_loss": math.exp(out.loss.item()),
    }


if __name__ == "__main__":
    main()
