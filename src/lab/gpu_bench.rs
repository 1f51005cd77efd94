//! `kvlab bench --device cuda`: how fast the GPU runs prefill and decode, next to the
//! roofline (book: roofline.md).
//!
//! A decode step multiplies one token's vector by every weight matrix: two FLOPs per
//! weight, and every weight must come from memory. So a step cannot be faster than
//! `bytes read / memory bandwidth`, where the bytes are all the weights plus the KV cache
//! read by attention. This module measures tokens/s and prints the fraction of that
//! roofline reached (of the GPU's read bandwidth, measured), and how many kernels a token
//! launches. A launch costs a few µs, so the *launch roof*, `1 / (launches per token ×
//! launch latency)` tokens/s, was the first guess at what bounds a model this small; the
//! H200 refuted it for the plain kernels, whose matmuls were the bound (book: cuda.md,
//! "What the H200 measured"). The bench keeps measuring both, so the next GPU can say
//! which holds there.
//!
//! Every row is measured with each kernel plan: unfused with matmul v1, v2 and v3, fused (7
//! launches per layer, split-K attention), and fused with the decode step replayed from a
//! CUDA graph (1 launch per token). Book chapter "The CUDA backend".
//!
//! Prefill is the other regime: many rows share each weight, and the time is FLOPs.
//! A naive step at context `L` costs a prefill of `L` tokens; a cached step costs one token.
//!
//! Both roofs are measured on the GPU itself, before the model, with kernels as plain as
//! its own (src/cuda/roof.rs): the read bandwidth (an H200's data sheet says 4.8e12
//! bytes/s) and the f32 FMA rate (about 67e12 FLOP/s by the data sheet; kvlab's matmuls
//! are f32 FMA chains, no tensor cores).

use super::roof::prefill_flops;
use super::timing::{ms_since, synthetic_prompt};
use crate::cache::paged::LayerGroups;
use crate::cuda::roof::GpuRoof;
use crate::cuda::{AttentionVersion, GpuModel, MatmulVersion};
use crate::device::GpuDtype;
use crate::error::{Error, Result};
use crate::generate::Decoder;
use crate::model::Model;
use crate::ops;
use serde::Serialize;
use std::time::Instant;

/// HBM3e bandwidth of one H200, bytes/s (NVIDIA's data sheet: 4.8 TB/s).
pub const H200_HBM_BYTES_PER_S: f64 = 4.8e12;

/// One measurement: a model, its kernels, one context length.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    pub weights: GpuDtype,
    /// The kernel plan, as `GpuModel::kernels` says it (e.g. `fused + attention v3, graphs`).
    pub kernels: String,
    pub matmul: MatmulVersion,
    pub attention: AttentionVersion,
    pub fused: bool,
    /// Decode steps replayed from a CUDA graph (prefill never is: it runs once per prompt).
    pub graphs: bool,
    /// Prompt tokens before decoding starts.
    pub context: usize,
    /// Cached path: the prompt in one pass (logits of the last token copied back).
    pub prefill_ms: f64,
    pub prefill_tok_s: f64,
    /// Prefill FLOP/s (`lab::roof::prefill_flops`) / the measured FMA roof.
    pub prefill_flop_fraction: f64,
    /// Cached path, one token per step, logits copied to the host (what `kvlab generate` does).
    pub decode_ms: f64,
    pub decode_tok_s: f64,
    /// The same steps with the greedy token picked on the GPU (4 bytes back per token).
    pub decode_device_argmax_tok_s: f64,
    /// `decode_ms` with the cache in blocks of [`PAGED_BLOCK_SIZE`] read through a block
    /// table (`--cache paged`, attention_paged); `None` for the fused plans, which write a
    /// contiguous cache.
    pub paged_decode_ms: Option<f64>,
    /// `decode_ms` with an int8 cache (`--kv int8`, attention_int8: a quarter of the cache's
    /// f32 bytes read); `None` for the fused plans.
    pub int8_decode_ms: Option<f64>,
    /// Naive path: one step at this context recomputes all `context` tokens.
    pub naive_step_ms: f64,
    /// Bytes a decode step must read: weights + the KV cache at this context.
    pub bytes_per_token: usize,
    /// `bytes_per_token * tokens/s / measured read bandwidth`, for the device-argmax decode.
    pub hbm_fraction: f64,
    /// Launches per decode step (a graph replay is one).
    pub launches_per_token: f64,
    /// `1e6 / (launches_per_token × launch latency in µs)`: the tokens/s if nothing but
    /// launching kernels took time.
    pub launch_roof_tok_s: f64,
    /// `decode_device_argmax_tok_s / launch_roof_tok_s`.
    pub launch_fraction: f64,
}

