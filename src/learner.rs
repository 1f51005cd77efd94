//! `--impl learner`: the textbook pass ([`crate::textbook::forward`]) with the learner's
//! own exercise code in place of kvlab's kernels, on the real model (book:
//! forward-pass.md, "Your code in the engine").
//!
//! | kernel    | the learner's function                       | exercise |
//! |-----------|----------------------------------------------|----------|
//! | RMSNorm   | `rmsnorm(x, weight, eps)`, every row          | 02 |
//! | RoPE      | `rope(x, pos, theta)`, every head of a row    | 03 |
//! | attention, a whole sequence (the naive path, and the cached path's prefill) | `causal_attention`, every query head, its KV head from `kv_head_for` | 06, 14 |
//! | attention, new rows over a cache (the cached path's decode) | `gqa_attention` over the positions each row may see | 14 |
//!
//! So `kvlab compare --impl learner` runs *your* naive path (06 over the whole sequence,
//! every step) against *your* cached path (14 over the cache) on SmolLM2, and then
//! against the engine. The embedding, the matmuls, SwiGLU and the LM head stay the
//! textbook's.
//!
//! **Which files are compiled.** A normal build compiles the files under `exercises/`,
//! as you left them (a change there rebuilds kvlab). kvlab's own unit tests
//! (`cargo test --lib`) compile the worked solutions instead (`exercises/solutions/`),
//! whose tests pass: an unfinished exercise never fails kvlab's test suite, and the tests
//! at the end of this file check that the solutions, run in the engine, give the engine's
//! tokens, and that a planted mistake does not.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::attention::Heads;
use crate::cache::KvBytes;
use crate::error::{Error, Result};
use crate::generate::{Decoder, PathKind};
use crate::model::Model;
use crate::textbook::{self, Kernels};

// The learner's code is theirs, warnings and all: kvlab's lints are not theirs to satisfy
// (the exercise checker has its own), so nothing in these modules warns.
#[allow(unused, clippy::all)]
#[cfg_attr(not(test), path = "../exercises/02_rmsnorm/rmsnorm.rs")]
#[cfg_attr(test, path = "../exercises/solutions/02_rmsnorm/rmsnorm.rs")]
mod ex02_rmsnorm;

#[allow(unused, clippy::all)]
#[cfg_attr(not(test), path = "../exercises/03_rope/rope.rs")]
#[cfg_attr(test, path = "../exercises/solutions/03_rope/rope.rs")]
mod ex03_rope;

#[allow(unused, clippy::all)]
#[cfg_attr(not(test), path = "../exercises/06_causal_mask/causal_attention.rs")]
#[cfg_attr(
    test,
    path = "../exercises/solutions/06_causal_mask/causal_attention.rs"
)]
mod ex06_causal_attention;

#[allow(unused, clippy::all)]
#[cfg_attr(not(test), path = "../exercises/14_gqa_mapping/gqa.rs")]
#[cfg_attr(test, path = "../exercises/solutions/14_gqa_mapping/gqa.rs")]
mod ex14_gqa;

/// The exercise files this build compiled in, for reports.
pub const FILES: [&str; 4] = if cfg!(test) {
    [
        "exercises/solutions/02_rmsnorm/rmsnorm.rs",
        "exercises/solutions/03_rope/rope.rs",
        "exercises/solutions/06_causal_mask/causal_attention.rs",
        "exercises/solutions/14_gqa_mapping/gqa.rs",
    ]
} else {
    [
        "exercises/02_rmsnorm/rmsnorm.rs",
        "exercises/03_rope/rope.rs",
        "exercises/06_causal_mask/causal_attention.rs",
        "exercises/14_gqa_mapping/gqa.rs",
    ]
};

// ANCHOR: learner_kernels
/// The learner's functions behind the textbook's [`Kernels`].
pub struct Learner;

