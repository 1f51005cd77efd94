//! The speculative generation loop: draft, verify in one pass, accept, roll back,
//! repeat. Chapter "Speculative decoding", section "The loop".
//!
//! Each round feeds the target the tokens its cache lacks (the whole prompt in the first
//! round, the last emitted token after that) *followed by* the `k` drafts, so the first
//! round's pass is the prefill itself and already checks `k` guesses. The pass scores
//! all `1 + k` rows; the accepted drafts and the target's own next token are emitted one
//! by one under the stop rules of plain decoding (`src/generate.rs`): a token is
//! emitted, then EOS or `max_new_tokens` ends the generation, so nothing after an EOS
//! inside an accepted run comes out. The cache is then truncated past the rejected
//! drafts (`KvStore::truncate`: a paged cache gives back the blocks only they used).

use super::drafter::Drafter;
use super::verify::{accept_greedy, accept_sampled, verify_pass};
use super::SpecOptions;
use crate::cache::KvStore;
use crate::error::{Error, Result};
use crate::generate::{check_request, StopReason};
use crate::model::Model;
use crate::rng::Rng;
use serde::Serialize;
use std::time::Instant;

/// What a speculative generation produced, how well the drafter guessed, and the time.
#[derive(Debug, Clone, Serialize)]
pub struct SpecGeneration {
    pub drafter: String,
    /// `k`, the tokens proposed per round (fewer near `max_new_tokens`).
    pub draft_len: usize,
    pub prompt_ids: Vec<u32>,
    pub generated_ids: Vec<u32>,
    /// Filled in by the caller, who holds the tokenizer.
    pub text: String,
    pub stop_reason: StopReason,
    /// Target forward passes, the first (the prefill) included: plain cached decoding
    /// takes one per generated token.
    pub target_forwards: usize,
    /// Drafted tokens the target checked, and how many it accepted.
    pub draft_proposed: usize,
    pub draft_accepted: usize,
    /// `draft_accepted / draft_proposed`: the α of Leviathan et al.'s analysis.
    pub acceptance_rate: f64,
    /// Drafts accepted per target pass (the target's own token not counted).
    pub mean_accepted_len: f64,
    /// Tokens emitted per target pass: 1.0 for plain decoding, at most `k + 1`.
    pub tokens_per_forward: f64,
    /// Accepted drafts in each round, in order (a histogram's raw data).
    pub accepted_per_round: Vec<usize>,
    /// Forward passes of the draft model (0 for a lookup drafter).
    pub draft_forwards: usize,
    /// Time spent drafting, and in the target's verification passes.
    pub draft_ms: f64,
    pub verify_ms: f64,
    /// Time to the first emitted token: the first round (draft, prefill + verify).
    pub ttft_ms: f64,
    /// Tokens the first round emitted (1 up to `k + 1`).
    pub first_round_tokens: usize,
    pub total_ms: f64,
    /// Mean time per token after the first round (plain decoding's TPOT is per step).
    pub tpot_ms: f64,
    /// Tokens after the first round per second of the rounds after it.
    pub decode_tok_s: f64,
    /// The rounds after the first (the first one is the prefill too): how many, the
    /// drafts they proposed, and their drafting and verifying time. The experiment
    /// measures the draft's and the verify pass's cost per decode step from these.
    pub decode_rounds: usize,
    pub decode_proposed: usize,
    pub decode_draft_ms: f64,
    pub decode_verify_ms: f64,
    /// KV cache bytes reserved and holding live positions at the end.
    pub kv_cache_bytes: usize,
    pub kv_cache_bytes_used: usize,
}

