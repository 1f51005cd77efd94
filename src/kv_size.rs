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
    pub shape: KvShape,
    pub seq_len: usize,
    pub batch: usize,
    pub bytes_per_token: usize,
    pub bytes: usize,
    pub gib: f64,
}

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
            shape: *self,
            seq_len,
            batch,
            bytes_per_token,
            bytes,
            gib: bytes as f64 / (1u64 << 30) as f64,
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
