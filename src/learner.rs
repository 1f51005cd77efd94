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
//! | the greedy choice of the next token (in the kernel check) | `argmax(logits)` | 07 |
//! | the KV cache, one per layer (the cached path) | `KvCache::new`, `append`, `keys`, `values`, `reset` | 10 |
//! | the paged KV cache, one per layer (the cached path with `--cache paged`) | `BlockPool::locate`, `key`, `append` | 18 |
//!
//! So `kvlab compare --impl learner` runs *your* naive path (06 over the whole sequence,
//! every step) against *your* cached path (14 over *your* cache: 10, or with `--cache
//! paged` 18) on SmolLM2, and then
//! against the engine. The embedding, the matmuls, SwiGLU and the LM head stay the
//! textbook's.
//!
//! **Which files are compiled.** A normal build compiles your copies in `exercises/mine/`
//! (the checker makes them; `build.rs` falls back to the tracked stubs under
//! `exercises/NN_*/` where there is none), as you left them: a change there rebuilds
//! kvlab. kvlab's own unit tests
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
use crate::textbook::{self, Kernels, LayerCache, Rows, TextbookCache};

// `mod ex02_rmsnorm; mod ex03_rope; ...` (the files are chosen by `build.rs`: your copy
// in `exercises/mine/` when there is one, else the tracked stub; the solutions in kvlab's
// unit tests), and `FILES`, the paths it compiled.
include!(concat!(env!("OUT_DIR"), "/learner_files.rs"));

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

    /// The exercises' attention has no window: [`decoder`] and [`check_kernels`] refuse
    /// a model with local layers (`refuse_local_layers`) before it could get here.
    fn attention(
        &self,
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        start_pos: usize,
        heads: Heads,
        window: Option<usize>,
    ) -> Vec<f32> {
        debug_assert!(window.is_none(), "refused by refuse_local_layers");
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

// ANCHOR: learner_cache
/// Exercise 10's preallocated cache as the textbook's [`LayerCache`].
pub struct LearnerCache(ex10_kv_append::KvCache);

impl LearnerCache {
    /// One layer of `model`, holding `capacity` positions (your `KvCache::new`).
    pub fn new(model: &Model, capacity: usize) -> LearnerCache {
        let heads = Heads::of(&model.config);
        LearnerCache(ex10_kv_append::KvCache::new(
            heads.n_kv_heads,
            heads.head_dim,
            capacity,
        ))
    }
}

impl LayerCache for LearnerCache {
    fn len(&self) -> usize {
        self.0.len
    }
    fn append(&mut self, k: &[f32], v: &[f32]) -> Result<()> {
        self.0.append(k, v).map_err(|full| {
            Error::InvalidArgument(format!(
                "exercise 10: your KvCache is full ({} positions; position {} asked for room): kvlab made it with room for the prompt and every new token, so check `append`'s test for a full cache (`cargo run --manifest-path exercises/Cargo.toml -- run 10`)",
                full.capacity,
                full.requested.saturating_sub(1)
            ))
        })
    }
    fn keys(&self) -> &[f32] {
        self.0.keys()
    }
    fn values(&self) -> &[f32] {
        self.0.values()
    }
    fn reset(&mut self) {
        self.0.reset();
    }
    fn bytes(&self) -> KvBytes {
        let f32_bytes = std::mem::size_of::<f32>();
        KvBytes {
            reserved: (self.0.k_cache.len() + self.0.v_cache.len()) * f32_bytes,
            used: (self.keys().len() + self.values().len()) * f32_bytes,
        }
    }
}
// ANCHOR_END: learner_cache

// ANCHOR: learner_paged_cache
/// Exercise 18's block pool as the textbook's [`LayerCache`]: keys and values in two pools
/// of `block_size`-position blocks, each with its sequence's block table.
pub struct LearnerPagedCache {
    k_pool: ex18_block_table::BlockPool,
    v_pool: ex18_block_table::BlockPool,
    k_seq: ex18_block_table::Sequence,
    v_seq: ex18_block_table::Sequence,
    /// Every position read back through the block table (your `key`) after each append:
    /// `[len, n_kv_heads * head_dim]`, what attention reads.
    keys: Vec<f32>,
    values: Vec<f32>,
}

impl LearnerPagedCache {
    /// One layer of `model` with room for `capacity` positions in blocks of `block_size`.
    pub fn new(model: &Model, capacity: usize, block_size: usize) -> LearnerPagedCache {
        let heads = Heads::of(&model.config);
        let row = heads.n_kv_heads * heads.head_dim;
        let block_size = block_size.max(1);
        let n_blocks = capacity.div_ceil(block_size).max(1);
        let pool = || {
            let mut pool = ex18_block_table::BlockPool::new(n_blocks, block_size, row);
            // A pool that has served other requests hands blocks out in no useful order:
            // here the last first, so a table that is not read (`pos / block_size` as the
            // block) reads the wrong block.
            pool.free = (0..n_blocks).collect();
            pool
        };
        LearnerPagedCache {
            k_pool: pool(),
            v_pool: pool(),
            k_seq: Default::default(),
            v_seq: Default::default(),
            keys: Vec::new(),
            values: Vec::new(),
        }
    }
}

impl LayerCache for LearnerPagedCache {
    fn len(&self) -> usize {
        self.k_seq.len
    }
    fn append(&mut self, k: &[f32], v: &[f32]) -> Result<()> {
        let out_of_blocks = |e: ex18_block_table::OutOfBlocks| {
            Error::InvalidArgument(format!(
                "exercise 18: your BlockPool ran out of its {} blocks: kvlab gave it room for the prompt and every new token, so check that `append` takes a block only at a boundary (`cargo run --manifest-path exercises/Cargo.toml -- run 18`)",
                e.n_blocks
            ))
        };
        self.k_pool
            .append(&mut self.k_seq, k)
            .map_err(out_of_blocks)?;
        self.v_pool
            .append(&mut self.v_seq, v)
            .map_err(out_of_blocks)?;
        // Every position again, through the table: a later block written over an earlier
        // one shows up here, not only in the newest row. O(len) per append, as the paged
        // kernel reads them all each step.
        self.keys.clear();
        self.values.clear();
        for pos in 0..self.k_seq.len {
            self.keys
                .extend_from_slice(self.k_pool.key(&self.k_seq, pos));
            self.values
                .extend_from_slice(self.v_pool.key(&self.v_seq, pos));
        }
        Ok(())
    }
    fn keys(&self) -> &[f32] {
        &self.keys
    }
    fn values(&self) -> &[f32] {
        &self.values
    }
    fn reset(&mut self) {
        self.k_pool.release(&mut self.k_seq);
        self.v_pool.release(&mut self.v_seq);
        self.keys.clear();
        self.values.clear();
    }
    fn bytes(&self) -> KvBytes {
        let f32_bytes = std::mem::size_of::<f32>();
        let block_floats = self.k_pool.block_size * self.k_pool.row;
        KvBytes {
            // What this sequence holds: its blocks, not the pool.
            reserved: (self.k_seq.table.len() + self.v_seq.table.len()) * block_floats * f32_bytes,
            used: (self.keys.len() + self.values.len()) * f32_bytes,
        }
    }
}
// ANCHOR_END: learner_paged_cache

/// The textbook's `path` with the learner's kernels, and on the cached path the learner's
/// cache for `capacity` positions per layer: exercise 10's, or with `paged_blocks:
/// Some(block_size)` exercise 18's. A panic in the learner's code (an `assert!`, an index
/// out of range) ends the generation with an error, not the process.
pub fn decoder<'a>(
    model: &'a Model,
    path: PathKind,
    capacity: usize,
    paged_blocks: Option<usize>,
) -> Box<dyn Decoder + 'a> {
    fn on<'a, L: LayerCache + 'a>(
        model: &'a Model,
        new_layer: impl Fn() -> L,
    ) -> Box<dyn Decoder + 'a> {
        // Your constructor runs here: a panic in it is reported at the prefill.
        let layers = guarded(|| Ok((0..model.layers.len()).map(|_| new_layer()).collect()));
        Box::new(Guarded(layers.map(|layers| {
            textbook::cached_decoder(model, &Learner, TextbookCache { layers })
        })))
    }
    if let Err(e) = refuse_local_layers(model) {
        return Box::new(Guarded(Err(e)));
    }
    match (path, paged_blocks) {
        (PathKind::Naive, _) => Box::new(Guarded(Ok(textbook::naive_decoder(model, &Learner)))),
        (PathKind::Cached, None) => on(model, || LearnerCache::new(model, capacity)),
        (PathKind::Cached, Some(block_size)) => on(model, || {
            LearnerPagedCache::new(model, capacity, block_size)
        }),
    }
}

