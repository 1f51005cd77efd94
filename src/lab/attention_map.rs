//! `kvlab attention-map`: the attention probabilities of a real model, made visible
//! (book: attention.md).
//!
//! Row `i` of a head's map is `softmax(q_i · Kᵀ / sqrt(head_dim))` over positions
//! `0..=i`: the causal mask shows as an upper triangle of exact zeros, because those
//! scores are never computed. The same run also measures, per layer, how much of each
//! query's attention lands on the very first token: the "attention sink" (Xiao et al.
//! 2023, StreamingLLM), a token that many heads use as a place to put attention they
//! do not need elsewhere.
//!
//! The engine's attention returns only `softmax(...) · V`, never the probabilities, and
//! it should not pay for them. So the real pass (`Model::forward_layers_observed`) shows
//! each layer's rotated queries, the keys and values attention read and its output to a
//! [`PassObserver`], and this file recomputes each head's probabilities from them with
//! attention's own arithmetic (the same `score`, the same scale, the same `softmax`).
//! The tests check it bitwise: `Σ_j p_ij · v_j` (in order of `j`) is the output the
//! pass's attention returned, on the naive path and on the cached one.

use crate::attention::{self, Heads};
use crate::cache::rows::KvHeads;
use crate::cache::view::KvView;
use crate::error::{Error, Result};
use crate::model::{KvSource, Model, PassObserver};
use crate::ops;
use serde::Serialize;

/// One head's probabilities, and the attention sink of every layer.
#[derive(Debug, Clone, Serialize)]
pub struct AttentionMap {
    pub layer: usize,
    pub head: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    /// `[t][t]`: row `i` is query position `i`, column `j` key position `j`;
    /// `probs[i][j] == 0.0` exactly for `j > i`.
    pub probs: Vec<Vec<f32>>,
    /// Per layer: the mean over heads and over query positions `1..t` of the
    /// probability on position 0 (position 0 itself is left out: it can only
    /// attend to itself).
    pub first_token_mass: Vec<f64>,
}

// ANCHOR: probabilities
/// The attention probabilities of every head, `[n_heads][t][rows_before + t]`, for the
/// queries `q` `[t, n_heads * head_dim]` of one layer (already rotated) over the rows
/// `kv` their attention read: query `i` sees rows `0..=rows_before + i` (on the naive
/// path `rows_before` is 0 and the map is square), or in a local layer (`window`, Gemma 3)
/// only the last `window` of them.
pub fn attention_probs(
    q: &[f32],
    kv: &dyn KvHeads,
    rows_before: usize,
    heads: Heads,
    window: Option<usize>,
) -> Vec<Vec<Vec<f32>>> {
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    } = heads;
    let q_dim = n_heads * head_dim;
    let t = q.len() / q_dim;
    let kv_mul = n_heads / n_kv_heads;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut scratch = vec![0.0f32; head_dim]; // a quantized view dequantizes into it
    let mut probs = Vec::with_capacity(n_heads);
    for h in 0..n_heads {
        let kv_head = h / kv_mul;
        let mut map = Vec::with_capacity(t);
        for i in 0..t {
            let q_head = &q[i * q_dim + h * head_dim..][..head_dim];
            let seen = rows_before + i + 1;
            // The oldest row the window holds (0 in a global layer): as attend_group's mask.
            let from = window.map_or(0, |w| seen.saturating_sub(w));
            let mut row = vec![0.0f32; rows_before + t]; // outside from..seen stays 0: the mask
            for (j, score) in row.iter_mut().enumerate().take(seen).skip(from) {
                let k_head = kv.key_head(j, kv_head, head_dim, &mut scratch);
                // The engine's own q·k (a fixed-order dot, src/attention.rs).
                *score = attention::score(q_head, k_head) * scale;
            }
            ops::softmax(&mut row[from..seen]);
            map.push(row);
        }
        probs.push(map);
    }
    probs
}
// ANCHOR_END: probabilities

/// Keeps one head of one layer, and every layer's first-token mass.
struct MapObserver {
    layer: usize,
    head: usize,
    /// Each layer's window (`Config::layer_window`): `None` in a global layer.
    windows: Vec<Option<usize>>,
    probs: Vec<Vec<f32>>,
    first_token_mass: Vec<f64>,
}

