//! The model's shape, read from a Hugging Face `config.json`.
//!
//! Every size in the forward pass comes from here: how many layers, how many
//! query heads (`n_heads`) and how many key/value heads (`n_kv_heads`, fewer
//! than `n_heads` under grouped-query attention), the head size, the context.

use crate::error::{Error, Result};
use crate::limits;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The subset of a Llama-family `config.json` that the forward pass needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Width of the residual stream (`dim` in llama2.c).
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP's hidden layer.
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads: equal to the query heads for MHA, fewer for GQA, 1 for MQA.
    /// Missing in older configs, which then mean MHA.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Explicit head size; when absent it is `hidden_size / num_attention_heads`.
    #[serde(default)]
    pub head_dim: Option<usize>,
    pub vocab_size: usize,
    #[serde(default = "default_rms_norm_eps")]
    pub rms_norm_eps: f64,
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    /// The context: the most positions the model was trained for.
    pub max_position_embeddings: usize,
    /// True when the LM head reuses the token-embedding matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Qwen2-style q/k/v projection biases. Also detected from the weights.
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// One id or a list of ids that end generation.
    #[serde(default)]
    pub eos_token_id: Option<EosIds>,
    /// kvlab implements plain RoPE only; a scaled variant would silently give wrong logits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<serde_json::Value>,
    #[serde(default = "default_model_type")]
    pub model_type: String,
    /// What a Gemma 3 config states and a Llama config leaves out (all absent for Llama).
    #[serde(flatten)]
    pub gemma: GemmaSettings,
}

// ANCHOR: gemma_settings
/// The settings of a Gemma 3 `config.json` (transformers' `Gemma3TextConfig`) that change
/// the forward pass. Each is absent from a Llama config, and absent means Llama's choice.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GemmaSettings {
    /// The MLP's activation: Llama's configs say `hidden_act: "silu"` (SwiGLU); Gemma 3's
    /// say `hidden_activation: "gelu_pytorch_tanh"` (GeGLU, GELU's tanh approximation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_act: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_activation: Option<String>,
    /// Attention scores are scaled by `query_pre_attn_scalar^-1/2` (Gemma 3: 256, its head_dim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_pre_attn_scalar: Option<f64>,
    /// How many positions a local layer attends to: its own and the `sliding_window - 1`
    /// before it (transformers' `sliding_window_overlay`: `kv_idx > q_idx - sliding_window`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<usize>,
    /// One entry per layer, `sliding_attention` (local) or `full_attention` (global).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_types: Option<Vec<String>>,
    /// When `layer_types` is absent: every `n`-th layer is global (Gemma 3: 6).
    #[serde(
        default,
        alias = "_sliding_window_pattern",
        skip_serializing_if = "Option::is_none"
    )]
    pub sliding_window_pattern: Option<usize>,
    /// The local layers' RoPE base (Gemma 3: 10,000; the global layers use `rope_theta`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_local_base_freq: Option<f64>,
    /// transformers 5 writes the RoPE bases here (per layer type) instead of `rope_theta`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_parameters: Option<serde_json::Value>,
    /// Gemma 2 capped its logits with `c·tanh(x/c)`; Gemma 3 does not (null). kvlab refuses a cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_logit_softcapping: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attn_logit_softcapping: Option<f64>,
}
// ANCHOR_END: gemma_settings

/// The MLP's gated activation: `act(x·W_gate) ⊙ (x·W_up)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Activation {
    /// `silu(x) = x·σ(x)`: SwiGLU (Llama, Qwen2).
    Silu,
    /// `gelu(x) ≈ x/2·(1 + tanh(√(2/π)·(x + 0.044715x³)))`: GeGLU (Gemma).
    GeluTanh,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EosIds {
    One(u32),
    Many(Vec<u32>),
}

fn default_rms_norm_eps() -> f64 {
    1e-6
}
fn default_rope_theta() -> f64 {
    10000.0
}
fn default_model_type() -> String {
    "llama".into()
}

