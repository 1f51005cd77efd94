//! Every cache layout against the preallocated one, bit for bit; the paged allocator's
//! invariants under random interleavings of many sequences; the prefix cache's hits and
//! misses; multi-turn reuse; memory accounting.

mod common;

use common::{bits, step_logits_on, tiny_config};
use kvlab::backend::generate;
use kvlab::cache::paged::{BlockPool, PoolStats};
use kvlab::cache::PreallocatedCache;
use kvlab::cache::{new_policy_store, KvElement, KvPolicy};
use kvlab::cache::{new_store, CacheKind, GrowableCache, KvStore, PagedCache, PagedSeq, SeqId};
use kvlab::chat::ChatSession;
use kvlab::generate::{GenerateOptions, PathKind};
use kvlab::model::KvSource;
use kvlab::sampler::SamplerConfig;
use kvlab::{Config, Error, Model};
use proptest::prelude::*;
use std::collections::HashMap;

/// Random small shapes, as in tests/paths.rs: MHA, GQA and MQA, 1-2 layers.
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

fn greedy(max_new_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens,
        path: PathKind::Cached,
        sampler: SamplerConfig::default(),
        eos_ids: vec![],
    }
}

/// A block's stored K and V in every layer, as bytes (f32 bits, or codes and scales).
fn block_bits(cache: &PagedCache, b: usize) -> Vec<u8> {
    cache.pool().block_image(b)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// Decode through every layout, any block size: the logits of every step are the
    /// preallocated cache's, bit for bit.
    #[test]
    fn every_layout_gives_the_preallocated_logits(
        (config, prompt, continuation) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (Just(c), tokens(v, 1..30), tokens(v, 0..20))
        }),
        block_size in 1usize..9,
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let capacity = prompt.len() + continuation.len();
        let mut reference = PreallocatedCache::new(&model.config, capacity).unwrap();
        let want = bits(&step_logits_on(&model, &mut reference, &prompt, &continuation));
        for kind in CacheKind::ALL {
            let mut cache = new_store(&model.config, kind, capacity, block_size).unwrap();
            let got = bits(&step_logits_on(&model, &mut cache, &prompt, &continuation));
            prop_assert_eq!(&got, &want, "{:?}", kind);
            prop_assert_eq!(cache.len(), capacity);
            prop_assert_eq!(cache.bytes_used(), reference.bytes_used());
        }
    }

    /// The rectangular causal mask on every layout: prefill in random chunks (which
    /// cross block boundaries and growths at random places) == one-shot prefill.
    #[test]
    fn chunked_prefill_equals_one_shot_on_every_layout(
        (config, prompt, cuts) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (Just(c), tokens(v, 2..40), prop::collection::vec(1usize..8, 1..10))
        }),
        block_size in 1usize..9,
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let mut one_shot = PreallocatedCache::new(&model.config, prompt.len()).unwrap();
        let want: Vec<u32> = model
            .forward_hidden(&prompt, &mut KvSource::Cache(&mut one_shot))
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        for kind in CacheKind::ALL {
            let mut cache = new_store(&model.config, kind, prompt.len(), block_size).unwrap();
            let mut rows = Vec::new();
            let (mut start, mut cuts) = (0, cuts.iter().cycle());
            while start < prompt.len() {
                let end = (start + cuts.next().unwrap()).min(prompt.len());
                let h = model
                    .forward_hidden(&prompt[start..end], &mut KvSource::Cache(&mut cache))
                    .unwrap();
                rows.extend(h.iter().map(|v| v.to_bits()));
                start = end;
            }
            prop_assert_eq!(&rows, &want, "{:?}", kind);
        }
    }
}

/// One operation on a pool of sequences, drawn at random.
#[derive(Debug, Clone)]
enum Op {
    /// A new sequence: shared prefix `prefix` (cut to `keep` tokens), then `tail`.
    Add {
        prefix: usize,
        keep: usize,
        tail: Vec<u32>,
    },
    /// Feed `tokens` to live sequence number `which % live`.
    Step {
        which: usize,
        tokens: Vec<u32>,
    },
    Fork {
        which: usize,
    },
    Free {
        which: usize,
    },
}

