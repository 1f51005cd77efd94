//! The CUDA backend (`--features cuda`): the same forward pass as src/model.rs, on an NVIDIA
//! GPU, with hand-written kernels compiled at run time by NVRTC.
//!
//! Reading order, each file the GPU twin of a CPU one:
//! - `kernels/*.cu` — the kernels, one operation per file, each naming its CPU twin;
//! - [`nvrtc`] — how the kernel source becomes GPU code while kvlab runs;
//! - [`gpu`] — opening the GPU, and the checks that make "no GPU here" an error, not a crash;
//! - [`ops`] — one safe Rust function per kernel launch (src/ops.rs on the GPU);
//!   [`ops_attention`] the same for the KV append and attention v1/v2/paged;
//! - [`ops_fused`] — the fused kernels (RMSNorm→QKV, residual epilogues, SwiGLU→down,
//!   RoPE + KV append), each bitwise equal to the unfused chain it replaces;
//! - [`ops_splitk`] — attention v3, split-K (Flash-Decoding) for long contexts;
//!   [`ops_quant`]: attention over an int8 cache (src/cache/quant/, `--kv int8`);
//! - [`weights`] — the model uploaded once, in f32 or bf16;
//! - [`kv_cache`] — the KV cache in GPU memory (src/cache/preallocated.rs); [`paged_cache`]
//!   the paged one, its block tables from the CPU's pool logic (src/cache/paged/);
//!   [`int8_cache`] the int8 one (src/cache/quant/, `--kv int8`);
//! - [`forward`] — the forward pass (src/model.rs), naive and cached; [`forward_fused`] the
//!   same pass with the fused kernels, 7 launches per layer instead of 15;
//! - [`graph`] — the cached decode step captured once as a CUDA graph, replayed per token;
//! - [`decoder`] — the two paths behind the generation loop's `Decoder` trait
//!   (`src/backend.rs` picks one; `src/lab/gpu_bench.rs` measures them against the
//!   memory-bandwidth roofline, `kvlab bench --device cuda`);
//! - [`roof`] — the GPU's own read-bandwidth and FMA roofs, measured (kernels/roof.cu);
//! - [`speculative`] — greedy speculative decoding with the n-gram drafter, verified on the
//!   GPU (src/speculative/decode.rs).
//!
//! Book chapter: "The CUDA backend: kernels and their CPU twins" (book/src/cuda.md).
//!
//! What the GPU changes, and what it does not: the arithmetic is the CPU's (f32 sums, the
//! same RoPE tables, the same softmax; the matmuls even run the CPU's exact chain of fused
//! multiply-adds), but reductions split across threads (RMSNorm's sum of squares, v2
//! attention's dot products) add in other orders and CUDA's `expf` is not Rust's `exp`, so
//! GPU and CPU logits agree to a tolerance, not bit for bit. Between the GPU's own naive and
//! cached paths they *are* bitwise equal, for the reason the CPU's are: every kernel is
//! row-independent (see kernels/matmul.cu).

pub mod decoder;
pub mod forward;
pub mod forward_fused;
pub mod gpu;
pub mod graph;
pub mod int8_cache;
pub mod kv_cache;
pub mod nvrtc;
pub mod ops;
pub mod ops_attention;
pub mod ops_fused;
pub mod ops_quant;
pub mod ops_splitk;
pub mod paged_cache;
pub mod roof;
pub mod speculative;
pub mod weights;

pub use decoder::{GpuCached, GpuCachedIn, GpuNaive, GpuStore};
pub use forward::{GpuKvSource, RunState};
pub use gpu::Gpu;
pub use int8_cache::GpuInt8Cache;
pub use kv_cache::GpuKvCache;
pub use ops::{AttentionVersion, MatmulVersion};
pub use ops_attention::GpuBlockTable;
pub use paged_cache::GpuPagedCache;
pub use weights::GpuWeights;

use crate::config::Config;
use crate::device::GpuDtype;
use crate::error::Result;
use crate::model::Model;
use std::sync::Arc;

/// A model uploaded to the GPU, with its kernels compiled: what `--device cuda` runs.
///
/// (Config and weights are boxed so that `backend::Backend`, an enum that holds either a
/// `&Model` or a `GpuModel`, stays small instead of as big as every buffer handle it holds.)
pub struct GpuModel {
    pub(crate) gpu: Arc<Gpu>,
    pub config: Box<Config>,
    pub weights: Box<GpuWeights>,
    pub dtype: GpuDtype,
    /// The matmul kernel every linear layer uses (one choice for both paths: see kernels/matmul.cu).
    pub matmul: MatmulVersion,
    /// The attention kernel both paths use.
    pub attention: AttentionVersion,
    /// Run the fused kernels (kernels/fused.cu, with attention v3) instead of the unfused
    /// ones: 7 launches per layer instead of 15. Both paths use the same choice.
    pub fused: bool,
    /// Replay the cached path's decode steps from a CUDA graph (src/cuda/graph.rs): one
    /// launch per token instead of one per kernel. Needs `fused` (its kernels read the
    /// position from the GPU).
    pub graphs: bool,
}

