//! The argument groups the commands share, each declared once: which model, which prompt,
//! how to sample, which device, which cache layout and block size. Also the CLI's names
//! for the library's enums (the library has no clap: `src/lib.rs`).

use crate::checks::in_range;
use clap::{Args, ValueEnum};
use kvlab::backend::{Backend, CacheLayout};
use kvlab::batch::{batch_model, BatchModel};
use kvlab::cache::{CacheKind, KvPolicy, PolicyParams, DEFAULT_BLOCK_SIZE};
use kvlab::device::{Device, GpuDtype, WeightDtype, WeightLayout};
use kvlab::engine::Speculation;
use kvlab::error::{Error, Result};
use kvlab::generate::PathKind;
use kvlab::kv_size::KvDtype;
use kvlab::lab::timing::synthetic_prompt;
use kvlab::limits::{read_text_capped, MAX_PROMPT_BYTES};
use kvlab::sampler::SamplerConfig;
use kvlab::speculative::DrafterSpec;
use kvlab::tokenizer::{Message, Tokenizer};
use kvlab::{loader, Config, Model};
use std::path::PathBuf;
use std::sync::Arc;

/// Where SmolLM2 lands after `bash scripts/fetch-smollm2.sh`.
pub const DEFAULT_MODEL: &str = "models/smollm2-135m-instruct";

/// Which weights to run: a model folder, or seeded random weights of a real model's shape.
#[derive(Args)]
pub struct ModelArgs {
    /// Model folder (config.json, *.safetensors, tokenizer.json).
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: PathBuf,
    /// Use seeded random weights of SmolLM2-135M's shape (or --random-shape's) instead of
    /// --model (same cost; no tokenizer: give --prompt-len where a prompt is needed).
    #[arg(long)]
    pub random_weights: bool,
    /// The shape of --random-weights: smollm2 (SmolLM2-135M) or gemma3 (Gemma 3 270M, its
    /// local layers, MQA and QK-norm; what a machine without the model folder can run).
    #[arg(
        long,
        value_enum,
        default_value = "smollm2",
        requires = "random_weights"
    )]
    pub random_shape: RandomShape,
}

/// The real models whose shapes `--random-weights` can take.
#[derive(Clone, Copy, ValueEnum)]
pub enum RandomShape {
    Smollm2,
    Gemma3,
}

/// A loaded model, its tokenizer (none for random weights) and a name for reports.
pub struct Loaded {
    pub model: Model,
    pub tokenizer: Option<Tokenizer>,
    pub name: String,
}

impl ModelArgs {
    /// Loads `--model`, or random weights seeded with `seed`; with `tokenizer`, also the
    /// model folder's tokenizer.
    pub fn load(&self, seed: u64, tokenizer: bool) -> Result<Loaded> {
        if self.random_weights {
            let (config, name) = match self.random_shape {
                RandomShape::Smollm2 => (Config::smollm2_135m(), "SmolLM2-135M"),
                RandomShape::Gemma3 => (Config::gemma3_270m(), "Gemma 3 270M"),
            };
            return Ok(Loaded {
                model: Model::random(config, seed)?,
                tokenizer: None,
                name: format!("{name} shape, random weights"),
            });
        }
        if !self.model.is_dir() {
            return Err(loader::not_a_folder(&self.model));
        }
        let tokenizer = if tokenizer {
            Some(Tokenizer::from_dir(&self.model)?)
        } else {
            None
        };
        Ok(Loaded {
            model: loader::load_model(&self.model)?,
            tokenizer,
            name: self.model.display().to_string(),
        })
    }
}