impl Config {
    /// Reads and validates `config.json`: a regular file of at most
    /// [`limits::MAX_JSON_BYTES`], describing a Llama-family model whose sizes are
    /// inside [`check_shape`]'s bounds.
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = limits::read_text_capped(path, limits::MAX_JSON_BYTES, "config.json")?;
        let bad = |msg: String| Error::Config {
            path: path.to_path_buf(),
            msg,
        };
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        check_architecture(&json).map_err(bad)?;
        let config: Config = serde_json::from_value(json).map_err(|e| bad(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    pub fn n_kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// How many query heads share one KV head (llama2.c's `kv_mul`): 1 for MHA.
    pub fn kv_mul(&self) -> usize {
        self.num_attention_heads / self.n_kv_heads()
    }

    /// Gemma 3's text model (`model_type: gemma3_text`): sandwich norms, QK-norm, a scaled
    /// embedding, GeGLU and local/global layers (book: sliding-window-model.md).
    pub fn is_gemma3(&self) -> bool {
        self.model_type == GEMMA3
    }

    /// The MLP's activation, from `hidden_activation` or `hidden_act` (`silu` when absent).
    pub fn activation(&self) -> Result<Activation> {
        let g = &self.gemma;
        let name = g.hidden_activation.as_deref().or(g.hidden_act.as_deref());
        match name {
            None => Ok(if self.is_gemma3() {
                Activation::GeluTanh
            } else {
                Activation::Silu
            }),
            Some("silu" | "swish") => Ok(Activation::Silu),
            Some("gelu_pytorch_tanh" | "gelu_tanh") => Ok(Activation::GeluTanh),
            Some(other) => Err(Error::InvalidConfig(format!(
                "the activation is `{other}`; kvlab implements `silu` (SwiGLU) and `gelu_pytorch_tanh` (GeGLU)"
            ))),
        }
    }

    // ANCHOR: layer_window
    /// How many positions layer `layer` attends to, or None for the whole prefix. Only a
    /// Gemma 3 config makes a layer local (a Qwen2 config states a `sliding_window` it
    /// does not use); `layer_types` names each layer, else every `sliding_window_pattern`-th
    /// layer is global (transformers: `(i + 1) % pattern != 0` is local).
    pub fn layer_window(&self, layer: usize) -> Option<usize> {
        if !self.is_gemma3() {
            return None;
        }
        let g = &self.gemma;
        let local = match &g.layer_types {
            Some(types) => types.get(layer).map(String::as_str) == Some(SLIDING),
            None => !(layer + 1).is_multiple_of(g.sliding_window_pattern.unwrap_or(6).max(1)),
        };
        if local {
            g.sliding_window
        } else {
            None
        }
    }

    /// The RoPE base of layer `layer`: Gemma 3's local layers turn faster (10,000) than
    /// its global ones (`rope_theta`, 1,000,000), which must reach 32k positions.
    pub fn layer_rope_theta(&self, layer: usize) -> f64 {
        let (full, local) = self.rope_bases();
        match self.layer_window(layer) {
            Some(_) => local,
            None => full,
        }
    }
    // ANCHOR_END: layer_window

    /// (global, local) RoPE bases, from transformers 5's `rope_parameters` when present.
    pub fn rope_bases(&self) -> (f64, f64) {
        let theta = |v: &serde_json::Value| v.get("rope_theta").and_then(serde_json::Value::as_f64);
        let g = &self.gemma;
        let params = g.rope_parameters.as_ref();
        let full = params
            .and_then(|p| p.get("full_attention").and_then(theta).or_else(|| theta(p)))
            .unwrap_or(self.rope_theta);
        let local = params
            .and_then(|p| p.get("sliding_attention").and_then(theta))
            .or(g.rope_local_base_freq)
            .unwrap_or(10_000.0);
        (full, local)
    }

    /// How many layers attend to a window rather than the whole prefix (Gemma 3 270M: 15
    /// of 18; a Llama: none).
    pub fn local_layers(&self) -> usize {
        (0..self.num_hidden_layers)
            .filter(|&l| self.layer_window(l).is_some())
            .count()
    }

    /// Whether any layer attends to a window rather than the whole prefix.
    pub fn has_local_layers(&self) -> bool {
        self.local_layers() > 0
    }

    /// Gemma multiplies the embedding by `√hidden_size` (transformers'
    /// `Gemma3TextScaledWordEmbedding`, the scale rounded to f32); Llama does not scale it.
    pub fn embed_scale(&self) -> Option<f32> {
        self.is_gemma3()
            .then(|| (self.hidden_size as f64).sqrt() as f32)
    }

    pub fn eos_ids(&self) -> Vec<u32> {
        match &self.eos_token_id {
            None => vec![],
            Some(EosIds::One(id)) => vec![*id],
            Some(EosIds::Many(ids)) => ids.clone(),
        }
    }

    /// Checks every size against kvlab's bounds ([`check_shape`]), then the
    /// relations between the sizes that the forward pass relies on.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::InvalidConfig(msg));
        let positive = [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.n_kv_heads()),
            ("vocab_size", self.vocab_size),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        for (name, value) in positive {
            if value == 0 {
                return bad(format!("{name} is 0"));
            }
        }
        check_shape(self)?;
        let (n_heads, n_kv_heads) = (self.num_attention_heads, self.n_kv_heads());
        if !n_heads.is_multiple_of(n_kv_heads) {
            return bad(format!(
                "num_attention_heads ({n_heads}) is not divisible by num_key_value_heads ({n_kv_heads}): \
                 each KV head must serve the same number of query heads"
            ));
        }
        if self.head_dim.is_none() && !self.hidden_size.is_multiple_of(n_heads) {
            return bad(format!(
                "hidden_size ({}) is not divisible by num_attention_heads ({n_heads}) and no head_dim is given",
                self.hidden_size
            ));
        }
        if self.head_dim() == 0 || !self.head_dim().is_multiple_of(2) {
            return bad(format!(
                "head_dim ({}) must be even and positive: RoPE rotates pairs of dimensions",
                self.head_dim()
            ));
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.rms_norm_eps) || !positive(self.rope_theta) {
            return bad("rms_norm_eps and rope_theta must be positive".into());
        }
        if let Some(scaling) = &self.rope_scaling {
            if !scaling.is_null() {
                return bad(format!(
                    "rope_scaling {scaling} is not supported: kvlab implements plain RoPE only"
                ));
            }
        }
        self.validate_gemma()
    }

    /// The checks of [`GemmaSettings`]: an activation kvlab has, no logit cap, a score scale
    /// of `1/√head_dim`, plain RoPE, and for Gemma 3 one window and one type per layer.
    fn validate_gemma(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::InvalidConfig(msg));
        let g = &self.gemma;
        self.activation()?;
        for (name, cap) in [
            ("final_logit_softcapping", g.final_logit_softcapping),
            ("attn_logit_softcapping", g.attn_logit_softcapping),
        ] {
            if let Some(cap) = cap {
                return bad(format!(
                    "{name} is {cap}: kvlab does not cap logits (Gemma 2 does, Gemma 3 does not)"
                ));
            }
        }
        // transformers' Gemma 3 default is 256 when the config leaves it out.
        let default_scalar = if self.is_gemma3() {
            256.0
        } else {
            self.head_dim() as f64
        };
        let scalar = g.query_pre_attn_scalar.unwrap_or(default_scalar);
        if scalar != self.head_dim() as f64 {
            return bad(format!(
                "query_pre_attn_scalar is {scalar} but head_dim is {}: kvlab scales attention scores by 1/sqrt(head_dim) only",
                self.head_dim()
            ));
        }
        if let Some(params) = &g.rope_parameters {
            let kinds = ["full_attention", "sliding_attention"];
            let entries: Vec<&serde_json::Value> = if kinds.iter().any(|k| params.get(k).is_some())
            {
                kinds.iter().filter_map(|k| params.get(k)).collect()
            } else {
                vec![params]
            };
            for entry in entries {
                let kind = entry.get("rope_type").and_then(serde_json::Value::as_str);
                if !matches!(kind, None | Some("default")) {
                    return bad(format!(
                        "rope_parameters {params} is not supported: kvlab implements plain RoPE only"
                    ));
                }
            }
        }
        let (full, local) = self.rope_bases();
        if !(full.is_finite() && full > 0.0 && local.is_finite() && local > 0.0) {
            return bad(format!("the RoPE bases ({full}, {local}) must be positive"));
        }
        if let Some(types) = &g.layer_types {
            if let Some(t) = types
                .iter()
                .find(|t| ![SLIDING, FULL].contains(&t.as_str()))
            {
                return bad(format!(
                    "layer_types holds `{t}`; each layer is `{SLIDING}` or `{FULL}`"
                ));
            }
            if !self.is_gemma3() && types.iter().any(|t| t == SLIDING) {
                return bad(format!(
                    "layer_types makes some layers local in a `{}` model: kvlab runs local layers for Gemma 3 only",
                    self.model_type
                ));
            }
            if types.len() != self.num_hidden_layers {
                return bad(format!(
                    "layer_types names {} layers but the model has {}: one type per layer",
                    types.len(),
                    self.num_hidden_layers
                ));
            }
        }
        if self.is_gemma3() {
            match g.sliding_window {
                Some(w) if w > 0 => {}
                other => {
                    return bad(format!(
                        "sliding_window is {other:?}: a Gemma 3 config needs the local layers' window, a positive number of positions"
                    ))
                }
            }
            if g.sliding_window_pattern == Some(0) {
                return bad("sliding_window_pattern is 0: it must be at least 1".into());
            }
        }
        Ok(())
    }