impl GpuModel {
    /// Opens GPU 0, compiles the kernels and uploads `model`'s weights in `dtype`.
    ///
    /// Never panics: without a CUDA driver, without NVRTC or without a GPU it returns
    /// `Error::Cuda` with a message that says what is missing and what to do.
    pub fn upload(model: &Model, dtype: GpuDtype) -> Result<GpuModel> {
        GpuModel::upload_on(Arc::new(Gpu::new()?), model, dtype)
    }

    /// [`GpuModel::upload`] onto a GPU that is already open (tests share one).
    pub fn upload_on(gpu: Arc<Gpu>, model: &Model, dtype: GpuDtype) -> Result<GpuModel> {
        let weights = GpuWeights::upload(&gpu, model, dtype)?;
        Ok(GpuModel {
            gpu,
            config: Box::new(model.config.clone()),
            weights: Box::new(weights),
            dtype,
            matmul: MatmulVersion::V2,
            attention: AttentionVersion::V2,
            fused: false,
            graphs: false,
        })
    }

    /// The same model with other kernels (the bench and the tests compare versions).
    pub fn with_kernels(mut self, matmul: MatmulVersion, attention: AttentionVersion) -> GpuModel {
        self.matmul = matmul;
        self.attention = attention;
        self
    }

    /// The same model with the fused kernels on or off, and decode steps replayed from a
    /// CUDA graph or launched one kernel at a time. Graphs need the fused kernels.
    pub fn with_plan(mut self, fused: bool, graphs: bool) -> Result<GpuModel> {
        self.set_plan(fused, graphs)?;
        Ok(self)
    }

    /// [`GpuModel::with_plan`] in place (the bench switches plans on one uploaded model).
    pub fn set_plan(&mut self, fused: bool, graphs: bool) -> Result<()> {
        if fused && self.config.is_gemma3() {
            // The fused kernels fold RMSNorm into the next matmul and SwiGLU into the down
            // projection: Gemma's QK-norm, sandwich norms, GeGLU and windows are not in them.
            return Err(crate::error::Error::InvalidArgument(
                "the fused CUDA kernels build a Llama layer; Gemma 3 (QK-norm, sandwich norms, \
                 GeGLU, local windows) runs on the unfused kernels, the default of --device cuda"
                    .into(),
            ));
        }
        if graphs && !fused {
            return Err(crate::error::Error::InvalidArgument(
                "CUDA graphs replay the fused kernels (they read the position from the GPU): \
                 turn on the fused kernels too"
                    .into(),
            ));
        }
        self.fused = fused;
        self.graphs = graphs;
        Ok(())
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The naive path, with buffers for a sequence of up to `capacity` tokens.
    pub fn naive_decoder(&self, capacity: usize) -> Result<GpuNaive<'_>> {
        Ok(GpuNaive {
            model: self,
            state: RunState::new(&self.gpu, &self.config, capacity)?,
            seq: Vec::new(),
        })
    }

    /// The cached path, with a KV cache of `capacity` positions in GPU memory.
    pub fn cached_decoder(&self, capacity: usize) -> Result<GpuCached<'_>> {
        Ok(GpuCached {
            model: self,
            state: RunState::new(&self.gpu, &self.config, capacity)?,
            cache: GpuKvCache::new(&self.gpu, &self.config, capacity)?,
            graph: None,
        })
    }

    /// The cached path over a paged cache: blocks of `block_size` positions, enough for
    /// `capacity`, in GPU memory; attention through the block table.
    pub fn paged_decoder(&self, block_size: usize, capacity: usize) -> Result<GpuCachedIn<'_>> {
        let cache = GpuPagedCache::new(&self.gpu, &self.config, block_size, capacity)?;
        self.cached_decoder_in(GpuStore::Paged(Box::new(cache)), capacity)
    }

    /// The cached path over an int8 cache of `capacity` positions.
    pub fn int8_decoder(&self, capacity: usize) -> Result<GpuCachedIn<'_>> {
        let cache = GpuInt8Cache::new(&self.gpu, &self.config, capacity)?;
        self.cached_decoder_in(GpuStore::Int8(Box::new(cache)), capacity)
    }

    fn cached_decoder_in(&self, cache: GpuStore, capacity: usize) -> Result<GpuCachedIn<'_>> {
        Ok(GpuCachedIn {
            model: self,
            state: RunState::new(&self.gpu, &self.config, capacity)?,
            cache,
        })
    }

    /// E.g. `cuda: NVIDIA H200 (sm_90, driver 13.0, NVRTC 13.0, code compute_90), weights bf16, kernels matmul v2, attention v2`.
    pub fn describe(&self) -> String {
        format!(
            "cuda: {}, weights {}, kernels {}",
            self.gpu.describe(),
            self.dtype.name(),
            self.kernels()
        )
    }

    /// The kernels in use, e.g. `matmul v2, attention v2` or `fused + attention v3, graphs`.
    pub fn kernels(&self) -> String {
        if self.fused {
            let graphs = if self.graphs { ", graphs" } else { "" };
            format!("fused + attention v3{graphs}")
        } else {
            format!(
                "matmul {}, attention {}",
                self.matmul.name(),
                self.attention.name()
            )
        }
    }
}