/// Ok when a prompt of `context` tokens followed by `decode_tokens` greedy tokens fits a
/// model of `max_positions` positions; otherwise an error naming the largest context that
/// does. The bench needs `context + decode_tokens + 1` positions: the prompt, the decoded
/// tokens, and the warm-up's one extra step. Needs no GPU (tests/cuda_bench.rs checks it
/// on any machine).
pub fn check_sizes(max_positions: usize, context: usize, decode_tokens: usize) -> Result<()> {
    if decode_tokens == 0 {
        return Err(Error::InvalidArgument(
            "the GPU bench decodes at least 1 token per context (it divides by the count)".into(),
        ));
    }
    let needed = context
        .checked_add(decode_tokens)
        .and_then(|n| n.checked_add(1));
    if context == 0 || needed.is_none_or(|n| n > max_positions) {
        return Err(Error::InvalidArgument(format!(
            "context {context}: with {decode_tokens} decoded tokens the model's {max_positions} positions \
             allow contexts from 1 to {}",
            max_positions.saturating_sub(decode_tokens + 1)
        )));
    }
    Ok(())
}

/// Measures `model` (uploaded from `cpu`) at one `context`, decoding `decode_tokens`
/// greedy tokens.
pub fn bench_context(
    model: &GpuModel,
    cpu: &Model,
    context: usize,
    decode_tokens: usize,
    roof: &GpuRoof,
    launch_latency_us: f64,
) -> Result<BenchRow> {
    let c = &model.config;
    check_sizes(c.max_position_embeddings, context, decode_tokens)?;
    let prompt = synthetic_prompt(context, c.vocab_size, 0);
    let capacity = context + decode_tokens + 1;
    let gpu = model.gpu();

    // Warm-up: the first launch of each kernel pays one-off costs; keep them out of the figures.
    {
        let mut warm = model.cached_decoder(capacity)?;
        let token = warm.prefill_greedy(&prompt)?;
        warm.step_greedy(token)?;
    }

    // Cached path, logits to the host, as the generation loop runs it.
    let mut cached = model.cached_decoder(capacity)?;
    let t = Instant::now();
    let logits = cached.prefill(&prompt)?; // returns after the copy back: the GPU is done
    let prefill_ms = ms_since(t);
    let mut token = ops::argmax(&logits) as u32;
    // One untimed step: with graphs, the first step captures the graph.
    token = ops::argmax(&cached.step(token)?) as u32;
    let launches_before = gpu.launches();
    let t = Instant::now();
    for _ in 0..decode_tokens {
        token = ops::argmax(&cached.step(token)?) as u32;
    }
    let decode_ms = ms_since(t) / decode_tokens as f64;
    let launches_per_token = (gpu.launches() - launches_before) as f64 / decode_tokens as f64;

    // Cached path, greedy token picked on the GPU.
    let mut greedy = model.cached_decoder(capacity)?;
    let mut token = greedy.prefill_greedy(&prompt)?;
    token = greedy.step_greedy(token)?; // untimed, as above
    let t = Instant::now();
    for _ in 0..decode_tokens {
        token = greedy.step_greedy(token)?;
    }
    let device_argmax_ms = ms_since(t) / decode_tokens as f64;

    // The paged and int8 caches, timed as `decode_ms` (logits to the host), unfused plans
    // only (the fused kernels write a contiguous f32 cache).
    let (paged_decode_ms, int8_decode_ms) = if model.fused {
        (None, None)
    } else {
        let paged = model.paged_decoder(PAGED_BLOCK_SIZE, capacity)?;
        let int8 = model.int8_decoder(capacity)?;
        (
            Some(time_decode(paged, &prompt, decode_tokens)?),
            Some(time_decode(int8, &prompt, decode_tokens)?),
        )
    };

    // Naive path: a step at this context is the whole sequence again.
    let mut naive = model.naive_decoder(context)?;
    let t = Instant::now();
    naive.prefill(&prompt)?;
    let naive_step_ms = ms_since(t);

    let kv_dim = c.n_kv_heads() * c.head_dim();
    // Each step reads K and V of every position a layer's query sees: the whole context
    // (its middle step's), or a local layer's window (Gemma 3).
    let seen = context + decode_tokens / 2;
    let rows_read = LayerGroups::of(c).rows_read(seen);
    let kv_bytes_read = 2 * rows_read * kv_dim * 4;
    let bytes_per_token = model.weights.bytes_read_per_token() + kv_bytes_read;
    let device_tok_s = 1e3 / device_argmax_ms;
    let launch_roof_tok_s = 1e6 / (launches_per_token * launch_latency_us);
    Ok(BenchRow {
        weights: model.dtype,
        kernels: model.kernels(),
        matmul: model.matmul,
        attention: if model.fused {
            AttentionVersion::V3
        } else {
            model.attention
        },
        fused: model.fused,
        graphs: model.graphs,
        context,
        prefill_ms,
        prefill_tok_s: context as f64 / (prefill_ms / 1e3),
        prefill_flop_fraction: prefill_flops(cpu, context)
            / (prefill_ms / 1e3)
            / roof.fma_flop_per_s,
        decode_ms,
        decode_tok_s: 1e3 / decode_ms,
        decode_device_argmax_tok_s: device_tok_s,
        paged_decode_ms,
        int8_decode_ms,
        naive_step_ms,
        bytes_per_token,
        hbm_fraction: bytes_per_token as f64 * device_tok_s / roof.read_bytes_per_s,
        launches_per_token,
        launch_roof_tok_s,
        launch_fraction: device_tok_s / launch_roof_tok_s,
    })
}

