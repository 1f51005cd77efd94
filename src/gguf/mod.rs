//! `kvlab import-gguf`: from one llama.cpp GGUF file to a Hugging Face model folder.
//!
//! What this module teaches: a GGUF file and a Hugging Face folder hold the same
//! model, arranged differently. The importer
//!
//! - reads the file ([`reader`]): header, metadata, tensor directory;
//! - dequantizes every tensor to f32 exactly as llama.cpp's Python package does
//!   ([`dequant`]);
//! - renames the tensors, reverses their dimension lists and undoes llama.cpp's
//!   query/key row permutation ([`layout`]);
//! - rebuilds `config.json` from the `llama.*` metadata and `tokenizer.json` from the
//!   `tokenizer.ggml.*` metadata ([`tokenizer`]);
//!
//! and writes `model.safetensors`, `tokenizer.json`, `tokenizer_config.json` and, last,
//! `config.json` into the output folder, which kvlab's loader then reads like any
//! Hugging Face checkpoint.
//!
//! Dequantizing does not give back the original bf16 weights: it gives the quantized
//! model's weights, widened. Computing with them in f32 reproduces what llama.cpp's
//! own `gguf.dequantize` + PyTorch would compute, not what llama.cpp's quantized
//! kernels compute (those also quantize the activations).

pub mod dequant;
pub mod dequant_k;
pub mod layout;
pub mod reader;
pub mod spm;
pub mod tokenizer;
pub mod types;

pub use reader::{GgmlType, GgufFile, TensorInfo, Value};

use crate::config::{Config, EosIds};
use crate::error::{Error, Result};
use layout::{Arch, Permuted};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The element type of the tensors written to `model.safetensors`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutDtype {
    /// Bit-exact dequantized values (Q4_1, Q8_0, f16 and bf16 all widen exactly).
    #[default]
    F32,
    /// Half the size; rounds every value to 8 significant bits (round to nearest even).
    Bf16,
}

impl OutDtype {
    /// The name `config.json` uses for it (`torch_dtype`).
    pub fn torch_name(self) -> &'static str {
        match self {
            OutDtype::F32 => "float32",
            OutDtype::Bf16 => "bfloat16",
        }
    }
}

/// What `import_gguf` did.
#[derive(Debug, Clone)]
pub struct ImportReport {
    /// Tensors written to `model.safetensors`.
    pub n_tensors: usize,
    /// The model's shape, as written to `config.json`.
    pub config: Config,
    pub out_dir: PathBuf,
    /// Total size of the files written.
    pub bytes_written: u64,
    /// The files written, in the order they were written (`config.json` last).
    pub files: Vec<PathBuf>,
    pub dtype: OutDtype,
    /// `general.architecture`, e.g. "llama".
    pub architecture: String,
    /// `general.name`, if the file has one.
    pub model_name: Option<String>,
    /// How many GGUF tensors had each element type, e.g. {"F32": 61, "Q4_1": 210, "Q8_0": 1}.
    pub gguf_tensor_types: BTreeMap<String, usize>,
    /// `tokenizer.ggml.pre`, the pre-tokenizer's name, e.g. "smollm".
    pub tokenizer_pre: String,
    /// GGUF tensors that have no Hugging Face counterpart and were not written.
    pub skipped_tensors: Vec<String>,
}

impl std::fmt::Display for ImportReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "imported {} ({}) into {}",
            self.model_name.as_deref().unwrap_or("model"),
            self.architecture,
            self.out_dir.display()
        )?;
        let types: Vec<String> = self
            .gguf_tensor_types
            .iter()
            .map(|(ty, n)| format!("{n} {ty}"))
            .collect();
        writeln!(
            f,
            "  {} tensors (GGUF: {}) written as {}",
            self.n_tensors,
            types.join(", "),
            self.dtype.torch_name()
        )?;
        writeln!(
            f,
            "  {} layers, hidden {}, {} heads ({} KV), head_dim {}, FFN {}, vocab {}, context {}, tied embeddings: {}",
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            c.n_kv_heads(),
            c.head_dim(),
            c.intermediate_size,
            c.vocab_size,
            c.max_position_embeddings,
            c.tie_word_embeddings
        )?;
        if c.is_gemma3() {
            writeln!(
                f,
                "  tokenizer: SentencePiece BPE (byte fallback); layers: {} local (window {}), {} global",
                c.local_layers(),
                c.gemma.sliding_window.unwrap_or(0),
                c.num_hidden_layers - c.local_layers(),
            )?;
        } else {
            writeln!(
                f,
                "  tokenizer: byte-level BPE, pre-tokenizer `{}`",
                self.tokenizer_pre
            )?;
        }
        if !self.skipped_tensors.is_empty() {
            writeln!(
                f,
                "  skipped (not used by kvlab): {}",
                self.skipped_tensors.join(", ")
            )?;
        }
        write!(f, "  {:.1} MB written", self.bytes_written as f64 / 1e6)
    }
}