impl PassObserver for MapObserver {
    fn attention(
        &mut self,
        layer: usize,
        _seq: usize,
        q: &[f32],
        kv: &KvView,
        rows_before: usize,
        heads: Heads,
        _out: &[f32],
    ) {
        let window = self.windows.get(layer).copied().flatten();
        let layer_probs = attention_probs(q, kv.as_heads(), rows_before, heads, window);
        let t = layer_probs.first().map_or(0, |head| head.len());
        let rows = (t.saturating_sub(1)).max(1) * heads.n_heads;
        let mass: f64 = layer_probs
            .iter()
            .flat_map(|head| head.iter().skip(1).map(|row| row[0] as f64))
            .sum();
        self.first_token_mass.push(mass / rows as f64);
        if layer == self.layer {
            self.probs = layer_probs.into_iter().nth(self.head).unwrap_or_default();
        }
    }
}

/// Head `head` of layer `layer` on `tokens` (the naive path: one pass over the whole
/// prompt), and every layer's first-token mass.
pub fn attention_map(
    model: &Model,
    tokens: &[u32],
    layer: usize,
    head: usize,
) -> Result<AttentionMap> {
    let (n_layers, n_heads) = (
        model.config.num_hidden_layers,
        model.config.num_attention_heads,
    );
    if layer >= n_layers || head >= n_heads {
        return Err(Error::InvalidArgument(format!(
            "--layer {layer} --head {head}: this model has layers 0..{n_layers} and heads 0..{n_heads}"
        )));
    }
    let mut observer = MapObserver {
        layer,
        head,
        windows: (0..n_layers)
            .map(|l| model.config.layer_window(l))
            .collect(),
        probs: Vec::new(),
        first_token_mass: Vec::with_capacity(n_layers),
    };
    model.forward_layers_observed(&[tokens], &mut KvSource::ThisPass, n_layers, &mut observer)?;
    Ok(AttentionMap {
        layer,
        head,
        n_layers,
        n_heads,
        probs: observer.probs,
        first_token_mass: observer.first_token_mass,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::PreallocatedCache;
    use crate::config::Config;

    fn tiny_model() -> Model {
        let config = Config {
            hidden_size: 64,
            intermediate_size: 96,
            num_hidden_layers: 3,
            num_attention_heads: 4,
            num_key_value_heads: Some(2),
            vocab_size: 97,
            max_position_embeddings: 64,
            ..Config::smollm2_135m()
        };
        Model::random(config, 7).unwrap()
    }

    /// Checks, in every layer it is shown, that the probabilities are a causal softmax
    /// and that `Σ_j p_ij v_j` is, bit for bit, what the pass's attention returned.
    struct Checker {
        layers_seen: usize,
        rows_before_seen: Vec<usize>,
        /// Each layer's window, as the pass applies it.
        windows: Vec<Option<usize>>,
    }

    impl PassObserver for Checker {
        fn attention(
            &mut self,
            layer: usize,
            _: usize,
            q: &[f32],
            kv: &KvView,
            rows_before: usize,
            heads: Heads,
            out: &[f32],
        ) {
            let (head_dim, q_dim) = (heads.head_dim, heads.n_heads * heads.head_dim);
            let rows = kv.as_heads();
            let mut scratch = vec![0.0f32; head_dim];
            let window = self.windows[layer];
            for (h, head) in attention_probs(q, rows, rows_before, heads, window)
                .iter()
                .enumerate()
            {
                let kv_head = h / (heads.n_heads / heads.n_kv_heads);
                for (i, row) in head.iter().enumerate() {
                    let seen = rows_before + i + 1;
                    assert!(row[seen..].iter().all(|&p| p == 0.0), "causal mask");
                    let from = window.map_or(0, |w| seen.saturating_sub(w));
                    assert!(row[..from].iter().all(|&p| p == 0.0), "window mask");
                    let sum: f32 = row.iter().sum();
                    assert!((sum - 1.0).abs() < 1e-5, "row {i} sums to {sum}");
                    // Σ_j p_ij v_j in order of j, as attention_over sums it.
                    let mut o = vec![0.0f32; head_dim];
                    for (j, &p) in row[..seen].iter().enumerate() {
                        let v_j = rows.value_head(j, kv_head, head_dim, &mut scratch);
                        for (o, &v) in o.iter_mut().zip(v_j) {
                            *o = p.mul_add(v, *o);
                        }
                    }
                    assert_eq!(o, &out[i * q_dim + h * head_dim..][..head_dim]);
                }
            }
            self.layers_seen += 1;
            self.rows_before_seen.push(rows_before);
        }
    }

    #[test]
    fn probabilities_are_the_ones_the_engine_used_naive_and_cached() {
        let model = tiny_model();
        let tokens: Vec<u32> = (0..13).map(|i| (i * 31 + 5) % 97).collect();
        let mut checker = Checker {
            layers_seen: 0,
            rows_before_seen: vec![],
            windows: vec![None; 3],
        };
        model
            .forward_layers_observed(&[&tokens], &mut KvSource::ThisPass, 3, &mut checker)
            .unwrap();
        // Cached: a prefill of 9, then 4 new rows over the 9 cached ones.
        let mut cache = PreallocatedCache::new(&model.config, 13).unwrap();
        for chunk in [&tokens[..9], &tokens[9..]] {
            model
                .forward_layers_observed(
                    &[chunk],
                    &mut KvSource::Cache(&mut cache),
                    3,
                    &mut checker,
                )
                .unwrap();
        }
        assert_eq!(checker.layers_seen, 9);
        assert_eq!(checker.rows_before_seen, [0, 0, 0, 0, 0, 0, 9, 9, 9]);
    }

    /// A Gemma-shaped model with a window of 3 in layers 0 and 2: the map is zero outside
    /// each local query's window, and still what the pass used, bit for bit.
    #[test]
    fn a_local_layers_map_is_its_window_bit_for_bit() {
        use crate::config::{GemmaSettings, FULL, GEMMA3, SLIDING};
        let mut config = tiny_model().config;
        config.model_type = GEMMA3.into();
        config.head_dim = Some(16);
        config.gemma = GemmaSettings {
            hidden_activation: Some("gelu_pytorch_tanh".into()),
            query_pre_attn_scalar: Some(16.0),
            sliding_window: Some(3),
            layer_types: Some([SLIDING, FULL, SLIDING].map(String::from).to_vec()),
            ..GemmaSettings::default()
        };
        let model = Model::random(config, 3).unwrap();
        let windows: Vec<_> = (0..3).map(|l| model.config.layer_window(l)).collect();
        assert_eq!(windows, [Some(3), None, Some(3)]);
        let tokens: Vec<u32> = (0..9).map(|i| (i * 31 + 5) % 97).collect();
        let mut checker = Checker {
            layers_seen: 0,
            rows_before_seen: vec![],
            windows,
        };
        model
            .forward_layers_observed(&[&tokens], &mut KvSource::ThisPass, 3, &mut checker)
            .unwrap();
        assert_eq!(checker.layers_seen, 3);
        let map = attention_map(&model, &tokens, 0, 1).unwrap();
        assert_eq!(
            map.probs[8][..6],
            [0.0; 6],
            "the last query sees positions 6..=8"
        );
        assert!(attention_map(&model, &tokens, 1, 1).unwrap().probs[8][0] > 0.0);
    }

    #[test]
    fn watching_the_pass_changes_none_of_its_bits() {
        let model = tiny_model();
        let tokens: Vec<u32> = (0..13).map(|i| (i * 31 + 5) % 97).collect();
        let plain = model
            .forward_hidden(&tokens, &mut KvSource::ThisPass)
            .unwrap();
        let mut observer = MapObserver {
            layer: 1,
            head: 2,
            windows: vec![None; 3],
            probs: vec![],
            first_token_mass: vec![],
        };
        let watched = model
            .forward_layers_observed(&[&tokens], &mut KvSource::ThisPass, 3, &mut observer)
            .unwrap();
        assert_eq!(plain, watched);
        assert_eq!(
            (observer.probs.len(), observer.first_token_mass.len()),
            (13, 3)
        );
    }

    #[test]
    fn the_map_checks_its_layer_and_head() {
        let model = tiny_model();
        let map = attention_map(&model, &[1, 2, 3, 4], 2, 3).unwrap();
        assert_eq!((map.probs.len(), map.first_token_mass.len()), (4, 3));
        assert_eq!(map.probs[0], vec![1.0, 0.0, 0.0, 0.0]);
        assert!(attention_map(&model, &[1, 2], 3, 0).is_err());
        assert!(attention_map(&model, &[1, 2], 0, 4).is_err());
        assert!(attention_map(&model, &[], 0, 0).is_err());
    }
}