/// ms per decode step of `decoder` after `prompt`, logits to the host, over `decode_tokens`
/// steps (one untimed step first, as for `decode_ms`).
fn time_decode(mut decoder: impl Decoder, prompt: &[u32], decode_tokens: usize) -> Result<f64> {
    let mut token = ops::argmax(&decoder.prefill(prompt)?) as u32;
    token = ops::argmax(&decoder.step(token)?) as u32;
    let t = Instant::now();
    for _ in 0..decode_tokens {
        token = ops::argmax(&decoder.step(token)?) as u32;
    }
    Ok(ms_since(t) / decode_tokens as f64)
}

// ANCHOR: launch_latency
/// The time one kernel launch costs when launches are queued back to back, in µs: `count`
/// launches of a kernel that adds one float, divided by their wall time. (The GPU finishes
/// such a kernel in far less than a launch takes to issue, so this is the issue rate.)
pub fn launch_latency_us(model: &GpuModel, count: usize) -> Result<f64> {
    let gpu = model.gpu();
    let (mut x, y) = (gpu.zeros::<f32>(1)?, gpu.zeros::<f32>(1)?);
    for _ in 0..10 {
        gpu.add_inplace(&mut x.as_view_mut(), &y.as_view(), 1)?; // warm-up
    }
    gpu.synchronize()?;
    let t = Instant::now();
    for _ in 0..count {
        gpu.add_inplace(&mut x.as_view_mut(), &y.as_view(), 1)?;
    }
    gpu.synchronize()?;
    Ok(ms_since(t) * 1e3 / count.max(1) as f64)
}
// ANCHOR_END: launch_latency

/// Positions per block of the paged rows (vLLM's default on GPUs, and `--block-size`'s).
pub const PAGED_BLOCK_SIZE: usize = 16;

