//! `kvlab bench` (CPU, or the GPU roofline with `--device cuda`), `kvlab bench-cache` and
//! `kvlab bench-kv`.
//! On the CPU, `--dtype bf16|int8` measures the same model with bf16 or int8 weights and `--threads N`
//! on a pool of N threads (thread scaling: run it at 1, then 2).

use crate::args::{BlockSizeArgs, DeviceArg, DeviceArgs, JsonArgs, ModelArgs};
use crate::checks::{in_range, MAX_REPS};
use crate::print;
use clap::Args;
use kvlab::cache::{KvPolicy, PolicyParams};
use kvlab::error::{Error, Result};
use kvlab::lab;
use kvlab::simd::WeightElem;
use kvlab::weights::{CpuWeights, OnWeights};
use kvlab::Model;

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt lengths for the prefill measurement (CPU).
    #[arg(long, value_delimiter = ',', default_value = "32,128,512")]
    pub prefill: Vec<usize>,
    /// Contexts at which to time one step of each path.
    #[arg(long, value_delimiter = ',', default_value = "32,128,512")]
    pub contexts: Vec<usize>,
    /// Timed repetitions per figure (the median is reported; CPU).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Threads to measure with, roofs included (CPU; default: all cores, or RAYON_NUM_THREADS).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub threads: Option<usize>,
    /// With --device cuda: prefill, decode and naive step on the GPU, each matmul kernel,
    /// against the memory-bandwidth roofline.
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub out: JsonArgs,
}

#[derive(Args)]
pub struct BenchCacheArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Contexts at which to time one decode step of each layout.
    #[arg(long, value_delimiter = ',', default_value = "128,512")]
    pub contexts: Vec<usize>,
    #[command(flatten)]
    pub block: BlockSizeArgs,
    /// Timed repetitions (medians are reported).
    #[arg(long, default_value_t = 9)]
    pub reps: usize,
    /// Shared-prefix length for the prefix-hit TTFT (0 = skip it).
    #[arg(long, default_value_t = 1000)]
    pub shared_len: usize,
    #[arg(long, default_value_t = 16)]
    pub suffix_len: usize,
    #[command(flatten)]
    pub out: JsonArgs,
}

pub fn bench(args: BenchArgs) -> Result<()> {
    in_range("--reps", args.reps, 1, MAX_REPS, "timed repetitions")?;
    let dtype = args.device.cpu_dtype()?;
    let loaded = args.model.load(0, false)?;
    lab::bench::check_lengths(&loaded.model, &args.prefill, &args.contexts)?;
    if args.device.device == DeviceArg::Cuda {
        return gpu_bench(&args, &loaded);
    }
    let (model, name) = (&loaded.model, &loaded.name);
    let (prefill, contexts) = (&args.prefill, &args.contexts);
    let layout = args.device.weights.layout()?;
    // A model without a panel form keeps its rows, unless --layout panels named them.
    let strict = args.device.weights.layout.is_some();
    let reps = args.reps;
    let measure = || {
        let weights = CpuWeights::convert(model, dtype, layout, strict)?;
        weights.run(Measure {
            name,
            prefill,
            contexts,
            reps,
        })
    };
    let report = match args.threads {
        // Every parallel region (and both roofs) runs on the pool `install` enters.
        Some(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .map_err(|e| Error::InvalidArgument(format!("--threads {n}: {e}")))?
            .install(measure)?,
        None => measure()?,
    };
    if args.out.json {
        return print::json(&report);
    }
    print::bench(&report);
    Ok(())
}

/// `lab::bench::run` on whatever weights `--dtype` and `--layout` made.
struct Measure<'a> {
    name: &'a str,
    prefill: &'a [usize],
    contexts: &'a [usize],
    reps: usize,
}

impl OnWeights for Measure<'_> {
    type Out = Result<lab::bench::BenchReport>;
    fn run<E: WeightElem>(self, model: &Model<E>) -> Self::Out {
        lab::bench::run(model, self.name, self.prefill, self.contexts, self.reps)
    }
}