fn op_strategy(vocab: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0usize..3, 0usize..40, tokens(vocab, 1..8))
            .prop_map(|(prefix, keep, tail)| Op::Add { prefix, keep, tail }),
        5 => (any::<usize>(), tokens(vocab, 1..5))
            .prop_map(|(which, tokens)| Op::Step { which, tokens }),
        1 => any::<usize>().prop_map(|which| Op::Fork { which }),
        1 => any::<usize>().prop_map(|which| Op::Free { which }),
    ]
}

/// A live sequence: its id in the paged cache and its reference, a contiguous cache of
/// the same element (f32, int8, int4 per token) that has seen the same tokens, and
/// those tokens, pass by pass (a fork's reference replays them).
struct Live {
    id: SeqId,
    reference: Box<dyn KvStore>,
    passes: Vec<Vec<u32>>,
}

/// A contiguous cache of `policy` that has run `passes`, one forward pass each.
fn replayed(model: &Model, policy: KvPolicy, passes: &[Vec<u32>]) -> Box<dyn KvStore> {
    let mut reference =
        new_policy_store(&model.config, policy, model.config.max_position_embeddings).unwrap();
    for pass in passes {
        model
            .forward(pass, KvSource::Cache(&mut reference))
            .unwrap();
    }
    reference
}

/// Runs `ops` on one paged cache and checks, after every operation: logits equal to
/// the reference's bit for bit, the allocator's invariants, shared and named blocks
/// untouched by writes, and a clear error (with nothing changed) when the pool is full.
fn run_interleaving(
    model: &Model,
    policy: KvPolicy,
    block_size: usize,
    n_blocks: usize,
    prefix_caching: bool,
    prefixes: &[Vec<u32>],
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let max_len = model.config.max_position_embeddings;
    let element = KvElement::for_pool(&model.config, policy, "paged").unwrap();
    let mut cache =
        PagedCache::with_element(&model.config, element, block_size, n_blocks, prefix_caching)
            .unwrap();
    let mut live: Vec<Live> = Vec::new();
    for op in ops {
        // Blocks that must not change while another sequence writes: shared ones, and
        // named ones (the prefix cache promises their content to future requests).
        let guarded: HashMap<usize, Vec<u8>> = (0..n_blocks)
            .filter(|&b| {
                cache.pool().ref_count(b) >= 2
                    || (cache.pool().ref_count(b) >= 1
                        && cache.prefix().is_some_and(|p| p.is_named(b)))
            })
            .map(|b| (b, block_bits(&cache, b)))
            .collect();
        match op {
            Op::Add { prefix, keep, tail } => {
                let mut prompt = prefixes[*prefix][..*keep.min(&prefixes[*prefix].len())].to_vec();
                prompt.extend(tail);
                let (id, reused) = cache.add_sequence_with_prefix(&prompt);
                prop_assert!(reused < prompt.len() && reused % block_size == 0);
                let mut reference = replayed(model, policy, &[]);
                let want = model
                    .forward(&prompt, KvSource::Cache(&mut reference))
                    .unwrap();
                let got = model.forward(
                    &prompt[reused..],
                    KvSource::Cache(&mut cache.seq(id).unwrap()),
                );
                match got {
                    Ok(got) => {
                        prop_assert_eq!(bits(&[got]), bits(&[want]));
                        live.push(Live {
                            id,
                            reference,
                            passes: vec![prompt],
                        });
                    }
                    Err(e) => {
                        prop_assert!(matches!(e, Error::BlockBudgetExhausted { .. }), "{}", e);
                        prop_assert_eq!(cache.seq_len(id), Some(reused));
                        cache.free(id).unwrap(); // the request is turned away
                    }
                }
            }
            Op::Step { which, tokens } if !live.is_empty() => {
                let i = which % live.len();
                let s = &mut live[i];
                if s.reference.len() + tokens.len() > max_len {
                    continue;
                }
                let before = (
                    cache.seq_len(s.id),
                    cache.block_table(s.id).map(<[_]>::to_vec),
                );
                // The block accounting the scheduler reads says beforehand what the step
                // takes: it succeeds exactly when the blocks are there, and takes no more.
                let promised = cache.blocks_to_append(s.id, tokens.len());
                let fits = cache.can_append(s.id, tokens.len(), 0);
                let used_before = cache.pool().n_used();
                let got = model.forward(tokens, KvSource::Cache(&mut cache.seq(s.id).unwrap()));
                prop_assert_eq!(got.is_ok(), fits, "can_append disagrees with the step");
                if got.is_ok() {
                    prop_assert!(cache.pool().n_used() <= used_before + promised);
                    let len = cache.seq_len(s.id).unwrap();
                    prop_assert_eq!(
                        cache.block_table(s.id).unwrap().len(),
                        kvlab::cache::paged::blocks_for_positions(len, block_size)
                    );
                }
                match got {
                    Ok(got) => {
                        let want = model
                            .forward(tokens, KvSource::Cache(&mut s.reference))
                            .unwrap();
                        prop_assert_eq!(bits(&[got]), bits(&[want]));
                        s.passes.push(tokens.clone());
                    }
                    Err(e) => {
                        prop_assert!(matches!(e, Error::BlockBudgetExhausted { .. }), "{}", e);
                        prop_assert!(e.to_string().contains("budget"));
                        let after = (
                            cache.seq_len(s.id),
                            cache.block_table(s.id).map(<[_]>::to_vec),
                        );
                        prop_assert_eq!(before, after, "a failed step changed the sequence");
                    }
                }
            }
            Op::Fork { which } if !live.is_empty() => {
                let s = &live[which % live.len()];
                let id = cache.fork(s.id).unwrap();
                let passes = s.passes.clone();
                let reference = replayed(model, policy, &passes);
                live.push(Live {
                    id,
                    reference,
                    passes,
                });
            }
            Op::Free { which } if !live.is_empty() => {
                let s = live.swap_remove(which % live.len());
                cache.free(s.id).unwrap();
            }
            _ => {}
        }
        if let Err(msg) = cache.check_invariants() {
            return Err(TestCaseError::fail(format!("after {op:?}: {msg}")));
        }
        for (b, before) in &guarded {
            let still_named = cache.prefix().is_some_and(|p| p.is_named(*b));
            if cache.pool().ref_count(*b) >= 1 || still_named {
                prop_assert_eq!(
                    &block_bits(&cache, *b),
                    before,
                    "block {} changed while shared",
                    b
                );
            }
        }
        // Waste: under one block per sequence.
        for s in &live {
            let seq = cache.seq(s.id).unwrap();
            prop_assert!(
                seq.bytes_reserved() - seq.bytes_used()
                    < BlockPool::block_bytes(&model.config, element, block_size)
            );
        }
    }
    // Every sequence ends: no block may stay in use.
    for s in live {
        cache.free(s.id).unwrap();
    }
    cache.check_invariants().map_err(TestCaseError::fail)?;
    let PoolStats {
        free, used, cached, ..
    } = cache.stats();
    prop_assert_eq!(used, 0);
    prop_assert_eq!(free + cached, n_blocks);
    if !prefix_caching {
        prop_assert_eq!(free, n_blocks);
    }
    Ok(())
}

