//! The evicting caches (sliding window with sinks, H2O) against their plain twin, the
//! full cache with the evicted positions masked out, bit for bit; their memory against
//! the formula; bad shapes as one-line errors.

mod common;

use common::{bits, tiny_config};
use kvlab::cache::paged::Retention;
use kvlab::cache::{
    bytes_per_token, H2oCache, KvElement, KvStore, MaskRule, MaskedCache, PagedCache, PagedSeq,
    PreallocatedCache, WindowCache,
};
use kvlab::model::KvSource;
use kvlab::{Config, Model};
use proptest::prelude::*;

/// Random small shapes, as in tests/caches.rs: MHA, GQA and MQA, 1-2 layers.
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

fn tokens(vocab: usize, len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(0..vocab as u32, len)
}

/// One thing done to both caches.
#[derive(Debug, Clone)]
enum Op {
    /// Feed the next `n` tokens of the text (capped by the pass limit).
    Feed(usize),
    /// Forget positions from `len % (positions + 1)` on.
    Truncate(usize),
}

fn ops_strategy() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            12 => prop_oneof![4 => Just(1usize), 1 => 1usize..8].prop_map(Op::Feed),
            1 => any::<usize>().prop_map(Op::Truncate),
        ],
        1..60,
    )
}

/// The kept positions of every layer (for the window, the same in all).
trait Kept {
    fn kept(&self, layer: usize) -> Vec<usize>;
}
impl Kept for WindowCache {
    fn kept(&self, _layer: usize) -> Vec<usize> {
        self.positions()
    }
}
impl Kept for H2oCache {
    fn kept(&self, layer: usize) -> Vec<usize> {
        self.positions(layer).to_vec()
    }
}
impl Kept for PagedSeq<PagedCache> {
    fn kept(&self, _layer: usize) -> Vec<usize> {
        self.cache().positions_held(self.id())
    }
}
impl Kept for MaskedCache {
    fn kept(&self, layer: usize) -> Vec<usize> {
        self.positions(layer).to_vec()
    }
}

