//! What a client hands the engine and what it gets back: requests, sampling settings,
//! events, the policies the scheduler can follow (book: scheduling.md).

use crate::cache::paged::{blocks_in_budget, LayerGroups, Retention};
use crate::cache::{KvElement, KvPolicy};
use crate::config::Config;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// How the scheduler forms batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// One request at a time, to completion (the baseline).
    Sequential,
    /// A batch is formed from the waiting queue, runs until every member is done, then the next.
    Static,
    /// Orca-style: requests join and leave at every iteration; whole prompts prefilled at once.
    Continuous,
    /// Continuous + Sarathi-style chunked prefill under the token budget.
    ContinuousChunked,
}

impl Policy {
    pub const ALL: [Policy; 4] = [
        Policy::Sequential,
        Policy::Static,
        Policy::Continuous,
        Policy::ContinuousChunked,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Sequential => "sequential",
            Policy::Static => "static",
            Policy::Continuous => "continuous",
            Policy::ContinuousChunked => "continuous-chunked",
        }
    }
}

/// How the engine runs: its policy, its per-iteration budget, its KV pool.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub policy: Policy,
    /// Tokens one iteration may run (decode rows + prefill chunk rows). Default 512.
    pub max_batch_tokens: usize,
    /// Largest number of sequences in one iteration. Default 64.
    pub max_batch_seqs: usize,
    /// Bytes of the paged KV pool (blocks = budget / block bytes). Default: 2048 tokens' worth x 8.
    pub kv_budget_bytes: usize,
    pub block_size: usize,
    /// What the pool's blocks store (`--kv`): `full` (f32), `int8` or `int4-per-token`
    /// codes (`cache/element.rs`), or a window per query (`sliding`, f32 blocks that go
    /// back once no later query sees them). The per-pass window, H2O and KIVI are refused.
    pub kv: KvPolicy,
    /// Bounded waiting queue: a submit beyond it is refused (`SubmitError::QueueFull`).
    pub max_waiting: usize,
    pub prefix_caching: bool,
    /// Keep the logits of every sampled token in the step report (tests compare them
    /// bit for bit with a solo run). Off by default: a vocabulary of floats per token.
    pub capture_logits: bool,
    /// Prompt-lookup speculation for greedy requests (`--speculative ngram`); `None`:
    /// one token per decode row.
    pub speculation: Option<Speculation>,
}

// ANCHOR: speculation
/// Speculative decoding in the engine: before each iteration, every greedy request that
/// is decoding looks its own tokens up for what followed the last `ngram` of them
/// (`speculative::ngram::lookup`), and runs up to `draft_len` of those guesses as extra
/// rows beside its pending token. One pass verifies all of them for every request at
/// once; each request keeps the drafts its own greedy choice agrees with, and rolls its
/// block table back past the rest (book: speculative.md, "In the engine").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Speculation {
    /// The longest n-gram looked up (falling back to shorter ones).
    pub ngram: usize,
    /// Drafts per request per iteration, at most.
    pub draft_len: usize,
}
// ANCHOR_END: speculation

impl Speculation {
    /// Refuses an n-gram or a draft length of 0, which would draft nothing.
    pub fn new(ngram: usize, draft_len: usize) -> Result<Speculation> {
        if ngram == 0 || draft_len == 0 {
            return Err(Error::InvalidArgument(format!(
                "speculation with ngram:{ngram} and --draft-len {draft_len} drafts nothing: give both at least 1 (e.g. --speculative ngram:3 --draft-len 4)"
            )));
        }
        Ok(Speculation { ngram, draft_len })
    }
}

/// SmolLM2-135M's bytes per position (K and V of 30 layers, 3 KV heads of 64, f32).
const DEFAULT_TOKEN_BYTES: usize = 2 * 30 * 3 * 64 * 4;

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            policy: Policy::ContinuousChunked,
            max_batch_tokens: 512,
            max_batch_seqs: 64,
            kv_budget_bytes: 2048 * 8 * DEFAULT_TOKEN_BYTES,
            block_size: crate::cache::DEFAULT_BLOCK_SIZE,
            kv: KvPolicy::Full,
            max_waiting: 256,
            prefix_caching: true,
            capture_logits: false,
            speculation: None,
        }
    }
}