fn cache_block_bytes(config: &Config, block_size: usize) -> usize {
    BlockPool::block_bytes(config, KvElement::F32, block_size)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Sequences added, stepped, forked and freed in random order, in pools small enough
    /// to run out: paged and prefix-cached, with f32, int8 and int4-per-token blocks
    /// (each against a contiguous cache of the same element: paged int8 == contiguous int8).
    #[test]
    fn interleaved_sequences_match_their_references(
        (config, prefixes, ops) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (
                Just(c),
                prop::collection::vec(tokens(v, 0..40), 3),
                prop::collection::vec(op_strategy(v), 1..40),
            )
        }),
        block_size in 1usize..7,
        n_blocks in 4usize..48,
        prefix_caching in any::<bool>(),
        seed in any::<u64>(),
        element in 0usize..3,
    ) {
        // head_dim is a multiple of 4 here: an int4 group of 4 channels tiles every head.
        let policy = [KvPolicy::Full, KvPolicy::Int8, KvPolicy::Int4PerToken { group: 4 }][element];
        let model = Model::random(config, seed).unwrap();
        run_interleaving(&model, policy, block_size, n_blocks, prefix_caching, &prefixes, &ops)?;
    }
}

/// A model for the hand-made cases.
fn small_model() -> Model {
    Model::random(tiny_config(2, 4, 2, 8, 64), 3).unwrap()
}