/// What to feed the model: text, a file, or a synthetic prompt of a chosen length.
#[derive(Args)]
pub struct PromptArgs {
    /// The prompt text.
    #[arg(long, required_unless_present_any = ["prompt_len", "prompt_file"], conflicts_with_all = ["prompt_len", "prompt_file"])]
    pub prompt: Option<String>,
    /// Read the prompt text from a file.
    #[arg(long, conflicts_with = "prompt_len")]
    pub prompt_file: Option<PathBuf>,
    /// A synthetic prompt of this many token ids (for measurements at a chosen length).
    #[arg(long)]
    pub prompt_len: Option<usize>,
    /// Wrap the prompt in the model's chat template, as a user message.
    #[arg(long)]
    pub chat: bool,
    /// System message for --chat (else the template's default, if any).
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    #[arg(long, default_value_t = 64)]
    pub max_new_tokens: usize,
}

impl PromptArgs {
    /// The prompt's token ids: synthetic (`--prompt-len`), or the text through `tokenizer`.
    /// `config` bounds `--prompt-len` before the ids are made (10^10 ids are 40 GB).
    pub fn token_ids(&self, tokenizer: Option<&Tokenizer>, config: &Config) -> Result<Vec<u32>> {
        let prompt = match &self.prompt_file {
            // Capped: `--prompt-file /dev/zero` must not read forever.
            Some(path) => Some(read_text_capped(path, MAX_PROMPT_BYTES, "prompt file")?),
            None => self.prompt.clone(),
        };
        if self.chat && prompt.is_none() {
            return Err(Error::InvalidArgument(
                "--chat needs a text prompt: give --prompt or --prompt-file".into(),
            ));
        }
        if let (true, Some(tokenizer)) = (self.chat, tokenizer) {
            if !tokenizer.has_chat_template() {
                return Err(Error::InvalidArgument(
                    "--chat: this model has no chat template (tokenizer_config.json): drop --chat, or point --model at an instruct model".into(),
                ));
            }
        }
        let ids =
            match (&prompt, self.prompt_len, tokenizer) {
                (_, Some(n), _) => {
                    let context = config.max_position_embeddings;
                    let why = format!("the model's context is {context} positions");
                    in_range("--prompt-len", n, 1, context, &why)?;
                    synthetic_prompt(n, config.vocab_size, 0)
                }
                (Some(prompt), None, Some(tokenizer)) => {
                    let text = if self.chat {
                        let mut messages = Vec::new();
                        if let Some(system) = &self.system {
                            messages.push(Message::new("system", system));
                        }
                        messages.push(Message::new("user", prompt));
                        tokenizer.apply_chat_template(&messages)?
                    } else {
                        prompt.clone()
                    };
                    tokenizer.encode(&text)?
                }
                _ => return Err(Error::InvalidArgument(
                    "--random-weights has no tokenizer: give --prompt-len N instead of --prompt"
                        .into(),
                )),
            };
        if ids.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        Ok(ids)
    }
}

/// How tokens are picked: shared by every command that generates.
#[derive(Args, Clone, Copy)]
pub struct SamplingArgs {
    /// 0 = greedy. (Negative values parse, to be refused with a message.)
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Nucleus sampling mass (1.0 = off).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub top_p: f32,
    /// Seeds the sampler (and --random-weights).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl SamplingArgs {
    pub fn config(&self) -> SamplerConfig {
        SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            seed: self.seed,
        }
    }
}

#[derive(Args, Clone, Copy)]
pub struct DeviceArgs {
    /// Where to run the forward pass.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// Weight format on the GPU (with --device cuda).
    #[arg(long, value_enum, default_value_t = GpuDtypeArg::Bf16)]
    pub gpu_dtype: GpuDtypeArg,
    #[command(flatten)]
    pub weights: DtypeArgs,
}

impl DeviceArgs {
    /// The CPU's weight format. `--dtype` is the CPU's flag; the GPU's is `--gpu-dtype`
    /// (with its own default), so `--dtype` with `--device cuda` is refused, not guessed.
    pub fn cpu_dtype(&self) -> Result<WeightDtype> {
        match (self.device, self.weights.dtype) {
            (DeviceArg::Cuda, Some(_)) => Err(Error::InvalidArgument(
                "--dtype sets the CPU's weight format: with --device cuda use --gpu-dtype f32|bf16"
                    .into(),
            )),
            (DeviceArg::Cuda, None) if self.weights.layout.is_some() => {
                Err(Error::InvalidArgument(
                    "--layout sets how the CPU lays out its weights: drop it with --device cuda"
                        .into(),
                ))
            }
            _ => Ok(self.weights.dtype()),
        }
    }

