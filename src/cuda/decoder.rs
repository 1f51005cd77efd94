//! The two generation paths on the GPU, behind the same [`Decoder`] trait as the CPU's
//! (src/generate.rs), so `kvlab generate/compare/demo --device cuda` share its loop.

use super::forward::{GpuKvSource, RunState};
use super::graph::DecodeGraph;
use super::int8_cache::GpuInt8Cache;
use super::kv_cache::GpuKvCache;
use super::paged_cache::GpuPagedCache;
use super::GpuModel;
use crate::cache::KvBytes;
use crate::error::Result;
use crate::generate::Decoder;

/// Naive: keeps the token ids only and runs the whole sequence again at every step.
pub struct GpuNaive<'a> {
    pub model: &'a GpuModel,
    pub state: RunState,
    pub seq: Vec<u32>,
}

impl Decoder for GpuNaive<'_> {
    fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>> {
        self.seq = prompt.to_vec();
        self.model
            .forward_logits(&self.seq, GpuKvSource::ThisPass, &mut self.state)
    }
    fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        self.seq.push(token);
        self.model
            .forward_logits(&self.seq, GpuKvSource::ThisPass, &mut self.state)
    }
    fn kv_bytes(&self) -> KvBytes {
        KvBytes::default()
    }
}

/// Cached: keeps every layer's K and V in GPU memory and runs one token per step.
pub struct GpuCached<'a> {
    pub model: &'a GpuModel,
    pub state: RunState,
    pub cache: GpuKvCache,
    /// The decode step as a CUDA graph, captured at the first step when `model.graphs`.
    pub graph: Option<DecodeGraph>,
}

impl GpuCached<'_> {
    /// A decode step that picks the greedy token on the GPU (`kernels/argmax.cu`) instead of
    /// copying the logits back: what a serving engine does when it samples on the device.
    pub fn step_greedy(&mut self, token: u32) -> Result<u32> {
        if self.model.graphs {
            self.model
                .graph_step(token, &mut self.cache, &mut self.state, &mut self.graph)?;
            return Ok(self.model.gpu.download(&self.state.next_token)?[0]);
        }
        self.model.forward_greedy(
            &[token],
            GpuKvSource::Cache(&mut self.cache),
            &mut self.state,
        )
    }

    /// Prefill, returning the greedy first token (picked on the GPU).
    pub fn prefill_greedy(&mut self, prompt: &[u32]) -> Result<u32> {
        self.model
            .forward_greedy(prompt, GpuKvSource::Cache(&mut self.cache), &mut self.state)
    }
}

impl Decoder for GpuCached<'_> {
    fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>> {
        self.model
            .forward_logits(prompt, GpuKvSource::Cache(&mut self.cache), &mut self.state)
    }
    fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        if self.model.graphs {
            self.model
                .graph_step(token, &mut self.cache, &mut self.state, &mut self.graph)?;
            return self.model.gpu.download(&self.state.logits);
        }
        self.model.forward_logits(
            &[token],
            GpuKvSource::Cache(&mut self.cache),
            &mut self.state,
        )
    }
    fn kv_bytes(&self) -> KvBytes {
        KvBytes {
            reserved: self.cache.bytes_allocated(),
            used: self.cache.bytes_used(),
        }
    }
}

// ANCHOR: gpu_store
/// The GPU caches besides the preallocated f32 one, each the twin of a CPU cache.
/// (Boxed, as the two differ much in size: hundreds of bytes of handles and pool logic.)
pub enum GpuStore {
    /// `--cache paged`: block tables from the CPU's pool logic, blocks in GPU memory.
    Paged(Box<GpuPagedCache>),
    /// `--kv int8`: codes and one scale per position per KV head, as the CPU's.
    Int8(Box<GpuInt8Cache>),
}

impl GpuStore {
    fn source(&mut self) -> GpuKvSource<'_> {
        match self {
            GpuStore::Paged(cache) => GpuKvSource::Paged(cache),
            GpuStore::Int8(cache) => GpuKvSource::Int8(cache),
        }
    }
}

/// The cached path over a [`GpuStore`]: one token per step, the unfused kernels.
pub struct GpuCachedIn<'a> {
    pub model: &'a GpuModel,
    pub state: RunState,
    pub cache: GpuStore,
}
// ANCHOR_END: gpu_store

impl Decoder for GpuCachedIn<'_> {
    fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>> {
        let kv = self.cache.source();
        self.model.forward_logits(prompt, kv, &mut self.state)
    }
    fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        let kv = self.cache.source();
        self.model.forward_logits(&[token], kv, &mut self.state)
    }
    fn kv_bytes(&self) -> KvBytes {
        let (reserved, used) = match &self.cache {
            GpuStore::Paged(c) => (c.bytes_reserved(), c.bytes_used()),
            GpuStore::Int8(c) => (c.bytes_reserved(), c.bytes_used()),
        };
        KvBytes { reserved, used }
    }
}
