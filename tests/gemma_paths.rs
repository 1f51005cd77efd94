//! The twin tests on Gemma-3-shaped random models (book: sliding-window-model.md): local
//! layers whose window is shorter than the sequence, several local/global patterns, MQA
//! to MHA. Naive == cached == every cache layout == batched == the textbook, bit for bit;
//! chunked prefill == one shot; and the window provably changes the logits.

mod common;

use common::{bits, cached_step_logits, naive_step_logits, step_logits_on, tiny_gemma_config};
use kvlab::cache::{
    new_policy_store, new_store, CacheKind, HybridCache, KvPolicy, KvStore, PreallocatedCache,
};
use kvlab::generate::prefill_in_passes;
use kvlab::model::KvSource;
use kvlab::textbook::{self, TextbookCache};
use kvlab::{Config, Model};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Random Gemma shapes: 1-4 layers, each local or global, a window of 1-6 positions.
fn config_strategy() -> impl Strategy<Value = Config> {
    (
        prop::collection::vec(any::<bool>(), 1..=4),
        1usize..=2,
        1usize..=3,
        1usize..=3,
        16usize..=96,
        1usize..=6,
    )
        .prop_map(|(local, n_kv_heads, group, half_head, vocab, window)| {
            tiny_gemma_config(
                n_kv_heads * group,
                n_kv_heads,
                4 * half_head,
                vocab,
                window,
                &local,
            )
        })
}

fn tokens(vocab: usize, len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(0..vocab as u32, len)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Every step's logits: naive == preallocated == every layout == the textbook's two paths.
    #[test]
    fn naive_cached_every_layout_and_the_textbook_agree_bit_for_bit(
        (config, prompt, continuation) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (Just(c), tokens(v, 1..20), tokens(v, 0..12))
        }),
        block_size in 1usize..6,
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let want = bits(&cached_step_logits(&model, &prompt, &continuation));
        prop_assert_eq!(&bits(&naive_step_logits(&model, &prompt, &continuation)), &want);
        let capacity = prompt.len() + continuation.len();
        for kind in CacheKind::ALL {
            let mut cache = new_store(&model.config, kind, capacity, block_size).unwrap();
            let got = bits(&step_logits_on(&model, &mut cache, &prompt, &continuation));
            prop_assert_eq!(&got, &want, "{:?}", kind);
        }
        let mut book = TextbookCache::default();
        let mut textbook_cached = vec![book.logits(&model, &prompt).unwrap()];
        let mut seq = prompt.clone();
        let mut textbook_naive = vec![textbook::naive_logits(&model, &seq).unwrap()];
        for &t in &continuation {
            textbook_cached.push(book.logits(&model, &[t]).unwrap());
            seq.push(t);
            textbook_naive.push(textbook::naive_logits(&model, &seq).unwrap());
        }
        prop_assert_eq!(&bits(&textbook_cached), &want);
        prop_assert_eq!(&bits(&textbook_naive), &want);
    }

    /// The window on the rectangular mask: prefill in random chunks == one shot.
    #[test]
    fn chunked_prefill_equals_one_shot(
        (config, prompt, cuts) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (Just(c), tokens(v, 2..30), prop::collection::vec(1usize..8, 1..8))
        }),
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
        let mut cache = PreallocatedCache::new(&model.config, prompt.len()).unwrap();
        let (mut rows, mut start, mut cuts) = (Vec::new(), 0, cuts.iter().cycle());
        while start < prompt.len() {
            let end = (start + cuts.next().unwrap()).min(prompt.len());
            let h = model.forward_hidden(&prompt[start..end], &mut KvSource::Cache(&mut cache)).unwrap();
            rows.extend(h.iter().map(|v| v.to_bits()));
            start = end;
        }
        prop_assert_eq!(rows, want);
    }

    /// The hybrid cache (a ring per local layer, `cache/hybrid.rs`) against the full
    /// cache, with passes small enough that every ring wraps many times: the prompt in
    /// passes, then decode steps, each followed now and then by a speculative-style
    /// rollback of up to one pass and a re-feed. Logits bitwise equal at every step.
    #[test]
    fn a_ring_per_local_layer_equals_the_full_cache_bit_for_bit(
        (config, prompt, continuation) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (Just(c), tokens(v, 1..40), tokens(v, 1..24))
        }),
        pass in 1usize..5,
        rollbacks in prop::collection::vec(0usize..5, 1..6),
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let capacity = prompt.len() + continuation.len();
        let mut full = PreallocatedCache::new(&model.config, capacity).unwrap();
        let mut ring = HybridCache::new(&model.config, capacity, pass).unwrap();
        let want = bits(&[model.forward(&prompt, KvSource::Cache(&mut full)).unwrap()]);
        let got = bits(&[prefill_in_passes(&model, &mut ring, &prompt).unwrap()]);
        prop_assert_eq!(got, want, "prefill in passes of {}", pass);
        let mut rollbacks = rollbacks.iter().cycle();
        for (i, &t) in continuation.iter().enumerate() {
            let want = bits(&[model.forward(&[t], KvSource::Cache(&mut full)).unwrap()]);
            let got = bits(&[model.forward(&[t], KvSource::Cache(&mut ring)).unwrap()]);
            prop_assert_eq!(&got, &want, "step {}", i);
            // Roll back up to one pass (never below what the ring can serve) and re-feed.
            let back = (*rollbacks.next().unwrap()).min(pass).min(ring.len());
            if back > 0 {
                let keep = ring.len() - back;
                ring.truncate(keep);
                prop_assert_eq!(ring.len(), keep, "a rollback of {} <= one pass is served", back);
                let fed: Vec<u32> = prompt.iter().chain(&continuation[..=i]).copied().collect();
                let again = prefill_in_passes(&model, &mut ring, &fed[keep..]).unwrap();
                prop_assert_eq!(bits(&[again]), want, "re-fed after a rollback of {}", back);
            }
        }
        let slots = ring.slots_per_layer();
        for (l, &got) in slots.iter().enumerate() {
            let want = match model.config.layer_window(l) {
                Some(w) => (w - 1 + pass).min(capacity),
                None => capacity,
            };
            prop_assert_eq!(got, want, "layer {} slots", l);
        }
    }

    /// Sequences of different lengths batched in one pool, in random chunks: each gets
    /// the logits it gets alone.
    #[test]
    fn batched_passes_equal_solo_runs(
        config in config_strategy(),
        seed in any::<u64>(),
        lens in prop::collection::vec(1usize..24, 1..6),
        plan_seed in any::<u64>(),
        block_size in 1usize..8,
    ) {
        let model = Model::random(config, seed).unwrap();
        let vocab = model.config.vocab_size as u64;
        let mut rng = kvlab::rng::Rng::new(plan_seed);
        let seqs: Vec<Vec<u32>> = lens
            .iter()
            .map(|&len| (0..len).map(|_| (rng.next_u64() % vocab) as u32).collect())
            .collect();
        common::batched_equals_solo(&model, &seqs, block_size, false, &mut rng)?;
    }
}

