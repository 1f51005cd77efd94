//! Measurements behind `kvlab bench` and `cargo bench` on the CPU: prefill throughput,
//! per-token latency of both paths at a given context, and the memory bandwidth that
//! bounds decode; each figure also as a fraction of its roof. Any weight format (`E`:
//! f32, bf16 from `Model::to_bf16`, int8 from `Model::to_int8`). Book: prefill-decode.md,
//! roofline.md.

use super::roof::{self, decode_bytes, prefill_flops};
use super::timing::{machine_name, median_ms, synthetic_prompt};
use crate::cache::PreallocatedCache;
use crate::device::WeightLayout;
use crate::error::{Error, Result};
use crate::model::{KvSource, Model};
use crate::simd::WeightElem;
use serde::Serialize;
use std::time::Instant;

// ANCHOR: step_at_context
/// One generation step at `context` tokens already seen, on each path.
/// Naive: a forward pass over all `context + 1` tokens. Cached: a forward pass
/// over one token, attending to `context` cached positions.
pub struct StepBench<'a, E: WeightElem = f32> {
    model: &'a Model<E>,
    seq: Vec<u32>,
    cache: PreallocatedCache,
}

impl<'a, E: WeightElem> StepBench<'a, E> {
    /// Prefills a cache with `context` tokens, once.
    pub fn new(model: &'a Model<E>, context: usize) -> Result<StepBench<'a, E>> {
        let seq = synthetic_prompt(context + 1, model.config.vocab_size, 0);
        let mut cache = PreallocatedCache::new(&model.config, context + 1)?;
        model.forward_hidden(&seq[..context], &mut KvSource::Cache(&mut cache))?;
        Ok(StepBench { model, seq, cache })
    }

    pub fn naive_step(&mut self) -> Result<Vec<f32>> {
        self.model.forward(&self.seq, KvSource::ThisPass)
    }

    pub fn cached_step(&mut self) -> Result<Vec<f32>> {
        let context = self.seq.len() - 1;
        self.cache.truncate(context);
        self.model
            .forward(&self.seq[context..], KvSource::Cache(&mut self.cache))
    }
}
// ANCHOR_END: step_at_context

/// Per-token latency of both paths at one context length.
#[derive(Debug, Clone, Serialize)]
pub struct StepLatency {
    pub context: usize,
    pub naive_ms: f64,
    pub cached_ms: f64,
    pub speedup: f64,
    /// The cached step on the roofline: FLOP/byte ([`roof::decode_intensity`]) and FLOP/s.
    pub cached_intensity: f64,
    pub cached_gflop_s: f64,
    /// Bytes the cached step reads ([`decode_bytes`]: weights in their format + KV).
    pub cached_bytes_per_token: f64,
    /// Those bytes over the step's time, over the measured bandwidth: how close the
    /// cached step comes to the memory roof (1.0 = reading at the machine's full rate).
    pub fraction_of_bandwidth_roof: f64,
    /// The tokens/s the bandwidth roof allows at this context: bandwidth / bytes per token.
    pub roof_tok_s: f64,
}

/// The two roofs, measured once per report: what every figure is a fraction of.
#[derive(Debug, Clone, Copy)]
pub struct Roofs {
    /// Memory read bandwidth, bytes/s ([`memory_bandwidth`]).
    pub bytes_per_s: f64,
    /// f32 FMA peak, FLOP/s ([`roof::fma_peak`]).
    pub flop_per_s: f64,
}

impl Roofs {
    /// Measures both roofs on the current rayon pool.
    pub fn measure() -> Roofs {
        Roofs {
            bytes_per_s: memory_bandwidth(),
            flop_per_s: roof::fma_peak().gflop_s * 1e9,
        }
    }
}

pub fn step_latency<E: WeightElem>(
    model: &Model<E>,
    context: usize,
    reps: usize,
    roofs: &Roofs,
) -> Result<StepLatency> {
    let mut b = StepBench::new(model, context)?;
    let naive_ms = median_ms(reps, || b.naive_step().map(drop))?;
    let cached_ms = median_ms(reps * 3, || b.cached_step().map(drop))?;
    let bytes = decode_bytes(model, context);
    Ok(StepLatency {
        context,
        naive_ms,
        cached_ms,
        speedup: naive_ms / cached_ms,
        cached_intensity: roof::decode_intensity(model, context),
        cached_gflop_s: roof::decode_flops(model, context) / (cached_ms / 1e3) / 1e9,
        cached_bytes_per_token: bytes,
        fraction_of_bandwidth_roof: bytes / (cached_ms / 1e3) / roofs.bytes_per_s,
        roof_tok_s: roofs.bytes_per_s / bytes,
    })
}

/// Prefill (the whole prompt in one pass) at one prompt length.
#[derive(Debug, Clone, Serialize)]
pub struct Prefill {
    pub prompt_len: usize,
    /// Time to first token: the prefill pass plus the LM head of the last token.
    pub ttft_ms: f64,
    pub tok_s: f64,
    /// Achieved FLOP/s (2 FLOPs per weight per token, plus attention).
    pub gflop_s: f64,
    /// FLOP/byte at the least traffic ([`roof::prefill_intensity`]): its roofline x.
    pub intensity: f64,
    /// `gflop_s` over the measured f32 FMA peak: how close prefill comes to the compute roof.
    pub fraction_of_fma_peak: f64,
}

pub fn prefill<E: WeightElem>(
    model: &Model<E>,
    prompt_len: usize,
    reps: usize,
    roofs: &Roofs,
) -> Result<Prefill> {
    let prompt = synthetic_prompt(prompt_len, model.config.vocab_size, 0);
    let ttft_ms = median_ms(reps, || {
        let mut cache = PreallocatedCache::new(&model.config, prompt_len)?;
        model
            .forward(&prompt, KvSource::Cache(&mut cache))
            .map(drop)
    })?;
    let flop_s = prefill_flops(model, prompt_len) / (ttft_ms / 1e3);
    Ok(Prefill {
        prompt_len,
        ttft_ms,
        tok_s: prompt_len as f64 / (ttft_ms / 1e3),
        gflop_s: flop_s / 1e9,
        intensity: roof::prefill_intensity(model, prompt_len),
        fraction_of_fma_peak: flop_s / roofs.flop_per_s,
    })
}

// ANCHOR: memory_bandwidth
/// This machine's memory read bandwidth, in bytes/s: the best of three passes summing a
/// 512 MiB buffer (far larger than any cache), split across threads, over three fresh
/// buffers, and of those three the median. On a virtual machine one buffer reads at 30
/// GB/s in one process and 48 in the next (where its pages landed), and a single pass
/// now and then reads far faster than any other: the median of the buffers' best keeps
/// the roof at what the machine does again and again, not at one lucky moment.
pub fn memory_bandwidth() -> f64 {
    use rayon::prelude::*;
    let mut bests: Vec<f64> = (0..3)
        .map(|_| {
            let buffer = vec![1.0f32; 128 << 20];
            (0..3)
                .map(|_| {
                    let t = Instant::now();
                    let sum: f32 = buffer.par_chunks(1 << 16).map(lane_sum).sum();
                    let secs = t.elapsed().as_secs_f64();
                    std::hint::black_box(sum);
                    (buffer.len() * 4) as f64 / secs
                })
                .fold(0.0, f64::max)
        })
        .collect();
    bests.sort_by(f64::total_cmp);
    bests[1]
}
// ANCHOR_END: memory_bandwidth

/// A sum in 8 independent lanes, so the compiler can vectorise it and the
/// loop runs at the speed of memory, not of one addition after another.
fn lane_sum(values: &[f32]) -> f32 {
    let (blocks, tail) = values.as_chunks::<8>();
    let mut acc = [0.0f32; 8];
    for b in blocks {
        for l in 0..8 {
            acc[l] += b[l];
        }
    }
    acc.iter().sum::<f32>() + tail.iter().sum::<f32>()
}

/// Everything `kvlab bench` reports.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub machine: String,
    /// Rayon threads every figure (and both roofs) ran on.
    pub threads: usize,
    pub model: String,
    pub n_params: usize,
    /// The weight matrices' format: "f32", "bf16" or "int8" (norms, biases, embedding: f32).
    pub dtype: &'static str,
    /// How the matrices lie in memory: "panels" (32 columns contiguous) or "rows"
    /// (`[d_in, d_out]`; int8 blocks report "rows": block rows of `[d_in / 32, d_out / 16]`).
    pub layout: WeightLayout,
    pub prefill: Vec<Prefill>,
    pub steps: Vec<StepLatency>,
    /// Cached decode at the largest context: tokens/s.
    pub decode_tok_s: f64,
    /// Bytes that decode step reads (weights + KV), and the rate it achieved.
    pub decode_bytes_per_token: f64,
    pub decode_gb_s: f64,
    /// Measured memory read bandwidth of this machine.
    pub memory_gb_s: f64,
    /// Fraction of the bandwidth roof that cached decode reaches.
    pub decode_roofline_fraction: f64,
    /// Measured f32 FMA peak of this machine: the compute roof ([`roof::fma_peak`]).
    pub fma_peak_gflop_s: f64,
}