    /// `model` ready on `--device`, its weights in `--dtype` (CPU) or `--gpu-dtype` (GPU).
    pub fn backend<'a>(&self, model: &'a Model) -> Result<Backend<'a>> {
        let dtype = self.cpu_dtype()?;
        match self.device {
            DeviceArg::Cpu => Backend::cpu(model, dtype, self.weights.layout()?),
            DeviceArg::Cuda => Backend::new(Device::Cuda, model, self.gpu_dtype.into()),
        }
    }
}

/// `--dtype`: the weight matrices' format on the CPU.
#[derive(Args, Clone, Copy)]
pub struct DtypeArgs {
    /// Weight format on the CPU: f32 as loaded, bf16 (each weight rounded: half the bytes
    /// for decode to read) or int8 (Q8_0 blocks: 1.125 bytes a weight), with f32
    /// arithmetic; or w8a8 / bf16a, which round the activations too (int8 / bf16 dot
    /// products, llama.cpp's arithmetic). Default f32.
    #[arg(long, value_enum)]
    pub dtype: Option<WeightDtypeArg>,
    /// How f32 and bf16 weights lie in memory on the CPU: panels of 32 output columns,
    /// each one contiguous run (what decode streams fastest), or rows as loaded (the
    /// plain twin: same bits, slower decode). int8 blocks have their own layout.
    #[arg(long, value_enum)]
    pub layout: Option<WeightLayoutArg>,
}

impl DtypeArgs {
    pub fn dtype(&self) -> WeightDtype {
        self.dtype.map_or(WeightDtype::F32, Into::into)
    }

    /// The layout, default panels; `--layout` with int8 is refused (its blocks have one).
    pub fn layout(&self) -> Result<WeightLayout> {
        match (self.dtype(), self.layout) {
            (WeightDtype::Int8 | WeightDtype::W8a8 | WeightDtype::Bf16a, Some(_)) => Err(Error::InvalidArgument(
                "--layout applies to f32 and bf16 weights: int8, w8a8 and bf16a blocks have their own layout, drop --layout".into(),
            )),
            (_, Some(WeightLayoutArg::Rows)) => Ok(WeightLayout::Rows),
            _ => Ok(WeightLayout::Panels),
        }
    }

    /// `model` in these weights, for the engine (`serve`, `bench-batch`, `bench-disagg`):
    /// converted once, as `generate` converts them.
    pub fn batch_model(&self, model: Arc<Model>) -> Result<Arc<dyn BatchModel>> {
        batch_model(model, self.dtype(), self.layout()?)
    }
}

/// `f32`, `bf16:rows`, `int8`...: a weight format and layout in one word (`bench-batch
/// --against`), parsed as `--dtype` and `--layout` are.
pub fn parse_weights(word: &str) -> std::result::Result<DtypeArgs, String> {
    let (dtype, layout) = match word.split_once(':') {
        Some((d, l)) => (d, Some(l)),
        None => (word, None),
    };
    let dtype = WeightDtypeArg::from_str(dtype, true)
        .map_err(|_| format!("{dtype:?} is not a weight format: f32, bf16, int8, w8a8 or bf16a, then optionally :rows or :panels (e.g. f32:rows)"))?;
    let layout = match layout {
        Some(l) => Some(
            WeightLayoutArg::from_str(l, true)
                .map_err(|_| format!("{l:?} is not a layout: rows or panels (e.g. f32:rows)"))?,
        ),
        None => None,
    };
    Ok(DtypeArgs {
        dtype: Some(dtype),
        layout,
    })
}

/// Positions per block of the paged layouts: one flag, one range check, everywhere.
#[derive(Args, Clone, Copy)]
pub struct BlockSizeArgs {
    /// Positions per block, for the paged and prefix layouts.
    #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub block_size: usize,
}

