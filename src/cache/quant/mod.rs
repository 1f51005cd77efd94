//! Quantized KV caches: int8 and int4 codes with their scales, read by attention in place
//! (book: kv-quantization.md, part "Shrinking the cache").
//!
//! f32 K and V cost `2 x layers x kv_dim x 4` bytes per token. Stored as int8 with one f32
//! scale per token per head, they cost about a quarter; as int4 with a scale and a zero
//! point per 32 values, about a sixth (SmolLM2: 46 080 → 12 240 → 8 640 bytes per token:
//! [`crate::kv_size::KvShape::quantized_bytes_per_token`]).
//!
//! | `--kv` | keys | values | file |
//! |---|---|---|---|
//! | `int8` | int8 per token per head | the same | `side.rs`, `codec.rs` |
//! | `int4-per-token` | int4 per token, groups of G channels | the same | |
//! | `int4` (KIVI) | int4 per **channel**, groups of G tokens, the last G in f32 | int4 per token | |
//!
//! Attention never sees an f32 copy of the cache: [`QuantRows`] dequantizes one head's
//! `head_dim` run of one position into a small buffer inside the attention loop
//! ([`crate::cache::rows::KvHeads`]). Its twin, [`FakeQuantCache`] (`fake.rs`), is an f32
//! cache holding quantized-then-dequantized values: the two give bitwise-equal logits
//! (`tests/quant.rs`), so everything the quantized cache changes is the rounding itself.
//!
//! This file's [`QuantCache`] is contiguous and preallocated. The paged pool stores the
//! same per-token codes and scales in its blocks (`--cache paged --kv int8`,
//! `cache/element.rs`, [`rows::PagedQuantRows`]); KIVI's per-channel keys stay contiguous.

pub mod codec;
mod fake;
pub mod rows;
mod side;

pub use fake::FakeQuantCache;
pub use rows::QuantRows;
pub use side::{Scheme, Side, SideRows};

use crate::cache::policy::KvPolicy;
use crate::cache::view::KvView;
use crate::cache::KvStore;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::mask::Window;

/// The key and value schemes of a quantized policy (or of the rows a composed one
/// keeps: `int8+sliding` stores int8), checked against the model's heads.
pub fn schemes(config: &Config, policy: KvPolicy) -> Result<(Scheme, Scheme)> {
    let head_dim = config.head_dim();
    let check_group = |group: usize| -> Result<usize> {
        if group == 0 || !head_dim.is_multiple_of(group) {
            return Err(Error::InvalidArgument(format!(
                "--group {group} does not divide head_dim {head_dim}: a quantization group must tile each head; use a divisor of {head_dim} such as {}",
                largest_divisor_up_to(head_dim, 32)
            )));
        }
        Ok(group)
    };
    if !head_dim.is_multiple_of(2) {
        return Err(Error::InvalidArgument(format!(
            "head_dim {head_dim} is odd: int4 codes are packed two a byte per head; quantized caches need an even head_dim"
        )));
    }
    Ok(match policy.element_policy() {
        KvPolicy::Int8 => {
            let per_head = Scheme::Int8PerToken { group: head_dim };
            (per_head, per_head)
        }
        KvPolicy::Int4PerToken { group } => {
            let s = Scheme::Int4PerToken {
                group: check_group(group)?,
            };
            (s, s)
        }
        KvPolicy::Int4Kivi { group } => {
            let group = check_group(group)?;
            (
                Scheme::Int4PerChannel { group },
                Scheme::Int4PerToken { group },
            )
        }
        other => {
            return Err(Error::Internal(format!(
                "--kv {} is not a quantized policy",
                other.name()
            )))
        }
    })
}

fn largest_divisor_up_to(n: usize, cap: usize) -> usize {
    (1..=cap.min(n))
        .rev()
        .find(|&d| n.is_multiple_of(d))
        .unwrap_or(1)
}