/// Checks that every prefill length is at least 1 and every context fits the model
/// with one more token.
pub fn check_lengths<E: WeightElem>(
    model: &Model<E>,
    prefill_lens: &[usize],
    contexts: &[usize],
) -> Result<()> {
    let max_seq_len = model.config.max_position_embeddings;
    for (flag, lens) in [("--prefill", prefill_lens), ("--contexts", contexts)] {
        // `n >= max`, not `n + 1 > max`: a length near usize::MAX must not wrap.
        if let Some(&n) = lens.iter().find(|&&n| n == 0 || n >= max_seq_len) {
            return Err(Error::InvalidArgument(format!(
                "{flag} {n}: every length must be between 1 and {} (the model's context is {max_seq_len} positions, and a timed step needs one more): give lengths in that range",
                max_seq_len.saturating_sub(1)
            )));
        }
    }
    Ok(())
}

/// Runs the prefill and per-step measurements at the given lengths, on the current
/// rayon pool (`kvlab bench --threads N` installs one of N threads).
pub fn run<E: WeightElem>(
    model: &Model<E>,
    model_name: &str,
    prefill_lens: &[usize],
    contexts: &[usize],
    reps: usize,
) -> Result<BenchReport> {
    check_lengths(model, prefill_lens, contexts)?;
    let roofs = Roofs::measure();
    let prefill = prefill_lens
        .iter()
        .map(|&n| self::prefill(model, n, reps, &roofs))
        .collect::<Result<Vec<_>>>()?;
    let steps = contexts
        .iter()
        .map(|&t| step_latency(model, t, reps, &roofs))
        .collect::<Result<Vec<_>>>()?;
    let last = steps.last().cloned();
    let (decode_tok_s, bytes, gb_s) = match &last {
        Some(s) => {
            let bytes = decode_bytes(model, s.context);
            (1e3 / s.cached_ms, bytes, bytes / (s.cached_ms / 1e3) / 1e9)
        }
        None => (0.0, 0.0, 0.0),
    };
    let memory_gb_s = roofs.bytes_per_s / 1e9;
    Ok(BenchReport {
        machine: machine_name(),
        threads: rayon::current_num_threads(),
        model: model_name.to_string(),
        n_params: model.n_params(),
        dtype: E::NAME,
        layout: E::LAYOUT,
        prefill,
        steps,
        decode_tok_s,
        decode_bytes_per_token: bytes,
        decode_gb_s: gb_s,
        memory_gb_s,
        decode_roofline_fraction: gb_s / memory_gb_s,
        fma_peak_gflop_s: roofs.flop_per_s / 1e9,
    })
}