/// Greedy tokens each GPU row decodes after its prompt.
#[cfg(feature = "cuda")]
const GPU_DECODE_TOKENS: usize = 32;

#[cfg(feature = "cuda")]
fn gpu_bench(args: &BenchArgs, loaded: &crate::args::Loaded) -> Result<()> {
    let mut gpu = kvlab::cuda::GpuModel::upload(&loaded.model, args.device.gpu_dtype.into())?;
    // The roofs first, on the same GPU: the model's figures are fractions of them.
    // (The CPU emulator runs one CUDA thread at a time: there, the small sizes.)
    let sizes = if gpu.gpu().is_emulator() {
        kvlab::cuda::roof::RoofSizes::SMALL
    } else {
        kvlab::cuda::roof::RoofSizes::GPU
    };
    let roof = gpu.gpu().measure_roof(sizes)?;
    let report = lab::gpu_bench::run(
        &mut gpu,
        &loaded.model,
        &loaded.name,
        &args.contexts,
        GPU_DECODE_TOKENS,
        roof,
    )?;
    if args.out.json {
        return print::json(&report);
    }
    print::gpu_bench(&report);
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn gpu_bench(args: &BenchArgs, loaded: &crate::args::Loaded) -> Result<()> {
    // The backend says why there is no GPU (this build has no CUDA support).
    kvlab::backend::Backend::new(
        args.device.device.into(),
        &loaded.model,
        args.device.gpu_dtype.into(),
    )
    .map(drop)
}

pub fn bench_cache(args: BenchCacheArgs) -> Result<()> {
    in_range("--reps", args.reps, 1, MAX_REPS, "timed repetitions")?;
    let loaded = args.model.load(0, false)?;
    let prefix = (args.shared_len > 0).then_some((args.shared_len, args.suffix_len));
    let report = lab::cache_bench::run(
        &loaded.model,
        &loaded.name,
        &args.contexts,
        args.block.block_size,
        args.reps,
        prefix,
    )?;
    if args.out.json {
        return print::json(&report);
    }
    print::cache_bench(&report);
    Ok(())
}

#[derive(Args)]
pub struct BenchKvArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Contexts at which to time one decode step of each policy.
    #[arg(long, value_delimiter = ',', default_value = "512,2048")]
    pub contexts: Vec<usize>,
    /// KV policies to time (the first is the baseline): full, int8, int4, int4-per-token.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "full,int8,int4,int4-per-token"
    )]
    pub kv: Vec<String>,
    /// Timed repetitions (medians are reported).
    #[arg(long, default_value_t = 9)]
    pub reps: usize,
    #[command(flatten)]
    pub out: JsonArgs,
}

pub fn bench_kv(args: BenchKvArgs) -> Result<()> {
    in_range("--reps", args.reps, 1, MAX_REPS, "timed repetitions")?;
    let policies = args
        .kv
        .iter()
        .map(|name| KvPolicy::parse(name, PolicyParams::default()))
        .collect::<Result<Vec<_>>>()?;
    let loaded = args.model.load(0, false)?;
    let report = lab::kv_bench::run(
        &loaded.model,
        &loaded.name,
        &policies,
        &args.contexts,
        args.reps,
    )?;
    if args.out.json {
        return print::json(&report);
    }
    print::kv_bench(&report);
    Ok(())
}

#[derive(Args)]
pub struct BenchContextArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Contexts at which to time one decode step (each below the model's context).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,1024,2048,4096,6000,8000"
    )]
    pub contexts: Vec<usize>,
    /// Timed repetitions (medians are reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    #[command(flatten)]
    pub out: JsonArgs,
}

/// `kvlab bench-context`: TPOT against the context on the model's own cache.
pub fn bench_context(args: BenchContextArgs) -> Result<()> {
    in_range("--reps", args.reps, 1, MAX_REPS, "timed repetitions")?;
    let loaded = args.model.load(0, false)?;
    let report = lab::tpot_context::run(&loaded.model, &loaded.name, &args.contexts, args.reps)?;
    if args.out.json {
        return print::json(&report);
    }
    print::tpot_context(&report);
    Ok(())
}