/// Converts the GGUF file at `gguf_path` into a Hugging Face model folder at `out_dir`
/// (created if needed; existing files of the same names are replaced).
///
/// Every problem with the file (not a GGUF file, truncated, an unsupported
/// architecture, quantization type or pre-tokenizer, inconsistent shapes) is an
/// [`Error::Gguf`] naming the file and the problem; nothing panics.
pub fn import_gguf(gguf_path: &Path, out_dir: &Path, dtype: OutDtype) -> Result<ImportReport> {
    let gguf = GgufFile::open(gguf_path)?;
    let meta = Metadata::new(&gguf)?;
    let tok = tokenizer::GgufTokenizer::from_gguf(&gguf)?;
    let config = build_config(&gguf, &meta, &tok)?;

    // Convert every tensor (in memory: f32 SmolLM2-135M is ~540 MB).
    let mut gguf_tensor_types = BTreeMap::new();
    let mut skipped_tensors = Vec::new();
    let mut converted = Vec::new();
    for info in &gguf.tensors {
        *gguf_tensor_types.entry(info.ty.name()).or_insert(0) += 1;
        let Some(hf_name) = layout::hf_name_for(meta.kind, &info.name) else {
            skipped_tensors.push(info.name.clone());
            continue;
        };
        let values = convert_tensor(&gguf, info, &config, meta.kind)?;
        let bytes = match dtype {
            OutDtype::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            OutDtype::Bf16 => values
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect(),
        };
        converted.push((hf_name, info.hf_shape(), bytes));
    }
    check_tensors(&gguf, &config, &converted, meta.kind)?;

    std::fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, e))?;
    let mut files = Vec::new();
    // config.json is written last and marks a complete import. Remove an old one
    // first, so that a run interrupted half-way never looks complete.
    let config_path = out_dir.join("config.json");
    match std::fs::remove_file(&config_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io(&config_path, e))
        }
        _ => {}
    }

    // tokenizer.json, checked by loading it back with the `tokenizers` library.
    let tokenizer_path = out_dir.join("tokenizer.json");
    let tokenizer_text = tok.to_tokenizer_json().map_err(|msg| gguf.error(msg))?;
    write_file(&tokenizer_path, tokenizer_text.as_bytes())?;
    tokenizers::Tokenizer::from_file(&tokenizer_path).map_err(|e| {
        Error::Tokenizer(format!(
            "{}: the rebuilt tokenizer does not load: {e}",
            tokenizer_path.display()
        ))
    })?;
    files.push(tokenizer_path);

    let tokenizer_config_path = out_dir.join("tokenizer_config.json");
    let tokenizer_config = tok.to_tokenizer_config_json(config.max_position_embeddings);
    write_json(&tokenizer_config_path, &tokenizer_config)?;
    files.push(tokenizer_config_path);

    // model.safetensors
    let st_dtype = match dtype {
        OutDtype::F32 => safetensors::Dtype::F32,
        OutDtype::Bf16 => safetensors::Dtype::BF16,
    };
    let weights_path = out_dir.join("model.safetensors");
    let views = converted
        .iter()
        .map(|(name, shape, bytes)| {
            safetensors::tensor::TensorView::new(st_dtype, shape.clone(), bytes)
                .map(|view| (name.clone(), view))
                .map_err(|e| Error::Safetensors {
                    path: weights_path.clone(),
                    msg: format!("tensor `{name}`: {e}"),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let st_metadata = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::tensor::serialize_to_file(views, Some(st_metadata), &weights_path).map_err(
        |e| Error::Safetensors {
            path: weights_path.clone(),
            msg: e.to_string(),
        },
    )?;
    // serialize_to_file writes a temporary file and renames it, so the result has the
    // temporary file's owner-only permissions; give it those of our other files.
    let permissions = std::fs::metadata(&files[0])
        .map_err(|e| Error::io(&files[0], e))?
        .permissions();
    std::fs::set_permissions(&weights_path, permissions)
        .map_err(|e| Error::io(&weights_path, e))?;
    files.push(weights_path);

    // config.json last: its presence marks a complete import (scripts/fetch-smollm2.sh
    // skips the import when it exists), so an interrupted run is redone.
    let mut config_json = serde_json::to_value(&config).map_err(|e| Error::Config {
        path: config_path.clone(),
        msg: e.to_string(),
    })?;
    if let Some(object) = config_json.as_object_mut() {
        // Fields kvlab does not read, but Hugging Face transformers does.
        match meta.kind {
            Arch::Llama => {
                object.insert(
                    "architectures".into(),
                    serde_json::json!(["LlamaForCausalLM"]),
                );
            }
            Arch::Gemma3 => {
                object.insert(
                    "architectures".into(),
                    serde_json::json!(["Gemma3ForCausalLM"]),
                );
            }
        }
        object.insert("torch_dtype".into(), dtype.torch_name().into());
    }
    write_json(&config_path, &config_json)?;
    files.push(config_path);

    let mut bytes_written = 0;
    for file in &files {
        bytes_written += std::fs::metadata(file)
            .map_err(|e| Error::io(file, e))?
            .len();
    }
    Ok(ImportReport {
        n_tensors: converted.len(),
        config,
        out_dir: out_dir.to_path_buf(),
        bytes_written,
        files,
        dtype,
        architecture: meta.arch.clone(),
        model_name: gguf
            .get("general.name")
            .and_then(Value::as_str)
            .map(str::to_string),
        gguf_tensor_types,
        tokenizer_pre: tok.pre.clone(),
        skipped_tensors,
    })
}

/// Dequantizes one tensor and, for W_q and W_k (and their biases), restores
/// Hugging Face's row order; a Gemma norm goes back from llama.cpp's `1 + w` to `w`.
fn convert_tensor(
    gguf: &GgufFile,
    info: &TensorInfo,
    config: &Config,
    arch: Arch,
) -> Result<Vec<f32>> {
    let mut values =
        dequant::dequantize(info.ty, gguf.tensor_bytes(info), info.n_elements as usize)
            .map_err(|msg| gguf.error(format!("tensor `{}`: {msg}", info.name)))?;
    crate::loader::check_finite(&info.name, &gguf.path, &values)?;
    // llama.cpp's `Gemma3Model.modify_tensors` adds 1 to every `*norm.weight` (its
    // RMSNorm multiplies by the weight; Gemma's by 1 + w); transformers' GGUF loader
    // subtracts it again (`Gemma2TensorProcessor`), in f32, and so does this.
    if arch == Arch::Gemma3 && info.name.ends_with("norm.weight") {
        values
            .iter_mut()
            .for_each(|v| *v -= crate::loader::GEMMA_NORM_OFFSET);
    }
    let n_head = match layout::permutation_for(arch, &info.name) {
        Permuted::No => return Ok(values),
        Permuted::Query => config.num_attention_heads,
        Permuted::Key => config.n_kv_heads(),
    };
    // A row is the innermost dimension (ne[0]); a 1-D bias has rows of one value.
    let row_len = if info.dims.len() == 1 {
        1
    } else {
        info.dims[0] as usize
    };
    layout::unpermute_rows(&values, row_len, n_head).map_err(|msg| {
        gguf.error(format!(
            "tensor `{}` (dims {:?}): cannot undo the RoPE row permutation: {msg}",
            info.name, info.dims
        ))
    })
}

/// Checks that every tensor kvlab's Llama needs is present with the shape
/// `config.json` implies, so a bad file fails here and not at load time.
fn check_tensors(
    gguf: &GgufFile,
    config: &Config,
    converted: &[(String, Vec<usize>, Vec<u8>)],
    arch: Arch,
) -> Result<()> {
    let (hidden, ffn, vocab) = (
        config.hidden_size,
        config.intermediate_size,
        config.vocab_size,
    );
    let q_dim = config.num_attention_heads * config.head_dim();
    let kv_dim = config.n_kv_heads() * config.head_dim();
    let mut expected = vec![
        ("model.embed_tokens.weight".to_string(), vec![vocab, hidden]),
        ("model.norm.weight".to_string(), vec![hidden]),
    ];
    if !config.tie_word_embeddings {
        expected.push(("lm_head.weight".to_string(), vec![vocab, hidden]));
    }
    for l in 0..config.num_hidden_layers {
        let p = format!("model.layers.{l}");
        expected.extend([
            (format!("{p}.input_layernorm.weight"), vec![hidden]),
            (format!("{p}.self_attn.q_proj.weight"), vec![q_dim, hidden]),
            (format!("{p}.self_attn.k_proj.weight"), vec![kv_dim, hidden]),
            (format!("{p}.self_attn.v_proj.weight"), vec![kv_dim, hidden]),
            (format!("{p}.self_attn.o_proj.weight"), vec![hidden, q_dim]),
            (format!("{p}.post_attention_layernorm.weight"), vec![hidden]),
            (format!("{p}.mlp.gate_proj.weight"), vec![ffn, hidden]),
            (format!("{p}.mlp.up_proj.weight"), vec![ffn, hidden]),
            (format!("{p}.mlp.down_proj.weight"), vec![hidden, ffn]),
        ]);
        if arch == Arch::Gemma3 {
            let head_dim = config.head_dim();
            expected.extend([
                (
                    format!("{p}.pre_feedforward_layernorm.weight"),
                    vec![hidden],
                ),
                (
                    format!("{p}.post_feedforward_layernorm.weight"),
                    vec![hidden],
                ),
                (format!("{p}.self_attn.q_norm.weight"), vec![head_dim]),
                (format!("{p}.self_attn.k_norm.weight"), vec![head_dim]),
            ]);
        }
    }
    for (name, shape) in expected {
        match converted.iter().find(|(n, _, _)| *n == name) {
            None => {
                return Err(gguf.error(format!(
                    "it has no tensor for `{name}`, which a {}-layer {} needs",
                    config.num_hidden_layers,
                    match arch {
                        Arch::Llama => "Llama",
                        Arch::Gemma3 => "Gemma 3",
                    }
                )))
            }
            Some((_, got, _)) if *got != shape => {
                return Err(gguf.error(format!(
                    "tensor `{name}` has shape {got:?}, but the metadata implies {shape:?}"
                )))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Typed access to the `{arch}.*` hyper-parameter keys.
struct Metadata<'a> {
    gguf: &'a GgufFile,
    arch: String,
    kind: Arch,
}

impl<'a> Metadata<'a> {
    fn new(gguf: &'a GgufFile) -> Result<Metadata<'a>> {
        let arch = gguf
            .get("general.architecture")
            .and_then(Value::as_str)
            .ok_or_else(|| gguf.error("metadata has no string `general.architecture`"))?;
        // Other architectures name and lay out tensors differently (Qwen2 has biases
        // and no Q/K permutation, Gemma 2 caps its logits...): refuse rather than guess.
        let kind = match arch {
            "llama" => Arch::Llama,
            "gemma3" => Arch::Gemma3,
            _ => {
                return Err(gguf.error(format!(
                "general.architecture is `{arch}`; kvlab imports `llama` and `gemma3` models only"
            )))
            }
        };
        Ok(Metadata {
            gguf,
            arch: arch.to_string(),
            kind,
        })
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.gguf.get(&format!("{}.{key}", self.arch))
    }

    /// A required non-negative integer `{arch}.{key}`.
    fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?.ok_or_else(|| {
            self.gguf
                .error(format!("metadata has no `{}.{key}`", self.arch))
        })
    }

    fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    self.gguf.error(format!(
                        "`{}.{key}` is {v:?}, not a non-negative integer",
                        self.arch
                    ))
                }),
        }
    }

    /// An optional number. f32 values are widened through their shortest decimal
    /// form, so the f32 epsilon 1e-5 is written to config.json as 1e-5 and not as
    /// 9.999999747378752e-6 (both are the same f32).
    fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::F32(v)) => Ok(v.to_string().parse().ok()),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                self.gguf
                    .error(format!("`{}.{key}` is {v:?}, not a number", self.arch))
            }),
        }
    }
}

