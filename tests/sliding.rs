//! The window per query (`--kv sliding`, `src/mask.rs`): every token sees the first
//! `sinks` positions and the latest `window - sinks` up to itself, whatever the cut.
//! Three caches keep it: the plain twin (every position kept, read through the mask),
//! the contiguous ring (`HybridCache::sliding`) and the paged pool that gives blocks
//! back (`Retention::Sliding`). They give the same hidden states, bit for bit, under
//! any cut of the text into passes, any block size and any rollback, and the pool
//! holds no more than the window's blocks.

mod common;

use common::tiny_config;
use kvlab::cache::build::new_composed_store;
use kvlab::cache::paged::Retention;
use kvlab::cache::quant::{FakeQuantCache, QuantCache};
use kvlab::cache::{
    CacheKind, HybridCache, KvElement, KvPolicy, KvStore, PagedCache, PagedSeq, RowCodes,
};
use kvlab::mask::Window;
use kvlab::model::KvSource;
use kvlab::{Config, Model};
use proptest::prelude::*;

fn config_strategy() -> impl Strategy<Value = Config> {
    (
        1usize..=2,
        1usize..=3,
        1usize..=3,
        1usize..=3,
        16usize..=128,
    )
        .prop_map(|(layers, n_kv_heads, group, half_head, vocab)| {
            tiny_config(layers, n_kv_heads * group, n_kv_heads, 4 * half_head, vocab)
        })
}

/// Hidden states of `text` fed to `cache` in passes of the sizes `cuts` gives (cycled),
/// every row of every pass, as bits. A truncate to `rollback` positions (when it is
/// set and the text is past it) replays the rest: a speculative rollback.
fn hidden_bits(model: &Model, cache: &mut dyn KvStore, text: &[u32], cuts: &[usize]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut cut = cuts.iter().cycle();
    while cache.len() < text.len() {
        let pos = cache.len();
        let n = (*cut.next().unwrap())
            .min(cache.max_pass_tokens())
            .min(text.len() - pos);
        let hidden = model
            .forward_hidden(&text[pos..pos + n], &mut KvSource::Cache(cache))
            .unwrap();
        out.extend(hidden.iter().map(|v| v.to_bits()));
    }
    out
}

/// Feeds `text` to the paged sequence in passes of the sizes `cuts` gives (cycled) and
/// returns its hidden states as bits, checking after every pass that the pool's
/// invariants hold (a hole only where no later query looks) and that the sequence holds
/// no more blocks than `Retention::peak_blocks`.
fn paged_bits_checked(
    model: &Model,
    paged: &mut PagedSeq<PagedCache>,
    text: &[u32],
    cuts: &[usize],
    retention: Retention,
    block_size: usize,
) -> Result<Vec<u32>, TestCaseError> {
    let mut got = Vec::new();
    let mut cut = cuts.iter().cycle();
    let most_pass = cuts.iter().max().copied().unwrap();
    while paged.len() < text.len() {
        let pos = paged.len();
        let n = (*cut.next().unwrap()).min(text.len() - pos);
        let hidden = model
            .forward_hidden(&text[pos..pos + n], &mut KvSource::Cache(paged))
            .unwrap();
        got.extend(hidden.iter().map(|v| v.to_bits()));
        paged
            .cache()
            .check_invariants()
            .map_err(TestCaseError::fail)?;
        let held = (paged.cache().block_table(paged.id()).unwrap().iter())
            .filter(|&&b| b != kvlab::cache::paged::HOLE)
            .count();
        let peak = retention.peak_blocks(paged.len(), block_size, most_pass);
        prop_assert!(held <= peak, "{} blocks held, peak {}", held, peak);
    }
    Ok(got)
}