/// The exercises build a Llama layer: their attention sees the whole prefix, and no
/// exercise writes QK-norm or the sandwich norms. Gemma 3 runs on kvlab's own kernels.
fn refuse_local_layers(model: &Model) -> Result<()> {
    if model.config.is_gemma3() {
        return Err(Error::InvalidArgument(
            "`--impl learner` runs Llama-shaped models (the exercises' attention has no sliding window, and no exercise builds QK-norm): run this Gemma 3 model with `--impl kvlab`".into(),
        ));
    }
    Ok(())
}

/// Runs the learner's code: a panic becomes an error naming the fix. AssertUnwindSafe:
/// after a panic whatever `f` was changing is dropped with the generation; no
/// half-updated state is read again.
fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(Error::InvalidArgument(
            "your exercise code panicked (the line above names the file and line): fix it and run `cargo run --manifest-path exercises/Cargo.toml -- check`".into(),
        ))
    })
}

/// A decoder running the learner's code (or the error its construction gave).
struct Guarded<'a>(Result<Box<dyn Decoder + 'a>>);

impl Guarded<'_> {
    fn run(&mut self, f: impl FnOnce(&mut dyn Decoder) -> Result<Vec<f32>>) -> Result<Vec<f32>> {
        match &mut self.0 {
            Ok(decoder) => guarded(|| f(decoder.as_mut())),
            Err(e) => Err(Error::InvalidArgument(e.to_string())),
        }
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
        self.0.as_ref().map(|d| d.kv_bytes()).unwrap_or_default()
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
    /// was broken: NaN or inf, or an output of the wrong length).
    pub max_abs_diff: Option<f32>,
    /// The largest |kvlab's output| (the scale the difference is judged against).
    pub max_abs_reference: f32,
    /// The largest difference allowed: see [`tolerance`].
    pub tolerance: f32,
    pub ok: bool,
}