#[test]
fn a_pool_that_runs_out_says_so_and_keeps_the_others() {
    let model = small_model();
    // 4 blocks of 4 positions.
    let mut cache = PagedCache::new(&model.config, 4, 4, false).unwrap();
    let a = cache.add_sequence();
    let b = cache.add_sequence();
    let prompt_a: Vec<u32> = (1..=10).collect(); // 3 blocks
    let logits_a = model
        .forward(&prompt_a, KvSource::Cache(&mut cache.seq(a).unwrap()))
        .unwrap();
    // b wants 2 blocks, 1 is left.
    let err = model
        .forward(
            &[5, 6, 7, 8, 9],
            KvSource::Cache(&mut cache.seq(b).unwrap()),
        )
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            Error::BlockBudgetExhausted {
                n_blocks: 4,
                block_size: 4,
                free: 1,
                needed: 2,
                ..
            }
        ),
        "{msg}"
    );
    // The advice names no flag: the commands that build a paged cache do not all have --budget.
    assert!(
        msg.contains("budget") && msg.contains("size the pool for more") && !msg.contains("--"),
        "{msg}"
    );
    assert_eq!(cache.seq_len(b), Some(0));
    assert_eq!(cache.block_table(b), Some(&[][..]));
    cache.check_invariants().unwrap();
    // a is intact: its next token still equals the preallocated cache's.
    let mut reference = PreallocatedCache::new(&model.config, 11).unwrap();
    let want = model
        .forward(&prompt_a, KvSource::Cache(&mut reference))
        .unwrap();
    assert_eq!(logits_a, want);
    let next = model
        .forward(&[11], KvSource::Cache(&mut cache.seq(a).unwrap()))
        .unwrap();
    let want = model
        .forward(&[11], KvSource::Cache(&mut reference))
        .unwrap();
    assert_eq!(next, want);
    // When a ends, b fits.
    cache.free(a).unwrap();
    model
        .forward(
            &[5, 6, 7, 8, 9],
            KvSource::Cache(&mut cache.seq(b).unwrap()),
        )
        .unwrap();
    cache.check_invariants().unwrap();
}

#[test]
fn blocks_are_taken_only_at_block_boundaries() {
    let model = small_model();
    let mut seq = PagedSeq::single(&model.config, 4, 8, false).unwrap();
    let block = cache_block_bytes(&model.config, 4);
    let mut reserved = Vec::new();
    model
        .forward(&[1, 2, 3], KvSource::Cache(&mut seq))
        .unwrap();
    reserved.push(seq.bytes_reserved());
    for t in 4..=9 {
        model.forward(&[t], KvSource::Cache(&mut seq)).unwrap();
        reserved.push(seq.bytes_reserved());
    }
    // Lengths 3, 4, 5, ..., 9: blocks 1, 1, 2, 2, 2, 2, 3.
    let blocks: Vec<usize> = reserved.iter().map(|r| r / block).collect();
    assert_eq!(blocks, [1, 1, 2, 2, 2, 2, 3]);
    assert_eq!(seq.cache().block_table(seq.id()), Some(&[0, 1, 2][..]));
}

#[test]
fn fork_shares_blocks_and_copies_the_partial_one_on_write() {
    let model = small_model();
    let mut cache = PagedCache::new(&model.config, 4, 16, false).unwrap();
    let parent = cache.add_sequence();
    model
        .forward(
            &[1, 2, 3, 4, 5, 6],
            KvSource::Cache(&mut cache.seq(parent).unwrap()),
        )
        .unwrap();
    let child = cache.fork(parent).unwrap();
    assert_eq!(cache.block_table(parent), cache.block_table(child));
    let table = cache.block_table(parent).unwrap().to_vec();
    assert!(table.iter().all(|&b| cache.pool().ref_count(b) == 2));
    let partial = table[1];
    let before = block_bits(&cache, partial);
    model
        .forward(&[7], KvSource::Cache(&mut cache.seq(child).unwrap()))
        .unwrap();
    // The child got its own copy of the partial block; the full one is still shared.
    let child_table = cache.block_table(child).unwrap().to_vec();
    assert_eq!(child_table[0], table[0]);
    assert_ne!(child_table[1], partial);
    assert_eq!(
        block_bits(&cache, partial),
        before,
        "the shared block was written"
    );
    assert_eq!(
        (
            cache.pool().ref_count(table[0]),
            cache.pool().ref_count(partial)
        ),
        (2, 1)
    );
    assert_eq!(cache.cow_copies, 1);
    cache.check_invariants().unwrap();
    // The parent writes its own partial block in place now (it holds it alone).
    model
        .forward(&[8], KvSource::Cache(&mut cache.seq(parent).unwrap()))
        .unwrap();
    assert_eq!(cache.block_table(parent).unwrap()[1], partial);
    assert_eq!(cache.cow_copies, 1);
}

