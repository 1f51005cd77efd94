//! How much memory the KV cache needs (book: kv-size.md).
//!
//! `bytes = 2 (K and V) × layers × kv_heads × head_dim × seq_len × bytes_per_value × batch`
//!
//! For a 7B Llama (32 layers, 32 KV heads of 128, bf16) that is 512 KiB per token:
//! 1 GiB at 2048 tokens, 16 GiB at 32768 — more than the 14 GB of weights.
//! GQA divides it by `n_heads / n_kv_heads` (SmolLM2: 3x).

use crate::error::{Error, Result};
use serde::Serialize;

/// The numeric type of the cached values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KvDtype {
    F32,
    Bf16,
    F16,
    Int8,
}

impl KvDtype {
    pub fn bytes(self) -> usize {
        match self {
            KvDtype::F32 => 4,
            KvDtype::Bf16 | KvDtype::F16 => 2,
            KvDtype::Int8 => 1,
        }
    }
}

/// The shape that decides the cache's size.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct KvShape {
    pub layers: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub dtype: KvDtype,
}

impl KvShape {
    /// The cache shape of a model: its layers, KV heads (not query heads) and head size.
    pub fn of(config: &crate::config::Config, dtype: KvDtype) -> KvShape {
        KvShape {
            layers: config.num_hidden_layers,
            kv_heads: config.n_kv_heads(),
            head_dim: config.head_dim(),
            dtype,
        }
    }
}

// ANCHOR: kv_size
impl KvShape {
    /// Bytes one token adds to the cache: a K and a V vector per layer.
    pub fn bytes_per_token(&self) -> usize {
        2 * self.layers * self.kv_heads * self.head_dim * self.dtype.bytes()
    }

    /// Bytes for `seq_len` tokens of each of `batch` sequences.
    pub fn bytes(&self, seq_len: usize, batch: usize) -> usize {
        self.bytes_per_token() * seq_len * batch
    }
}
// ANCHOR_END: kv_size

/// What `kvlab kv-size` reports: the shape, the length, and the bytes they need.
#[derive(Debug, Clone, Serialize)]
pub struct KvSizeReport {
    /// What the shape is of (`--name`, or the model folder), for tables and figures.
    pub name: Option<String>,
    pub shape: KvShape,
    pub seq_len: usize,
    pub batch: usize,
    pub bytes_per_token: usize,
    pub bytes: usize,
    pub gib: f64,
    /// The weights next to the cache, when the parameter count is known.
    pub weights: Option<CacheVsWeights>,
    /// For a model with local layers (Gemma 3): the cache when each keeps only its window.
    pub layer_groups: Option<LayerGroups>,
    /// A real cache of `seq_len` positions, filled and counted (`--measure`).
    pub measured: Option<MeasuredKv>,
}

/// The bytes of a real cache (`lab/kv_fill.rs`), in kvlab's f32: the cache the cached
/// path builds for the model, filled with `positions` positions.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct MeasuredKv {
    pub positions: usize,
    /// Passes it was filled in (a ring takes a bounded number of tokens per pass).
    pub passes: usize,
    pub bytes_reserved: usize,
    /// Rows the latest position's attention read (`KvStore::bytes_used`).
    pub bytes_used: usize,
    /// Every position of every layer, in f32.
    pub full_bytes: usize,
    /// `bytes_used / full_bytes`: the formula's `fraction_of_full`, measured.
    pub used_fraction_of_full: f64,
    pub reserved_fraction_of_full: f64,
}

// ANCHOR: layer_groups
/// The cache of a hybrid model, per layer group: a global layer holds every position, a
/// local one only its window (Gemma 3 270M: 3 global layers, 15 local ones of 512), so
/// `bytes = (global × seq_len + local × min(seq_len, window)) × bytes per layer-position
/// × batch`. At 32,768 tokens that is (3 × 32,768 + 15 × 512) / (18 × 32,768) ≈ 18 % of
/// what full attention in every layer holds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LayerGroups {
    pub global_layers: usize,
    pub local_layers: usize,
    pub window: usize,
    /// Positions a local layer holds: `min(seq_len, window)`.
    pub local_positions: usize,
    pub bytes: usize,
    /// `bytes` over the report's `bytes` (every layer holding every position).
    pub fraction_of_full: f64,
}

impl KvSizeReport {
    /// Adds the per-group figures of `config`'s layers, when some are local.
    pub fn with_layer_groups(mut self, config: &crate::config::Config) -> Result<KvSizeReport> {
        let n = config.num_hidden_layers;
        let windows: Vec<usize> = (0..n).filter_map(|l| config.layer_window(l)).collect();
        let Some(&window) = windows.first() else {
            return Ok(self);
        };
        let local_layers = windows.len();
        let global_layers = n - local_layers;
        let local_positions = self.seq_len.min(window);
        let per_layer_position = self.bytes_per_token / n.max(1);
        let overflow = || {
            Error::InvalidArgument(format!(
                "{} tokens x {} sequences overflows a 64-bit byte count: ask for fewer",
                self.seq_len, self.batch
            ))
        };
        let positions = global_layers
            .checked_mul(self.seq_len)
            .and_then(|g| g.checked_add(local_layers.checked_mul(local_positions)?))
            .ok_or_else(overflow)?;
        let bytes = positions
            .checked_mul(per_layer_position)
            .and_then(|b| b.checked_mul(self.batch))
            .ok_or_else(overflow)?;
        self.layer_groups = Some(LayerGroups {
            global_layers,
            local_layers,
            window,
            local_positions,
            bytes,
            fraction_of_full: bytes as f64 / self.bytes.max(1) as f64,
        });
        Ok(self)
    }
}
// ANCHOR_END: layer_groups

