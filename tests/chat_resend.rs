//! A chat turn whose prompt is already entirely in the cache: the user resends or
//! regenerates a message. The common prefix with the cache is then the whole prompt,
//! and a prefill of the remaining zero tokens would have no logits to sample from.
//! `src/chat.rs` keeps at least the last prompt token to compute; without that guard
//! every case below fails with "the prompt is empty".

mod common;

use common::tiny_config;
use kvlab::backend::generate;
use kvlab::cache::{new_store, CacheKind};
use kvlab::chat::ChatSession;
use kvlab::generate::{GenerateOptions, PathKind};
use kvlab::sampler::SamplerConfig;
use kvlab::Model;

fn greedy(max_new_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens,
        path: PathKind::Cached,
        sampler: SamplerConfig::default(),
        eos_ids: vec![],
    }
}

#[test]
fn a_fully_cached_turn_recomputes_only_its_last_token_on_every_layout() {
    let model = Model::random(tiny_config(2, 4, 2, 8, 80), 7).unwrap();
    let prompt: Vec<u32> = (0..21).map(|i| (i * 3 + 2) % 80).collect();
    for kind in CacheKind::ALL {
        // Block size 4: the prompt ends inside a block, and 20 (the reused length) is
        // a block boundary, so the paged layouts truncate at an edge and mid-block.
        let cache = new_store(&model.config, kind, 128, 4).unwrap();
        let mut chat = ChatSession::new(&model, cache);
        let first = chat.turn(&prompt, &greedy(5), |_| {}).unwrap();
        assert_eq!((first.reused, first.computed), (0, 21), "{kind:?}");

        // 1. The same message again ("regenerate"): the cache holds the prompt and
        //    four of the five sampled tokens (the last one was never fed back).
        let again = chat
            .turn(&prompt, &greedy(5), |_| {})
            .unwrap_or_else(|e| panic!("{kind:?}: a resent prompt failed: {e}"));
        assert_eq!((again.reused, again.computed), (20, 1), "{kind:?}");
        assert_eq!(
            again.generation.generated_ids, first.generation.generated_ids,
            "{kind:?}: greedy regeneration must give the same reply"
        );

        // 2. A prompt equal to exactly what the cache holds, to the last position.
        let held = chat.cached_ids().to_vec();
        assert_eq!(held.len(), 21 + 4, "{kind:?}");
        let exact = chat
            .turn(&held, &greedy(3), |_| {})
            .unwrap_or_else(|e| panic!("{kind:?}: a prompt equal to the cache failed: {e}"));
        assert_eq!((exact.reused, exact.computed), (24, 1), "{kind:?}");
        let scratch = generate(&model, &held, &greedy(3), |_| {}).unwrap();
        assert_eq!(
            exact.generation.generated_ids, scratch.generated_ids,
            "{kind:?}: a fully cached turn must generate what a fresh one does"
        );
    }
}