/// How a request picks its tokens. `temperature == 0` is greedy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_p: f32,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// The sampler settings of `src/sampler.rs` these stand for.
    pub fn sampler_config(&self) -> crate::sampler::SamplerConfig {
        crate::sampler::SamplerConfig {
            temperature: self.temperature,
            top_k: 0,
            top_p: self.top_p,
            seed: self.seed,
        }
    }
}

/// One generation request, already tokenized.
#[derive(Debug, Clone)]
pub struct Request {
    /// Token ids (the server applies the chat template and tokenizes).
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Generation ends when one of these is sampled (EOS); it is not emitted as a Token.
    pub stop_ids: Vec<u32>,
}

/// What a request's stream receives.
#[derive(Debug, Clone, Serialize)]
pub enum Event {
    /// A generated token. The first one ends the prefill (TTFT is measured to it).
    Token { id: u32 },
    Finished {
        reason: FinishReason,
        prompt_tokens: usize,
        completion_tokens: usize,
        cached_prompt_tokens: usize,
    },
    /// The request failed inside the engine (its blocks are already freed). One line.
    Failed { message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop id was sampled.
    Stop,
    /// `max_tokens` tokens were generated.
    Length,
}

/// Why a request was not accepted.
#[derive(Debug)]
pub enum SubmitError {
    /// The waiting queue is full: the server answers 429 with Retry-After.
    QueueFull { retry_after_s: u64 },
    /// The request can never run (prompt + max_tokens over the context or over the whole
    /// KV pool, empty prompt, token out of range): the server answers 400 with this message.
    Invalid(Error),
    /// The engine thread has stopped: 503.
    ShutDown,
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::QueueFull { retry_after_s } => write!(
                f,
                "the engine's waiting queue is full: retry in {retry_after_s} s"
            ),
            SubmitError::Invalid(e) => write!(f, "{e}"),
            SubmitError::ShutDown => write!(f, "the engine has shut down"),
        }
    }
}

impl std::error::Error for SubmitError {}

// ANCHOR: validate
/// A request [`validate`] accepted for an engine of one model and [`EngineConfig`]: the
/// only kind the engine queues. A request is checked once, where it enters (the handle
/// checks it on `submit`, on the caller's thread; the engine's thread does not again).
#[derive(Debug, Clone)]
pub struct Validated(Request);

impl Validated {
    pub fn request(&self) -> &Request {
        &self.0
    }
    pub fn into_request(self) -> Request {
        self.0
    }
}

/// Whether `request` can ever run on an engine of model `c` and `config`: a clear
/// one-line error if not.
pub fn validate(c: &Config, config: &EngineConfig, request: Request) -> Result<Validated> {
    if request.prompt.is_empty() {
        return Err(Error::EmptyPrompt);
    }
    if let Some(&id) = request.prompt.iter().find(|&&t| t as usize >= c.vocab_size) {
        return Err(Error::TokenOutOfRange {
            id,
            vocab_size: c.vocab_size,
        });
    }
    crate::generate::check_request(c, &request.prompt, request.max_tokens)?;
    request.sampling.sampler_config().validate()?;
    // The last token sampled is never fed back: prompt + max_tokens - 1 positions at most.
    let positions = request.prompt.len() + request.max_tokens - 1;
    let bs = config.block_size.max(1);
    let element = KvElement::for_pool(c, config.kv, "paged")?;
    let n_blocks = blocks_in_budget(c, element, bs, config.kv_budget_bytes)?;
    // A pass brings a chunk of at most `max_batch_tokens` rows (chunked prefill), or
    // the whole prompt; a window per query holds the window's blocks and one pass's.
    let pass = match config.policy {
        Policy::ContinuousChunked => config.max_batch_tokens,
        _ => request.prompt.len().max(config.max_batch_tokens),
    };
    let groups = LayerGroups::of(c).with_retention(Retention::of(config.kv)?)?;
    let needed = groups.peak_blocks(positions, bs, pass);
    if needed > n_blocks {
        return Err(Error::InvalidArgument(format!(
            "prompt ({}) + max_tokens ({}) needs {} KV blocks of {bs} positions but the engine's whole pool holds {n_blocks}: shorten the request or give the engine a larger KV budget",
            request.prompt.len(),
            request.max_tokens,
            needed
        )));
    }
    Ok(Validated(request))
}
// ANCHOR_END: validate