/// Runs `ops` over `text` on an evicting cache and its masked twin: after every pass
/// the hidden states of every new token are the same bits, and so are the kept
/// positions of every layer. Returns the most rows the evicting cache ever held.
fn run_twins<C: KvStore + Kept>(
    model: &Model,
    text: &[u32],
    ops: &[Op],
    evicting: &mut C,
    twin: &mut MaskedCache,
    check: &dyn Fn(&C) -> Result<(), String>,
) -> Result<usize, TestCaseError> {
    let layers = model.config.num_hidden_layers;
    let mut most_rows = 0;
    for op in ops {
        match *op {
            Op::Feed(n) => {
                let pos = evicting.len();
                prop_assert_eq!(evicting.max_pass_tokens(), twin.max_pass_tokens());
                let n = n.min(evicting.max_pass_tokens()).min(text.len() - pos);
                if n == 0 {
                    continue;
                }
                let chunk = &text[pos..pos + n];
                let got = model
                    .forward_hidden(chunk, &mut KvSource::Cache(evicting))
                    .unwrap();
                let want = model
                    .forward_hidden(chunk, &mut KvSource::Cache(twin))
                    .unwrap();
                let (got, want): (Vec<u32>, Vec<u32>) = (
                    got.iter().map(|v| v.to_bits()).collect(),
                    want.iter().map(|v| v.to_bits()).collect(),
                );
                prop_assert_eq!(got, want, "pass at position {}", pos);
            }
            Op::Truncate(len) => {
                let len = len % (evicting.len() + 1);
                evicting.truncate(len);
                twin.truncate(len);
            }
        }
        prop_assert_eq!(evicting.len(), twin.len());
        prop_assert_eq!(evicting.rows_held(), twin.rows_held());
        for l in 0..layers {
            prop_assert_eq!(evicting.kept(l), twin.kept(l), "layer {}", l);
        }
        check(evicting).map_err(TestCaseError::fail)?;
        most_rows = most_rows.max(evicting.rows_held());
    }
    Ok(most_rows)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A sliding window with sinks gives the masked full cache's hidden states, bit for
    /// bit, for any window, any number of sinks, any chunking and truncation; it keeps
    /// exactly the first `sinks` and the latest positions; its memory never passes the
    /// window's.
    #[test]
    fn window_cache_equals_the_masked_full_cache(
        (config, text) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (Just(c), tokens(v, 1..80))
        }),
        (window, sinks) in (1usize..12).prop_flat_map(|w| (Just(w), 0..w)),
        ops in ops_strategy(),
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let rule = MaskRule::Window { window, sinks };
        let mut cache = WindowCache::new(&model.config, window, sinks).unwrap();
        let mut twin = MaskedCache::new(&model.config, text.len(), rule).unwrap();
        let most = run_twins(&model, &text, &ops, &mut cache, &mut twin, &|_| Ok(()))?;
        let per_token = bytes_per_token(&model.config);
        prop_assert!(most <= window);
        prop_assert_eq!(cache.bytes_reserved(), window * per_token);
        prop_assert_eq!(cache.bytes_used(), cache.rows_held() * per_token);
        // The window's definition, checked directly (no truncation in between: the
        // kept set is the first sinks and a run of the latest positions).
        let kept = cache.positions();
        let first = kept.iter().take_while(|&&p| p < sinks).count();
        prop_assert_eq!(first, sinks.min(cache.len()));
        prop_assert!(kept[first..].windows(2).all(|w| w[1] == w[0] + 1));
        prop_assert!(kept.len() <= window);
    }

    /// A window kept in paged blocks (`--cache paged|prefix --kv window`) gives the
    /// masked full cache's hidden states, bit for bit, for any window, sinks, block
    /// size, chunking and rollback; after every pass the pool's invariants hold (holes
    /// only where every position is dropped, no leak), the sequence never holds more
    /// blocks than `Retention::max_blocks`, and once the text is freed every block is
    /// back in the pool.
    #[test]
    fn paged_window_equals_the_masked_full_cache(
        (config, text) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (Just(c), tokens(v, 1..80))
        }),
        (window, sinks) in (1usize..12).prop_flat_map(|w| (Just(w), 0..w)),
        block_size in 1usize..6,
        prefix_caching in any::<bool>(),
        ops in ops_strategy(),
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let retention = Retention::Window { window, sinks };
        let capacity_blocks = text.len().div_ceil(block_size);
        let mut paged = PagedSeq::single_keeping(
            &model.config, KvElement::F32, retention, block_size, capacity_blocks, prefix_caching,
        ).unwrap();
        let rule = MaskRule::Window { window, sinks };
        let mut twin = MaskedCache::new(&model.config, text.len(), rule).unwrap();
        let check = |seq: &PagedSeq<PagedCache>| seq.cache().check_invariants();
        let most = run_twins(&model, &text, &ops, &mut paged, &mut twin, &check)?;
        prop_assert!(most <= window);
        let most_blocks = retention.max_blocks(block_size).unwrap();
        prop_assert!(paged.cache().pool().n_blocks() <= most_blocks);
        prop_assert_eq!(
            paged.bytes_used(),
            paged.rows_held() * KvElement::F32.bytes_per_token(&model.config)
        );
        let id = paged.id();
        let mut pool = paged.into_cache();
        pool.free(id).unwrap();
        pool.check_invariants().map_err(TestCaseError::fail)?;
        prop_assert_eq!(pool.stats().used, 0);
    }

    /// H2O gives the masked full cache's hidden states, bit for bit: same scores, same
    /// evictions, in every layer, for any budget and recent window.
    #[test]
    fn h2o_cache_equals_the_masked_full_cache(
        (config, text) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (Just(c), tokens(v, 1..80))
        }),
        (budget, recent) in (1usize..12).prop_flat_map(|b| (Just(b), 0..=b)),
        ops in ops_strategy(),
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        // Half the cases without truncation, where the recent window must be held.
        let truncates = seed % 2 == 0;
        let ops: Vec<Op> = ops.into_iter().filter(|op| truncates || matches!(op, Op::Feed(_))).collect();
        let rule = MaskRule::H2o { budget, recent };
        let mut cache = H2oCache::new(&model.config, budget, recent).unwrap();
        let mut twin = MaskedCache::new(&model.config, text.len(), rule).unwrap();
        let most = run_twins(&model, &text, &ops, &mut cache, &mut twin, &|_| Ok(()))?;
        let per_token = bytes_per_token(&model.config);
        prop_assert!(most <= budget);
        prop_assert_eq!(cache.bytes_reserved(), budget * per_token);
        prop_assert_eq!(cache.bytes_used(), cache.rows_held() * per_token);
        // The recent window is always held, in every layer (unless a truncation cut
        // back to positions evicted long ago).
        let recent_start = cache.len().saturating_sub(recent);
        for l in (0..model.config.num_hidden_layers).filter(|_| !truncates) {
            let kept = cache.positions(l);
            prop_assert!((recent_start..cache.len()).all(|p| kept.contains(&p)));
        }
    }

    /// Anchors the twin: with nothing to evict (window or budget at least the text), both
    /// evicting caches and the masked cache give the preallocated cache's logits.
    #[test]
    fn nothing_evicted_is_the_full_cache(
        (config, text) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (Just(c), tokens(v, 1..40))
        }),
        sinks in 0usize..4,
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let size = text.len() + sinks + 1;
        let logits = |cache: &mut dyn KvStore| -> Vec<Vec<f32>> {
            text.iter().map(|&t| model.forward(&[t], KvSource::Cache(cache)).unwrap()).collect()
        };
        let want = bits(&logits(&mut PreallocatedCache::new(&model.config, text.len()).unwrap()));
        let c = &model.config;
        let mut caches: Vec<Box<dyn KvStore>> = vec![
            Box::new(WindowCache::new(c, size, sinks).unwrap()),
            Box::new(H2oCache::new(c, size, 0).unwrap()),
            Box::new(MaskedCache::new(c, text.len(), MaskRule::Window { window: size, sinks }).unwrap()),
            Box::new(MaskedCache::new(c, text.len(), MaskRule::H2o { budget: size, recent: 1 }).unwrap()),
        ];
        for cache in &mut caches {
            prop_assert_eq!(&bits(&logits(cache.as_mut())), &want);
        }
    }
}