/// The test above could pass with the window ignored everywhere; this one cannot: past
/// the window, a local layer's logits differ from the same model's with a wider window,
/// and before the window's end they are the same bits.
#[test]
fn the_window_changes_the_logits_only_once_the_sequence_is_longer_than_it() {
    let narrow = Model::random(tiny_gemma_config(4, 1, 8, 64, 4, &[true, false]), 9).unwrap();
    let mut config = narrow.config.clone();
    config.gemma.sliding_window = Some(64);
    let wide = narrow.with_config(config).unwrap();
    let seq: Vec<u32> = (0..12).map(|i| (i * 7 + 3) % 64).collect();
    let a = bits(&cached_step_logits(&narrow, &seq[..1], &seq[1..]));
    let b = bits(&cached_step_logits(&wide, &seq[..1], &seq[1..]));
    // Positions 0..=3 see at most 4 positions: no difference yet.
    assert_eq!(a[..4], b[..4]);
    for p in 4..12 {
        assert_ne!(
            a[p], b[p],
            "position {p} is past the window: its logits must change"
        );
    }
}

/// Gemma's other pieces matter too: each of QK-norm, the sandwich norms and GeGLU, removed,
/// changes the logits (so these twins test real arithmetic, not a pass that skips one).
/// The embedding scale has its own test below.
#[test]
fn every_gemma_piece_changes_the_logits() {
    let model = Model::random(tiny_gemma_config(2, 1, 8, 64, 3, &[true, false]), 4).unwrap();
    let seq: Vec<u32> = vec![5, 9, 2, 7, 1];
    let base = model.forward(&seq, KvSource::ThisPass).unwrap();
    let mut llama_mlp = model.config.clone();
    llama_mlp.gemma.hidden_activation = Some("silu".into());
    let changed = model
        .with_config(llama_mlp)
        .unwrap()
        .forward(&seq, KvSource::ThisPass)
        .unwrap();
    assert_ne!(
        bits(std::slice::from_ref(&base)),
        bits(&[changed]),
        "the activation"
    );
    let without = |f: fn(&mut kvlab::model::Layer)| {
        let mut m = model.with_config(model.config.clone()).unwrap();
        m.layers.iter_mut().for_each(f);
        m.forward(&seq, KvSource::ThisPass).unwrap()
    };
    for (what, logits) in [
        (
            "QK-norm",
            without(|l| {
                l.q_norm = None;
                l.k_norm = None;
            }),
        ),
        (
            "the attention's sandwich norm",
            without(|l| l.post_attn_norm = None),
        ),
        (
            "the MLP's sandwich norm",
            without(|l| l.post_mlp_norm = None),
        ),
    ] {
        assert_ne!(bits(std::slice::from_ref(&base)), bits(&[logits]), "{what}");
    }
}