/// How far a correct learner's output may sit from kvlab's: `1e-4` of the output's scale
/// (nothing for the cache, which must give back the very bits it was given, and for
/// argmax, whose output is a token id).
/// A correct function may sum in another order (a different rounding at each add: a few
/// ulps, about 1e-6 relative for the ~600-term sums here); RoPE may also compute its
/// angles in f32 (as Hugging Face does) where kvlab uses f64, off by about `pos · 2⁻²⁴`
/// radians, so its allowance grows with the position. Every mistake the exercises' tests
/// plant (no max shift, a missing √d, the wrong pairs, the wrong KV head) is off by more
/// than 1e-2 of the scale.
pub fn tolerance(function: &str, scale: f32, max_pos: usize) -> f32 {
    if matches!(function, "kv_append" | "block_table" | "argmax") {
        return 0.0; // a cache gives back the bits it was given; a token is right or wrong
    }
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
    /// A call returned the wrong length, a NaN or an infinity, or refused.
    broken: bool,
    max_abs_reference: f32,
}

impl Tally {
    fn record(&mut self, reference: &[f32], yours: &[f32]) {
        self.broken |= reference.len() != yours.len() || yours.iter().any(|x| !x.is_finite());
        for (r, y) in reference.iter().zip(yours) {
            self.max_abs_diff = self.max_abs_diff.max((r - y).abs());
            self.max_abs_reference = self.max_abs_reference.max(r.abs());
        }
    }
    fn merge(&mut self, other: Tally) {
        self.calls += other.calls;
        self.max_abs_diff = self.max_abs_diff.max(other.max_abs_diff);
        self.broken |= other.broken;
        self.max_abs_reference = self.max_abs_reference.max(other.max_abs_reference);
    }
}

