//! Every decoder is built here: a device ([`crate::device::Device`]), a weight format
//! ([`WeightDtype`] on the CPU, [`GpuDtype`] on the GPU), a path (naive or cached) and a
//! cache layout in, a [`Decoder`] for the generation loop out.
//!
//! Both devices give the generation loop a [`Decoder`]; everything above it — sampling,
//! timing, the naive-vs-cached comparison — is shared. Book: naive-vs-cached.md.

use crate::cache::build::new_composed_store;
use crate::cache::{CacheKind, KvPolicy, KvStore, DEFAULT_BLOCK_SIZE};
use crate::config::Config;
use crate::device::{Device, GpuDtype, WeightDtype, WeightLayout};
use crate::error::Result;
use crate::generate::{
    check_request, generate_with, Cached, Decoder, GenerateOptions, Generation, Naive, PathKind,
};
use crate::model::Model;
use crate::simd::{Bf16aBlock, Q8Block, W8a8Block, WeightElem, PANEL};
use crate::weights::CpuWeights;
use half::bf16;

/// Where the cached path keeps K and V: a layout, and the block size of the paged ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLayout {
    pub kind: CacheKind,
    /// Positions per block, for [`CacheKind::Paged`] and [`CacheKind::Prefix`].
    pub block_size: usize,
    /// What the cache keeps of each position (`--kv`): f32, int8, int4, a window...
    pub policy: KvPolicy,
}

impl Default for CacheLayout {
    fn default() -> CacheLayout {
        CacheLayout {
            kind: CacheKind::Preallocated,
            block_size: DEFAULT_BLOCK_SIZE,
            policy: KvPolicy::Full,
        }
    }
}

/// A cache of `layout` for one sequence of up to `capacity` positions: its layout
/// holding what its policy keeps ([`new_composed_store`]: `--cache paged --kv int8` is a
/// pool of int8 blocks; a combination a layout cannot hold is an error, not a silent choice).
pub fn new_layout_store(
    config: &Config,
    layout: CacheLayout,
    capacity: usize,
) -> Result<Box<dyn KvStore>> {
    new_composed_store(
        config,
        layout.kind,
        layout.policy,
        capacity,
        layout.block_size,
    )
}

// ANCHOR: cpu_decoder
/// The CPU decoder for `path`, sized for `prompt_len + max_new_tokens` positions. The
/// naive path keeps no cache; the cached one keeps it in `layout` (preallocated: the
/// whole request reserved up front, book: cache-layouts.md). The weights may be f32,
/// bf16 or int8 (`E`): the same decoders, the same f32 arithmetic on the widened weights.
pub fn cpu_decoder<'a, E: WeightElem>(
    model: &'a Model<E>,
    path: PathKind,
    layout: CacheLayout,
    prompt_len: usize,
    max_new_tokens: usize,
) -> Result<Box<dyn Decoder + 'a>> {
    Ok(match path {
        PathKind::Naive => Box::new(Naive {
            model,
            seq: Vec::new(),
        }),
        PathKind::Cached => Box::new(Cached {
            model,
            cache: new_layout_store(&model.config, layout, prompt_len + max_new_tokens)?,
        }),
    })
}
// ANCHOR_END: cpu_decoder

/// Generates up to `max_new_tokens` after `prompt` on the CPU (preallocated cache),
/// calling `on_token` with each token as soon as it is chosen (for streaming).
pub fn generate<E: WeightElem>(
    model: &Model<E>,
    prompt: &[u32],
    opts: &GenerateOptions,
    on_token: impl FnMut(u32),
) -> Result<Generation> {
    check_request(&model.config, prompt, opts.max_new_tokens)?;
    let mut decoder = cpu_decoder(
        model,
        opts.path,
        CacheLayout::default(),
        prompt.len(),
        opts.max_new_tokens,
    )?;
    generate_with(decoder.as_mut(), prompt, opts, on_token)
}