/// The Hugging Face config, from `llama.*` metadata, the tokenizer and the tensor list.
fn build_config(
    gguf: &GgufFile,
    meta: &Metadata,
    tok: &tokenizer::GgufTokenizer,
) -> Result<Config> {
    let hidden_size = meta.usize("embedding_length")?;
    let n_heads = meta.usize("attention.head_count")?;
    let n_kv_heads = meta
        .opt_usize("attention.head_count_kv")?
        .unwrap_or(n_heads);
    let head_dim = match meta.opt_usize("attention.key_length")? {
        Some(d) => d,
        None if n_heads > 0 => hidden_size / n_heads,
        None => 0, // rejected by validate() below
    };
    let rope_scaling = match meta.get("rope.scaling.type").and_then(Value::as_str) {
        None | Some("none") => None,
        // Kept so that Config::validate() names it in its "not supported" error.
        Some(kind) => Some(serde_json::json!({
            "rope_type": kind,
            "factor": meta.opt_f64("rope.scaling.factor")?,
        })),
    };
    let vocab_size = meta.opt_usize("vocab_size")?.unwrap_or(tok.tokens.len());
    let n_layers = meta.usize("block_count")?;
    let config = Config {
        hidden_size,
        intermediate_size: meta.usize("feed_forward_length")?,
        num_hidden_layers: n_layers,
        num_attention_heads: n_heads,
        num_key_value_heads: Some(n_kv_heads),
        head_dim: Some(head_dim),
        vocab_size,
        rms_norm_eps: meta
            .opt_f64("attention.layer_norm_rms_epsilon")?
            .ok_or_else(|| {
                gguf.error(format!(
                    "metadata has no `{}.attention.layer_norm_rms_epsilon`",
                    meta.arch
                ))
            })?,
        // llama.cpp's default when a file leaves it out.
        rope_theta: meta.opt_f64("rope.freq_base")?.unwrap_or(10000.0),
        max_position_embeddings: meta.usize("context_length")?,
        // llama.cpp leaves out output.weight when the head reuses the embedding.
        tie_word_embeddings: gguf.tensor("output.weight").is_none(),
        attention_bias: gguf.tensor("blk.0.attn_q.bias").is_some(),
        bos_token_id: tok.bos_id,
        eos_token_id: tok.eos_id.map(EosIds::One),
        rope_scaling,
        model_type: match meta.kind {
            Arch::Llama => "llama".into(),
            Arch::Gemma3 => crate::config::GEMMA3.into(),
        },
        gemma: match meta.kind {
            Arch::Llama => crate::config::GemmaSettings {
                hidden_act: Some("silu".into()),
                ..Default::default()
            },
            Arch::Gemma3 => gemma3_settings(meta, n_layers)?,
        },
    };
    // Sizes first (zero heads, a 2^40-wide hidden state...): the checks below
    // would otherwise report their symptoms.
    config
        .validate()
        .map_err(|e| gguf.error(format!("the metadata describes an invalid model: {e}")))?;
    // kvlab rotates the whole head; partial rotary embeddings would need more code.
    if let Some(rot) = meta.opt_usize("rope.dimension_count")? {
        if rot != head_dim {
            return Err(gguf.error(format!(
                "{}.rope.dimension_count is {rot} but the head size is {head_dim}: \
                 partial rotary embeddings are not supported",
                meta.arch
            )));
        }
    }
    if tok.tokens.len() > config.vocab_size {
        return Err(gguf.error(format!(
            "the tokenizer has {} tokens but the model's vocabulary is {}",
            tok.tokens.len(),
            config.vocab_size
        )));
    }
    Ok(config)
}