#[derive(Args, Clone)]
pub struct CacheArgs {
    /// Where the cached path keeps K and V (the CPU only; see `src/cache/`).
    #[arg(long, value_enum, default_value_t = CacheArg::Preallocated)]
    pub cache: CacheArg,
    #[command(flatten)]
    pub block: BlockSizeArgs,
    #[command(flatten)]
    pub kv: KvArgs,
}

impl CacheArgs {
    /// The layout, block size and `--kv` policy (an unknown policy name is an error).
    pub fn layout(&self) -> Result<CacheLayout> {
        Ok(CacheLayout {
            kind: self.cache.into(),
            block_size: self.block.block_size,
            policy: self.kv.policy()?,
        })
    }
}

/// `--kv`: what the cache keeps of each position, and in what precision (part "Shrinking
/// the cache"): one flag, one parser, for `eval`, `generate`, `compare` and `chat`.
#[derive(Args, Clone)]
pub struct KvArgs {
    /// KV cache policy: full, int8, int4 (KIVI: keys per channel), int4-per-token, window (per pass), sliding (per query), h2o; or rows in codes under a window per query: int8+sliding, int4-per-token+sliding.
    #[arg(long, default_value = "full", value_name = "POLICY")]
    pub kv: String,
    /// With --kv window or [ELEMENT+]sliding: the positions kept (window) or seen by each token (sliding), sinks included.
    #[arg(long)]
    pub window: Option<usize>,
    /// With --kv window or [ELEMENT+]sliding: the first positions always kept (attention sinks).
    #[arg(long)]
    pub sinks: Option<usize>,
    /// With --kv h2o: positions kept.
    #[arg(long)]
    pub budget: Option<usize>,
    /// With --kv h2o: of the budget, the most recent positions (default: half).
    #[arg(long)]
    pub recent: Option<usize>,
    /// With --kv int4 / int4-per-token[+sliding]: values per scale (channels; tokens for KIVI's
    /// per-channel keys). Must divide head_dim. Default 32.
    #[arg(long)]
    pub group: Option<usize>,
}

impl KvArgs {
    pub fn policy(&self) -> Result<KvPolicy> {
        KvPolicy::parse(
            &self.kv,
            PolicyParams {
                window: self.window,
                sinks: self.sinks,
                budget: self.budget,
                recent: self.recent,
                group: self.group,
            },
        )
    }
}

/// Speculative decoding (`generate`, `compare`; prompt lookup in `serve` and
/// `bench-batch`): a drafter proposes `k` tokens, the model checks them in one pass.
/// Book: speculative.md.
#[derive(Args, Clone)]
pub struct SpecArgs {
    /// Decode speculatively with this drafter: ngram, ngram:N, early-exit:L or bf16.
    #[arg(long, value_name = "DRAFTER")]
    pub speculative: Option<String>,
    /// Tokens the drafter proposes per round, k (with --speculative).
    #[arg(long, default_value_t = 4, requires = "speculative")]
    pub draft_len: usize,
}

impl SpecArgs {
    /// The engine's speculation (`serve`, `bench-batch`): prompt lookup only, whose
    /// drafts cost no forward pass. A model drafter would need its own batched pass
    /// and its own KV per request each round, which the engine does not run.
    pub fn engine(&self) -> Result<Option<Speculation>> {
        let Some(name) = self.speculative.as_deref() else {
            return Ok(None);
        };
        in_range(
            "--draft-len",
            self.draft_len,
            1,
            64,
            "drafts per request per iteration",
        )?;
        match name.parse::<DrafterSpec>()? {
            DrafterSpec::Ngram { n } => Ok(Some(Speculation::new(n, self.draft_len)?)),
            other => Err(Error::InvalidArgument(format!(
                "--speculative {other}: the engine drafts by prompt lookup only (its drafts cost no forward pass; a model drafter would need a second batched pass and its own KV per request): use --speculative ngram[:N], or kvlab generate --speculative {other} for one request"
            ))),
        }
    }
}