/// The prefix cache on a hand-made case, block size 4.
#[test]
fn prefix_hits_and_misses_by_hand() {
    let model = small_model();
    let mut cache = PagedCache::new(&model.config, 4, 32, true).unwrap();
    let system: Vec<u32> = (10..22).collect(); // 12 tokens = 3 full blocks
    let prompt = |tail: &[u32]| [&system[..], tail].concat();

    // Cold: nothing cached; 3 lookups (blocks 0-2; block 3 holds the last token), 3 misses.
    let p1 = prompt(&[1, 2]);
    let (a, reused) = cache.add_sequence_with_prefix(&p1);
    assert_eq!(reused, 0);
    model
        .forward(&p1, KvSource::Cache(&mut cache.seq(a).unwrap()))
        .unwrap();
    assert_eq!(
        (cache.stats().prefix_hits, cache.stats().prefix_misses),
        (0, 3)
    );

    // Same system prompt: the 3 full blocks hit, shared with a.
    let p2 = prompt(&[3, 4, 5]);
    let (b, reused) = cache.add_sequence_with_prefix(&p2);
    assert_eq!(reused, 12);
    assert_eq!(
        (cache.stats().prefix_hits, cache.stats().prefix_misses),
        (3, 3)
    );
    assert_eq!(
        cache.block_table(b).unwrap(),
        &cache.block_table(a).unwrap()[..3]
    );
    model
        .forward(&p2[reused..], KvSource::Cache(&mut cache.seq(b).unwrap()))
        .unwrap();
    cache.check_invariants().unwrap();

    // A prompt that is exactly the 3 blocks: only 2 may hit (the last token is computed).
    let (c, reused) = cache.add_sequence_with_prefix(&system);
    assert_eq!(reused, 8);
    cache.free(c).unwrap();

    // One token differs in block 1: block 0 hits, blocks 1 and 2 miss.
    let mut p3 = p1.clone();
    p3[5] = 63;
    let (d, reused) = cache.add_sequence_with_prefix(&p3);
    assert_eq!(reused, 4);
    let s = cache.stats();
    assert_eq!((s.prefix_hits, s.prefix_misses), (3 + 2 + 1, 3 + 2));
    cache.free(d).unwrap();

    // Everyone leaves: named blocks are parked, not freed, and still hit afterwards.
    cache.free(a).unwrap();
    cache.free(b).unwrap();
    let s = cache.stats();
    assert_eq!(s.used, 0);
    assert!(s.cached >= 3, "{s:?}");
    let (e, reused) = cache.add_sequence_with_prefix(&p2);
    assert_eq!(reused, 12);
    cache.free(e).unwrap();
    cache.check_invariants().unwrap();
}

#[test]
fn a_prefix_hit_gives_the_tokens_of_a_cold_run() {
    let model = Model::random(tiny_config(2, 6, 2, 8, 96), 11).unwrap();
    let system: Vec<u32> = (0..37).map(|i| (i * 7 + 3) % 96).collect();
    let mut cache = PagedCache::new(&model.config, 8, 64, true).unwrap();
    let run = |cache: &mut PagedCache, prompt: &[u32]| -> (usize, Vec<u32>) {
        let (id, reused) = cache.add_sequence_with_prefix(prompt);
        let mut seq = cache.seq(id).unwrap();
        let mut logits = model
            .forward(&prompt[reused..], KvSource::Cache(&mut seq))
            .unwrap();
        let mut out = Vec::new();
        for _ in 0..8 {
            let t = kvlab::ops::argmax(&logits) as u32;
            out.push(t);
            logits = model.forward(&[t], KvSource::Cache(&mut seq)).unwrap();
        }
        (reused, out)
    };
    let p1 = [&system[..], &[1, 2, 3]].concat();
    let p2 = [&system[..], &[4, 5]].concat();
    let (reused, _) = run(&mut cache, &p1);
    assert_eq!(reused, 0);
    let (reused, hit) = run(&mut cache, &p2);
    assert_eq!(reused, 32);
    let cold = generate(&model, &p2, &greedy(8), |_| {}).unwrap();
    assert_eq!(hit, cold.generated_ids);
}

