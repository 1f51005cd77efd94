#!/usr/bin/env python3
"""Writes tests/fixtures/gguf_dequant_k.json: random Q5_0, Q4_K and Q6_K blocks and what
gguf-py (llama.cpp's Python package, `gguf.quants.dequantize`) makes of them, bit for bit.

    python3 -m venv /tmp/gguf-venv && /tmp/gguf-venv/bin/pip install gguf numpy
    /tmp/gguf-venv/bin/python scripts/gguf-dequant-fixture.py

`tests/gguf.rs` (`k_quants_match_gguf_py_bit_for_bit`) dequantizes the same bytes with
kvlab's importer and compares every value's bits. The blocks are random bytes except for
their f16 scales, which are drawn finite (normal, subnormal and zero), so that no NaN
payload decides a comparison. Seeded: the same file every run.
"""
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

BLOCKS = 12
# (type, bytes per block, byte offsets of its f16 fields)
FORMATS = [(T.Q5_0, 22, [0]), (T.Q4_K, 144, [0, 2]), (T.Q6_K, 210, [208])]


def finite_f16(rng, i):
    # Cycle through zero, a subnormal, and normal values of both signs.
    if i % 6 == 0:
        return np.float16(0.0)
    if i % 6 == 1:
        return np.float16(rng.uniform(-1, 1) * 2.0**-20)
    return np.float16(rng.uniform(-1, 1) * 2.0 ** rng.integers(-12, 2))


def main():
    rng = np.random.default_rng(2026)
    out = {}
    for ty, size, f16_at in FORMATS:
        raw = bytearray(rng.integers(0, 256, size=BLOCKS * size, dtype=np.uint8).tobytes())
        for b in range(BLOCKS):
            for k, at in enumerate(f16_at):
                raw[b * size + at : b * size + at + 2] = finite_f16(rng, b + k).tobytes()
        values = dequantize(np.frombuffer(bytes(raw), dtype=np.uint8), ty).astype(np.float32)
        out[ty.name] = {
            "blocks": BLOCKS,
            "bytes_hex": bytes(raw).hex(),
            "value_bits": [int(v) for v in values.reshape(-1).view(np.uint32)],
        }
    path = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/gguf_dequant_k.json"
    path.write_text(json.dumps(out, indent=0) + "\n")
    print(f"wrote {path}: " + ", ".join(f"{k} {len(v['value_bits'])} values" for k, v in out.items()))


if __name__ == "__main__":
    main()
