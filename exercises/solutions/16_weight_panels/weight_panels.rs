//! # Exercise 16 — weights in panels: the order decode streams them in
//!
//! A linear layer's weight `w` is `[d_in, d_out]`, row after row. Decode (解码) computes one
//! row of outputs, `out[j] = Σ_k x[k] · w[k][j]`, and a thread takes a *strip* of 32
//! output columns: at every `k` it reads 32 numbers (128 bytes) of row `k`, then jumps
//! `d_out` numbers ahead to row `k + 1`. For SmolLM2's gate projection (`d_out` = 1536,
//! 6 KiB a row) each of those 128-byte reads sits on a different 4 KiB page: a page the
//! TLB must translate and the hardware prefetcher will not run into.
//!
//! Stored **in panels** — `[d_out / 32, d_in, 32]`: all of panel `p`'s rows, 32 numbers
//! each, one after the other — the same strip is one contiguous run. The arithmetic does
//! not change: each output is still `fma(x[k], w[k][j], acc)` for `k = 0, 1, 2, ...`, so the
//! results are bit for bit the same; only the order of the bytes in memory does.
//!
//! kvlab: `src/weights.rs` (`to_panels`), `src/simd/elem.rs` (`WeightElem for [S; PANEL]`),
//! `kvlab bench --layout rows` vs the default panels; book chapter "Prefill is
//! compute-bound, decode memory-bound".

/// Output columns in one panel.
pub const PANEL: usize = 32;

/// Where weight `[k][j]` of a `[d_in, d_out]` matrix lands in the panel layout.
pub fn panel_index(k: usize, j: usize, d_in: usize) -> usize {
    (j / PANEL * d_in + k) * PANEL + j % PANEL
}

/// `w` (`[d_in, d_out]`, rows) laid out in panels; `d_out` is a multiple of [`PANEL`].
pub fn to_panels(w: &[f32], d_in: usize, d_out: usize) -> Vec<f32> {
    let mut panels = vec![0.0; w.len()];
    for k in 0..d_in {
        for j in 0..d_out {
            panels[panel_index(k, j, d_in)] = w[k * d_out + j];
        }
    }
    panels
}

/// 4 KiB pages a strip of the first 32 columns reads, in the row layout, for a matrix that
/// starts on a page boundary: the distinct pages of the 128-byte pieces of every row.
pub fn row_layout_pages(d_in: usize, d_out: usize) -> usize {
    const PAGE: usize = 4096;
    let mut pages = 0;
    let mut last = usize::MAX;
    for k in 0..d_in {
        let first_byte = k * d_out * 4;
        let last_byte = first_byte + PANEL * 4 - 1;
        for page in [first_byte / PAGE, last_byte / PAGE] {
            if page != last {
                pages += 1;
                last = page;
            }
        }
    }
    pages
}

/// Given: the pages the same strip reads in panels (one contiguous run of `d_in · 128` bytes).
pub fn panel_layout_pages(d_in: usize) -> usize {
    (d_in * PANEL * 4).div_ceil(4096)
}

/// Given: `out = x · w` reading the row layout.
pub fn matvec_rows(x: &[f32], w: &[f32], d_out: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; d_out];
    for (k, &xk) in x.iter().enumerate() {
        for (j, o) in out.iter_mut().enumerate() {
            *o = xk.mul_add(w[k * d_out + j], *o);
        }
    }
    out
}

/// Given: the same product reading the panel layout, panel after panel.
pub fn matvec_panels(x: &[f32], panels: &[f32], d_out: usize) -> Vec<f32> {
    let d_in = x.len();
    let mut out = vec![0.0f32; d_out];
    for (p, panel) in panels.chunks_exact(d_in * PANEL).enumerate() {
        let sums = &mut out[p * PANEL..][..PANEL];
        for (k, row) in panel.chunks_exact(PANEL).enumerate() {
            for (s, &wkj) in sums.iter_mut().zip(row) {
                *s = x[k].mul_add(wkj, *s);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(d_in: usize, d_out: usize) -> Vec<f32> {
        (0..d_in * d_out)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect()
    }

    #[test]
    fn the_first_panel_holds_the_first_32_columns_row_by_row() {
        assert_eq!(panel_index(0, 0, 4), 0);
        assert_eq!(panel_index(0, 31, 4), 31);
        assert_eq!(
            panel_index(1, 0, 4),
            32,
            "row 1 of panel 0 follows row 0's 32 columns"
        );
        assert_eq!(panel_index(3, 31, 4), 127);
        assert_eq!(
            panel_index(0, 32, 4),
            128,
            "panel 1 starts after all 4 rows of panel 0"
        );
        assert_eq!(panel_index(2, 45, 4), 4 * 32 + 2 * 32 + 13);
    }

    #[test]
    fn panels_hold_the_same_numbers_each_once() {
        let (d_in, d_out) = (5, 96);
        let w = matrix(d_in, d_out);
        let p = to_panels(&w, d_in, d_out);
        assert_eq!(p.len(), w.len());
        for k in 0..d_in {
            for j in 0..d_out {
                assert_eq!(
                    p[panel_index(k, j, d_in)].to_bits(),
                    w[k * d_out + j].to_bits()
                );
            }
        }
    }

    #[test]
    fn panels_give_the_same_bits() {
        let (d_in, d_out) = (48, 64);
        let w = matrix(d_in, d_out);
        let x: Vec<f32> = (0..d_in).map(|i| (i % 7) as f32 * 0.3 - 0.9).collect();
        let rows = matvec_rows(&x, &w, d_out);
        let panels = matvec_panels(&x, &to_panels(&w, d_in, d_out), d_out);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&panels), bits(&rows));
    }

    #[test]
    fn a_strip_of_smollm2_gate_reads_32_times_fewer_pages_in_panels() {
        // gate_proj: [576, 1536]. A row is 6 KiB: every row's piece is on its own page.
        assert_eq!(row_layout_pages(576, 1536), 576);
        assert_eq!(panel_layout_pages(576), 18);
        // q_proj: [576, 576], 2304-byte rows: about 1.8 rows per page.
        assert_eq!(row_layout_pages(576, 576), 324);
        // A matrix narrower than a page per row: rows share pages.
        assert_eq!(row_layout_pages(64, 32), 2);
        // Rows of 8160 bytes: rows 1, 2 and 3 each start 32-96 bytes before a page ends,
        // so their 128-byte pieces straddle two pages.
        assert_eq!(row_layout_pages(4, 2040), 7);
    }
}