impl Kernels for Learner {
    fn rmsnorm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        let dim = weight.len();
        for (row, out_row) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
            let normed = ex02_rmsnorm::rmsnorm(row, weight, eps);
            assert_eq!(normed.len(), dim, "exercise 02: rmsnorm must return [dim]");
            out_row.copy_from_slice(&normed);
        }
    }

    fn rope(&self, x: &mut [f32], pos: usize, head_dim: usize, theta: f64) {
        for head in x.chunks_exact_mut(head_dim) {
            ex03_rope::rope(head, pos, theta as f32);
        }
    }

    fn attention(
        &self,
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        start_pos: usize,
        heads: Heads,
    ) -> Vec<f32> {
        let Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        } = heads;
        let (q_dim, kv_dim) = (n_heads * head_dim, n_kv_heads * head_dim);
        let n = q.len() / q_dim;
        let mut out = vec![0.0f32; n * q_dim]; // [n, n_heads * head_dim]
        if start_pos == 0 {
            // The whole sequence in this pass: exercise 06, one query head at a time, over
            // its KV head's [n, head_dim] columns.
            let column = |rows: &[f32], width: usize, head: usize| -> Vec<f32> {
                rows.chunks_exact(width)
                    .flat_map(|row| row[head * head_dim..][..head_dim].to_vec())
                    .collect()
            };
            for h in 0..n_heads {
                let kv_head = ex14_gqa::kv_head_for(h, n_heads, n_kv_heads);
                let (k, v) = (
                    column(keys, kv_dim, kv_head),
                    column(values, kv_dim, kv_head),
                );
                let head_out =
                    ex06_causal_attention::causal_attention(&column(q, q_dim, h), &k, &v, head_dim);
                assert_eq!(
                    head_out.len(),
                    n * head_dim,
                    "exercise 06: causal_attention must return [seq, head_dim]"
                );
                for (i, o) in head_out.chunks_exact(head_dim).take(n).enumerate() {
                    out[i * q_dim + h * head_dim..][..head_dim].copy_from_slice(o);
                }
            }
        } else {
            // New rows over a cache: exercise 14, row `i` over the positions it may see
            // (0..=start_pos + i), all heads at once.
            for i in 0..n {
                let seen = (start_pos + i + 1) * kv_dim;
                let row_out = ex14_gqa::gqa_attention(
                    &q[i * q_dim..][..q_dim],
                    &keys[..seen],
                    &values[..seen],
                    n_heads,
                    n_kv_heads,
                    head_dim,
                );
                assert_eq!(
                    row_out.len(),
                    q_dim,
                    "exercise 14: gqa_attention must return [n_heads, head_dim]"
                );
                out[i * q_dim..][..q_dim].copy_from_slice(&row_out);
            }
        }
        out
    }
}
// ANCHOR_END: learner_kernels

/// The textbook's `path` with the learner's kernels. A panic in the learner's code (an
/// `assert!`, an index out of range) ends the generation with an error, not the process.
pub fn decoder<'a>(model: &'a Model, path: PathKind) -> Box<dyn Decoder + 'a> {
    Box::new(Guarded(textbook::decoder(model, path, &Learner)))
}

struct Guarded<'a>(Box<dyn Decoder + 'a>);

impl Guarded<'_> {
    fn run(&mut self, f: impl FnOnce(&mut dyn Decoder) -> Result<Vec<f32>>) -> Result<Vec<f32>> {
        // AssertUnwindSafe: after a panic the decoder is dropped with the generation; no
        // half-updated state is ever read again.
        catch_unwind(AssertUnwindSafe(|| f(self.0.as_mut()))).unwrap_or_else(|_| {
            Err(Error::InvalidArgument(
                "your exercise code panicked (the line above names the file and line): fix it and run `cargo run --manifest-path exercises/Cargo.toml -- check`".into(),
            ))
        })
    }
}

impl Decoder for Guarded<'_> {
    fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>> {
        self.run(|d| d.prefill(prompt))
    }
    fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        self.run(|d| d.step(token))
    }
    fn kv_bytes(&self) -> KvBytes {
        self.0.kv_bytes()
    }
}

