//! The plain twin of [`super::QuantCache`]: an f32 contiguous cache that stores every value
//! quantized-then-dequantized ("fake quantization", as quantization-aware training calls it).
//!
//! It follows the quantized cache's rules step for step — per-token groups as they are
//! written; KIVI's per-channel key groups once `group` positions have filled, the positions
//! before that kept exact — but keeps f32, and attention reads it as any contiguous cache.
//! `tests/quant.rs` checks that the two give bitwise-equal logits: the quantized cache's
//! only effect is the rounding, and its in-place dequantization adds none of its own.

use super::codec::{fake_quantize_i8, fake_quantize_u4};
use super::{schemes, Scheme};
use crate::cache::buffer::zeroed_buffer;
use crate::cache::policy::KvPolicy;
use crate::cache::rows::Contiguous;
use crate::cache::view::KvView;
use crate::cache::KvStore;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::mask::Window;

/// An f32 cache holding fake-quantized K and V: `[n_layers, capacity, kv_dim]` each.
pub struct FakeQuantCache {
    k_cache: Vec<f32>,
    v_cache: Vec<f32>,
    key_scheme: Scheme,
    value_scheme: Scheme,
    /// A per-query window's mask (`--kv int8+sliding`): every row kept, the unseen ones
    /// hidden, as [`super::QuantCache`] does.
    window: Option<Window>,
    n_layers: usize,
    capacity: usize,
    kv_dim: usize,
    len: usize,
}

impl FakeQuantCache {
    pub fn new(config: &Config, policy: KvPolicy, capacity: usize) -> Result<FakeQuantCache> {
        let (key_scheme, value_scheme) = schemes(config, policy)?;
        let kv_dim = config.n_kv_heads() * config.head_dim();
        let n_layers = config.num_hidden_layers;
        let dims = [n_layers, capacity, kv_dim];
        Ok(FakeQuantCache {
            k_cache: zeroed_buffer("the fake-quantized KV cache", &dims)?,
            v_cache: zeroed_buffer("the fake-quantized KV cache", &dims)?,
            key_scheme,
            value_scheme,
            window: policy.window(),
            n_layers,
            capacity,
            kv_dim,
            len: 0,
        })
    }
}

/// Fake-quantizes layer `layer`'s new rows `start..start + n` of `cache` by `scheme`.
fn fake_quantize(
    cache: &mut [f32],
    scheme: Scheme,
    layer_start: usize,
    start: usize,
    n: usize,
    kv_dim: usize,
) {
    let layer = &mut cache[layer_start..];
    match scheme {
        Scheme::Int8PerToken { group } => {
            for row in layer[start * kv_dim..(start + n) * kv_dim].chunks_exact_mut(kv_dim) {
                row.chunks_exact_mut(group).for_each(fake_quantize_i8);
            }
        }
        Scheme::Int4PerToken { group } => {
            for row in layer[start * kv_dim..(start + n) * kv_dim].chunks_exact_mut(kv_dim) {
                row.chunks_exact_mut(group).for_each(fake_quantize_u4);
            }
        }
        Scheme::Int4PerChannel { group } => {
            // Each group that the new rows complete: every channel over its `group` rows.
            let mut column = vec![0.0f32; group];
            for pos in start..start + n {
                if pos % group != group - 1 {
                    continue;
                }
                let first = pos + 1 - group;
                for c in 0..kv_dim {
                    for (t, x) in column.iter_mut().enumerate() {
                        *x = layer[(first + t) * kv_dim + c];
                    }
                    fake_quantize_u4(&mut column);
                    for (t, &x) in column.iter().enumerate() {
                        layer[(first + t) * kv_dim + c] = x;
                    }
                }
            }
        }
    }
}

impl KvStore for FakeQuantCache {
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
        let kv_dim = self.kv_dim;
        let n = k.len() / kv_dim;
        if layer >= self.n_layers || self.len + n > self.capacity {
            return Err(Error::Internal(format!(
                "layer {layer} written past a fake-quantized cache of {} layers, {} positions",
                self.n_layers, self.capacity
            )));
        }
        let layer_start = layer * self.capacity * kv_dim;
        let at = layer_start + self.len * kv_dim;
        self.k_cache[at..at + k.len()].copy_from_slice(k);
        self.v_cache[at..at + v.len()].copy_from_slice(v);
        fake_quantize(
            &mut self.k_cache,
            self.key_scheme,
            layer_start,
            self.len,
            n,
            kv_dim,
        );
        fake_quantize(
            &mut self.v_cache,
            self.value_scheme,
            layer_start,
            self.len,
            n,
            kv_dim,
        );
        Ok(())
    }
    fn read(&self, layer: usize, end: usize) -> KvView<'_> {
        let start = layer * self.capacity * self.kv_dim;
        let stop = start + end * self.kv_dim;
        KvView::Contiguous(Contiguous::new(
            &self.k_cache[start..stop],
            &self.v_cache[start..stop],
            self.kv_dim,
        ))
    }
    fn advance(&mut self, n: usize) {
        self.len += n;
    }
    /// The rows stay as they are: a cut into a quantized KIVI group keeps its dequantized
    /// values, which is what the quantized cache puts back into its residual.
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
    fn bytes_reserved(&self) -> usize {
        (self.k_cache.len() + self.v_cache.len()) * size_of::<f32>()
    }
    fn bytes_used(&self) -> usize {
        2 * self.n_layers * self.len * self.kv_dim * size_of::<f32>()
    }
}