// ANCHOR: cache_vs_weights
/// The cache against the weights (§3.1: "at 32K tokens the cache is larger than the
/// model"). The weights are counted at the cache's bytes per value (bf16 for both, as
/// GPU engines serve them), so the crossover does not depend on the dtype.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CacheVsWeights {
    pub params: u64,
    pub weight_bytes: u64,
    /// The shortest context at which the caches of `batch` sequences hold more bytes than
    /// the weights: `ceil(weight_bytes / (bytes_per_token × batch))`, `+ 1` when it divides.
    pub crossover_tokens: u64,
}

impl KvSizeReport {
    /// Adds the weights of a model of `params` parameters (checked: a parameter count
    /// comes from a user).
    pub fn with_weights(mut self, params: u64) -> Result<KvSizeReport> {
        let overflow = || {
            Error::InvalidArgument(format!(
                "--params {params} x {} bytes overflows a 64-bit byte count: give the real parameter count",
                self.shape.dtype.bytes()
            ))
        };
        let weight_bytes = params
            .checked_mul(self.shape.dtype.bytes() as u64)
            .ok_or_else(overflow)?;
        let per_token = (self.bytes_per_token as u64)
            .checked_mul(self.batch as u64)
            .ok_or_else(overflow)?;
        // "More than the weights": the first context past weight_bytes / per_token.
        let crossover_tokens = weight_bytes / per_token + 1;
        self.weights = Some(CacheVsWeights {
            params,
            weight_bytes,
            crossover_tokens,
        });
        Ok(self)
    }
}
// ANCHOR_END: cache_vs_weights

impl KvShape {
    /// The cache of `batch` sequences of `seq_len` tokens each, in this shape. The sizes
    /// come from a user, so the product is checked: 2^62 tokens is an error, not "0 bytes".
    pub fn report(&self, seq_len: usize, batch: usize) -> Result<KvSizeReport> {
        let overflow = || {
            Error::InvalidArgument(format!(
                "2 x {} layers x {} kv heads x {} head_dim x {} bytes x {seq_len} tokens x {batch} sequences overflows a 64-bit byte count: ask for fewer tokens or sequences",
                self.layers,
                self.kv_heads,
                self.head_dim,
                self.dtype.bytes()
            ))
        };
        let bytes_per_token = [
            self.layers,
            self.kv_heads,
            self.head_dim,
            self.dtype.bytes(),
        ]
        .into_iter()
        .try_fold(2usize, usize::checked_mul)
        .ok_or_else(overflow)?;
        let bytes = bytes_per_token
            .checked_mul(seq_len)
            .and_then(|b| b.checked_mul(batch))
            .ok_or_else(overflow)?;
        Ok(KvSizeReport {
            name: None,
            shape: *self,
            seq_len,
            batch,
            bytes_per_token,
            bytes,
            gib: bytes as f64 / (1u64 << 30) as f64,
            weights: None,
            layer_groups: None,
            measured: None,
        })
    }
}

// ANCHOR: quantized_size
impl KvShape {
    /// Bytes one token adds to a cache quantized to `bits` (8 or 4) with one f32 scale per
    /// `group` values, and for int4 one f32 zero point too (`src/cache/quant/`): the codes,
    /// plus the scales' share. The dtype of `self` is ignored.
    pub fn quantized_bytes_per_token(&self, bits: usize, group: usize) -> usize {
        let values = self.kv_heads * self.head_dim;
        let floats_per_group = if bits == 8 { 1 } else { 2 };
        2 * self.layers * (values * bits / 8 + values / group * floats_per_group * 4)
    }
}
// ANCHOR_END: quantized_size

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma3_at_32k_holds_the_formulas_share_of_a_full_cache() {
        let c = crate::config::Config::gemma3_270m();
        let report = KvShape::of(&c, KvDtype::Bf16)
            .report(32_768, 1)
            .unwrap()
            .with_layer_groups(&c)
            .unwrap();
        let g = report.layer_groups.unwrap();
        assert_eq!((g.global_layers, g.local_layers, g.window), (3, 15, 512));
        // 2 (K, V) x 1 KV head x 256 x 2 bytes per layer and position.
        assert_eq!(g.bytes, (3 * 32_768 + 15 * 512) * 2 * 256 * 2);
        let formula = (3.0 * 32_768.0 + 15.0 * 512.0) / (18.0 * 32_768.0);
        assert!((g.fraction_of_full - formula).abs() < 1e-12 && (0.17..0.18).contains(&formula));
        // Shorter than the window, every layer holds everything.
        let short = KvShape::of(&c, KvDtype::Bf16)
            .report(300, 1)
            .unwrap()
            .with_layer_groups(&c)
            .unwrap();
        assert_eq!(short.layer_groups.unwrap().fraction_of_full, 1.0);
    }
}