// ANCHOR: kernel_check
/// One of the learner's functions, checked against kvlab's on the real model's own
/// activations ([`check_kernels`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct KernelCheck {
    pub exercise: &'static str,
    pub function: &'static str,
    /// How many times the pass called it.
    pub calls: usize,
    /// The largest |yours − kvlab's| over every output of every call (`null`: yours
    /// gave NaN or inf).
    pub max_abs_diff: Option<f32>,
    /// The largest |kvlab's output| (the scale the difference is judged against).
    pub max_abs_reference: f32,
    /// The largest difference allowed: see [`tolerance`].
    pub tolerance: f32,
    pub ok: bool,
}

/// How far a correct learner's output may sit from kvlab's: `1e-4` of the output's scale.
/// A correct function may sum in another order (a different rounding at each add: a few
/// ulps, about 1e-6 relative for the ~600-term sums here); RoPE may also compute its
/// angles in f32 (as Hugging Face does) where kvlab uses f64, off by about `pos · 2⁻²⁴`
/// radians, so its allowance grows with the position. Every mistake the exercises' tests
/// plant (no max shift, a missing √d, the wrong pairs, the wrong KV head) is off by more
/// than 1e-2 of the scale.
pub fn tolerance(function: &str, scale: f32, max_pos: usize) -> f32 {
    let angle = if function == "rope" {
        4.0 * max_pos as f32 * f32::EPSILON
    } else {
        0.0
    };
    (1e-4 + angle) * scale.max(1.0)
}

#[derive(Default)]
struct Tally {
    calls: usize,
    max_abs_diff: f32,
    /// A call returned the wrong length, a NaN or an infinity.
    broken: bool,
    max_abs_reference: f32,
}

/// Runs kvlab's kernels *and* the learner's on the same inputs and passes kvlab's result
/// on, so each exercise is judged on correct inputs: a mistake in one never hides or
/// blames another.
struct Checked<'a> {
    yours: &'a dyn Kernels,
    // rmsnorm, rope, causal_attention (whole sequence), gqa_attention (over a cache)
    tallies: std::cell::RefCell<[Tally; 4]>,
    max_pos: std::cell::Cell<usize>,
}

impl Checked<'_> {
    fn record(&self, which: usize, reference: &[f32], yours: &[f32]) {
        let mut tallies = self.tallies.borrow_mut();
        let t = &mut tallies[which];
        t.calls += 1;
        t.broken |= reference.len() != yours.len() || yours.iter().any(|x| !x.is_finite());
        for (r, y) in reference.iter().zip(yours) {
            t.max_abs_diff = t.max_abs_diff.max((r - y).abs());
            t.max_abs_reference = t.max_abs_reference.max(r.abs());
        }
    }
}

impl Kernels for Checked<'_> {
    fn rmsnorm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        let mut yours = vec![0.0; out.len()];
        self.yours.rmsnorm(x, weight, eps, &mut yours);
        textbook::Reference.rmsnorm(x, weight, eps, out);
        self.record(0, out, &yours);
    }
    fn rope(&self, x: &mut [f32], pos: usize, head_dim: usize, theta: f64) {
        let mut yours = x.to_vec();
        self.yours.rope(&mut yours, pos, head_dim, theta);
        textbook::Reference.rope(x, pos, head_dim, theta);
        self.max_pos.set(self.max_pos.get().max(pos));
        self.record(1, x, &yours);
    }
    fn attention(
        &self,
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        start_pos: usize,
        heads: Heads,
    ) -> Vec<f32> {
        let yours = self.yours.attention(q, keys, values, start_pos, heads);
        let reference = textbook::Reference.attention(q, keys, values, start_pos, heads);
        self.record(if start_pos == 0 { 2 } else { 3 }, &reference, &yours);
        reference
    }
}