#[test]
fn evicted_blocks_are_reused_least_recently_parked_first() {
    let model = small_model();
    // 6 blocks of 2: a 5-token prompt takes 3 blocks and names 2.
    let mut cache = PagedCache::new(&model.config, 2, 6, true).unwrap();
    let run = |cache: &mut PagedCache, prompt: &[u32]| {
        let (id, reused) = cache.add_sequence_with_prefix(prompt);
        model
            .forward(
                &prompt[reused..],
                KvSource::Cache(&mut cache.seq(id).unwrap()),
            )
            .unwrap();
        id
    };
    let a = run(&mut cache, &[1, 2, 3, 4, 5]);
    cache.free(a).unwrap();
    let b = run(&mut cache, &[6, 7, 8, 9, 10]);
    cache.free(b).unwrap();
    assert_eq!(cache.stats().cached, 4);
    // A third request needs 3 blocks: 2 free ones, then the LRU parked block, which is
    // the tail of a's prefix (a was parked first, tail before head).
    let c = run(&mut cache, &[11, 12, 13, 14, 15]);
    assert_eq!(cache.stats().evictions, 1);
    cache.free(c).unwrap();
    let (d, reused) = cache.add_sequence_with_prefix(&[1, 2, 3, 4, 5]);
    assert_eq!(reused, 2, "a's head block survived, its tail was evicted");
    cache.free(d).unwrap();
    cache.check_invariants().unwrap();
}

/// Multi-turn: turn 2 on the cache kept from turn 1 gives the tokens of turn 2 from scratch.
#[test]
fn turn_two_on_a_kept_cache_equals_turn_two_from_scratch() {
    let model = Model::random(tiny_config(2, 4, 2, 8, 80), 5).unwrap();
    let turn1: Vec<u32> = (0..23).map(|i| (i * 5 + 1) % 80).collect();
    for kind in CacheKind::ALL {
        let cache = new_store(&model.config, kind, 128, 4).unwrap();
        let mut chat = ChatSession::new(&model, cache);
        let t1 = chat.turn(&turn1, &greedy(6), |_| {}).unwrap();
        assert_eq!((t1.reused, t1.computed), (0, 23));
        // Turn 2's prompt: turn 1, its answer, a new question.
        let mut turn2 = [&turn1[..], &t1.generation.generated_ids[..]].concat();
        turn2.extend([7, 8, 9, 10]);
        let t2 = chat.turn(&turn2, &greedy(6), |_| {}).unwrap();
        // Everything but the last sampled token (never fed back) was in the cache.
        assert_eq!(t2.reused, 23 + 6 - 1, "{kind:?}");
        assert_eq!(t2.computed, 1 + 4);
        let scratch = generate(&model, &turn2, &greedy(6), |_| {}).unwrap();
        assert_eq!(
            t2.generation.generated_ids, scratch.generated_ids,
            "{kind:?}"
        );
        // A turn 3 that rewrites history (an edited question) reuses only what matches.
        let mut turn3 = turn2.clone();
        turn3[10] = 79;
        let t3 = chat.turn(&turn3, &greedy(3), |_| {}).unwrap();
        assert_eq!(t3.reused, 10);
        let scratch = generate(&model, &turn3, &greedy(3), |_| {}).unwrap();
        assert_eq!(
            t3.generation.generated_ids, scratch.generated_ids,
            "{kind:?}"
        );
    }
}

#[test]
fn growable_counts_its_copies() {
    let config = tiny_config(2, 4, 2, 8, 64);
    let model = Model::random(config.clone(), 1).unwrap();
    let mut cache = GrowableCache::new(&config, 4).unwrap();
    let per_token = kvlab::cache::bytes_per_token(&config);
    let mut caps = Vec::new();
    model
        .forward(&[1, 2, 3], KvSource::Cache(&mut cache))
        .unwrap();
    caps.push(cache.capacity());
    for t in 0..14 {
        model.forward(&[t], KvSource::Cache(&mut cache)).unwrap();
        caps.push(cache.capacity());
    }
    // 3 fit in 4; the 5th token doubles to 8, the 9th to 16.
    assert_eq!(caps, [4, 4, 8, 8, 8, 8, 16, 16, 16, 16, 16, 16, 16, 16, 32]);
    assert_eq!(cache.growths, 3);
    // Each growth copied what was stored then: 4, 8, 16 positions.
    assert_eq!(cache.bytes_copied, (4 + 8 + 16) * per_token);
    // The peak held the last two buffers at once.
    assert_eq!(cache.peak_bytes, (16 + 32) * per_token);
    assert_eq!(cache.bytes_reserved(), 32 * per_token);
    assert_eq!(cache.bytes_used(), 17 * per_token);
}