    /// The shape of SmolLM2-135M, used by `kvlab demo`, the benches and the GPU check
    /// when the real weights are not at hand.
    pub fn smollm2_135m() -> Config {
        Config {
            hidden_size: 576,
            intermediate_size: 1536,
            num_hidden_layers: 30,
            num_attention_heads: 9,
            num_key_value_heads: Some(3),
            head_dim: None,
            vocab_size: 49152,
            rms_norm_eps: 1e-5,
            rope_theta: 100000.0,
            max_position_embeddings: 8192,
            tie_word_embeddings: true,
            attention_bias: false,
            bos_token_id: Some(1),
            eos_token_id: Some(EosIds::One(2)),
            rope_scaling: None,
            model_type: "llama".into(),
            gemma: GemmaSettings {
                hidden_act: Some("silu".into()),
                ..GemmaSettings::default()
            },
        }
    }

    /// The shape of Gemma 3 270M (its GGUF's metadata; book: sliding-window-model.md):
    /// MQA (4 query heads, 1 KV head of 256), 18 layers of which 5, 11 and 17 are global.
    pub fn gemma3_270m() -> Config {
        Config {
            hidden_size: 640,
            intermediate_size: 2048,
            num_hidden_layers: 18,
            num_attention_heads: 4,
            num_key_value_heads: Some(1),
            head_dim: Some(256),
            vocab_size: 262_144,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            max_position_embeddings: 32_768,
            tie_word_embeddings: true,
            attention_bias: false,
            bos_token_id: Some(2),
            eos_token_id: Some(EosIds::One(1)),
            rope_scaling: None,
            model_type: GEMMA3.into(),
            gemma: GemmaSettings {
                hidden_activation: Some("gelu_pytorch_tanh".into()),
                query_pre_attn_scalar: Some(256.0),
                sliding_window: Some(512),
                layer_types: Some(gemma3_layer_types(18, 6)),
                rope_local_base_freq: Some(10_000.0),
                ..GemmaSettings::default()
            },
        }
    }
}

