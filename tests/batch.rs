//! The batched forward pass (src/batch.rs) against solo runs, bit for bit: whatever a
//! sequence is batched with, however its tokens are cut into chunks, and whatever the
//! number of rows (the matmul kernel changes at 32 rows: strips below, packed panels from
//! there), its logits are those of running it alone.

mod common;

use common::{bits, cached_step_logits, tiny_config};
use kvlab::cache::source::PagedBatch;
use kvlab::cache::{PagedCache, SeqId};
use kvlab::model::KvSource;
use kvlab::{Config, Error, Model};
use proptest::prelude::*;

fn config_strategy() -> impl Strategy<Value = Config> {
    (1usize..=2, 1usize..=3, 1usize..=2, 1usize..=3, 16usize..=96).prop_map(
        |(layers, n_kv_heads, group, half_head, vocab)| {
            tiny_config(layers, n_kv_heads * group, n_kv_heads, 4 * half_head, vocab)
        },
    )
}

/// Logits after every position `p` of `tokens` when run alone (one token at a time).
fn solo_logits(model: &Model, tokens: &[u32]) -> Vec<Vec<f32>> {
    cached_step_logits(model, &tokens[..1], &tokens[1..])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random sequences, advanced in random groups by random chunks through one pool:
    /// every chunk's last-row logits equal the solo logits at that position.
    #[test]
    fn batched_passes_equal_solo_runs(
        config in config_strategy(),
        seed in any::<u64>(),
        lens in prop::collection::vec(1usize..40, 1..12),
        plan_seed in any::<u64>(),
        block_size in 1usize..20,
        prefix_caching in any::<bool>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let vocab = model.config.vocab_size as u64;
        let mut rng = kvlab::rng::Rng::new(plan_seed);
        // Some sequences share a prefix, so prefix caching has something to find.
        let shared: Vec<u32> = (0..20).map(|_| (rng.next_u64() % vocab) as u32).collect();
        let seqs: Vec<Vec<u32>> = lens
            .iter()
            .map(|&len| {
                let share = rng.next_u64().is_multiple_of(2) as usize * (rng.next_u64() as usize % len);
                let mut t = shared[..share.min(20)].to_vec();
                t.extend((t.len()..len).map(|_| (rng.next_u64() % vocab) as u32));
                t
            })
            .collect();
        common::batched_equals_solo(&model, &seqs, block_size, prefix_caching, &mut rng)?;
    }
}

/// 1 to 40 decode rows in one pass, across the kernel switch at 32 rows: the LM head and
/// every projection give each row the bits it gets alone.
#[test]
fn decode_rows_are_batch_invariant_across_the_kernel_switch() {
    let model = Model::random(tiny_config(2, 4, 2, 8, 64), 7).unwrap();
    let prompts: Vec<Vec<u32>> = (0..40u32)
        .map(|i| (0..5 + i % 4).map(|j| (i * 7 + j * 3) % 64).collect())
        .collect();
    let solo: Vec<Vec<f32>> = prompts
        .iter()
        .map(|p| solo_logits(&model, p).pop().unwrap())
        .collect();
    for n in (1..=12).chain([31, 32, 33, 40]) {
        let mut cache = PagedCache::new(&model.config, 4, 400, false).unwrap();
        let ids: Vec<SeqId> = (0..n).map(|_| cache.add_sequence()).collect();
        // Prompts but the last token, one pass; then the last tokens as n decode rows.
        let heads: Vec<&[u32]> = prompts[..n].iter().map(|p| &p[..p.len() - 1]).collect();
        let mut batch = PagedBatch {
            cache: &mut cache,
            seqs: ids.clone(),
        };
        model
            .forward_batch(&heads, &mut batch, &vec![false; n])
            .unwrap();
        let lasts: Vec<&[u32]> = prompts[..n].iter().map(|p| &p[p.len() - 1..]).collect();
        let mut batch = PagedBatch {
            cache: &mut cache,
            seqs: ids,
        };
        let logits = model
            .forward_batch(&lasts, &mut batch, &vec![true; n])
            .unwrap();
        for (i, l) in logits.into_iter().enumerate() {
            assert_eq!(
                bits(&[l.unwrap()]),
                bits(&[solo[i].clone()]),
                "row {i} of {n}"
            );
        }
    }
}

/// The single-sequence entry points are a batch of one: same bits as `forward_batch`.
#[test]
fn forward_is_a_batch_of_one() {
    let model = Model::random(tiny_config(1, 2, 1, 8, 32), 3).unwrap();
    let prompt = [1u32, 5, 9, 2, 30, 4];
    let alone = model.forward(&prompt, KvSource::ThisPass).unwrap();
    let mut kv = KvSource::ThisPass;
    let batched = model.forward_batch(&[&prompt], &mut kv, &[true]).unwrap();
    assert_eq!(bits(&[alone]), bits(&[batched[0].clone().unwrap()]));
}

#[test]
fn bad_batches_are_errors_not_panics() {
    let model = Model::random(tiny_config(1, 2, 1, 8, 32), 3).unwrap();
    let mut cache = PagedCache::new(&model.config, 4, 8, false).unwrap();
    let ids = vec![cache.add_sequence(), cache.add_sequence()];
    let mut batch = PagedBatch {
        cache: &mut cache,
        seqs: ids,
    };
    let empty: &[u32] = &[];
    assert!(matches!(
        model.forward_batch(&[&[1], empty], &mut batch, &[true, true]),
        Err(Error::EmptyPrompt)
    ));
    assert!(matches!(
        model.forward_batch(&[&[1], &[99]], &mut batch, &[true, true]),
        Err(Error::TokenOutOfRange { id: 99, .. })
    ));
    assert!(model.forward_batch(&[&[1]], &mut batch, &[true]).is_err());
}
