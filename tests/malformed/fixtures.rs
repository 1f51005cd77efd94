//! Tiny, valid model files that the malformed-input tests and the loader fuzzer then
//! break: a random Llama in a Hugging Face folder (config.json, model.safetensors,
//! a word-level tokenizer.json, tokenizer_config.json with a chat template) and a
//! tiny llama GGUF. Everything is generated here, in a few milliseconds.
#![allow(dead_code)]

use kvlab::loader::save_model;
use kvlab::{Config, Model};
use safetensors::Dtype;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A small Llama shape: 1 layer, 4 query heads sharing 2 KV heads of 8, vocab 64.
pub fn tiny_config() -> Config {
    Config {
        hidden_size: 32,
        intermediate_size: 96,
        num_hidden_layers: 1,
        num_attention_heads: 4,
        num_key_value_heads: Some(2),
        head_dim: None,
        vocab_size: 64,
        max_position_embeddings: 256,
        tie_word_embeddings: true,
        ..Config::smollm2_135m()
    }
}

pub const WORDS: [&str; 9] = [
    "<unk>",
    "<s>",
    "</s>",
    "hi",
    "there",
    "<|im_start|>",
    "<|im_end|>",
    "user",
    "assistant",
];

/// A word-level `tokenizer.json` (whitespace split, unknown words → `<unk>`).
pub fn tokenizer_json() -> Value {
    let vocab: serde_json::Map<String, Value> = WORDS
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), json!(i)))
        .collect();
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": { "type": "Whitespace" },
        "post_processor": null,
        "decoder": null,
        "model": { "type": "WordLevel", "vocab": vocab, "unk_token": "<unk>" }
    })
}

pub const CHAT_TEMPLATE: &str =
    "{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> {% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}";

pub fn tokenizer_config_json() -> Value {
    json!({
        "bos_token": "<s>",
        "eos_token": "</s>",
        "add_bos_token": false,
        "chat_template": CHAT_TEMPLATE,
    })
}

/// Writes a complete, loadable tiny model into `dir`.
pub fn tiny_model_dir(dir: &Path) {
    let model = Model::random(tiny_config(), 7).unwrap();
    save_model(&model, dir).unwrap();
    write_json(&dir.join("tokenizer.json"), &tokenizer_json());
    write_json(&dir.join("tokenizer_config.json"), &tokenizer_config_json());
}

pub fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
}

pub fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Applies `edit` to the JSON file at `path`.
pub fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut value = read_json(path);
    edit(&mut value);
    write_json(path, &value);
}

/// One tensor of a safetensors file: name, dtype, shape, bytes.
pub type RawTensor = (String, Dtype, Vec<usize>, Vec<u8>);

/// The tensors of the safetensors file at `path`.
pub fn read_tensors(path: &Path) -> Vec<RawTensor> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<RawTensor> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            (
                name,
                view.dtype(),
                view.shape().to_vec(),
                view.data().to_vec(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A safetensors image of `tensors`.
pub fn safetensors_bytes(tensors: &[RawTensor]) -> Vec<u8> {
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            (
                name.clone(),
                safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes).unwrap(),
            )
        })
        .collect();
    safetensors::serialize(views, None).unwrap()
}

/// Rewrites `dir/model.safetensors` after `edit` changes its tensor list.
pub fn edit_weights(dir: &Path, edit: impl FnOnce(&mut Vec<RawTensor>)) {
    let path = dir.join("model.safetensors");
    let mut tensors = read_tensors(&path);
    edit(&mut tensors);
    std::fs::write(&path, safetensors_bytes(&tensors)).unwrap();
}

/// Sets element `index` of tensor `name` (f32) to `value`.
pub fn poke_f32(tensors: &mut [RawTensor], name: &str, index: usize, value: f32) {
    let t = tensors.iter_mut().find(|t| t.0 == name).unwrap();
    t.3[index * 4..index * 4 + 4].copy_from_slice(&value.to_le_bytes());
}

pub fn symlink(target: &str, link: &Path) -> PathBuf {
    let _ = std::fs::remove_file(link);
    std::os::unix::fs::symlink(target, link).unwrap();
    link.to_path_buf()
}

// ---------------------------------------------------------------- GGUF

pub fn gguf_string(s: &str) -> Vec<u8> {
    let mut out = (s.len() as u64).to_le_bytes().to_vec();
    out.extend(s.as_bytes());
    out
}

/// A GGUF file under construction: metadata in order, F32 tensors.
pub struct Gguf {
    pub kv: Vec<(String, u32, Vec<u8>)>,
    /// name, ggml dims (innermost first), ggml type, bytes
    pub tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
    /// When set, the data offsets written instead of the computed ones.
    pub offsets: Option<Vec<u64>>,
}