/// `model_type` of Gemma 3's text model.
pub const GEMMA3: &str = "gemma3_text";
/// The two `layer_types`.
pub const SLIDING: &str = "sliding_attention";
pub const FULL: &str = "full_attention";

/// Gemma 3's layer pattern, as transformers writes it: layer `i` is global when
/// `(i + 1) % pattern == 0` (5, 11, 17 of 18 for a pattern of 6), local otherwise.
pub fn gemma3_layer_types(n_layers: usize, pattern: usize) -> Vec<String> {
    (0..n_layers)
        .map(|i| {
            if (i + 1).is_multiple_of(pattern.max(1)) {
                FULL
            } else {
                SLIDING
            }
            .to_string()
        })
        .collect()
}

/// The architectures kvlab's forward pass computes correctly: the Llama family's blocks
/// (RMSNorm, RoPE, GQA, SwiGLU), Qwen2's q/k/v biases included, and Gemma 3's text model
/// (the same blocks with sandwich norms, QK-norm, GeGLU and local layers).
pub const SUPPORTED_MODEL_TYPES: [&str; 3] = ["llama", "qwen2", GEMMA3];

/// Refuses a `config.json` written for another architecture. A Mamba or GPT-2
/// checkpoint whose sizes happen to parse would otherwise run as a Llama and
/// generate garbage with exit code 0. A missing `model_type` means Llama (old
/// Llama configs leave it out); `architectures`, when present, must agree.
fn check_architecture(json: &serde_json::Value) -> std::result::Result<(), String> {
    if !json.is_object() {
        return Err("expected a JSON object of model settings".into());
    }
    let model_type = match &json["model_type"] {
        serde_json::Value::Null => "llama",
        serde_json::Value::String(s) => s.as_str(),
        other => return Err(format!("`model_type` is {other}, not a string")),
    };
    if !SUPPORTED_MODEL_TYPES.contains(&model_type) {
        return Err(format!(
            "model_type is `{model_type}`; kvlab runs Llama-family models and Gemma 3 only ({}): this checkpoint needs another engine",
            SUPPORTED_MODEL_TYPES.join(", ")
        ));
    }
    match &json["architectures"] {
        serde_json::Value::Null => Ok(()),
        serde_json::Value::Array(names) => {
            for name in names {
                let name = name
                    .as_str()
                    .ok_or_else(|| format!("`architectures` holds {name}, not a class name"))?;
                let known = ["LlamaForCausalLM", "Qwen2ForCausalLM", "Gemma3ForCausalLM"];
                if !known.contains(&name) {
                    return Err(format!(
                        "architectures names `{name}`; kvlab runs {} only",
                        known.join(", ")
                    ));
                }
            }
            Ok(())
        }
        other => Err(format!(
            "`architectures` is {other}, not a list of class names"
        )),
    }
}

