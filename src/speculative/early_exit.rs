//! A model as the drafter: the target's own first `L` layers (self-speculative early
//! exit, as in LayerSkip, Elhoushi et al. 2024, and Draft & Verify, Zhang et al. 2023),
//! or a cheaper copy of the whole target ([`super::bf16`]). Chapter "Speculative
//! decoding", section "Drafters".
//!
//! **Early exit.** Run layers `0..L`, then the *final* norm and the LM head on that
//! hidden state. The head was trained to read layer 30's output, not layer L's, so
//! without training an exit (LayerSkip trains one) the guesses are poor: the acceptance
//! is measured, not assumed (the chapter's table).
//!
//! **Its own cache.** The draft layers keep their K and V in a small cache of `L`
//! layers, separate from the target's (the target's layer-`l` K/V for accepted tokens
//! are the same numbers, but sharing would tie the two caches' rollbacks together).
//! The drafter remembers which token ids its cache holds; each round it keeps the
//! longest prefix that still agrees with the context, rolls back the rest (its own
//! rejected guesses), and runs the new tokens in one chunk. Nothing is recomputed
//! from scratch.

use super::bf16::bf16_copy;
use super::drafter::{Draft, Drafter};
use super::sampling::choose;
use crate::cache::{new_store, CacheKind, KvStore};
use crate::error::{Error, Result};
use crate::model::{KvSource, Model};
use crate::rng::Rng;
use crate::sampler::SamplerConfig;

/// The draft model: the target itself (early exit) or a copy this drafter owns.
enum DraftModel<'a> {
    Borrowed(&'a Model),
    Owned(Box<Model>),
}

// ANCHOR: lm_drafter
/// A drafter that runs the first `n_layers` layers of `model` on top of its own cache.
pub struct LmDrafter<'a> {
    model: DraftModel<'a>,
    n_layers: usize,
    /// `n_layers` layers of K and V, for the ids in `cached`.
    cache: Box<dyn KvStore>,
    cached: Vec<u32>,
    label: String,
}
// ANCHOR_END: lm_drafter

impl<'a> LmDrafter<'a> {
    /// The target's first `layers` layers + final norm + LM head.
    pub fn early_exit(target: &'a Model, layers: usize) -> Result<LmDrafter<'a>> {
        check_exit(target, layers)?;
        LmDrafter::new(
            DraftModel::Borrowed(target),
            layers,
            format!("early-exit:{layers}"),
        )
    }

    /// The whole target with every weight rounded to bf16 and back (see [`bf16_copy`]).
    pub fn bf16_copy(target: &Model) -> Result<LmDrafter<'static>> {
        let copy = bf16_copy(target);
        let layers = copy.layers.len();
        LmDrafter::new(DraftModel::Owned(Box::new(copy)), layers, "bf16".into())
    }

    /// Any model with the target's vocabulary as the draft, all of its layers
    /// (a smaller model of the same family; in tests, a differently seeded random one).
    pub fn whole(draft: &'a Model, label: &str) -> Result<LmDrafter<'a>> {
        LmDrafter::new(
            DraftModel::Borrowed(draft),
            draft.layers.len(),
            label.into(),
        )
    }

    fn new(model: DraftModel<'a>, n_layers: usize, label: String) -> Result<LmDrafter<'a>> {
        let m = match &model {
            DraftModel::Borrowed(m) => *m,
            DraftModel::Owned(m) => m,
        };
        let mut config = m.config.clone();
        config.num_hidden_layers = n_layers;
        // Growable: the drafter is not told the request's length, and its cache is small.
        let cache = new_store(&config, CacheKind::Growable, 0, 1)?;
        Ok(LmDrafter {
            model,
            n_layers,
            cache,
            cached: Vec::new(),
            label,
        })
    }

    fn model(&self) -> &Model {
        match &self.model {
            DraftModel::Borrowed(m) => m,
            DraftModel::Owned(m) => m,
        }
    }

    /// Runs `tokens` through the draft layers on top of the draft cache; the logits of
    /// the last one, `[vocab]`.
    fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let model = match &self.model {
            DraftModel::Borrowed(m) => *m,
            DraftModel::Owned(m) => &**m,
        };
        let hidden = model.forward_hidden_layers(
            tokens,
            &mut KvSource::Cache(&mut *self.cache),
            self.n_layers,
        )?;
        self.cached.extend_from_slice(tokens);
        let dim = model.config.hidden_size;
        let hidden = hidden.as_slice().expect("arrays in kvlab are contiguous");
        Ok(model.logits(&hidden[hidden.len() - dim..]))
    }
}

/// An early exit must keep at least one layer and fewer than all of them (with all of
/// them the draft *is* the target).
pub fn check_exit(target: &Model, layers: usize) -> Result<()> {
    let n = target.layers.len();
    if layers == 0 || layers >= n {
        return Err(Error::InvalidArgument(format!(
            "early-exit:{layers}: the draft must keep between 1 and {} of the model's {n} layers",
            n.saturating_sub(1)
        )));
    }
    Ok(())
}

impl Drafter for LmDrafter<'_> {
    fn name(&self) -> String {
        self.label.clone()
    }

    // ANCHOR: lm_propose
    fn propose(
        &mut self,
        context: &[u32],
        k: usize,
        sampler: &SamplerConfig,
        rng: &mut Rng,
    ) -> Result<Draft> {
        if k == 0 || context.is_empty() {
            return Ok(Draft::default());
        }
        // The last guess is never run, so the cache reaches `context + k - 1` positions.
        if context.len() + k - 1 > self.model().config.max_position_embeddings {
            return Err(Error::InvalidArgument(format!(
                "drafting {k} tokens after {} would pass the model's context",
                context.len()
            )));
        }
        // Keep what the draft cache holds of the context (its rejected guesses go), and
        // leave at least the last token to run: its logits give the first guess.
        let keep = self
            .cached
            .iter()
            .zip(context)
            .take_while(|(a, b)| a == b)
            .count()
            .min(context.len() - 1);
        self.cache.truncate(keep);
        self.cached.truncate(keep);
        let mut logits = self.forward(&context[keep..])?;
        let mut draft = Draft {
            forwards: 1,
            probs: (sampler.temperature > 0.0).then(Vec::new),
            ..Draft::default()
        };
        for i in 0..k {
            let (token, q) = choose(&logits, sampler, rng);
            draft.tokens.push(token);
            if let (Some(all), Some(q)) = (draft.probs.as_mut(), q) {
                all.push(q);
            }
            if i + 1 < k {
                logits = self.forward(&[token])?;
                draft.forwards += 1;
            }
        }
        Ok(draft)
    }
    // ANCHOR_END: lm_propose
}
