//! The CUDA backend (`--features cuda`): the same forward pass as src/model.rs, on an NVIDIA
//! GPU, with hand-written kernels compiled at run time by NVRTC.
//!
//! Reading order, each file the GPU twin of a CPU one:
//! - `kernels/*.cu` — the kernels, one operation per file, each naming its CPU twin;
//! - [`nvrtc`] — how the kernel source becomes GPU code while kvlab runs;
//! - [`gpu`] — opening the GPU, and the checks that make "no GPU here" an error, not a crash;
//! - [`ops`] — one safe Rust function per kernel launch (src/ops.rs on the GPU);
//!   [`ops_quant`]: attention over an int8 cache (src/cache/quant/, `--kv int8`);
//! - [`weights`] — the model uploaded once, in f32 or bf16;
//! - [`kv_cache`] — the KV cache in GPU memory (src/cache/preallocated.rs);
//! - [`forward`] — the forward pass (src/model.rs), naive and cached;
//! - [`decoder`] — the two paths behind the generation loop's `Decoder` trait
//!   (`src/backend.rs` picks one; `src/lab/gpu_bench.rs` measures them against the
//!   memory-bandwidth roofline, `kvlab bench --device cuda`);
//! - [`speculative`] — greedy speculative decoding with the n-gram drafter, verified on the
//!   GPU (src/speculative/decode.rs).
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
pub mod gpu;
pub mod kv_cache;
pub mod nvrtc;
pub mod ops;
pub mod ops_attention;
pub mod ops_quant;
pub mod speculative;
pub mod weights;

pub use decoder::{GpuCached, GpuNaive};
pub use forward::{GpuKvSource, RunState};
pub use gpu::Gpu;
pub use kv_cache::GpuKvCache;
pub use ops::{AttentionVersion, MatmulVersion};
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
        })
    }

    /// The same model with other kernels (the bench and the tests compare versions).
    pub fn with_kernels(mut self, matmul: MatmulVersion, attention: AttentionVersion) -> GpuModel {
        self.matmul = matmul;
        self.attention = attention;
        self
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
        })
    }

    /// E.g. `cuda: NVIDIA H200 (sm_90, driver 13.0, NVRTC 13.0, PTX compute_90), weights bf16, kernels matmul v2, attention v2`.
    pub fn describe(&self) -> String {
        let dtype = self.dtype.name();
        let version = |v2: bool| if v2 { "v2" } else { "v1" };
        format!(
            "cuda: {}, weights {dtype}, kernels matmul {}, attention {}",
            self.gpu.describe(),
            version(self.matmul == MatmulVersion::V2),
            version(self.attention == AttentionVersion::V2)
        )
    }
}
