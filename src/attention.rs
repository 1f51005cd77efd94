//! Causal self-attention with grouped-query heads (book: attention.md, gqa.md).
//!
//! Each query is dotted with every key up to its own position, the scores are
//! softmaxed, and the result weights the values:
//! `out = softmax(q·Kᵀ / sqrt(head_dim)) · V` (Vaswani et al. 2017).
//!
//! One function serves both paths. Given queries for positions
//! `start_pos..start_pos + n` and keys/values for positions `0..start_pos + n`:
//! - the naive path passes the whole sequence (`start_pos = 0`, `n = seq_len`),
//!   with the K and V it has just recomputed for every position;
//! - the cached path passes one new token (`n = 1`) and the K and V read from the cache;
//! - a prefill, or several new tokens meeting a warm cache (chunked prefill, a
//!   second chat turn), is the general case: a *rectangular* causal mask, where
//!   query row `i` sees keys `0..=start_pos + i`.
//!
//! Attention only needs to find "the key and value of position `j`" ([`KvRows`]).
//! In a contiguous cache, row `j` sits at `j * kv_dim`; in a paged cache it sits in
//! block `j / block_size` of the sequence's block table (PagedAttention, Kwon et al.
//! 2023). The arithmetic per (query, head) is the same for every layout — the same
//! chains of multiply-adds per score, the same softmax, the same sum in order of `j`
//! — so every layout gives bitwise-identical outputs (chapters "Attention" and
//! "Paged attention").

use crate::cache::rows::{Contiguous, KvHeads};
use crate::cache::view::KvView;
use crate::config::Config;
use crate::mask::Window;
use crate::ops::softmax;
use rayon::prelude::*;

/// The sizes attention needs, from the config.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl Heads {
    /// The attention shape `config` describes.
    pub fn of(config: &Config) -> Heads {
        Heads {
            n_heads: config.num_attention_heads,
            n_kv_heads: config.n_kv_heads(),
            head_dim: config.head_dim(),
        }
    }
}

// ANCHOR: attention
/// `q`: `[n, n_heads * head_dim]`, already rotated, for positions `start_pos..start_pos + n`.
/// `keys`, `values`: `[start_pos + n, n_kv_heads * head_dim]`, contiguous.
/// Returns `[n, n_heads * head_dim]`.
pub fn causal_attention(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    start_pos: usize,
    heads: Heads,
) -> Vec<f32> {
    let kv_dim = heads.n_kv_heads * heads.head_dim;
    attention_over(&Contiguous::new(keys, values, kv_dim), q, start_pos, heads)
}

/// The same attention, reading position `j`'s key and value from any layout, in place.
///
/// The work is cut into tasks of (up to [`QUERY_ROWS`] query rows, one KV head, some of
/// the query heads that share it); each task returns `[rows, heads, head_dim]`, which is
/// then copied into place. See [`task_heads`] for how many query heads a task takes.
pub fn attention_over<R: KvHeads + ?Sized>(
    rows: &R,
    q: &[f32],
    start_pos: usize,
    heads: Heads,
) -> Vec<f32> {
    attention_observed(rows, q, start_pos, heads, None, false).0
}