#[test]
fn every_layout_reports_reserved_and_used_bytes() {
    let config = tiny_config(2, 4, 2, 8, 64);
    let model = Model::random(config.clone(), 1).unwrap();
    let per_token = kvlab::cache::bytes_per_token(&config);
    let prompt: Vec<u32> = (0..21).collect();
    for kind in CacheKind::ALL {
        let mut cache = new_store(&config, kind, 40, 16).unwrap();
        model.forward(&prompt, KvSource::Cache(&mut cache)).unwrap();
        assert_eq!(cache.bytes_used(), 21 * per_token, "{kind:?}");
        let reserved = match kind {
            CacheKind::Preallocated => 40,
            CacheKind::Growable => 32, // 16 was too small: doubled
            CacheKind::Paged | CacheKind::Prefix => 32, // 2 blocks of 16
        };
        assert_eq!(cache.bytes_reserved(), reserved * per_token, "{kind:?}");
    }
}

#[test]
fn bad_pool_sizes_are_errors() {
    let config = tiny_config(1, 2, 1, 8, 64);
    assert!(PagedCache::new(&config, 0, 4, false).is_err());
    let err = PagedCache::with_budget(&config, KvElement::F32, 16, 100, false)
        .err()
        .unwrap();
    assert!(err.to_string().contains("less than one block"), "{err}");
    let block = cache_block_bytes(&config, 16);
    let cache =
        PagedCache::with_budget(&config, KvElement::F32, 16, 10 * block + 1, false).unwrap();
    assert_eq!(cache.stats().n_blocks, 10);
    let mut cache = cache;
    assert!(cache.free(SeqId(99)).is_err());
    assert!(cache.fork(SeqId(99)).is_err());
    assert!(cache.seq(SeqId(99)).is_err());
}

/// Block names are plain FNV-1a (computed independently, in Python, for these values):
/// the same on every machine and Rust version, and the same as exercise 20's.
#[test]
fn block_names_are_fnv1a_and_chain() {
    use kvlab::cache::paged::prefix::block_hash;
    let first = block_hash(None, &[0, 1, 2, 3]);
    assert_eq!(first, 0xfab1_3f66_63ec_005f);
    assert_eq!(
        block_hash(Some(first), &[4, 5, 6, 7]),
        0x72aa_91e2_6974_3c66
    );
    assert_ne!(block_hash(Some(1), &[0, 1, 2, 3]), first);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The pool that only counts (what the GPU's paged cache asks, src/cuda/paged_cache.rs)
    /// takes and gives back the very blocks a pool with memory does: after every pass and
    /// every rollback the two block tables are equal, and so are the bytes in use.
    #[test]
    fn a_counting_pool_chooses_the_blocks_of_a_real_one(
        block_size in 1usize..=6,
        ops in prop::collection::vec((1usize..=9, 0usize..=4), 1..12),
    ) {
        let config = tiny_config(1, 2, 1, 4, 32);
        let capacity = ops.iter().map(|(n, _)| n).sum::<usize>();
        let n_blocks = capacity.div_ceil(block_size);
        let mut real = PagedSeq::single(&config, block_size, n_blocks, false).unwrap();
        let mut counting =
            PagedSeq::single_counting(&config, KvElement::F32, block_size, n_blocks).unwrap();
        let kv_dim = config.n_kv_heads() * config.head_dim();
        for (n, back) in ops {
            let pass = vec![1u32; n];
            real.prepare(&pass).unwrap();
            counting.prepare(&pass).unwrap();
            let rows = vec![0.5f32; n * kv_dim];
            real.write(0, &rows, &rows).unwrap();
            real.advance(n);
            counting.advance(n);
            let len = real.len().saturating_sub(back);
            real.truncate(len);
            counting.truncate(len);
            let table = |s: &PagedSeq<PagedCache>| s.cache().block_table(s.id()).unwrap().to_vec();
            prop_assert_eq!(table(&real), table(&counting));
            prop_assert_eq!(real.bytes_reserved(), counting.bytes_reserved());
            prop_assert_eq!(real.bytes_used(), counting.bytes_used());
            counting.cache().check_invariants().map_err(TestCaseError::fail)?;
        }
    }
}