/// The kernel plans every context is measured with: `(matmul, attention, fused, graphs)`.
/// The fused plans always run attention v3 and their own matmul chains (kernels/fused.cu).
/// The decode kernels, matmul v3 and attention v3 (both split-K), make an unfused plan of
/// their own: the first measurement on an H200 showed v1/v2's matmuls, not the launches,
/// bounding decode there (book: cuda.md).
pub const PLANS: [(MatmulVersion, AttentionVersion, bool, bool); 5] = [
    (MatmulVersion::V1, AttentionVersion::V2, false, false),
    (MatmulVersion::V2, AttentionVersion::V2, false, false),
    (MatmulVersion::V3, AttentionVersion::V3, false, false),
    (MatmulVersion::V2, AttentionVersion::V3, true, false),
    (MatmulVersion::V2, AttentionVersion::V3, true, true),
];

/// Everything `kvlab bench --device cuda` reports.
#[derive(Debug, Clone, Serialize)]
pub struct GpuBenchReport {
    /// The GPU, its driver and NVRTC, and the weights' format (each row names its kernels).
    pub device: String,
    pub model: String,
    pub n_params: usize,
    /// Greedy tokens decoded per row, after a prompt of `context` tokens.
    pub decode_tokens: usize,
    /// The GPU's own roofs, measured before the model (src/cuda/roof.rs): `hbm_fraction`
    /// divides by its read bandwidth, `prefill_flop_fraction` by its FMA rate.
    pub roof: GpuRoof,
    /// The data sheet's bandwidth (an H200's 4.8 TB/s), beside the measured one.
    pub datasheet_bytes_per_s: f64,
    /// Bytes of weights one decode step reads (the KV cache comes on top).
    pub weight_bytes_per_token: usize,
    /// One kernel launch, back to back, µs ([`launch_latency_us`]).
    pub launch_latency_us: f64,
    /// One row per kernel plan ([`PLANS`]) and context.
    pub rows: Vec<BenchRow>,
}

/// Measures `model` (uploaded from `cpu`) at every context in `contexts`, once with each
/// kernel plan ([`PLANS`]: unfused with matmul v1, v2 and v3, fused, fused with CUDA graphs),
/// against `roof` (measured with `Gpu::measure_roof`). A Gemma 3 model runs the unfused
/// plans only (the fused kernels build a Llama layer: `GpuModel::set_plan`).
pub fn run(
    model: &mut GpuModel,
    cpu: &Model,
    model_name: &str,
    contexts: &[usize],
    decode_tokens: usize,
    roof: GpuRoof,
) -> Result<GpuBenchReport> {
    let max = model.config.max_position_embeddings;
    for &context in contexts {
        check_sizes(max, context, decode_tokens)?;
    }
    let launch_latency = launch_latency_us(model, 2000)?;
    let saved = (model.matmul, model.attention, model.fused, model.graphs);
    let mut rows = Vec::new();
    let gemma = model.config.is_gemma3();
    for (matmul, attention, fused, graphs) in PLANS.into_iter().filter(|p| !(gemma && p.2)) {
        (model.matmul, model.attention) = (matmul, attention);
        model.set_plan(fused, graphs)?;
        for &context in contexts {
            let row = bench_context(model, cpu, context, decode_tokens, &roof, launch_latency);
            if row.is_err() {
                (model.matmul, model.attention, model.fused, model.graphs) = saved;
            }
            rows.push(row?);
        }
    }
    (model.matmul, model.attention, model.fused, model.graphs) = saved;
    Ok(GpuBenchReport {
        device: format!(
            "cuda: {}, weights {}",
            model.gpu().describe(),
            model.dtype.name()
        ),
        model: model_name.to_string(),
        n_params: cpu.n_params(),
        decode_tokens,
        roof,
        datasheet_bytes_per_s: H200_HBM_BYTES_PER_S,
        weight_bytes_per_token: model.weights.bytes_read_per_token(),
        launch_latency_us: launch_latency,
        rows,
    })
}
