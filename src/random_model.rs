//! A model with seeded random weights, for property tests, benches and `kvlab demo`
//! when the real weights are not downloaded. Any shape, same code path as the real model.

use crate::config::Config;
use crate::error::Result;
use crate::model::{Layer, Model};
use crate::rng::Rng;
use ndarray::{Array1, Array2};

impl Model {
    /// Builds a model of `config`'s shape with weights drawn from `seed`.
    ///
    /// Matrices are uniform in ±1/sqrt(d_in) so activations keep their scale
    /// through the layers (as PyTorch's default `Linear` init does); norm
    /// weights are near 1. The logits then spread enough that greedy choices
    /// are not ties, which keeps the property tests meaningful.
    pub fn random(config: Config, seed: u64) -> Result<Model> {
        config.validate()?;
        let mut rng = Rng::new(seed);
        let c = &config;
        let (dim, hidden) = (c.hidden_size, c.intermediate_size);
        let q_dim = c.num_attention_heads * c.head_dim();
        let kv_dim = c.n_kv_heads() * c.head_dim();

        // A linear weight `[d_in, d_out]` (the layout the model keeps).
        let mut matrix = |d_in: usize, d_out: usize| {
            let scale = 1.0 / (d_in as f32).sqrt();
            Array2::from_shape_fn((d_in, d_out), |_| rng.symmetric(scale))
        };
        let mut layers = Vec::new();
        let mut layer_mats = Vec::new();
        for _ in 0..c.num_hidden_layers {
            layer_mats.push([
                matrix(dim, q_dim),
                matrix(dim, kv_dim),
                matrix(dim, kv_dim),
                matrix(q_dim, dim),
                matrix(dim, hidden),
                matrix(dim, hidden),
                matrix(hidden, dim),
            ]);
        }
        // Scaled up so logits spread over a few units, as a trained model's do.
        let embed = matrix(dim, c.vocab_size)
            .reversed_axes()
            .as_standard_layout()
            .into_owned()
            * 4.0;
        let lm_head = if c.tie_word_embeddings {
            crate::loader::transpose(&embed)
        } else {
            matrix(dim, c.vocab_size) * 4.0
        };

        let mut vector = |len: usize, center: f32, spread: f32| {
            Array1::from_shape_fn(len, |_| center + rng.symmetric(spread))
        };
        let head_dim = c.head_dim();
        for [wq, wk, wv, wo, w_gate, w_up, w_down] in layer_mats {
            let bias = c.attention_bias;
            // Gemma 3's extra norms (QK-norm, the sandwich), as factors near 1.
            let gemma = c.is_gemma3();
            layers.push(Layer {
                q_norm: gemma.then(|| vector(head_dim, 1.0, 0.2)),
                k_norm: gemma.then(|| vector(head_dim, 1.0, 0.2)),
                post_attn_norm: gemma.then(|| vector(dim, 1.0, 0.2)),
                post_mlp_norm: gemma.then(|| vector(dim, 1.0, 0.2)),
                attn_norm: vector(dim, 1.0, 0.2),
                bq: bias.then(|| vector(q_dim, 0.0, 0.1)),
                bk: bias.then(|| vector(kv_dim, 0.0, 0.1)),
                bv: bias.then(|| vector(kv_dim, 0.0, 0.1)),
                mlp_norm: vector(dim, 1.0, 0.2),
                wq,
                wk,
                wv,
                wo,
                w_gate,
                w_up,
                w_down,
            });
        }
        let final_norm = vector(dim, 1.0, 0.2);
        let tied_embeddings = c.tie_word_embeddings;
        Ok(Model {
            config,
            embed,
            layers,
            final_norm,
            lm_head,
            tied_embeddings,
        })
    }
}