/// A model ready to run on one device, in one weight format.
pub enum Backend<'a> {
    /// f32 weights, as loaded (row layout).
    Cpu(&'a Model),
    /// f32 weights in panels: the loaded model laid out once (`Model::to_panels`).
    CpuPanels(Box<Model<[f32; PANEL]>>),
    /// bf16 weights: the loaded model converted once (`Model::to_bf16`).
    CpuBf16(Box<Model<bf16>>),
    /// bf16 weights in panels.
    CpuBf16Panels(Box<Model<[bf16; PANEL]>>),
    /// int8 weights (Q8_0 blocks): the loaded model quantized once (`Model::to_int8`).
    CpuInt8(Box<Model<Q8Block>>),
    /// int8 weights times int8 activations (`Model::to_w8a8`, `simd::w8a8`).
    CpuW8a8(Box<Model<W8a8Block>>),
    /// bf16 weights times bf16 activations (`Model::to_bf16a`, `simd::bf16a`).
    CpuBf16a(Box<Model<Bf16aBlock>>),
    /// The reference core (`src/textbook.rs`): one thread, f32 rows, nothing optimised;
    /// the engine's bits, slower (`--impl textbook`).
    Textbook(&'a Model),
    /// The reference core with the learner's exercise code for RMSNorm, RoPE, attention
    /// and the KV cache (`src/learner.rs`, `--impl learner`).
    Learner(&'a Model),
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::GpuModel),
}

impl<'a> Backend<'a> {
    /// `model` on the CPU with its weights in `dtype` (bf16, int8: converted here, once;
    /// int8 fails on a model whose matrices do not split into whole blocks) and, for f32
    /// and bf16, in `layout`. Panels are a copy of the weights in the order decode reads
    /// them; a model whose output dimensions are not multiples of 32 keeps its rows.
    pub fn cpu(model: &'a Model, dtype: WeightDtype, layout: WeightLayout) -> Result<Backend<'a>> {
        Ok(match CpuWeights::convert(model, dtype, layout, false)? {
            CpuWeights::F32Rows(model) => Backend::Cpu(model),
            CpuWeights::F32Panels(panels) => Backend::CpuPanels(Box::new(panels)),
            CpuWeights::Bf16Rows(half) => Backend::CpuBf16(Box::new(half)),
            CpuWeights::Bf16Panels(panels) => Backend::CpuBf16Panels(Box::new(panels)),
            CpuWeights::Int8(blocks) => Backend::CpuInt8(Box::new(blocks)),
            CpuWeights::W8a8(blocks) => Backend::CpuW8a8(Box::new(blocks)),
            CpuWeights::Bf16a(blocks) => Backend::CpuBf16a(Box::new(blocks)),
        })
    }

    /// Prepares `model` for `device` (on CUDA: compiles the kernels and uploads the
    /// weights in `gpu_dtype`; on the CPU: f32 weights, [`Backend::cpu`] for bf16 and int8).
    pub fn new(device: Device, model: &'a Model, gpu_dtype: GpuDtype) -> Result<Backend<'a>> {
        match device {
            Device::Cpu => Ok(Backend::Cpu(model)),
            #[cfg(feature = "cuda")]
            // The decode kernels: split-K matmul (v3) and attention (v3). On an H200 the
            // plain kernels' decode step is bound by their one-thread-per-output matmuls
            // (book: cuda.md, "What the H200 measured"); v3 runs it about 3x faster, and
            // both paths still share every kernel, so naive == cached stays bitwise.
            Device::Cuda => Ok(Backend::Cuda(
                crate::cuda::GpuModel::upload(model, gpu_dtype)?.with_kernels(
                    crate::cuda::MatmulVersion::V3,
                    crate::cuda::AttentionVersion::V3,
                ),
            )),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda => {
                let _ = gpu_dtype;
                Err(crate::error::Error::Cuda(
                    "this kvlab was built without CUDA support: rebuild with `cargo build --release --features cuda`".into(),
                ))
            }
        }
    }

    /// A fresh decoder for one request of `prompt_len + max_new_tokens` positions, its
    /// cache (cached path) in `layout`. On the GPU the cache is in GPU memory: preallocated,
    /// paged (`--cache paged`: block tables from the CPU's pool logic, blocks on the GPU,
    /// src/cuda/paged_cache.rs) or int8 (`--kv int8`, src/cuda/int8_cache.rs). The other
    /// layouts and `--kv` policies are the CPU's.
    pub fn decoder(
        &self,
        path: PathKind,
        layout: CacheLayout,
        prompt_len: usize,
        max_new_tokens: usize,
    ) -> Result<Box<dyn Decoder + '_>> {
        match self {
            Backend::Cpu(model) => cpu_decoder(model, path, layout, prompt_len, max_new_tokens),
            Backend::CpuPanels(model) => {
                cpu_decoder(model, path, layout, prompt_len, max_new_tokens)
            }
            Backend::CpuBf16(model) => cpu_decoder(model, path, layout, prompt_len, max_new_tokens),
            Backend::CpuBf16Panels(model) => {
                cpu_decoder(model, path, layout, prompt_len, max_new_tokens)
            }
            Backend::CpuInt8(model) => cpu_decoder(model, path, layout, prompt_len, max_new_tokens),
            Backend::CpuW8a8(model) => cpu_decoder(model, path, layout, prompt_len, max_new_tokens),
            Backend::CpuBf16a(model) => {
                cpu_decoder(model, path, layout, prompt_len, max_new_tokens)
            }
            Backend::Textbook(model) => {
                if layout != CacheLayout::default() {
                    return Err(crate::error::Error::InvalidArgument(
                        "--impl textbook keeps the textbook's plain cache (a growing list of rows per layer): drop --cache, --block-size and --kv".into(),
                    ));
                }
                Ok(crate::textbook::decoder(
                    model,
                    path,
                    &crate::textbook::Reference,
                ))
            }
            Backend::Learner(model) => {
                // Your exercise 10 cache, or with --cache paged your exercise 18 block pool.
                let paged = match (layout.kind, layout.policy) {
                    (CacheKind::Preallocated, KvPolicy::Full)
                        if layout.block_size == DEFAULT_BLOCK_SIZE =>
                    {
                        None
                    }
                    (CacheKind::Paged, KvPolicy::Full) => Some(layout.block_size),
                    _ => {
                        return Err(crate::error::Error::InvalidArgument(
                            "--impl learner runs your own caches: exercise 10's (the default) or, with --cache paged [--block-size N], exercise 18's block pool: drop --kv and the other --cache layouts".into(),
                        ))
                    }
                };
                let capacity = prompt_len.saturating_add(max_new_tokens);
                Ok(crate::learner::decoder(model, path, capacity, paged))
            }
            #[cfg(feature = "cuda")]
            Backend::Cuda(gpu) => {
                let capacity = prompt_len.saturating_add(max_new_tokens);
                Ok(match (path, layout.kind, layout.policy) {
                    (PathKind::Naive, _, _) => Box::new(gpu.naive_decoder(capacity)?),
                    (_, CacheKind::Preallocated, KvPolicy::Full) => {
                        Box::new(gpu.cached_decoder(capacity)?)
                    }
                    (_, CacheKind::Paged, KvPolicy::Full) => {
                        Box::new(gpu.paged_decoder(layout.block_size, capacity)?)
                    }
                    (_, CacheKind::Preallocated, KvPolicy::Int8) => {
                        Box::new(gpu.int8_decoder(capacity)?)
                    }
                    (_, kind, policy) => {
                        return Err(crate::error::Error::InvalidArgument(format!(
                            "--cache {} --kv {} runs on the CPU only: the CUDA backend has a preallocated or paged f32 cache and a preallocated int8 one. Use --cache paged, --kv int8 or --device cpu",
                            kind.name(),
                            policy.name()
                        )))
                    }
                })
            }
        }
    }

    /// The textbook and the learner's backends are second implementations of the engine's
    /// pass: their name and the files their kernels come from, for `kvlab compare` to
    /// check them against the engine. `None` for the engine itself.
    pub fn second_implementation(&self) -> Option<(&'static str, &'static [&'static str])> {
        match self {
            Backend::Textbook(_) => Some(("textbook", &["src/textbook.rs"])),
            Backend::Learner(_) => Some(("learner", &crate::learner::FILES)),
            _ => None,
        }
    }

    pub fn device(&self) -> Device {
        match self {
            Backend::Cpu(_)
            | Backend::CpuPanels(_)
            | Backend::CpuBf16(_)
            | Backend::CpuBf16Panels(_)
            | Backend::CpuInt8(_)
            | Backend::CpuW8a8(_)
            | Backend::CpuBf16a(_)
            | Backend::Textbook(_)
            | Backend::Learner(_) => Device::Cpu,
            #[cfg(feature = "cuda")]
            Backend::Cuda(_) => Device::Cuda,
        }
    }

    /// A one-line description (device name, weight format).
    pub fn describe(&self) -> String {
        match self {
            Backend::Cpu(_) => cpu_describe("f32"),
            Backend::CpuPanels(_) => cpu_describe("f32 in panels"),
            Backend::CpuBf16(_) => cpu_describe("bf16"),
            Backend::CpuBf16Panels(_) => cpu_describe("bf16 in panels"),
            Backend::CpuInt8(_) => cpu_describe("int8"),
            Backend::CpuW8a8(_) => cpu_describe("int8 weights x int8 activations (w8a8)"),
            Backend::CpuBf16a(_) => cpu_describe("bf16 weights x bf16 activations (bf16a)"),
            Backend::Textbook(_) => {
                "cpu (1 thread, f32, the textbook core: src/textbook.rs)".into()
            }
            Backend::Learner(_) => {
                "cpu (1 thread, f32, the textbook core with your exercises: src/learner.rs)".into()
            }
            #[cfg(feature = "cuda")]
            Backend::Cuda(gpu) => gpu.describe(),
        }
    }
}

/// "cpu (2 threads, f32 in panels)".
fn cpu_describe(weights: &str) -> String {
    format!("cpu ({} threads, {weights})", rayon::current_num_threads())
}