// ANCHOR: gemma3_settings
/// What Gemma 3's `config.json` needs and its GGUF leaves unsaid. The file gives the
/// window (`gemma3.attention.sliding_window`, 512) and the global RoPE base; the rest is
/// fixed by the architecture, in llama.cpp's `llama-model.cpp` (`LLM_ARCH_GEMMA3`:
/// `set_swa_pattern(6)`, `rope_freq_base_train_swa = 10000`, GELU, attention scale
/// `1/√n_embd_head_k`) as in transformers' `Gemma3TextConfig` defaults
/// (`sliding_window_pattern = 6`, `rope_local_base_freq = 10000`,
/// `hidden_activation = "gelu_pytorch_tanh"`, `query_pre_attn_scalar = 256`).
/// tests/reference_gemma3.rs checks every one against transformers' outputs.
fn gemma3_settings(meta: &Metadata, n_layers: usize) -> Result<crate::config::GemmaSettings> {
    let window = meta.usize("attention.sliding_window")?;
    let head_dim = meta.usize("attention.key_length")?;
    let global_base = meta.opt_f64("rope.freq_base")?.unwrap_or(1_000_000.0);
    let local_base = 10_000.0;
    Ok(crate::config::GemmaSettings {
        hidden_activation: Some("gelu_pytorch_tanh".into()),
        query_pre_attn_scalar: Some(head_dim as f64),
        sliding_window: Some(window),
        layer_types: Some(crate::config::gemma3_layer_types(n_layers, 6)),
        sliding_window_pattern: Some(6),
        rope_local_base_freq: Some(local_base),
        // transformers 5 reads the bases from here.
        rope_parameters: Some(serde_json::json!({
            "full_attention": {"rope_type": "default", "rope_theta": global_base},
            "sliding_attention": {"rope_type": "default", "rope_theta": local_base},
        })),
        ..Default::default()
    })
}
// ANCHOR_END: gemma3_settings

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let mut text = serde_json::to_string_pretty(value).map_err(|e| Error::Config {
        path: path.to_path_buf(),
        msg: e.to_string(),
    })?;
    text.push('\n');
    write_file(path, text.as_bytes())
}