// ANCHOR: attention_observed
/// [`attention_over`], and, when `observe` is set, the attention each row *received*:
/// `received[j] = Σ_i Σ_h p[i, h, j]`, summed over this call's query rows and every
/// query head, `[start_pos + n]` (empty when `observe` is off: other layouts pay one
/// branch per task). H2O ranks tokens by this sum (`src/cache/h2o.rs`). The sums run
/// in a fixed order (rows, then heads within a task; tasks in order), so two caches
/// that hand attention the same rows get the same bits.
///
/// `window`: the sliding-window mask added to the causal one ([`Window`]): the query at
/// position `p` sees the first `sinks` positions and the last `size - sinks` up to
/// itself. Gemma 3's local layers (no sinks) and `--kv sliding`. `None`: the whole prefix.
pub fn attention_observed<R: KvHeads + ?Sized>(
    rows: &R,
    q: &[f32],
    start_pos: usize,
    heads: Heads,
    window: Option<Window>,
    observe: bool,
) -> (Vec<f32>, Vec<f32>) {
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    } = heads;
    // GQA: query heads come in groups of `kv_mul` that share one KV head.
    // MHA is kv_mul = 1, MQA is n_kv_heads = 1. Same code for all three.
    let kv_mul = n_heads / n_kv_heads;
    let q_dim = n_heads * head_dim;
    let n = q.len() / q_dim;
    let per_task = task_heads(n, kv_mul, observe);
    // (first row, first query head): a task takes query heads `h0..h0 + per_task`,
    // which `per_task` dividing `kv_mul` keeps inside one KV head's group.
    let tasks: Vec<(usize, usize)> = (0..n)
        .step_by(QUERY_ROWS)
        .flat_map(|i0| (0..n_heads).step_by(per_task).map(move |h0| (i0, h0)))
        .collect();
    let outputs: Vec<(Vec<f32>, Vec<f32>)> = tasks
        .par_iter()
        .map(|&(i0, h0)| {
            let q_rows = &q[i0 * q_dim..(n.min(i0 + QUERY_ROWS)) * q_dim];
            let task_heads = h0..h0 + per_task;
            attend_group(
                rows,
                q_rows,
                start_pos + i0,
                task_heads,
                heads,
                window,
                observe,
            )
        })
        .collect();
    let mut out = vec![0.0f32; q.len()]; // [n, n_heads * head_dim]
    let mut received = vec![0.0f32; if observe { start_pos + n } else { 0 }]; // [start_pos + n]
    let task_dim = per_task * head_dim;
    for (&(i0, h0), (task_out, task_received)) in tasks.iter().zip(&outputs) {
        for (i, src) in task_out.chunks_exact(task_dim).enumerate() {
            out[(i0 + i) * q_dim + h0 * head_dim..][..task_dim].copy_from_slice(src);
        }
        for (r, &p) in received.iter_mut().zip(task_received) {
            *r += p;
        }
    }
    (out, received)
}
// ANCHOR_END: attention_observed

// ANCHOR: task_heads
/// How many of a group's `kv_mul` query heads one task takes.
///
/// A whole group, when there are rows enough to share out: each key is then read once
/// for every head that uses it. But a decode step has one row, and a task per KV head
/// is only `n_kv_heads` tasks: SmolLM2's 3 on 2 threads leave one thread two groups and
/// the other one, so the step waits for 2/3 of the work on one core. A task per query
/// head (9) shares out 5 to 4: 5/9 of the work on the busier core. Either way every
/// head's output is computed by the same chains in the same order, so the split
/// changes no bit of `out`. What does depend on
/// it is the order in which `received` (H2O) adds the tasks' sums, so a call that
/// observes keeps whole groups: its sums come out in one order, whatever the row count.
fn task_heads(n_rows: usize, kv_mul: usize, observe: bool) -> usize {
    if n_rows <= QUERY_ROWS && !observe {
        1
    } else {
        kv_mul
    }
}
// ANCHOR_END: task_heads

/// Query rows per attention task.
const QUERY_ROWS: usize = 16;
/// Value dimensions summed at once: 64 sums = 8 AVX2 registers.
const VALUE_BLOCK: usize = 64;

// ANCHOR: score
/// Lanes of the score dot product.
const LANES: usize = 16;

/// `q · k` for one query head and one key, in a fixed order that depends only
/// on `head_dim`: lane `l` sums `d = l, l + 16, l + 32, ...` (a chain of fused
/// multiply-adds from 0.0), then the 16 lanes are folded by halves
/// (`l + 8` onto `l`, then `+ 4`, `+ 2`, `+ 1`). The same chain for every score,
/// however many queries or keys a call has, so the naive and cached paths still
/// agree bit for bit; and the key is read where it lies (a contiguous
/// `head_dim` run of the cache), with no copy. The 16 lanes are what a compiler
/// turns into two AVX2 (or one AVX-512) multiply-adds per step.
#[inline(always)]
pub fn score(q: &[f32], k: &[f32]) -> f32 {
    debug_assert_eq!(q.len(), k.len());
    let (q_blocks, q_tail) = q.as_chunks::<LANES>();
    let (k_blocks, k_tail) = k.as_chunks::<LANES>();
    let mut acc = [0.0f32; LANES];
    for (qb, kb) in q_blocks.iter().zip(k_blocks) {
        for l in 0..LANES {
            acc[l] = qb[l].mul_add(kb[l], acc[l]);
        }
    }
    for (l, (&q, &k)) in q_tail.iter().zip(k_tail).enumerate() {
        acc[l] = q.mul_add(k, acc[l]);
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            acc[l] += acc[l + width];
        }
    }
    acc[0]
}
// ANCHOR_END: score

