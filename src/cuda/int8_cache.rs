//! The int8 KV cache in GPU memory (`--device cuda --kv int8`): the CPU's `--kv int8` cache
//! (src/cache/quant/, one symmetric scale per position per KV head), same layout, same codes.
//!
//! New rows are quantized as they are written (kernels/kv_append.cu, `kv_append_int8`: the
//! CPU's `quantize_i8`, bit for bit) and attention reads the codes as they are, dequantizing
//! in registers (kernels/attention_int8.cu). A decode step reads a quarter of the f32
//! cache's bytes plus one scale per head: at long contexts, where the cache outweighs the
//! model, that is what the step's time follows (book: kv-quantization.md).

use super::gpu::Gpu;
use crate::attention::Heads;
use crate::config::Config;
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

// ANCHOR: gpu_int8_cache
/// A preallocated int8 KV cache for one sequence, on the GPU.
pub struct GpuInt8Cache {
    /// `[n_layers, capacity, n_kv_heads, head_dim]` int8 codes, for K and for V
    k_codes: CudaSlice<i8>,
    v_codes: CudaSlice<i8>,
    /// `[n_layers, capacity, n_kv_heads]`: value = code x scale
    k_scales: CudaSlice<f32>,
    v_scales: CudaSlice<f32>,
    heads: Heads,
    n_layers: usize,
    capacity: usize,
    /// Positions filled (the same in every layer between forward passes).
    len: usize,
}
// ANCHOR_END: gpu_int8_cache

impl GpuInt8Cache {
    /// Reserves `capacity` positions of every layer up front.
    pub fn new(gpu: &Gpu, config: &Config, capacity: usize) -> Result<GpuInt8Cache> {
        let heads = Heads::of(config);
        let n_layers = config.num_hidden_layers;
        let too_big = || Error::OutOfMemory {
            what: "the GPU's int8 KV cache".into(),
            bytes: u128::MAX,
        };
        let rows = n_layers.checked_mul(capacity).ok_or_else(too_big)?;
        let scales = rows.checked_mul(heads.n_kv_heads).ok_or_else(too_big)?;
        let codes = scales.checked_mul(heads.head_dim).ok_or_else(too_big)?;
        Ok(GpuInt8Cache {
            k_codes: gpu.zeros(codes)?,
            v_codes: gpu.zeros(codes)?,
            k_scales: gpu.zeros(scales)?,
            v_scales: gpu.zeros(scales)?,
            heads,
            n_layers,
            capacity,
            len: 0,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Checks that `n` more positions fit, before any layer writes anything.
    pub fn reserve(&self, n: usize) -> Result<()> {
        if self.len + n > self.capacity {
            return Err(Error::CacheFull {
                capacity: self.capacity,
                used: self.len,
                requested: n,
            });
        }
        Ok(())
    }

    /// Quantizes layer `layer`'s K and V (`[n, kv_dim]` each) into positions `len..len + n`.
    pub fn write(
        &mut self,
        gpu: &Gpu,
        layer: usize,
        k: &CudaView<f32>,
        v: &CudaView<f32>,
        n: usize,
    ) -> Result<()> {
        self.reserve(n)?;
        gpu.kv_append_int8(
            (
                &mut self.k_codes.as_view_mut(),
                &mut self.k_scales.as_view_mut(),
            ),
            (
                &mut self.v_codes.as_view_mut(),
                &mut self.v_scales.as_view_mut(),
            ),
            k,
            v,
            n,
            (layer, self.capacity, self.len),
            self.heads,
        )
    }

    /// Attention of `n` queries at `start_pos..start_pos + n` over layer `layer`'s positions
    /// `0..start_pos + n` (the last `window` of them per query for a local layer), read as
    /// codes and scales.
    pub fn attend(
        &self,
        gpu: &Gpu,
        layer: usize,
        out: &mut CudaViewMut<f32>,
        q: &CudaView<f32>,
        (n, start_pos, window): (usize, usize, Option<usize>),
    ) -> Result<()> {
        let Heads {
            n_kv_heads,
            head_dim,
            ..
        } = self.heads;
        let end = (start_pos + n).min(self.capacity);
        let first = layer * self.capacity;
        let codes = (first * n_kv_heads * head_dim)..((first + end) * n_kv_heads * head_dim);
        let scales = (first * n_kv_heads)..((first + end) * n_kv_heads);
        let (Some(kc), Some(vc), Some(ks), Some(vs)) = (
            self.k_codes.try_slice(codes.clone()),
            self.v_codes.try_slice(codes),
            self.k_scales.try_slice(scales.clone()),
            self.v_scales.try_slice(scales),
        ) else {
            return Err(Error::Internal(format!(
                "the int8 cache has no layer {layer}"
            )));
        };
        gpu.attention_int8(out, q, &kc, &ks, &vc, &vs, n, start_pos, self.heads, window)
    }

    /// Marks `n` new positions as filled, once every layer has written them.
    pub fn advance(&mut self, n: usize) {
        self.len += n;
    }

    /// Keeps the first `len` positions (later writes overwrite the rest).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Bytes of one position in every layer: codes and scales of K and of V.
    fn bytes_per_position(&self) -> usize {
        let Heads {
            n_kv_heads,
            head_dim,
            ..
        } = self.heads;
        2 * self.n_layers * n_kv_heads * (head_dim + std::mem::size_of::<f32>())
    }

    /// Bytes reserved (as the CPU's `--kv int8` cache counts them).
    pub fn bytes_reserved(&self) -> usize {
        self.capacity * self.bytes_per_position()
    }

    /// Bytes holding live positions.
    pub fn bytes_used(&self) -> usize {
        self.len * self.bytes_per_position()
    }
}