/// `--json`: one JSON object with the figures instead of text.
#[derive(Args, Clone, Copy)]
pub struct JsonArgs {
    /// Print one JSON object with the figures instead of text.
    #[arg(long)]
    pub json: bool,
}

// The CLI's spellings of the library's enums (clap derives stay out of the library).

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    Cpu,
    Cuda,
}

impl From<DeviceArg> for Device {
    fn from(d: DeviceArg) -> Device {
        match d {
            DeviceArg::Cpu => Device::Cpu,
            DeviceArg::Cuda => Device::Cuda,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum GpuDtypeArg {
    /// Same numbers as the CPU: for tight GPU-vs-CPU checks.
    F32,
    /// Half the bytes per weight: what decode, being memory-bound, wants.
    Bf16,
}

impl From<GpuDtypeArg> for GpuDtype {
    fn from(d: GpuDtypeArg) -> GpuDtype {
        match d {
            GpuDtypeArg::F32 => GpuDtype::F32,
            GpuDtypeArg::Bf16 => GpuDtype::Bf16,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum WeightDtypeArg {
    /// As loaded: the reference numbers.
    F32,
    /// Rounded to bf16: half the bytes per weight, f32 arithmetic.
    Bf16,
    /// int8 with a scale per 32 inputs (Q8_0): 1.125 bytes per weight, f32 arithmetic.
    Int8,
    /// The int8 weights times activations quantized to int8 (Q8_0 x Q8_0, llama.cpp's
    /// arithmetic): integer dot products, a slightly different model.
    W8a8,
    /// bf16 weights times activations rounded to bf16 (AVX-512 BF16's `vdpbf16ps`, what
    /// llama.cpp's BF16 runs on such a CPU): two products per lane, a slightly different model.
    Bf16a,
}

impl From<WeightDtypeArg> for WeightDtype {
    fn from(d: WeightDtypeArg) -> WeightDtype {
        match d {
            WeightDtypeArg::F32 => WeightDtype::F32,
            WeightDtypeArg::Bf16 => WeightDtype::Bf16,
            WeightDtypeArg::Int8 => WeightDtype::Int8,
            WeightDtypeArg::W8a8 => WeightDtype::W8a8,
            WeightDtypeArg::Bf16a => WeightDtype::Bf16a,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WeightLayoutArg {
    /// 32 output columns of every row in one contiguous run (default).
    Panels,
    /// `[d_in, d_out]` as loaded.
    Rows,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CacheArg {
    /// Contiguous, reserved for prompt + max_new_tokens before the first token.
    Preallocated,
    /// Contiguous, doubled (with a copy) whenever it is full.
    Growable,
    /// Fixed-size blocks from a pool, taken as the sequence crosses into each one.
    Paged,
    /// Paged, with full blocks shared by every sequence that has the same prefix.
    Prefix,
}

impl From<CacheArg> for CacheKind {
    fn from(c: CacheArg) -> CacheKind {
        match c {
            CacheArg::Preallocated => CacheKind::Preallocated,
            CacheArg::Growable => CacheKind::Growable,
            CacheArg::Paged => CacheKind::Paged,
            CacheArg::Prefix => CacheKind::Prefix,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum PathArg {
    /// Prefill once into a KV cache, then one token per step.
    Cached,
    /// Recompute the whole sequence at every step (`use_cache=False`).
    Naive,
}

impl From<PathArg> for PathKind {
    fn from(p: PathArg) -> PathKind {
        match p {
            PathArg::Cached => PathKind::Cached,
            PathArg::Naive => PathKind::Naive,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum KvDtypeArg {
    F32,
    Bf16,
    F16,
    Int8,
}

impl From<KvDtypeArg> for KvDtype {
    fn from(d: KvDtypeArg) -> KvDtype {
        match d {
            KvDtypeArg::F32 => KvDtype::F32,
            KvDtypeArg::F16 => KvDtype::F16,
            KvDtypeArg::Bf16 => KvDtype::Bf16,
            KvDtypeArg::Int8 => KvDtype::Int8,
        }
    }
}