/// Checks the learner's four functions on `model`: a prefill of `prompt` and
/// `decode_steps` greedy steps on the textbook's cached path. A panic in the learner's
/// code is an error naming the fix.
pub fn check_kernels(
    model: &Model,
    prompt: &[u32],
    decode_steps: usize,
) -> Result<Vec<KernelCheck>> {
    check_kernels_of(&Learner, model, prompt, decode_steps)
}

/// [`check_kernels`] for any kernels `yours` (the tests plant mistakes through this).
pub fn check_kernels_of(
    yours: &dyn Kernels,
    model: &Model,
    prompt: &[u32],
    decode_steps: usize,
) -> Result<Vec<KernelCheck>> {
    let checked = Checked {
        yours,
        tallies: Default::default(),
        max_pos: Default::default(),
    };
    {
        let mut decoder = Guarded(textbook::decoder(model, PathKind::Cached, &checked));
        let mut logits = decoder.prefill(prompt)?;
        for _ in 0..decode_steps {
            let next = crate::ops::argmax(&logits) as u32;
            logits = decoder.step(next)?;
        }
    }
    let names = [
        ("02", "rmsnorm"),
        ("03", "rope"),
        ("06", "causal_attention"),
        ("14", "gqa_attention"),
    ];
    let max_pos = checked.max_pos.get();
    Ok(names
        .iter()
        .zip(checked.tallies.into_inner())
        .map(|(&(exercise, function), t)| {
            let tolerance = tolerance(function, t.max_abs_reference, max_pos);
            let max_abs_diff = (t.calls > 0 && !t.broken).then_some(t.max_abs_diff);
            KernelCheck {
                exercise,
                function,
                calls: t.calls,
                ok: t.calls > 0 && max_abs_diff.is_some_and(|d| d <= tolerance),
                max_abs_diff,
                max_abs_reference: t.max_abs_reference,
                tolerance,
            }
        })
        .collect())
}
// ANCHOR_END: kernel_check

#[cfg(test)]
mod tests {
    //! Built with the worked solutions (see the top of this file): they must pass the
    //! kernel check and give the engine's tokens, and a planted mistake must be named.
    use super::*;
    use crate::backend::{Backend, CacheLayout};
    use crate::config::Config;
    use crate::generate::{generate_with, GenerateOptions};
    use crate::sampler::SamplerConfig;

    fn small_model() -> Model {
        let config = Config {
            num_hidden_layers: 2,
            num_attention_heads: 6,
            num_key_value_heads: Some(2),
            hidden_size: 96,
            intermediate_size: 160,
            vocab_size: 300,
            ..Config::smollm2_135m()
        };
        Model::random(config, 7).unwrap()
    }

    fn tokens(decoder: &mut dyn Decoder, prompt: &[u32], n: usize) -> Vec<u32> {
        let opts = GenerateOptions {
            max_new_tokens: n,
            path: PathKind::Cached,
            sampler: SamplerConfig::default(),
            eos_ids: vec![],
        };
        generate_with(decoder, prompt, &opts, |_| {})
            .unwrap()
            .generated_ids
    }

    fn engine_tokens(model: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
        let engine = Backend::Cpu(model);
        let mut decoder = engine
            .decoder(PathKind::Cached, CacheLayout::default(), prompt.len(), n)
            .unwrap();
        tokens(decoder.as_mut(), prompt, n)
    }

    #[test]
    fn the_solutions_pass_the_kernel_check() {
        let model = small_model();
        let checks = check_kernels(&model, &[1, 17, 42, 5, 99, 3], 3).unwrap();
        for k in &checks {
            assert!(k.ok && k.calls > 0, "{k:?}");
        }
    }

    #[test]
    fn the_solutions_in_the_engine_give_the_engines_tokens() {
        let model = small_model();
        let prompt = [4, 8, 15, 16, 23, 42];
        let want = engine_tokens(&model, &prompt, 12);
        for path in [PathKind::Naive, PathKind::Cached] {
            assert_eq!(
                tokens(decoder(&model, path).as_mut(), &prompt, 12),
                want,
                "{path:?}"
            );
        }
    }