fn small_model() -> Model {
    Model::random(tiny_config(2, 4, 2, 8, 64), 7).unwrap()
}

/// Bounded memory for unbounded text: 200 tokens through an 8-position window (2 sinks)
/// and an 8-position H2O budget; the bytes never move from the formula
/// `positions x 2 x n_layers x kv_dim x 4`, and the text really was evicted (the
/// logits differ from the full cache's).
#[test]
fn memory_stays_bounded_whatever_the_text_length() {
    let model = small_model();
    let per_token = bytes_per_token(&model.config);
    assert_eq!(per_token, 2 * 2 * (2 * 8) * 4);
    let text: Vec<u32> = (0..200).map(|i| (i * 7 % 64) as u32).collect();
    let mut full = PreallocatedCache::new(&model.config, text.len()).unwrap();
    let mut window = WindowCache::new(&model.config, 8, 2).unwrap();
    let mut h2o = H2oCache::new(&model.config, 8, 4).unwrap();
    let mut differ = 0;
    for &t in &text {
        let want = model.forward(&[t], KvSource::Cache(&mut full)).unwrap();
        for cache in [&mut window as &mut dyn KvStore, &mut h2o] {
            let got = model.forward(&[t], KvSource::Cache(cache)).unwrap();
            differ += usize::from(got != want);
            assert_eq!(cache.bytes_reserved(), 8 * per_token);
            assert_eq!(cache.bytes_used(), cache.rows_held().min(8) * per_token);
            assert!(cache.rows_held() <= 8);
        }
    }
    assert_eq!(window.len(), 200);
    assert_eq!(window.positions(), [0, 1, 194, 195, 196, 197, 198, 199]);
    assert_eq!(full.bytes_used(), 200 * per_token);
    assert!(
        differ > 300,
        "only {differ} of 400 steps differ from the full cache"
    );
}