// ANCHOR: loop
/// Generates after `prompt` with `drafter` proposing and `model` verifying, on `cache`
/// (any layout). `cache` may already hold a prefix of `prompt` (a prefix-cache hit);
/// it must hold less than all of it. `on_token(id, logits)` gets each emitted token
/// with the target logits it was chosen from.
pub fn generate_speculative(
    model: &Model,
    cache: &mut dyn KvStore,
    drafter: &mut dyn Drafter,
    prompt: &[u32],
    opts: &SpecOptions,
    mut on_token: impl FnMut(u32, &[f32]),
) -> Result<SpecGeneration> {
    opts.validate(model)?;
    check_request(&model.config, prompt, opts.max_new_tokens)?;
    if cache.len() >= prompt.len() {
        return Err(Error::InvalidArgument(format!(
            "the cache already holds {} positions for a {}-token prompt: it must hold a prefix of the prompt, at most all but its last token",
            cache.len(),
            prompt.len()
        )));
    }
    let (mut target_rng, mut draft_rng) = (
        Rng::new(opts.sampler.seed),
        Rng::new(opts.sampler.seed ^ 0x5EC0_DA7A),
    );
    let mut r = Round::default();
    let mut context = prompt.to_vec(); // prompt + everything emitted
    let mut pending = prompt[cache.len()..].to_vec(); // ids the cache lacks
    let mut generated: Vec<u32> = Vec::with_capacity(opts.max_new_tokens);
    let start = Instant::now();
    let stop_reason = 'rounds: loop {
        // Never draft past max_new_tokens: a round emits at most k + 1 tokens.
        let k = opts
            .draft_len
            .min(opts.max_new_tokens - generated.len() - 1);
        let t = Instant::now();
        let mut draft = drafter.propose(&context, k, &opts.sampler, &mut draft_rng)?;
        draft.tokens.truncate(k);
        r.draft_ms += t.elapsed().as_secs_f64() * 1e3;

        // One target pass over pending + drafts; rows for the last 1 + k tokens.
        let t = Instant::now();
        let base = cache.len();
        let fed: Vec<u32> = pending.iter().chain(&draft.tokens).copied().collect();
        let rows = verify_pass(model, cache, &fed, 1 + draft.tokens.len())?;
        let outcome = if opts.sampler.temperature == 0.0 {
            accept_greedy(&draft.tokens, &rows)
        } else {
            let probs = draft.probs.as_deref();
            accept_sampled(
                &draft.tokens,
                probs,
                &rows,
                &opts.sampler,
                opts.accept_rule,
                &mut target_rng,
            )
        };
        // Roll back past the rejected drafts: the cache keeps pending + accepted.
        let keep = base + pending.len() + outcome.accepted;
        cache.truncate(keep);
        if cache.len() != keep {
            return Err(Error::InvalidArgument(format!(
                "the cache cannot roll back {} rejected drafts (its local layers keep one pass of {} tokens beyond their window): draft fewer tokens per round",
                fed.len() - pending.len() - outcome.accepted,
                cache.max_pass_tokens()
            )));
        }
        r.verify_ms += t.elapsed().as_secs_f64() * 1e3;
        r.count(&draft, outcome.accepted);

        // Emit accepted drafts, then the target's token, under plain decoding's stop rules.
        let first = r.rounds == 1;
        let emitted = draft.tokens[..outcome.accepted]
            .iter()
            .chain(std::iter::once(&outcome.next));
        for (row, &token) in rows.iter().zip(emitted) {
            generated.push(token);
            context.push(token);
            on_token(token, row);
            let stop = if opts.eos_ids.contains(&token) {
                Some(StopReason::Eos)
            } else if generated.len() == opts.max_new_tokens {
                Some(StopReason::MaxNewTokens)
            } else {
                None
            };
            if let Some(reason) = stop {
                // Hold exactly what plain decoding would: every token but the last.
                cache.truncate(prompt.len() + generated.len() - 1);
                if first {
                    r.first_round(start, generated.len());
                }
                break 'rounds reason;
            }
        }
        if first {
            r.first_round(start, generated.len());
        }
        pending = vec![outcome.next];
    };
    // ANCHOR_END: loop
    Ok(r.finish(cache, drafter, prompt, generated, stop_reason, opts, start))
}

/// Counters of the rounds so far.
#[derive(Default)]
struct Round {
    rounds: usize,
    proposed: usize,
    accepted: usize,
    accepted_per_round: Vec<usize>,
    draft_forwards: usize,
    draft_ms: f64,
    verify_ms: f64,
    ttft_ms: f64,
    first_round_tokens: usize,
    /// `(proposed, draft_ms, verify_ms)` once the first round is over.
    after_first: (usize, f64, f64),
}

impl Round {
    fn count(&mut self, draft: &super::Draft, accepted: usize) {
        self.rounds += 1;
        self.proposed += draft.tokens.len();
        self.accepted += accepted;
        self.accepted_per_round.push(accepted);
        self.draft_forwards += draft.forwards;
    }

    fn first_round(&mut self, start: Instant, emitted: usize) {
        self.ttft_ms = start.elapsed().as_secs_f64() * 1e3;
        self.first_round_tokens = emitted;
        self.after_first = (self.proposed, self.draft_ms, self.verify_ms);
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        self,
        cache: &dyn KvStore,
        drafter: &dyn Drafter,
        prompt: &[u32],
        generated: Vec<u32>,
        stop_reason: StopReason,
        opts: &SpecOptions,
        start: Instant,
    ) -> SpecGeneration {
        let total_ms = start.elapsed().as_secs_f64() * 1e3;
        let ratio = |a: usize, b: usize| if b > 0 { a as f64 / b as f64 } else { 0.0 };
        let decode_tokens = generated.len() - self.first_round_tokens;
        let decode_ms = total_ms - self.ttft_ms;
        SpecGeneration {
            drafter: drafter.name(),
            draft_len: opts.draft_len,
            prompt_ids: prompt.to_vec(),
            text: String::new(),
            stop_reason,
            target_forwards: self.rounds,
            draft_proposed: self.proposed,
            draft_accepted: self.accepted,
            acceptance_rate: ratio(self.accepted, self.proposed),
            mean_accepted_len: ratio(self.accepted, self.rounds),
            tokens_per_forward: ratio(generated.len(), self.rounds),
            accepted_per_round: self.accepted_per_round,
            draft_forwards: self.draft_forwards,
            draft_ms: self.draft_ms,
            verify_ms: self.verify_ms,
            ttft_ms: self.ttft_ms,
            first_round_tokens: self.first_round_tokens,
            total_ms,
            tpot_ms: if decode_tokens > 0 {
                decode_ms / decode_tokens as f64
            } else {
                0.0
            },
            decode_tok_s: if decode_tokens > 0 && decode_ms > 0.0 {
                decode_tokens as f64 / (decode_ms / 1e3)
            } else {
                0.0
            },
            decode_rounds: self.rounds - 1,
            decode_proposed: self.proposed - self.after_first.0,
            decode_draft_ms: self.draft_ms - self.after_first.1,
            decode_verify_ms: self.verify_ms - self.after_first.2,
            kv_cache_bytes: cache.bytes_reserved(),
            kv_cache_bytes_used: cache.bytes_used(),
            generated_ids: generated,
        }
    }
}