    /// The solutions, but RoPE turns adjacent pairs (GPT-J's convention, not Llama's
    /// rotate-half): a correct rotation of the wrong pairs.
    struct AdjacentPairs;

    impl Kernels for AdjacentPairs {
        fn rmsnorm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
            Learner.rmsnorm(x, weight, eps, out);
        }
        fn rope(&self, x: &mut [f32], pos: usize, head_dim: usize, theta: f64) {
            for head in x.chunks_exact_mut(head_dim) {
                for (i, pair) in head.chunks_exact_mut(2).enumerate() {
                    let freq = 1.0 / theta.powf(2.0 * i as f64 / head_dim as f64);
                    let (sin, cos) = (pos as f64 * freq).sin_cos();
                    let (a, b) = (pair[0] as f64, pair[1] as f64);
                    pair[0] = (a * cos - b * sin) as f32;
                    pair[1] = (a * sin + b * cos) as f32;
                }
            }
        }
        fn attention(&self, q: &[f32], k: &[f32], v: &[f32], start: usize, h: Heads) -> Vec<f32> {
            Learner.attention(q, k, v, start, h)
        }
    }

    #[test]
    fn a_planted_mistake_is_named_and_only_it() {
        let model = small_model();
        let checks = check_kernels_of(&AdjacentPairs, &model, &[1, 17, 42, 5, 99, 3], 2).unwrap();
        let wrong: Vec<&str> = checks
            .iter()
            .filter(|k| !k.ok)
            .map(|k| k.function)
            .collect();
        assert_eq!(wrong, ["rope"], "{checks:?}");
    }

    #[test]
    fn a_panic_in_the_learners_code_is_an_error() {
        struct Panics;
        impl Kernels for Panics {
            fn rmsnorm(&self, _: &[f32], _: &[f32], _: f32, _: &mut [f32]) {
                panic!("planted");
            }
            fn rope(&self, _: &mut [f32], _: usize, _: usize, _: f64) {}
            fn attention(&self, q: &[f32], _: &[f32], _: &[f32], _: usize, _: Heads) -> Vec<f32> {
                q.to_vec()
            }
        }
        let err = check_kernels_of(&Panics, &small_model(), &[1, 2], 1).unwrap_err();
        assert!(
            err.to_string().contains("your exercise code panicked"),
            "{err}"
        );
    }

    /// On SmolLM2 and a chat prompt: the solutions' kernels pass, and both of the
    /// learner's paths give the engine's tokens.
    #[test]
    fn the_solutions_on_the_real_model() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/smollm2-135m-instruct");
        if !dir.join("config.json").exists() {
            assert_eq!(
                std::env::var("KVLAB_ALLOW_MISSING_MODEL").as_deref(),
                Ok("1"),
                "{} is missing: run `bash scripts/fetch-smollm2.sh` first",
                dir.display()
            );
            eprintln!(
                "SKIPPED: {} missing and KVLAB_ALLOW_MISSING_MODEL=1",
                dir.display()
            );
            return;
        }
        let model = crate::loader::load_model(&dir).unwrap();
        let tokenizer = crate::tokenizer::Tokenizer::from_dir(&dir).unwrap();
        let text = tokenizer
            .apply_chat_template(&[crate::tokenizer::Message::new(
                "user",
                "What is a KV cache?",
            )])
            .unwrap();
        let prompt = tokenizer.encode(&text).unwrap();
        for k in check_kernels(&model, &prompt, 2).unwrap() {
            assert!(k.ok, "{k:?}");
        }
        let want = engine_tokens(&model, &prompt, 6);
        for path in [PathKind::Naive, PathKind::Cached] {
            assert_eq!(
                tokens(decoder(&model, path).as_mut(), &prompt, 6),
                want,
                "{path:?}"
            );
        }
    }
}