/// Which function a [`Tally`] counts, in the exercises' order.
const CHECKED: [(&str, &str); 7] = [
    ("02", "rmsnorm"),
    ("03", "rope"),
    ("06", "causal_attention"),
    ("07", "argmax"),
    ("10", "kv_append"),
    ("14", "gqa_attention"),
    ("18", "block_table"),
];
const RMSNORM: usize = 0;
const ROPE: usize = 1;
const CAUSAL_ATTENTION: usize = 2;
const ARGMAX: usize = 3;
const KV_APPEND: usize = 4;
const GQA_ATTENTION: usize = 5;
const BLOCK_TABLE: usize = 6;

/// Runs kvlab's kernels *and* the learner's on the same inputs and passes kvlab's result
/// on, so each exercise is judged on correct inputs: a mistake in one never hides or
/// blames another.
struct Checked<'a> {
    yours: &'a dyn Kernels,
    tallies: std::cell::RefCell<[Tally; 7]>,
    max_pos: std::cell::Cell<usize>,
}

impl Checked<'_> {
    fn record(&self, which: usize, reference: &[f32], yours: &[f32]) {
        let mut tallies = self.tallies.borrow_mut();
        tallies[which].calls += 1;
        tallies[which].record(reference, yours);
    }
}

impl Kernels for Checked<'_> {
    fn rmsnorm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        let mut yours = vec![0.0; out.len()];
        self.yours.rmsnorm(x, weight, eps, &mut yours);
        textbook::Reference.rmsnorm(x, weight, eps, out);
        self.record(RMSNORM, out, &yours);
    }
    fn rope(&self, x: &mut [f32], pos: usize, head_dim: usize, theta: f64) {
        let mut yours = x.to_vec();
        self.yours.rope(&mut yours, pos, head_dim, theta);
        textbook::Reference.rope(x, pos, head_dim, theta);
        self.max_pos.set(self.max_pos.get().max(pos));
        self.record(ROPE, x, &yours);
    }
    fn attention(
        &self,
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        start_pos: usize,
        heads: Heads,
        window: Option<usize>,
    ) -> Vec<f32> {
        let yours = self
            .yours
            .attention(q, keys, values, start_pos, heads, window);
        let reference = textbook::Reference.attention(q, keys, values, start_pos, heads, window);
        let which = if start_pos == 0 {
            CAUSAL_ATTENTION
        } else {
            GQA_ATTENTION
        };
        self.record(which, &reference, &yours);
        reference
    }
}

/// The learner's layer caches beside the textbook's: every append goes to all of them,
/// and the pass reads the textbook's, so a wrong cache is named without spoiling the
/// attention checks. After each append a cache's newest row and its length are compared;
/// at the end, every row ([`CheckedLayer::compare_all`]).
struct CheckedLayer {
    reference: Rows,
    /// (the [`CHECKED`] entry it counts for, the learner's cache, its tally)
    yours: Vec<(usize, Box<dyn LayerCache>, Tally)>,
}

impl CheckedLayer {
    fn compare_all(&mut self) {
        for (_, yours, tally) in &mut self.yours {
            tally.record(self.reference.keys(), yours.keys());
            tally.record(self.reference.values(), yours.values());
        }
    }
}