/// Frees the sequence: every block is back in the pool and the invariants hold.
fn free_leaves_nothing(paged: PagedSeq<PagedCache>) -> Result<(), TestCaseError> {
    let mut pool = paged.into_cache();
    let id = pool.sequences().next().unwrap();
    pool.free(id).unwrap();
    pool.check_invariants().map_err(TestCaseError::fail)?;
    prop_assert_eq!(pool.stats().used, 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The paged pool and the ring give the plain twin's bits under any cut, and the
    /// plain twin's own bits do not depend on the cut either: what a token sees is
    /// named by positions, not by passes. After every pass the pool's invariants hold
    /// (a hole only where no later query looks); the sequence's blocks stay within
    /// `Retention::peak_blocks`; freed, every block is back.
    #[test]
    fn every_cut_and_every_layout_gives_the_plain_twins_bits(
        (config, text) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size as u32;
            (Just(c), prop::collection::vec(0..v, 1..70))
        }),
        (size, sinks) in (1usize..12).prop_flat_map(|w| (Just(w), 0..w)),
        block_size in 1usize..7,
        cuts in prop::collection::vec(prop_oneof![3 => Just(1usize), 1 => 1usize..20], 1..6),
        prefix_caching in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let window = Window { size, sinks };
        // The plain twin: one ring as long as the text, so nothing is ever overwritten,
        // in one pass.
        let mut plain = HybridCache::sliding(&model.config, text.len(), text.len(), window).unwrap();
        let want = hidden_bits(&model, &mut plain, &text, &[text.len()]);
        // The same twin under this cut.
        let mut plain_cut = HybridCache::sliding(&model.config, text.len(), text.len(), window).unwrap();
        prop_assert_eq!(&hidden_bits(&model, &mut plain_cut, &text, &cuts), &want, "plain, cut");
        // The ring of `size - 1 + pass` slots.
        let mut ring = HybridCache::sliding(&model.config, text.len(), 8, window).unwrap();
        prop_assert_eq!(&hidden_bits(&model, &mut ring, &text, &cuts), &want, "ring");
        // The paged pool, checked pass by pass.
        let retention = Retention::Sliding { window: size, sinks };
        let mut paged = PagedSeq::single_keeping(
            &model.config, KvElement::F32, retention, block_size,
            text.len().div_ceil(block_size), prefix_caching,
        ).unwrap();
        let got = paged_bits_checked(&model, &mut paged, &text, &cuts, retention, block_size)?;
        prop_assert_eq!(&got, &want, "paged");
        // A window that reaches back over the whole text masks nothing: the full cache.
        if size >= text.len() {
            let mut full = kvlab::cache::PreallocatedCache::new(&model.config, text.len()).unwrap();
            prop_assert_eq!(&hidden_bits(&model, &mut full, &text, &cuts), &want, "full");
        }
        free_leaves_nothing(paged)?;
    }

    /// A rollback (speculative decoding's) to anywhere in the last pass keeps the bits:
    /// replaying from there gives what the uncut text gave. A cut deeper than what the
    /// window gave back forgets the sequence (its length reads 0), as the ring does.
    #[test]
    fn a_rollback_within_the_last_pass_keeps_the_bits(
        (config, text) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size as u32;
            (Just(c), prop::collection::vec(0..v, 8..60))
        }),
        (size, sinks) in (1usize..10).prop_flat_map(|w| (Just(w), 0..w)),
        block_size in 1usize..5,
        last_pass in 1usize..6,
        back in 0usize..6,
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let window = Window { size, sinks };
        let mut plain = HybridCache::sliding(&model.config, text.len(), text.len(), window).unwrap();
        let want = hidden_bits(&model, &mut plain, &text, &[1]);
        let retention = Retention::Sliding { window: size, sinks };
        let mut paged = PagedSeq::single_keeping(
            &model.config, KvElement::F32, retention, block_size,
            text.len().div_ceil(block_size), false,
        ).unwrap();
        let start = text.len().saturating_sub(last_pass).max(1);
        hidden_bits(&model, &mut paged, &text[..start], &[1]);
        model.forward_hidden(&text[start..], &mut KvSource::Cache(&mut paged)).unwrap();
        // Back into the last pass, never below its start.
        let to = text.len().saturating_sub(back).max(start);
        paged.truncate(to);
        prop_assert_eq!(paged.len(), to);
        paged.cache().check_invariants().map_err(TestCaseError::fail)?;
        let dim = model.config.hidden_size;
        let replay = hidden_bits(&model, &mut paged, &text, &[1]);
        prop_assert_eq!(&replay[..], &want[to * dim..]);
        // Far below the slide: everything is forgotten, nothing leaks.
        paged.truncate(0);
        prop_assert_eq!(paged.len(), 0);
        paged.cache().check_invariants().map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Element × retention (`--kv int8+sliding`, `--kv int4-per-token+sliding`): paged
    /// blocks of codes that go back to the pool as the window slides give the bits of
    /// the preallocated quantized cache that keeps every row and masks, and of the f32
    /// cache of fake-quantized K/V under the same mask, under any cut, block size and
    /// prefix caching. Both come from the one constructor every path calls
    /// (`new_composed_store`). A window over the whole text is the unwindowed codes.
    #[test]
    fn quantized_rows_under_a_window_are_the_masked_twins_bits(
        (config, text) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size as u32;
            (Just(c), prop::collection::vec(0..v, 1..60))
        }),
        (size, sinks) in (1usize..12).prop_flat_map(|w| (Just(w), 0..w)),
        codes in prop_oneof![
            Just(RowCodes::Int8),
            Just(RowCodes::Int4PerToken { group: 2 }),
            Just(RowCodes::Int4PerToken { group: 4 }),
        ],
        block_size in 1usize..7,
        cuts in prop::collection::vec(prop_oneof![3 => Just(1usize), 1 => 1usize..20], 1..6),
        prefix_caching in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let policy = KvPolicy::Sliding { window: size, sinks, codes };
        let n = text.len();
        // The f32 twin: every row fake-quantized, kept, and masked.
        let mut fake = FakeQuantCache::new(&model.config, policy, n).unwrap();
        let want = hidden_bits(&model, &mut fake, &text, &[n]);
        // The codes kept and masked, one pass per cut.
        let mut masked = QuantCache::new(&model.config, policy, n).unwrap();
        prop_assert_eq!(&hidden_bits(&model, &mut masked, &text, &cuts), &want, "masked codes");
        for kind in [CacheKind::Preallocated, CacheKind::Paged, CacheKind::Prefix] {
            let mut store = new_composed_store(&model.config, kind, policy, n, block_size).unwrap();
            prop_assert_eq!(&hidden_bits(&model, store.as_mut(), &text, &cuts), &want, "{}", kind.name());
        }
        // The pool of code blocks, checked pass by pass: holes only where no later
        // query looks, never more blocks than the window's peak.
        let retention = Retention::of(policy).unwrap();
        let element = KvElement::for_pool(&model.config, policy, "paged").unwrap();
        prop_assert!(element != KvElement::F32);
        let mut paged = PagedSeq::single_keeping(
            &model.config, element, retention, block_size, n.div_ceil(block_size), prefix_caching,
        ).unwrap();
        let got = paged_bits_checked(&model, &mut paged, &text, &cuts, retention, block_size)?;
        prop_assert_eq!(&got, &want, "paged codes");
        if size >= n {
            let mut unwindowed = QuantCache::new(&model.config, codes.policy(), n).unwrap();
            prop_assert_eq!(&hidden_bits(&model, &mut unwindowed, &text, &cuts), &want, "no window");
        }
        free_leaves_nothing(paged)?;
    }
}