/// A window, a budget or sinks that cannot work: a one-line error naming the fix.
#[test]
fn bad_shapes_are_one_line_errors() {
    let c = small_model().config;
    let cases = [
        (
            WindowCache::new(&c, 0, 0).err(),
            "a window of 0 positions keeps nothing",
        ),
        (WindowCache::new(&c, 4, 4).err(), "4 sinks leave no room"),
        (WindowCache::new(&c, 4, 9).err(), "9 sinks leave no room"),
        (H2oCache::new(&c, 0, 0).err(), "an H2O budget of 0"),
        (
            H2oCache::new(&c, 4, 5).err(),
            "a recent window of 5 does not fit",
        ),
        (
            MaskedCache::new(
                &c,
                8,
                MaskRule::Window {
                    window: 3,
                    sinks: 3,
                },
            )
            .err(),
            "3 sinks leave no room",
        ),
    ];
    for (err, want) in cases {
        let msg = err.expect("an error").to_string();
        assert!(msg.contains(want), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }
}

/// A pass larger than the window (or budget) can hold is refused before anything
/// changes, and the cache goes on as if it had not been asked.
#[test]
fn a_pass_too_large_is_refused_and_changes_nothing() {
    let model = small_model();
    let text: Vec<u32> = (0..12).collect();
    let mut window = WindowCache::new(&model.config, 6, 2).unwrap();
    let mut h2o = H2oCache::new(&model.config, 6, 2).unwrap();
    for cache in [&mut window as &mut dyn KvStore, &mut h2o] {
        model
            .forward(&text[..4], KvSource::Cache(&mut *cache))
            .unwrap();
        let (len, rows) = (cache.len(), cache.rows_held());
        let err = model
            .forward(&text[4..11], KvSource::Cache(&mut *cache))
            .unwrap_err();
        assert!(err.to_string().contains("feed at most"), "{err}");
        assert_eq!((cache.len(), cache.rows_held()), (len, rows));
        model
            .forward(&text[4..8], KvSource::Cache(&mut *cache))
            .unwrap();
        assert_eq!(cache.len(), 8);
        assert_eq!(cache.rows_held(), 6);
    }
}

/// A prompt longer than the window goes through the cached decoder's prefill in chunks
/// (the window's `max_pass_tokens`), as `kvlab generate --kv window` feeds it; the
/// tokens that follow equal the masked twin's.
#[test]
fn a_long_prompt_is_prefilled_in_chunks() {
    use kvlab::generate::{Cached, Decoder};
    let model = small_model();
    let prompt: Vec<u32> = (0..40).map(|i| (i * 5 % 64) as u32).collect();
    let c = &model.config;
    let mut window = Cached {
        model: &model,
        cache: WindowCache::new(c, 8, 2).unwrap(),
    };
    let rule = MaskRule::Window {
        window: 8,
        sinks: 2,
    };
    let mut twin = Cached {
        model: &model,
        cache: MaskedCache::new(c, 48, rule).unwrap(),
    };
    let mut got = vec![window.prefill(&prompt).unwrap()];
    let mut want = vec![twin.prefill(&prompt).unwrap()];
    for t in [3, 1, 4, 1, 5] {
        got.push(window.step(t).unwrap());
        want.push(twin.step(t).unwrap());
    }
    assert_eq!(bits(&got), bits(&want));
    assert_eq!(window.cache.len(), 45);
    assert_eq!(window.cache.positions(), [0, 1, 39, 40, 41, 42, 43, 44]);
}

/// `kvlab evict-speed`'s library side on a tiny model: the window's step reads `window`
/// rows at every context, the full cache's every position; bytes as reserved.
#[test]
fn evict_speed_reports_the_rows_each_step_read() {
    let model = small_model();
    let text: Vec<u32> = (0..50).map(|i| (i * 3 % 64) as u32).collect();
    let report = kvlab::lab::evict_speed::evict_speed(&model, &text, 8, 2, &[20, 100], 3).unwrap();
    let per_token = bytes_per_token(&model.config);
    let rows: Vec<(String, usize, usize, usize)> = report
        .points
        .iter()
        .map(|p| {
            (
                p.cache.clone(),
                p.context,
                p.rows_attended,
                p.kv_cache_bytes,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("full".to_string(), 20, 24, 24 * per_token),
            ("window-w8-s2".to_string(), 20, 8, 8 * per_token),
            ("full".to_string(), 100, 104, 104 * per_token),
            ("window-w8-s2".to_string(), 100, 8, 8 * per_token),
        ]
    );
    assert!(report.points.iter().all(|p| p.step_ms > 0.0));
    let too_long = kvlab::lab::evict_speed::evict_speed(&model, &text, 8, 2, &[255], 3);
    assert!(too_long
        .unwrap_err()
        .to_string()
        .contains("must be between 1 and"));
}

/// Multi-turn chat on an evicting cache (`kvlab chat --kv window|h2o`): each turn cuts the
/// cache back to the common prefix (`truncate`) and prefills the rest in passes; every
/// turn's tokens are the masked twin's.
#[test]
fn chat_turns_on_an_evicting_cache_equal_the_twin() {
    use kvlab::chat::ChatSession;
    use kvlab::generate::{GenerateOptions, PathKind};
    use kvlab::sampler::SamplerConfig;
    let model = small_model();
    let c = &model.config;
    let opts = GenerateOptions {
        max_new_tokens: 6,
        path: PathKind::Cached,
        sampler: SamplerConfig::default(),
        eos_ids: vec![],
    };
    for (evicting, rule) in [
        (
            Box::new(WindowCache::new(c, 10, 2).unwrap()) as Box<dyn KvStore>,
            MaskRule::Window {
                window: 10,
                sinks: 2,
            },
        ),
        (
            Box::new(H2oCache::new(c, 10, 4).unwrap()),
            MaskRule::H2o {
                budget: 10,
                recent: 4,
            },
        ),
    ] {
        let mut chat = ChatSession::new(&model, evicting);
        let mut twin = ChatSession::new(&model, Box::new(MaskedCache::new(c, 128, rule).unwrap()));
        let mut conversation: Vec<u32> = (0..25).map(|i| (i * 11 % 64) as u32).collect();
        for turn in 0..3 {
            let got = chat.turn(&conversation, &opts, |_| {}).unwrap();
            let want = twin.turn(&conversation, &opts, |_| {}).unwrap();
            assert_eq!(
                got.generation.generated_ids, want.generation.generated_ids,
                "turn {turn}"
            );
            assert_eq!(got.reused, want.reused);
            // The reply and a new user message (which differs from what was generated at
            // the end, so the next turn cuts the cache back).
            conversation.extend(&got.generation.generated_ids[..4]);
            conversation.extend([7, 8, 9, turn as u32]);
            assert!(chat.kv_bytes().reserved <= 10 * bytes_per_token(c));
        }
    }
}