impl LayerCache for CheckedLayer {
    fn len(&self) -> usize {
        self.reference.len()
    }
    fn append(&mut self, k: &[f32], v: &[f32]) -> Result<()> {
        self.reference.append(k, v)?;
        let len = self.reference.len();
        for (_, yours, tally) in &mut self.yours {
            tally.calls += 1;
            // A refusal (a cache full too early) is a wrong answer, not the end of the check.
            tally.broken |= yours.append(k, v).is_err() || yours.len() != len;
            let last = |rows: &[f32]| {
                rows.len()
                    .checked_sub(k.len())
                    .map(|at| rows[at..].to_vec())
            };
            match (last(yours.keys()), last(yours.values())) {
                (Some(yours_k), Some(yours_v)) => {
                    tally.record(k, &yours_k);
                    tally.record(v, &yours_v);
                }
                _ => tally.broken = true,
            }
        }
        Ok(())
    }
    fn keys(&self) -> &[f32] {
        self.reference.keys()
    }
    fn values(&self) -> &[f32] {
        self.reference.values()
    }
    fn reset(&mut self) {
        self.reference.reset();
        self.yours
            .iter_mut()
            .for_each(|(_, yours, _)| yours.reset());
    }
    fn bytes(&self) -> KvBytes {
        self.reference.bytes()
    }
}

/// The learner's caches for one layer, each with the [`CHECKED`] entry it counts for.
pub type YourCaches<'a> = dyn Fn() -> Vec<(usize, Box<dyn LayerCache>)> + 'a;

/// Checks the learner's seven functions on `model`: a prefill of `prompt` and
/// `decode_steps` greedy steps on the textbook's cached path, beside the learner's two
/// caches (10's, and 18's in blocks of [`CHECK_BLOCK_SIZE`]; room for exactly those
/// positions), each next token chosen by the learner's argmax and kvlab's. A panic in the
/// learner's code is an error naming the fix.
pub fn check_kernels(
    model: &Model,
    prompt: &[u32],
    decode_steps: usize,
) -> Result<Vec<KernelCheck>> {
    refuse_local_layers(model)?;
    let capacity = prompt.len().saturating_add(decode_steps);
    let your_caches = || -> Vec<(usize, Box<dyn LayerCache>)> {
        vec![
            (KV_APPEND, Box::new(LearnerCache::new(model, capacity))),
            (
                BLOCK_TABLE,
                Box::new(LearnerPagedCache::new(model, capacity, CHECK_BLOCK_SIZE)),
            ),
        ]
    };
    check_kernels_of(
        &Learner,
        &your_caches,
        ex07_greedy::argmax,
        model,
        prompt,
        decode_steps,
    )
}

/// Small blocks, so that even a short prompt crosses several block boundaries.
pub const CHECK_BLOCK_SIZE: usize = 4;