/// An evicting cache drops rows, and a local layer's window counts positions: refused
/// with a message naming the fix, not run with the wrong mask.
#[test]
fn an_evicting_cache_is_refused_for_a_model_with_local_layers() {
    let model = Model::random(tiny_gemma_config(2, 1, 8, 64, 3, &[true, false]), 4).unwrap();
    let policy = KvPolicy::Window {
        window: 6,
        sinks: 1,
    };
    let mut store = new_policy_store(&model.config, policy, 32).unwrap();
    let seq: Vec<u32> = (0..20).collect();
    let mut result = Ok(vec![]);
    for t in &seq {
        result = model.forward(&[*t], KvSource::Cache(store.as_mut()));
        if result.is_err() {
            break;
        }
    }
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains("local layers") && err.contains("--kv full"),
        "{err}"
    );
}

/// A Gemma 3 config.json that contradicts itself is refused, naming the setting.
#[test]
fn an_inconsistent_gemma_config_is_refused_naming_the_setting() {
    let good = serde_json::to_value(Config::gemma3_270m()).unwrap();
    let cases: [(&str, serde_json::Value, &str); 7] = [
        (
            "sliding_window",
            serde_json::json!(0),
            "sliding_window is Some(0)",
        ),
        (
            "sliding_window",
            serde_json::Value::Null,
            "sliding_window is None",
        ),
        (
            "layer_types",
            serde_json::json!(vec!["full_attention"; 17]),
            "layer_types names 17 layers but the model has 18",
        ),
        (
            "layer_types",
            serde_json::json!(vec!["chunked_attention"; 18]),
            "layer_types holds `chunked_attention`",
        ),
        (
            "hidden_activation",
            serde_json::json!("relu"),
            "the activation is `relu`",
        ),
        (
            "final_logit_softcapping",
            serde_json::json!(30.0),
            "final_logit_softcapping is 30",
        ),
        (
            "query_pre_attn_scalar",
            serde_json::json!(224),
            "query_pre_attn_scalar is 224 but head_dim is 256",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    for (key, value, want) in cases {
        let mut json = good.clone();
        json[key] = value;
        std::fs::write(&path, json.to_string()).unwrap();
        let err = Config::from_file(&path).unwrap_err().to_string();
        assert!(err.contains(want), "{key}: {err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }
    std::fs::write(&path, good.to_string()).unwrap();
    assert_eq!(Config::from_file(&path).unwrap(), Config::gemma3_270m());
}

/// Gemma's embedding is multiplied by √dim (rounded to f32, as transformers'
/// `Gemma3TextScaledWordEmbedding`): the residual stream before the first layer is exactly
/// that; a Llama's is the table's row as it is.
#[test]
fn the_embedding_is_scaled_by_the_root_of_dim_for_gemma_only() {
    let gemma = Model::random(tiny_gemma_config(2, 1, 8, 64, 3, &[true, false]), 4).unwrap();
    let scale = (gemma.config.hidden_size as f64).sqrt() as f32;
    assert_eq!(gemma.config.embed_scale(), Some(scale));
    let hidden = gemma
        .forward_hidden_layers(&[7, 3], &mut KvSource::ThisPass, 0)
        .unwrap();
    for (row, token) in [7usize, 3].iter().enumerate() {
        let want: Vec<u32> = gemma
            .embed
            .row(*token)
            .iter()
            .map(|v| (v * scale).to_bits())
            .collect();
        let got: Vec<u32> = hidden.row(row).iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, want);
    }
    let llama = Model::random(common::tiny_config(1, 2, 1, 8, 64), 4).unwrap();
    assert_eq!(llama.config.embed_scale(), None);
    let hidden = llama
        .forward_hidden_layers(&[7], &mut KvSource::ThisPass, 0)
        .unwrap();
    assert_eq!(hidden.row(0), llama.embed.row(7));
}

/// `kvlab eval --model-window`: the trained window against itself is the identity (KL 0,
/// every top-1 equal); a wider one changes the predictions once the text is longer than
/// the trained window; a model without local layers is refused, naming `--kv window`.
#[test]
fn eval_with_another_model_window_is_exact_at_the_trained_one_and_differs_past_it() {
    use kvlab::lab::eval::eval_model_window;
    let config = tiny_gemma_config(2, 1, 8, 48, 3, &[true, true, false]);
    let model = Model::random(config, 11).unwrap();
    let ids: Vec<u32> = (0..24).map(|i| (i * 7 % 48) as u32).collect();
    let same = eval_model_window(&model, &ids, 3).unwrap();
    assert_eq!(same.mean_kl, 0.0);
    assert_eq!(same.top1_agreement, 1.0);
    assert_eq!(same.perplexity.to_bits(), same.trained_perplexity.to_bits());
    let wider = eval_model_window(&model, &ids, 24).unwrap();
    assert!(wider.mean_kl > 0.0, "{wider:?}");
    assert_eq!(
        wider.trained_perplexity.to_bits(),
        same.trained_perplexity.to_bits()
    );
    assert!(
        wider.kv_cache_bytes >= wider.trained_kv_cache_bytes,
        "{wider:?}"
    );
    // Within the trained window nothing changes: 3 tokens see the same positions.
    let short = eval_model_window(&model, &ids[..3], 24).unwrap();
    assert_eq!(short.mean_kl, 0.0);
    let llama = Model::random(common::tiny_config(2, 2, 1, 8, 48), 1).unwrap();
    let err = eval_model_window(&llama, &ids, 4).unwrap_err().to_string();
    assert!(err.contains("--kv window"), "{err}");
}

/// Gemma shapes with at least one local and one global layer: the pool has a block
/// table per layer group (`paged/groups.rs`).
fn hybrid_config_strategy() -> impl Strategy<Value = Config> {
    config_strategy().prop_filter("local and global layers", |c| {
        let local = c.local_layers();
        local > 0 && local < c.num_hidden_layers
    })
}

/// Every layer group's table of `id`: a global group's holds a block for every
/// `block_size` positions, a local group's no more than its window's peak
/// (`Retention::peak_blocks`) when no pass brings more than `pass` tokens; and the
/// allocator's invariants hold.
fn check_group_tables(
    cache: &kvlab::cache::PagedCache,
    id: kvlab::cache::SeqId,
    pass: usize,
) -> Result<(), TestCaseError> {
    use kvlab::cache::paged::HOLE;
    cache.check_invariants().map_err(TestCaseError::fail)?;
    let (bs, len) = (cache.block_size(), cache.seq_len(id).unwrap());
    let groups = cache.layer_groups();
    for (g, table) in cache.block_tables(id).unwrap().iter().enumerate() {
        let held = table.iter().filter(|&&b| b != HOLE).count();
        let retention = groups.retention(g);
        let most = retention.peak_blocks(len, bs, pass);
        prop_assert!(
            held <= most,
            "group {} ({:?}) holds {} blocks > {}",
            g,
            retention,
            held,
            most
        );
        if retention.mask().is_none() {
            prop_assert_eq!(held, len.div_ceil(bs), "a global group keeps every block");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The paged pool of a model with local layers: one sequence prefilled in random
    /// passes, then decoded speculative-style (each pass brings the next true tokens
    /// and some junk drafts, and rolls the junk back), prefix caching on or off, then a
    /// second sequence with the same prompt (a prefix hit in every group's chain). Hidden
    /// states == the full contiguous cache, bit for bit; after every pass each local
    /// group's table holds no more than its window's blocks while the global one keeps
    /// them all; freed, every block is back.
    #[test]
    fn a_block_table_per_layer_group_gives_local_blocks_back_and_stays_bitwise(
        (config, prompt, continuation) in hybrid_config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (Just(c), tokens(v, 1..40), tokens(v, 1..30))
        }),
        block_size in 1usize..5,
        pass in 1usize..6,
        drafts in prop::collection::vec((1usize..4, 0usize..3), 1..6),
        prefix_caching in any::<bool>(),
        seed in any::<u64>(),
    ) {
        use kvlab::cache::paged::blocks_for_sequence;
        use kvlab::cache::PagedCache;
        let model = Model::random(config, seed).unwrap();
        let capacity = prompt.len() + continuation.len() + 3;
        let mut full = PreallocatedCache::new(&model.config, capacity).unwrap();
        let n_blocks = 2 * blocks_for_sequence(&model.config, capacity, block_size);
        let mut cache = PagedCache::new(&model.config, block_size, n_blocks, prefix_caching).unwrap();
        prop_assert!(cache.layer_groups().len() >= 2);
        let id = cache.add_sequence();
        let hidden = |tokens: &[u32], store: &mut dyn KvStore| -> Vec<u32> {
            model.forward_hidden(tokens, &mut KvSource::Cache(store)).unwrap().iter().map(|v| v.to_bits()).collect()
        };
        for chunk in prompt.chunks(pass) {
            let want = hidden(chunk, &mut full);
            prop_assert_eq!(hidden(chunk, &mut cache.seq(id).unwrap()), want, "prefill pass");
            check_group_tables(&cache, id, pass)?;
        }
        let (mut i, mut drafts) = (0, drafts.iter().cycle());
        let width = model.config.hidden_size;
        while i < continuation.len() {
            let (&(take, junk), len) = (drafts.next().unwrap(), cache.seq_len(id).unwrap());
            let accepted = &continuation[i..(i + take).min(continuation.len())];
            let fed: Vec<u32> = accepted.iter().copied().chain((0..junk as u32).map(|j| j % 7)).collect();
            let want = hidden(accepted, &mut full);
            let got = hidden(&fed, &mut cache.seq(id).unwrap());
            prop_assert_eq!(&got[..accepted.len() * width], &want[..], "verify pass at {}", len);
            cache.seq(id).unwrap().truncate(len + accepted.len());
            prop_assert_eq!(cache.seq_len(id), Some(len + accepted.len()), "rolled back within the pass");
            check_group_tables(&cache, id, fed.len().max(pass))?;
            i += accepted.len();
        }
        // A second sequence with the first one's prompt: its last position's hidden state.
        let (twin, reused) = cache.add_sequence_with_prefix(&prompt);
        let mut alone = PreallocatedCache::new(&model.config, prompt.len()).unwrap();
        let want = hidden(&prompt, &mut alone);
        let got = hidden(&prompt[reused..], &mut cache.seq(twin).unwrap());
        prop_assert_eq!(&got[got.len() - width..], &want[want.len() - width..], "after a prefix hit of {}", reused);
        check_group_tables(&cache, twin, prompt.len())?;
        cache.free(id).unwrap();
        cache.free(twin).unwrap();
        cache.check_invariants().map_err(TestCaseError::fail)?;
        prop_assert_eq!(cache.stats().used, 0, "blocks still held after both sequences ended");
    }
}

/// What the block table per layer group saves, counted: a Gemma-shaped model with five
/// local layers (window 8) and one global layer, 96 positions decoded one at a time in
/// blocks of 4. The global table holds all 24 blocks; each local table the blocks the
/// newest query's 8 positions straddle, at most 3; so the sequence holds at most
/// 24 + 5 × 3 = 39 blocks of one layer, and 24 + 5 × 2 = 34 at the end (positions
/// 88..=95 are two whole blocks), against 6 × 24 = 144 if every layer kept every
/// position.
#[test]
fn local_tables_hold_the_window_and_the_global_table_everything() {
    use kvlab::cache::paged::HOLE;
    use kvlab::cache::PagedCache;
    let config = tiny_gemma_config(2, 1, 8, 64, 8, &[true, true, true, true, true, false]);
    let model = Model::random(config, 3).unwrap();
    let mut cache = PagedCache::new(&model.config, 4, 200, false).unwrap();
    assert_eq!(cache.layer_groups().group_size, 1);
    assert_eq!(cache.layer_groups().groups[0].layers, vec![5]);
    let id = cache.add_sequence();
    let mut most = 0;
    for t in 0..96u32 {
        model
            .forward(&[t % 64], KvSource::Cache(&mut cache.seq(id).unwrap()))
            .unwrap();
        cache.check_invariants().unwrap();
        let held: Vec<usize> = (cache.block_tables(id).unwrap().iter())
            .map(|t| t.iter().filter(|&&b| b != HOLE).count())
            .collect();
        assert_eq!(held[0], (t as usize + 1).div_ceil(4), "the global table");
        assert!(
            held[1..].iter().all(|&h| h <= 3),
            "a local table holds {held:?}"
        );
        most = most.max(held.iter().sum::<usize>());
    }
    assert_eq!(most, 24 + 5 * 3, "blocks at the peak");
    assert_eq!(cache.stats().used, 24 + 5 * 2, "blocks at the end");
    let bytes = cache.seq(id).unwrap().bytes_reserved();
    assert_eq!(bytes, cache.stats().used * cache.block_bytes());
    // One block holds one layer: 4 positions × (K + V) × 8 channels × 4 bytes.
    assert_eq!(cache.block_bytes(), 4 * 2 * 8 * 4);
}