/// Attention of the query heads `task_heads` (all in one KV head's group) for the rows
/// of `q_rows` (`[m, n_heads * head_dim]`, the first at position `first_pos`). Returns
/// `[m, task_heads.len(), head_dim]`, and, when `observe` is set, the probabilities
/// each key received from these rows and heads, `[first_pos + m]`.
fn attend_group<R: KvHeads + ?Sized>(
    rows: &R,
    q_rows: &[f32],
    first_pos: usize,
    task_heads: std::ops::Range<usize>,
    heads: Heads,
    window: Option<Window>,
    observe: bool,
) -> (Vec<f32>, Vec<f32>) {
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    } = heads;
    let kv_head = task_heads.start / (n_heads / n_kv_heads);
    let (first_head, n_task_heads) = (task_heads.start, task_heads.len());
    let scale = 1.0 / (head_dim as f32).sqrt();
    let m = q_rows.len() / (n_heads * head_dim);
    // Keys 0..end: the causal horizon of the last row.
    let end = first_pos + m;
    // What row `i` sees: the sinks `0..sink_end` and the recent `recent_start..=its
    // position` ([`Window::seen`]); without a window, all of `0..=its position`.
    let seen = |i: usize| window.map_or((0, 0), |w| w.seen(first_pos + i));
    // The sinks every row sees, and where the first row's recent run starts: a key in
    // between is seen by no row of this task and never read (a local layer's decode
    // reads `window` keys, not them all).
    let (sinks, first_recent) = window.map_or((0, 0), |w| (w.sinks, seen(0).1));

    // Scores, `[m, n_task_heads, end]`: each key is read once, in place, and scored
    // against every query row and head of the group that can see it.
    let mut scores = vec![0.0f32; m * n_task_heads * end];
    // Where a quantized cache dequantizes one head's run ([`KvHeads`]); unused by f32 rows.
    let (mut key_buf, mut value_buf) = (vec![0.0f32; head_dim], vec![0.0f32; head_dim]);
    for j in (0..sinks.min(first_recent)).chain(first_recent..end) {
        let key = rows.key_head(j, kv_head, head_dim, &mut key_buf);
        // Rows whose position reaches key `j` (the causal mask), and whose window still
        // holds it: a sink while it is one, else while `first_pos + i < j + size - sinks`.
        let last_row = match window {
            Some(w) if j >= w.sinks => m.min((j + w.size - w.sinks).saturating_sub(first_pos)),
            _ => m,
        };
        for i in j.saturating_sub(first_pos)..last_row {
            for g in 0..n_task_heads {
                let q_head = &q_rows[(i * n_heads + first_head + g) * head_dim..][..head_dim];
                scores[(i * n_task_heads + g) * end + j] = score(q_head, key);
            }
        }
    }

    let mut out = vec![0.0f32; m * n_task_heads * head_dim]; // [m, n_task_heads, head_dim]
    let mut received = vec![0.0f32; if observe { end } else { 0 }]; // [end]
    for (i, (scores_i, out_i)) in scores
        .chunks_exact_mut(n_task_heads * end)
        .zip(out.chunks_exact_mut(n_task_heads * head_dim))
        .enumerate()
    {
        // The causal mask: position `first_pos + i` attends to positions up to its own;
        // the window's: from its sinks and its recent run only.
        let (sink_end, recent_start) = seen(i);
        let last = first_pos + i + 1;
        for (s, out_head) in scores_i
            .chunks_exact_mut(end)
            .zip(out_i.chunks_exact_mut(head_dim))
        {
            // Softmax over the seen scores, gathered into one run (in place: the recent
            // run slides down to follow the sinks; with no sinks it is already in place).
            let s = if sink_end == 0 {
                &mut s[recent_start..last]
            } else {
                s.copy_within(recent_start..last, sink_end);
                &mut s[..sink_end + last - recent_start]
            };
            for x in s.iter_mut() {
                *x *= scale;
            }
            softmax(s);
            // The two runs this row sees, in order, each with its probabilities.
            let (sink_probs, recent_probs) = s.split_at(sink_end);
            let runs = [
                (0..sink_end, sink_probs),
                (recent_start..last, recent_probs),
            ];
            if observe {
                for (js, ps) in runs.clone() {
                    for (j, &p) in js.zip(ps) {
                        received[j] += p;
                    }
                }
            }
            // out = Σ_j p_j · v_j, in order of j, `VALUE_BLOCK` dimensions at a time
            // so that the sums stay in registers while `j` runs.
            for (d0, out_block) in (0..head_dim)
                .step_by(VALUE_BLOCK)
                .zip(out_head.chunks_mut(VALUE_BLOCK))
            {
                let width = out_block.len();
                match width {
                    VALUE_BLOCK => {
                        let mut acc = [0.0f32; VALUE_BLOCK];
                        for (js, ps) in runs.clone() {
                            for (j, &p) in js.zip(ps) {
                                let v = rows.value_head(j, kv_head, head_dim, &mut value_buf);
                                let v: &[f32; VALUE_BLOCK] =
                                    v[d0..][..width].try_into().expect("block");
                                for (a, &v) in acc.iter_mut().zip(v) {
                                    *a = p.mul_add(v, *a);
                                }
                            }
                        }
                        out_block.copy_from_slice(&acc);
                    }
                    _ => {
                        for (js, ps) in runs.clone() {
                            for (j, &p) in js.zip(ps) {
                                let v = rows.value_head(j, kv_head, head_dim, &mut value_buf);
                                for (o, &v) in out_block.iter_mut().zip(&v[d0..][..width]) {
                                    *o = p.mul_add(v, *o);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    (out, received)
}
// ANCHOR_END: attention

impl KvView<'_> {
    /// Attention over this view: the match happens once per layer, and each arm runs
    /// a copy of [`attention_over`] compiled for its layout (no per-row dispatch).
    /// `rows_before`: the rows that precede the first query (its causal horizon).
    pub fn attend(&self, q: &[f32], rows_before: usize, heads: Heads) -> Vec<f32> {
        self.attend_observed(q, rows_before, heads, None, false).0
    }

    /// [`KvView::attend`], and the attention each row received when `observe` is set
    /// ([`attention_observed`]).
    pub fn attend_observed(
        &self,
        q: &[f32],
        rows_before: usize,
        heads: Heads,
        window: Option<Window>,
        observe: bool,
    ) -> (Vec<f32>, Vec<f32>) {
        match self {
            KvView::Contiguous(rows) => {
                attention_observed(rows, q, rows_before, heads, window, observe)
            }
            KvView::Paged(rows) => attention_observed(rows, q, rows_before, heads, window, observe),
            KvView::Ring(rows) => attention_observed(rows, q, rows_before, heads, window, observe),
            KvView::Indexed(rows) => {
                attention_observed(rows, q, rows_before, heads, window, observe)
            }
            KvView::Quantized(rows) => {
                attention_observed(rows, q, rows_before, heads, window, observe)
            }
            KvView::PagedQuantized(rows) => {
                attention_observed(rows, q, rows_before, heads, window, observe)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn random(rng: &mut Rng, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.symmetric(1.0)).collect()
    }

    /// A task per query head (decode: one row) and a task per group (a prefill of more
    /// than `QUERY_ROWS` rows) compute each head the same way: every row of a 40-row
    /// prefill equals the same row attended alone, bitwise, for MHA, GQA and MQA, with
    /// and without a window.
    #[test]
    fn a_task_per_query_head_changes_no_bit() {
        let mut rng = Rng::new(7);
        for (n_heads, n_kv_heads) in [(4, 4), (9, 3), (4, 1)] {
            let heads = Heads {
                n_heads,
                n_kv_heads,
                head_dim: 80, // a full value block and a tail: both sum orders run
            };
            let (q_dim, kv_dim) = (n_heads * 80, n_kv_heads * 80);
            let n = 40;
            let kv_mul = n_heads / n_kv_heads;
            // The prefill takes whole groups; a row alone, a task per head.
            assert_eq!(task_heads(n, kv_mul, false), kv_mul);
            assert_eq!(task_heads(1, kv_mul, false), 1);
            let q = random(&mut rng, n * q_dim);
            let keys = random(&mut rng, n * kv_dim);
            let values = random(&mut rng, n * kv_dim);
            for window in [
                None,
                Some(Window::plain(7)),
                Some(Window { size: 7, sinks: 2 }),
            ] {
                let rows = Contiguous::new(&keys, &values, kv_dim);
                let (all, _) = attention_observed(&rows, &q, 0, heads, window, false);
                for i in 0..n {
                    let alone = Contiguous::new(
                        &keys[..(i + 1) * kv_dim],
                        &values[..(i + 1) * kv_dim],
                        kv_dim,
                    );
                    let q_i = &q[i * q_dim..][..q_dim];
                    let (one, _) = attention_observed(&alone, q_i, i, heads, window, false);
                    assert_eq!(
                        one.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        all[i * q_dim..][..q_dim]
                            .iter()
                            .map(|x| x.to_bits())
                            .collect::<Vec<_>>(),
                        "row {i}, {n_heads}/{n_kv_heads} heads, window {window:?}"
                    );
                }
            }
        }
    }

    /// The sliding-window mask with sinks, against its definition: each row equals the
    /// plain causal attention of that one query over only the positions it sees,
    /// gathered in order ([`Indexed`] rows), bitwise. MHA, GQA and MQA; windows that
    /// reach the sinks and windows that leave a gap; a prefill of 40 rows after 9
    /// cached positions; and what H2O would read (`received`) lands on seen positions only.
    #[test]
    fn a_window_with_sinks_is_attention_over_the_positions_it_sees() {
        use crate::cache::rows::Indexed;
        let mut rng = Rng::new(11);
        for (n_heads, n_kv_heads) in [(4, 4), (9, 3), (4, 1)] {
            let heads = Heads {
                n_heads,
                n_kv_heads,
                head_dim: 80,
            };
            let (q_dim, kv_dim) = (n_heads * 80, n_kv_heads * 80);
            let (before, n) = (9, 40);
            let q = random(&mut rng, n * q_dim);
            let keys = random(&mut rng, (before + n) * kv_dim);
            let values = random(&mut rng, (before + n) * kv_dim);
            let rows = Contiguous::new(&keys, &values, kv_dim);
            for window in [
                Window { size: 7, sinks: 2 },
                Window { size: 30, sinks: 4 },
                Window { size: 5, sinks: 4 },
            ] {
                let (all, received) =
                    attention_observed(&rows, &q, before, heads, Some(window), true);
                for i in 0..n {
                    let pos = before + i;
                    let seen: Vec<usize> = (0..=pos).filter(|&j| window.sees(pos, j)).collect();
                    let gathered = Indexed {
                        store: Contiguous::new(&keys, &values, kv_dim),
                        slots: &seen,
                    };
                    let q_i = &q[i * q_dim..][..q_dim];
                    let one = attention_over(&gathered, q_i, seen.len() - 1, heads);
                    assert_eq!(
                        one.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        all[i * q_dim..][..q_dim]
                            .iter()
                            .map(|x| x.to_bits())
                            .collect::<Vec<_>>(),
                        "row {i}, {n_heads}/{n_kv_heads} heads, {window:?}"
                    );
                }
                // A position no query sees (past the sinks, before the first query's run)
                // receives nothing.
                let first_seen = window.forgotten_below(before).max(window.sinks);
                assert!(received[window.sinks..first_seen].iter().all(|&r| r == 0.0));
                assert!(received[..window.sinks].iter().all(|&r| r > 0.0));
            }
        }
    }

    /// What H2O reads (`received`) is summed task by task; a call that observes keeps
    /// whole groups, so one row alone sums in the order a prefill's rows do.
    #[test]
    fn an_observing_call_keeps_whole_groups() {
        assert_eq!(task_heads(1, 3, true), 3);
        assert_eq!(task_heads(QUERY_ROWS + 1, 3, false), 3);
    }
}