/// [`check_kernels`] for any kernels `yours`, layer caches `your_caches` and greedy choice
/// `your_argmax` (the tests plant mistakes through this).
pub fn check_kernels_of(
    yours: &dyn Kernels,
    your_caches: &YourCaches,
    your_argmax: fn(&[f32]) -> usize,
    model: &Model,
    prompt: &[u32],
    decode_steps: usize,
) -> Result<Vec<KernelCheck>> {
    let checked = Checked {
        yours,
        tallies: Default::default(),
        max_pos: Default::default(),
    };
    let layers = guarded(|| {
        let mut cache = TextbookCache {
            layers: (0..model.layers.len())
                .map(|_| CheckedLayer {
                    reference: Rows::default(),
                    yours: your_caches()
                        .into_iter()
                        .map(|(which, cache)| (which, cache, Tally::default()))
                        .collect(),
                })
                .collect(),
        };
        let mut logits = textbook::forward(&checked, model, prompt, Some(&mut cache))?;
        for step in 0..=decode_steps {
            // The index is the output: |yours − kvlab's| is 0 or a wrong token.
            let next = crate::ops::argmax(&logits);
            let yours = your_argmax(&logits);
            checked.record(ARGMAX, &[next as f32], &[yours as f32]);
            if step < decode_steps {
                logits = textbook::forward(&checked, model, &[next as u32], Some(&mut cache))?;
            }
        }
        cache.layers.iter_mut().for_each(CheckedLayer::compare_all);
        Ok(cache.layers)
    })?;
    let mut tallies = checked.tallies.into_inner();
    for (which, _, tally) in layers.into_iter().flat_map(|layer| layer.yours) {
        tallies[which].merge(tally);
    }
    let max_pos = checked.max_pos.get();
    Ok(CHECKED
        .iter()
        .zip(tallies)
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
        let checks = check_kernels(&model, &PROMPT, 3).unwrap();
        for k in &checks {
            assert!(k.ok && k.calls > 0, "{k:?}");
        }
    }

    #[test]
    fn the_solutions_in_the_engine_give_the_engines_tokens() {
        let model = small_model();
        let prompt = [4, 8, 15, 16, 23, 42];
        let want = engine_tokens(&model, &prompt, 12);
        for (path, paged) in [
            (PathKind::Naive, None),
            (PathKind::Cached, None),
            (PathKind::Cached, Some(4)),
            (PathKind::Cached, Some(1)),
        ] {
            let mut yours = decoder(&model, path, prompt.len() + 12, paged);
            assert_eq!(
                tokens(yours.as_mut(), &prompt, 12),
                want,
                "{path:?} {paged:?}"
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
        fn attention(
            &self,
            q: &[f32],
            k: &[f32],
            v: &[f32],
            start: usize,
            h: Heads,
            window: Option<usize>,
        ) -> Vec<f32> {
            Learner.attention(q, k, v, start, h, window)
        }
    }

    /// The worked solutions' caches, as [`check_kernels`] builds them.
    fn solution_caches(
        model: &Model,
        capacity: usize,
    ) -> impl Fn() -> Vec<(usize, Box<dyn LayerCache>)> + '_ {
        move || {
            vec![
                (
                    KV_APPEND,
                    Box::new(LearnerCache::new(model, capacity)) as Box<dyn LayerCache>,
                ),
                (
                    BLOCK_TABLE,
                    Box::new(LearnerPagedCache::new(model, capacity, CHECK_BLOCK_SIZE)),
                ),
            ]
        }
    }

    fn wrong(checks: &[KernelCheck]) -> Vec<&'static str> {
        checks
            .iter()
            .filter(|k| !k.ok)
            .map(|k| k.function)
            .collect()
    }

    const PROMPT: [u32; 6] = [1, 17, 42, 5, 99, 3];

    #[test]
    fn a_planted_mistake_is_named_and_only_it() {
        let model = small_model();
        let caches = solution_caches(&model, PROMPT.len() + 2);
        let checks = check_kernels_of(
            &AdjacentPairs,
            &caches,
            ex07_greedy::argmax,
            &model,
            &PROMPT,
            2,
        )
        .unwrap();
        assert_eq!(wrong(&checks), ["rope"], "{checks:?}");
    }

    /// Writes every position over row 0 (its `len` still counts).
    struct RowZero(Rows);

    impl LayerCache for RowZero {
        fn len(&self) -> usize {
            self.0.len
        }
        fn append(&mut self, k: &[f32], v: &[f32]) -> Result<()> {
            let row = k.len();
            self.0.k_cache.resize((self.0.len + 1) * row, 0.0);
            self.0.v_cache.resize((self.0.len + 1) * row, 0.0);
            self.0.k_cache[..row].copy_from_slice(k);
            self.0.v_cache[..row].copy_from_slice(v);
            self.0.len += 1;
            Ok(())
        }
        fn keys(&self) -> &[f32] {
            self.0.keys()
        }
        fn values(&self) -> &[f32] {
            self.0.values()
        }
        fn reset(&mut self) {
            self.0.reset();
        }
        fn bytes(&self) -> KvBytes {
            self.0.bytes()
        }
    }

    /// Exercise 18's solution, but read back at `pos * row` as if block `i` were the
    /// table's `i`-th: the table ignored.
    struct IgnoresTable(LearnerPagedCache);

    impl LayerCache for IgnoresTable {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn append(&mut self, k: &[f32], v: &[f32]) -> Result<()> {
            self.0.append(k, v)?;
            let c = &mut self.0;
            let floats = c.k_seq.len * c.k_pool.row;
            c.keys = c.k_pool.keys[..floats].to_vec();
            c.values = c.v_pool.keys[..floats].to_vec();
            Ok(())
        }
        fn keys(&self) -> &[f32] {
            self.0.keys()
        }
        fn values(&self) -> &[f32] {
            self.0.values()
        }
        fn reset(&mut self) {
            self.0.reset();
        }
        fn bytes(&self) -> KvBytes {
            self.0.bytes()
        }
    }

    /// Each planted cache or argmax mistake is named, and nothing else is: a cache that
    /// writes every position over row 0, one that says it is full one position early, a
    /// block pool whose table is never read, an argmax that takes the smallest logit. In
    /// the decoder, a cache one position short stops the generation with its exercise's
    /// error.
    #[test]
    fn a_planted_cache_or_argmax_mistake_is_named_and_only_it() {
        let model = small_model();
        let room = PROMPT.len() + 2;
        let planted: [(&str, Box<YourCaches>); 3] = [
            (
                "kv_append",
                Box::new(|| {
                    vec![(
                        KV_APPEND,
                        Box::new(RowZero(Rows::default())) as Box<dyn LayerCache>,
                    )]
                }),
            ),
            (
                "kv_append",
                Box::new(|| {
                    vec![(
                        KV_APPEND,
                        Box::new(LearnerCache::new(&model, room - 1)) as Box<dyn LayerCache>,
                    )]
                }),
            ),
            (
                "block_table",
                Box::new(|| {
                    let paged = LearnerPagedCache::new(&model, room, CHECK_BLOCK_SIZE);
                    vec![(
                        BLOCK_TABLE,
                        Box::new(IgnoresTable(paged)) as Box<dyn LayerCache>,
                    )]
                }),
            ),
        ];
        for (function, caches) in planted {
            let checks =
                check_kernels_of(&Learner, &caches, ex07_greedy::argmax, &model, &PROMPT, 2)
                    .unwrap();
            // The exercise not planted has no cache here: it is named too (0 calls).
            let named: Vec<_> = wrong(&checks)
                .into_iter()
                .filter(|f| !matches!(*f, "kv_append" | "block_table") || *f == function)
                .collect();
            assert_eq!(named, [function], "{checks:?}");
            let planted = checks.iter().find(|k| k.function == function).unwrap();
            assert!(planted.calls > 0, "{checks:?}");
        }

        let argmin: fn(&[f32]) -> usize =
            |logits| crate::ops::argmax(&logits.iter().map(|x| -x).collect::<Vec<_>>());
        let caches = solution_caches(&model, room);
        let checks = check_kernels_of(&Learner, &caches, argmin, &model, &PROMPT, 2).unwrap();
        assert_eq!(wrong(&checks), ["argmax"], "{checks:?}");

        for (paged, error) in [
            (None, "exercise 10: your KvCache is full"),
            (Some(2), "exercise 18: your BlockPool ran out"),
        ] {
            // Room for the prompt only (in blocks of 2: 3 blocks, all full).
            let mut short = decoder(&model, PathKind::Cached, PROMPT.len(), paged);
            short.prefill(&PROMPT).unwrap();
            let err = short.step(3).unwrap_err().to_string();
            assert!(err.contains(error), "{err}");
        }
    }

    #[test]
    fn a_panic_in_the_learners_code_is_an_error() {
        struct Panics;
        impl Kernels for Panics {
            fn rmsnorm(&self, _: &[f32], _: &[f32], _: f32, _: &mut [f32]) {
                panic!("planted");
            }
            fn rope(&self, _: &mut [f32], _: usize, _: usize, _: f64) {}
            fn attention(
                &self,
                q: &[f32],
                _: &[f32],
                _: &[f32],
                _: usize,
                _: Heads,
                _: Option<usize>,
            ) -> Vec<f32> {
                q.to_vec()
            }
        }
        let model = small_model();
        let caches = solution_caches(&model, 3);
        let err = check_kernels_of(&Panics, &caches, ex07_greedy::argmax, &model, &[1, 2], 1)
            .unwrap_err();
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
        for (path, paged) in [
            (PathKind::Naive, None),
            (PathKind::Cached, None),
            (PathKind::Cached, Some(16)),
        ] {
            let mut yours = decoder(&model, path, prompt.len() + 6, paged);
            assert_eq!(
                tokens(yours.as_mut(), &prompt, 6),
                want,
                "{path:?} {paged:?}"
            );
        }
    }
}
