//! Grouped-query attention (Ainslie et al. 2023): query head `h` reads KV head
//! `h / (n_heads / n_kv_heads)`. MHA and MQA are the two ends of the same code.

mod common;

use common::{bits, cached_step_logits, naive_step_logits, tiny_config};
use kvlab::cache::PreallocatedCache;
use kvlab::model::Model;
use ndarray::{concatenate, Array1, Array2, Axis};

/// Columns of a `[dim, n_kv_heads * head_dim]` K/V weight, each KV head repeated
/// `kv_mul` times: `[dim, n_heads * head_dim]`, head `h` = KV head `h / kv_mul`.
fn repeat_heads(w: &Array2<f32>, head_dim: usize, kv_mul: usize) -> Array2<f32> {
    let n_kv = w.ncols() / head_dim;
    let blocks: Vec<_> = (0..n_kv * kv_mul)
        .map(|h| {
            w.slice(ndarray::s![
                ..,
                (h / kv_mul) * head_dim..(h / kv_mul + 1) * head_dim
            ])
        })
        .collect();
    concatenate(Axis(1), &blocks)
        .unwrap()
        .as_standard_layout()
        .into_owned()
}

fn repeat_bias(b: &Array1<f32>, head_dim: usize, kv_mul: usize) -> Array1<f32> {
    let m = b.clone().into_shape_with_order((1, b.len())).unwrap();
    repeat_heads(&m, head_dim, kv_mul).row(0).to_owned()
}

/// The MHA model equivalent to a GQA model: K/V projections with repeated heads.
fn as_mha(gqa: &Model) -> Model {
    let c = &gqa.config;
    let (head_dim, kv_mul) = (c.head_dim(), c.kv_mul());
    let mut config = c.clone();
    config.num_key_value_heads = Some(c.num_attention_heads);
    let mut mha = Model::random(config, 0).unwrap();
    mha.embed = gqa.embed.clone();
    mha.lm_head = gqa.lm_head.clone();
    mha.final_norm = gqa.final_norm.clone();
    for (m, g) in mha.layers.iter_mut().zip(&gqa.layers) {
        m.attn_norm = g.attn_norm.clone();
        m.mlp_norm = g.mlp_norm.clone();
        m.wq = g.wq.clone();
        m.wo = g.wo.clone();
        m.w_gate = g.w_gate.clone();
        m.w_up = g.w_up.clone();
        m.w_down = g.w_down.clone();
        m.wk = repeat_heads(&g.wk, head_dim, kv_mul);
        m.wv = repeat_heads(&g.wv, head_dim, kv_mul);
        m.bq = g.bq.clone();
        m.bk = g.bk.as_ref().map(|b| repeat_bias(b, head_dim, kv_mul));
        m.bv = g.bv.as_ref().map(|b| repeat_bias(b, head_dim, kv_mul));
    }
    mha
}

#[test]
fn mha_with_repeated_kv_heads_equals_gqa() {
    for (n_heads, n_kv_heads, bias) in [(9, 3, false), (6, 2, true), (4, 1, false)] {
        let mut config = tiny_config(2, n_heads, n_kv_heads, 8, 97);
        config.attention_bias = bias;
        let gqa = Model::random(config, 11).unwrap();
        let mha = as_mha(&gqa);
        let prompt = [5, 17, 3, 96, 42, 0, 7];
        let continuation = [1, 2, 3, 4];
        // The K/V columns are computed by the same per-element sums, so even the bits agree.
        assert_eq!(
            bits(&cached_step_logits(&gqa, &prompt, &continuation)),
            bits(&cached_step_logits(&mha, &prompt, &continuation)),
            "{n_heads} query heads over {n_kv_heads} KV heads"
        );
        // ...while the GQA cache is kv_mul times smaller.
        let kv_mul = n_heads / n_kv_heads;
        assert_eq!(
            PreallocatedCache::new(&mha.config, 10)
                .unwrap()
                .bytes_allocated(),
            kv_mul
                * PreallocatedCache::new(&gqa.config, 10)
                    .unwrap()
                    .bytes_allocated()
        );
    }
}

#[test]
fn n_kv_heads_equal_to_n_heads_is_mha() {
    // Omitting num_key_value_heads (older configs) means MHA, and gives the same model.
    let mut explicit = tiny_config(2, 4, 4, 8, 64);
    explicit.num_key_value_heads = Some(4);
    let mut implicit = explicit.clone();
    implicit.num_key_value_heads = None;
    assert_eq!(implicit.n_kv_heads(), 4);
    assert_eq!(implicit.kv_mul(), 1);
    let a = Model::random(explicit, 3).unwrap();
    let b = Model::random(implicit, 3).unwrap();
    let prompt = [1, 2, 3, 4, 5];
    assert_eq!(
        bits(&naive_step_logits(&a, &prompt, &[6, 7])),
        bits(&naive_step_logits(&b, &prompt, &[6, 7]))
    );
}

#[test]
fn gqa_actually_shares_kv_heads() {
    // Guard against a GQA that silently behaves as MHA: in a 4/2 model, changing
    // the K weights of KV head 1 must change query heads 2 and 3, not 0 and 1.
    let config = tiny_config(1, 4, 2, 8, 64);
    let model = Model::random(config.clone(), 5).unwrap();
    let mut changed = Model::random(config, 5).unwrap();
    changed.layers[0]
        .wk
        .slice_mut(ndarray::s![.., 8..16])
        .mapv_inplace(|v| v * 1.5);
    let prompt = [3, 1, 4, 1, 5];
    let base = model
        .forward(&prompt, kvlab::model::KvSource::ThisPass)
        .unwrap();
    let other = changed
        .forward(&prompt, kvlab::model::KvSource::ThisPass)
        .unwrap();
    assert_ne!(base, other);
}