// ANCHOR: quant_cache
/// A preallocated cache of `capacity` positions whose K and V are stored quantized.
/// Under a per-query window (`--kv int8+sliding`) it still keeps every row and lets the
/// mask hide what a query does not see: the plain twin of the paged pool that hands
/// those rows' blocks back (`tests/sliding.rs`).
pub struct QuantCache {
    keys: Side,
    values: Side,
    policy: KvPolicy,
    window: Option<Window>,
    len: usize,
    capacity: usize,
    kv_dim: usize,
    n_layers: usize,
}
// ANCHOR_END: quant_cache

impl QuantCache {
    pub fn new(config: &Config, policy: KvPolicy, capacity: usize) -> Result<QuantCache> {
        let (key_scheme, value_scheme) = schemes(config, policy)?;
        let kv_dim = config.n_kv_heads() * config.head_dim();
        let n_layers = config.num_hidden_layers;
        Ok(QuantCache {
            keys: Side::new(key_scheme, n_layers, capacity, kv_dim)?,
            values: Side::new(value_scheme, n_layers, capacity, kv_dim)?,
            policy,
            window: policy.window(),
            len: 0,
            capacity,
            kv_dim,
            n_layers,
        })
    }

    pub fn policy(&self) -> KvPolicy {
        self.policy
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl KvStore for QuantCache {
    fn len(&self) -> usize {
        self.len
    }
    fn window(&self) -> Option<Window> {
        self.window
    }
    fn prepare(&mut self, tokens: &[u32]) -> Result<()> {
        if self.len + tokens.len() > self.capacity {
            return Err(Error::CacheFull {
                capacity: self.capacity,
                used: self.len,
                requested: tokens.len(),
            });
        }
        Ok(())
    }
    fn write(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        let n = k.len() / self.kv_dim;
        if layer >= self.n_layers || self.len + n > self.capacity {
            return Err(Error::Internal(format!(
                "layer {layer}, positions {}..{} written in a quantized cache of {} layers and {} positions",
                self.len,
                self.len + n,
                self.n_layers,
                self.capacity
            )));
        }
        self.keys.write(layer, self.len, k);
        self.values.write(layer, self.len, v);
        Ok(())
    }
    fn read(&self, layer: usize, end: usize) -> KvView<'_> {
        KvView::Quantized(QuantRows {
            keys: self.keys.rows(layer, end),
            values: self.values.rows(layer, end),
        })
    }
    fn advance(&mut self, n: usize) {
        self.len += n;
    }
    fn truncate(&mut self, len: usize) {
        let new_len = self.len.min(len);
        self.keys.truncate(self.len, new_len);
        self.values.truncate(self.len, new_len);
        self.len = new_len;
    }
    fn bytes_reserved(&self) -> usize {
        self.keys.bytes_reserved() + self.values.bytes_reserved()
    }
    fn bytes_used(&self) -> usize {
        self.keys.bytes_used(self.len) + self.values.bytes_used(self.len)
    }
}

// ANCHOR: quant_bytes
/// Bytes a [`QuantCache`] of `capacity` positions reserves: per layer, each side's codes
/// and scales, and for KIVI's per-channel keys the f32 residual of `group` rows.
pub fn reserved_bytes(config: &Config, policy: KvPolicy, capacity: usize) -> Result<usize> {
    let (key_scheme, value_scheme) = schemes(config, policy)?;
    let kv_dim = config.n_kv_heads() * config.head_dim();
    let side = |scheme: Scheme| -> usize {
        let group = scheme.group();
        let f32s = size_of::<f32>();
        match scheme {
            Scheme::Int8PerToken { .. } => capacity * (kv_dim + kv_dim / group * f32s),
            Scheme::Int4PerToken { .. } => capacity * (kv_dim / 2 + kv_dim / group * 2 * f32s),
            Scheme::Int4PerChannel { .. } => {
                capacity * kv_dim / 2 + capacity / group * kv_dim * 2 * f32s + group * kv_dim * f32s
            }
        }
    };
    Ok(config.num_hidden_layers * (side(key_scheme) + side(value_scheme)))
}
// ANCHOR_END: quant_bytes
