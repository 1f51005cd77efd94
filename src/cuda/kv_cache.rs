//! The KV cache in GPU memory: the CPU's [`crate::cache::PreallocatedCache`], same layout, same verbs.
//!
//! `[n_layers, capacity, n_kv_heads, head_dim]` for K and again for V, f32, allocated once for
//! the whole request (prompt + max_new_tokens positions). Values stay f32 even with bf16
//! weights: the cache is what the naive path recomputes, and keeping it exact is what lets
//! the two paths agree bit for bit. (A bf16 or int8 cache would halve or quarter these
//! bytes; KIVI, Liu et al. 2024, goes to 2 bits.)

use super::gpu::Gpu;
use crate::config::Config;
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

/// A preallocated KV cache for one sequence, on the GPU.
pub struct GpuKvCache {
    /// `[n_layers, capacity, n_kv_heads, head_dim]`
    k: CudaSlice<f32>,
    /// `[n_layers, capacity, n_kv_heads, head_dim]`
    v: CudaSlice<f32>,
    n_layers: usize,
    capacity: usize,
    /// `n_kv_heads * head_dim`: one position of one layer.
    kv_dim: usize,
    /// Positions filled (the same in every layer between forward passes).
    len: usize,
}

impl GpuKvCache {
    /// Reserves `capacity` positions of every layer, zeroed, up front.
    pub fn new(gpu: &Gpu, config: &Config, capacity: usize) -> Result<GpuKvCache> {
        let kv_dim = config.n_kv_heads() * config.head_dim();
        let n_layers = config.num_hidden_layers;
        let size = n_layers * capacity * kv_dim;
        Ok(GpuKvCache {
            k: gpu.zeros(size)?,
            v: gpu.zeros(size)?,
            n_layers,
            capacity,
            kv_dim,
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

    /// Writes layer `layer`'s K and V (`[n, kv_dim]` each) at positions `len..len + n`.
    pub fn write(
        &mut self,
        gpu: &Gpu,
        layer: usize,
        k: &CudaView<f32>,
        v: &CudaView<f32>,
        n: usize,
    ) -> Result<()> {
        self.reserve(n)?;
        let rows = n * self.kv_dim;
        let (Some(k), Some(v)) = (k.try_slice(..rows), v.try_slice(..rows)) else {
            return Err(Error::Cuda(format!(
                "internal: {n} positions of K and V need {rows} values each, got {} and {}",
                k.len(),
                v.len()
            )));
        };
        gpu.kv_append(
            &mut self.k.as_view_mut(),
            &mut self.v.as_view_mut(),
            &k,
            &v,
            self.kv_dim,
            layer,
            self.capacity,
            self.len,
        )
    }

    /// Layer `layer`'s keys and values for positions `0..end`, each `[end, kv_dim]`.
    pub fn read(&self, layer: usize, end: usize) -> (CudaView<'_, f32>, CudaView<'_, f32>) {
        let start = layer * self.capacity * self.kv_dim;
        let stop = start + end.min(self.capacity) * self.kv_dim;
        (self.k.slice(start..stop), self.v.slice(start..stop))
    }

    /// The whole of both caches, `[n_layers, capacity, kv_dim]` each, for a kernel that writes
    /// new rows itself (the fused RoPE + KV append); the caller advances [`Self::len`].
    pub(crate) fn buffers_mut(&mut self) -> (CudaViewMut<'_, f32>, CudaViewMut<'_, f32>) {
        (self.k.as_view_mut(), self.v.as_view_mut())
    }

    /// Marks `n` new positions as filled, once every layer has written them.
    pub fn advance(&mut self, n: usize) {
        self.len += n;
    }

    /// Keeps the first `len` positions and forgets the rest (a rejected speculative draft,
    /// an edited chat turn). Nothing is erased: later writes overwrite the forgotten rows.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Forgets every position (the memory stays reserved).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Bytes reserved (as the CPU cache and `kvlab kv-size --dtype f32` count them).
    pub fn bytes_allocated(&self) -> usize {
        2 * self.n_layers * self.capacity * self.kv_dim * std::mem::size_of::<f32>()
    }

    /// Bytes holding live positions.
    pub fn bytes_used(&self) -> usize {
        2 * self.n_layers * self.len * self.kv_dim * std::mem::size_of::<f32>()
    }
}