/// `--kv ELEMENT+RETENTION` parses into one policy whose name and label say both axes;
/// a composition that cannot be built is refused in one line saying why.
#[test]
fn compositions_parse_and_refuse_in_one_line() {
    use kvlab::cache::PolicyParams;
    let params = PolicyParams {
        window: Some(64),
        sinks: Some(4),
        ..Default::default()
    };
    let int8 = KvPolicy::parse("int8+sliding", params).unwrap();
    assert_eq!(
        int8,
        KvPolicy::Sliding {
            window: 64,
            sinks: 4,
            codes: RowCodes::Int8
        }
    );
    assert_eq!(
        (int8.name(), int8.label().as_str()),
        ("int8+sliding", "int8-sliding-w64-s4")
    );
    assert_eq!(int8.element_policy(), KvPolicy::Int8);
    let grouped = PolicyParams {
        group: Some(16),
        ..params
    };
    let int4 = KvPolicy::parse("int4-per-token+sliding", grouped).unwrap();
    assert_eq!(int4.label(), "int4-per-token-g16-sliding-w64-s4");
    // --group means nothing to int8 rows.
    let err = KvPolicy::parse("int8+sliding", grouped)
        .unwrap_err()
        .to_string();
    assert!(err.contains("--group does nothing"), "{err}");
    for (name, why) in [
        ("int4+sliding", "cuts through"),
        ("int8+window", "per-pass window"),
        ("int8+h2o", "H2O"),
        ("int8+int4", "not an element"),
    ] {
        let err = KvPolicy::parse(name, params).unwrap_err().to_string();
        assert!(err.contains(why) && !err.contains('\n'), "{name}: {err}");
        assert!(
            err.contains("int8+sliding, int4-per-token+sliding"),
            "{err}"
        );
    }
    // An engine pool holds int8 blocks under the window; the quantized element's bytes
    // per token are the unwindowed int8's.
    let config = Config::smollm2_135m();
    let element = KvElement::for_pool(&config, int8, "paged").unwrap();
    assert_eq!(
        element,
        KvElement::for_pool(&config, KvPolicy::Int8, "paged").unwrap()
    );
    assert_eq!(
        kvlab::cache::paged::Retention::of(int8).unwrap(),
        kvlab::cache::paged::Retention::Sliding {
            window: 64,
            sinks: 4
        }
    );
}