pub const GGUF_TOKENS: [&str; 11] = [
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

impl Gguf {
    pub fn raw(&mut self, key: &str, ty: u32, value: Vec<u8>) -> &mut Self {
        self.kv.retain(|(k, _, _)| k != key);
        self.kv.push((key.to_string(), ty, value));
        self
    }
    pub fn str(&mut self, key: &str, v: &str) -> &mut Self {
        self.raw(key, 8, gguf_string(v))
    }
    pub fn u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.raw(key, 4, v.to_le_bytes().to_vec())
    }
    pub fn u64(&mut self, key: &str, v: u64) -> &mut Self {
        self.raw(key, 10, v.to_le_bytes().to_vec())
    }
    pub fn f32(&mut self, key: &str, v: f32) -> &mut Self {
        self.raw(key, 6, v.to_le_bytes().to_vec())
    }
    pub fn strs(&mut self, key: &str, items: &[&str]) -> &mut Self {
        let mut v = 8u32.to_le_bytes().to_vec();
        v.extend((items.len() as u64).to_le_bytes());
        for item in items {
            v.extend(gguf_string(item));
        }
        self.raw(key, 9, v)
    }
    pub fn i32s(&mut self, key: &str, items: &[i32]) -> &mut Self {
        let mut v = 5u32.to_le_bytes().to_vec();
        v.extend((items.len() as u64).to_le_bytes());
        for item in items {
            v.extend(item.to_le_bytes());
        }
        self.raw(key, 9, v)
    }

    /// Adds an F32 tensor of Hugging Face shape `hf_shape` with deterministic values.
    pub fn tensor(&mut self, name: &str, hf_shape: &[usize]) -> &mut Self {
        let n: usize = hf_shape.iter().product();
        let bytes = (0..n)
            .flat_map(|i| (((i * 37 % 17) as f32 - 8.0) / 16.0).to_le_bytes())
            .collect();
        let dims = hf_shape.iter().rev().map(|&d| d as u64).collect();
        self.tensors.push((name.to_string(), dims, 0, bytes));
        self
    }

    /// Sets element `index` of tensor `name` to `value`.
    pub fn poke(&mut self, name: &str, index: usize, value: f32) -> &mut Self {
        let t = self.tensors.iter_mut().find(|t| t.0 == name).unwrap();
        t.3[index * 4..index * 4 + 4].copy_from_slice(&value.to_le_bytes());
        self
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        const ALIGN: usize = 32;
        let align = |n: usize| n.div_ceil(ALIGN) * ALIGN;
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.kv.len() as u64).to_le_bytes());
        for (key, ty, value) in &self.kv {
            out.extend(gguf_string(key));
            out.extend(ty.to_le_bytes());
            out.extend(value);
        }
        let mut offset = 0usize;
        let mut offsets = Vec::new();
        for (i, (name, dims, ty, bytes)) in self.tensors.iter().enumerate() {
            out.extend(gguf_string(name));
            out.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(ty.to_le_bytes());
            let at = match &self.offsets {
                Some(o) => o[i],
                None => offset as u64,
            };
            out.extend(at.to_le_bytes());
            offsets.push(offset);
            offset = align(offset + bytes.len());
        }
        out.resize(align(out.len()), 0);
        let data_start = out.len();
        for ((_, _, _, bytes), at) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + at, 0);
            out.extend(bytes);
        }
        out
    }
}

/// A valid tiny llama GGUF: 1 layer, hidden 32, 4 heads (2 KV) of 8, FFN 64, 11 tokens.
pub fn tiny_gguf() -> Gguf {
    let mut g = Gguf {
        kv: Vec::new(),
        tensors: Vec::new(),
        offsets: None,
    };
    g.str("general.architecture", "llama")
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
        .strs("tokenizer.ggml.tokens", &GGUF_TOKENS)
        .i32s(
            "tokenizer.ggml.token_type",
            &[3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1],
        )
        .strs("tokenizer.ggml.merges", &["a b", "Ġ a"])
        .u32("tokenizer.ggml.bos_token_id", 1)
        .u32("tokenizer.ggml.eos_token_id", 2)
        .str(
            "tokenizer.chat_template",
            "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}",
        );
    g.tensor("token_embd.weight", &[11, 32])
        .tensor("output_norm.weight", &[32])
        .tensor("blk.0.attn_norm.weight", &[32])
        .tensor("blk.0.ffn_norm.weight", &[32])
        .tensor("blk.0.attn_q.weight", &[32, 32])
        .tensor("blk.0.attn_k.weight", &[16, 32])
        .tensor("blk.0.attn_v.weight", &[16, 32])
        .tensor("blk.0.attn_output.weight", &[32, 32])
        .tensor("blk.0.ffn_gate.weight", &[64, 32])
        .tensor("blk.0.ffn_up.weight", &[64, 32])
        .tensor("blk.0.ffn_down.weight", &[32, 64]);
    g
}