// ANCHOR: check_shape
/// Checks every dimension of `c` against kvlab's bounds. Runs before any other
/// check multiplies two of them, so nothing after it can overflow.
pub fn check_shape(c: &Config) -> Result<()> {
    let bounds = [
        ("num_hidden_layers", c.num_hidden_layers, limits::MAX_LAYERS),
        (
            "num_attention_heads",
            c.num_attention_heads,
            limits::MAX_HEADS,
        ),
        ("num_key_value_heads", c.n_kv_heads(), limits::MAX_HEADS),
        ("hidden_size", c.hidden_size, limits::MAX_HIDDEN),
        (
            "intermediate_size",
            c.intermediate_size,
            limits::MAX_INTERMEDIATE,
        ),
        ("vocab_size", c.vocab_size, limits::MAX_VOCAB),
        (
            "max_position_embeddings",
            c.max_position_embeddings,
            limits::MAX_CONTEXT,
        ),
        // Last: when absent it derives from hidden_size, which is then the one to name.
        ("head_dim", c.head_dim(), limits::MAX_HEAD_DIM),
    ];
    for (name, value, max) in bounds {
        if value > max {
            return Err(Error::InvalidConfig(format!(
                "{name} is {value}, above kvlab's limit of {max} (far beyond any Llama-family model): the config is corrupt"
            )));
        }
    }
    Ok(())
}
// ANCHOR_END: check_shape

/// The weights `c` needs (embedding, every layer's projections and norms, the final
/// norm, and the LM head unless tied), in checked arithmetic. Biases are optional and
/// not counted: this is a lower bound on what the weight files must hold.
pub fn min_params(c: &Config) -> Result<u64> {
    let overflow = || {
        Error::InvalidConfig(format!(
            "the shape in config.json ({} layers, hidden {}, vocab {}) overflows a parameter count",
            c.num_hidden_layers, c.hidden_size, c.vocab_size
        ))
    };
    let m = |a: usize, b: usize| (a as u64).checked_mul(b as u64).ok_or_else(overflow);
    let dim = c.hidden_size;
    let q_dim = c
        .num_attention_heads
        .checked_mul(c.head_dim())
        .ok_or_else(overflow)?;
    let kv_dim = c
        .n_kv_heads()
        .checked_mul(c.head_dim())
        .ok_or_else(overflow)?;
    let per_layer = [
        m(2, dim)?,                                   // two RMSNorm weights
        m(dim, q_dim)?,                               // W_q
        m(2, m(dim, kv_dim)? as usize)?,              // W_k, W_v
        m(q_dim, dim)?,                               // W_o
        m(3, m(dim, c.intermediate_size)? as usize)?, // gate, up, down
    ]
    .into_iter()
    .try_fold(0u64, |acc, x| acc.checked_add(x))
    .ok_or_else(overflow)?;
    let embed = m(c.vocab_size, dim)?;
    let heads = if c.tie_word_embeddings { 0 } else { embed };
    per_layer
        .checked_mul(c.num_hidden_layers as u64)
        .and_then(|x| x.checked_add(embed))
        .and_then(|x| x.checked_add(heads))
        .and_then(|x| x.checked_add(dim as u64))
        .ok_or_else(overflow)
}

/// The fewest bytes of tensor data that can hold `c`'s weights: kvlab reads
/// F32, BF16 and F16, so at least 2 bytes a parameter.
pub fn min_weight_bytes(c: &Config) -> Result<u64> {
    min_params(c)?
        .checked_mul(2)
        .ok_or_else(|| Error::InvalidConfig("the parameter count overflows".into()))
}

#[cfg(test)]
mod shape_tests {
    use super::*;

    #[test]
    fn smollm2_is_inside_every_bound_and_its_size_is_exact() {
        let c = Config::smollm2_135m();
        check_shape(&c).unwrap();
        // 134,515,008 parameters (Hugging Face's count for SmolLM2-135M, tied head).
        assert_eq!(min_params(&c).unwrap(), 134_515_008);
    }

    #[test]
    fn one_dimension_past_its_bound_is_named() {
        let mut c = Config::smollm2_135m();
        c.num_hidden_layers = 1 << 40;
        let err = check_shape(&c).unwrap_err().to_string();
        assert!(err.contains("num_hidden_layers is 1099511627776"), "{err}");
    }
}