/// The policy parses from the command line's words and is refused in one line where
/// it cannot work.
#[test]
fn the_policy_parses_and_refuses_in_one_line() {
    use kvlab::cache::PolicyParams;
    let params = PolicyParams {
        window: Some(64),
        sinks: Some(4),
        ..Default::default()
    };
    let policy = KvPolicy::parse("sliding", params).unwrap();
    assert_eq!(
        policy,
        KvPolicy::Sliding {
            window: 64,
            sinks: 4,
            codes: RowCodes::F32,
        }
    );
    assert_eq!(policy.label(), "sliding-w64-s4");
    let no_window = KvPolicy::parse("sliding", PolicyParams::default()).unwrap_err();
    assert!(no_window.to_string().contains("--window W"));
    let too_many_sinks = PolicyParams {
        window: Some(4),
        sinks: Some(4),
        ..Default::default()
    };
    let err = KvPolicy::parse("sliding", too_many_sinks).unwrap_err();
    assert!(err.to_string().contains("fewer sinks"));
    // Gemma 3 has windows of its own.
    let gemma = common::tiny_gemma_config(4, 1, 8, 32, 4, &[true, false]);
    let err = HybridCache::sliding(&gemma, 64, 8, Window { size: 8, sinks: 0 })
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("trained with their own window"),
        "{err}"
    );
    // Engine pools take it; the per-pass window they refuse.
    let config = Config::smollm2_135m();
    assert_eq!(
        KvElement::for_pool(&config, policy, "paged").unwrap(),
        KvElement::F32
    );
    let per_pass = KvPolicy::Window {
        window: 64,
        sinks: 4,
    };
    let err = KvElement::for_pool(&config, per_pass, "paged").unwrap_err();
    assert!(err.to_string().contains("or sliding"), "{err}");
}
