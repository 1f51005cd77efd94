//! A multi-turn chat that keeps its KV cache between turns (book: multi-turn.md).
//!
//! Turn 2's prompt is the whole conversation again, rendered by the chat template:
//! system prompt, turn 1's question, turn 1's answer, the new question. Everything up
//! to the new question is already in the cache from turn 1, so only the new tokens
//! need a prefill: a long conversation answers as fast as a short one.
//!
//! What can be reused is the *longest common prefix* of the token ids in the cache and
//! the new prompt, not "everything from last turn": re-tokenizing the answer's text can
//! give other ids than the ones sampled, and the template may render the last answer
//! differently once it is history (an end-of-turn token the model sampled but never
//! fed back). The cache is truncated to the common prefix and the rest is computed;
//! `tests/caches.rs` checks that turn 2 then gives the same tokens as turn 2 from scratch.

use crate::cache::{KvBytes, KvStore};
use crate::error::{Error, Result};
use crate::generate::{check_request, generate_with, Decoder, GenerateOptions, Generation};
use crate::model::{KvSource, Model};
use crate::simd::WeightElem;
use serde::Serialize;

/// A conversation's cache, and the token ids it holds; weights of element type `E`.
pub struct ChatSession<'a, E: WeightElem = f32> {
    model: &'a Model<E>,
    cache: Box<dyn KvStore + 'a>,
    /// The ids of positions `0..cache.len()`.
    cached: Vec<u32>,
}

/// What one turn reused, computed and generated.
#[derive(Debug, Clone, Serialize)]
pub struct Turn {
    pub prompt_tokens: usize,
    /// Prompt positions whose K and V came from the cache.
    pub reused: usize,
    /// Prompt positions prefilled this turn.
    pub computed: usize,
    pub generation: Generation,
}

impl<'a, E: WeightElem> ChatSession<'a, E> {
    /// A conversation on `model` whose K and V live in `cache` (any layout).
    pub fn new(model: &'a Model<E>, cache: Box<dyn KvStore + 'a>) -> ChatSession<'a, E> {
        ChatSession {
            model,
            cache,
            cached: Vec::new(),
        }
    }

    /// Token ids the cache holds now.
    pub fn cached_ids(&self) -> &[u32] {
        &self.cached
    }

    pub fn kv_bytes(&self) -> KvBytes {
        KvBytes::of(&self.cache)
    }

    /// Runs one turn. `prompt` is the whole conversation so far, ending with the
    /// assistant's turn opened (the template's `add_generation_prompt`).
    pub fn turn(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: impl FnMut(u32),
    ) -> Result<Turn> {
        check_request(&self.model.config, prompt, opts.max_new_tokens)?;
        let mut decoder = Resume {
            model: self.model,
            cache: &mut *self.cache,
            cached: &mut self.cached,
            reused: 0,
        };
        let generation = generate_with(&mut decoder, prompt, opts, on_token)?;
        let reused = decoder.reused;
        Ok(Turn {
            prompt_tokens: prompt.len(),
            reused,
            computed: prompt.len() - reused,
            generation,
        })
    }
}

// ANCHOR: resume
/// A decoder whose prefill starts from what the cache already holds.
struct Resume<'s, E: WeightElem> {
    model: &'s Model<E>,
    cache: &'s mut dyn KvStore,
    cached: &'s mut Vec<u32>,
    reused: usize,
}

impl<E: WeightElem> Decoder for Resume<'_, E> {
    fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>> {
        if prompt.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        // Keep the longest common prefix, but compute at least the last prompt token:
        // its logits are this turn's first output.
        let common = self
            .cached
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len() - 1);
        // A cache that cannot serve so deep a cut forgets more (a local layer's ring,
        // `cache/hybrid.rs`): continue from what it still holds.
        self.cache.truncate(common);
        let common = self.cache.len().min(common);
        self.cached.truncate(common);
        self.reused = common;
        // In passes when the cache evicts (`--kv window`, `h2o`).
        let logits =
            crate::generate::prefill_in_passes(self.model, &mut *self.cache, &prompt[common..])?;
        self.cached.extend_from_slice(&prompt[common..]);
        Ok(logits)
    }

    fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        let logits = self
            .model
            .forward(&[token], KvSource::Cache(&mut *self.cache))?;
        self.cached.push(token);
        Ok(logits)
    }

    fn kv_bytes(&self) -> KvBytes {
        KvBytes::of(&*self.cache)
    }
}
// ANCHOR_END: resume
