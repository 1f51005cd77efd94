//! Each weight format's kernels: how a matrix stored in it is widened, and which
//! ISA's strip reads it (the traits are in `elem.rs`, the kernels in `portable.rs`,
//! `avx2.rs` and `avx512.rs`).

use super::bf16a::{self, Bf16Rows, Bf16aBlock, BF16A_COLS, BF16A_ROWS};
use super::bf16a_kernels::Kernel as Bf16aKernel;
use super::elem::{Scalar, WeightElem, PANEL};
use super::isa::Isa;
use super::q8::{Q8Block, Q8_COLS, Q8_ROWS};
use super::w8a8::{self, Q8Rows, W8a8Block};
use super::w8a8_kernels::Kernel;
use crate::device::WeightLayout;

/// Every one-number format is a weight format: widen in place, run the scalar strip.
impl<S: Scalar> WeightElem for S {
    const NAME: &'static str = <S as Scalar>::NAME;
    type Input<'a> = &'a [f32];

    fn prepare(x: &[f32], _d_in: usize) -> &[f32] {
        x
    }

    fn widen_row(w: &[S], d_out: usize, k: usize, j0: usize, dst: &mut [f32]) {
        for (d, &src) in dst.iter_mut().zip(&w[k * d_out + j0..]) {
            *d = src.to_f32();
        }
    }

    fn strip(isa: Isa, x: &&[f32], d_in: usize, w: &[S], d_out: usize, j0: usize, out: &mut [f32]) {
        let x: &[f32] = x;
        match isa {
            // SAFETY: `Isa::Avx512` is only handed out by `Isa::available()` after
            // `is_x86_feature_detected!("avx512f")` said yes on this CPU.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { super::avx512::strip(x, d_in, w, d_out, j0, out) },
            // SAFETY: as above, for `avx2` and `fma`.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { super::avx2::strip(x, d_in, w, d_out, j0, out) },
            _ => super::portable::strip(x, d_in, w, d_out, j0, out),
        }
    }
}

// ANCHOR: panel_layout
/// A weight matrix stored **panel by panel**: its array is `[d_out / PANEL, d_in]` of
/// `[S; PANEL]`, element `(p, k)` holding weights `[k][p·PANEL .. (p+1)·PANEL]`. One panel
/// (`PANEL` = 32 output columns, all `d_in` rows) is one contiguous run of memory.
///
/// Why: a decode strip reads a few columns of every row of `w`. In the row layout
/// (`[d_in, d_out]`) those are short pieces of rows `d_out` apart, a new 4 KiB page at
/// almost every step of `k`, which the hardware prefetcher does not cross and the TLB
/// does not hold; in panels the same bytes are one sequential stream, and decode reads
/// them with prefill's register tile ([`Isa::tile`], its sums in registers for the whole
/// `k` loop, each weight widened as it is loaded). Each output column is still the chain
/// `fma(x[k], w[k][j], acc)` for `k = 0, 1, 2, ...`, so a panel model gives bitwise the
/// logits of its row twin (`tests/panels.rs`); only the time changes (`kvlab bench
/// --layout rows`; book: roofline.md).
impl<S: Scalar> WeightElem for [S; PANEL] {
    const NAME: &'static str = <S as Scalar>::NAME;
    const BLOCK_COLS: usize = PANEL;
    const LAYOUT: WeightLayout = WeightLayout::Panels;
    type Input<'a> = &'a [f32];

    fn prepare(x: &[f32], _d_in: usize) -> &[f32] {
        x
    }

    fn widen_row(w: &[Self], d_out: usize, k: usize, j0: usize, dst: &mut [f32]) {
        let d_in = w.len() * PANEL / d_out;
        let row = &w[j0 / PANEL * d_in + k][j0 % PANEL..];
        for (d, &src) in dst.iter_mut().zip(row) {
            *d = src.to_f32();
        }
    }

    fn strip(
        isa: Isa,
        x: &&[f32],
        d_in: usize,
        w: &[Self],
        d_out: usize,
        j0: usize,
        out: &mut [f32],
    ) {
        let x: &[f32] = x;
        let n = x.len() / d_in;
        let width = out.len() / n;
        assert!(
            j0.is_multiple_of(PANEL) && (width.is_multiple_of(PANEL) || j0 + width == d_out),
            "a panel strip starts on a panel and covers whole panels"
        );
        let tile_rows = isa.tile_rows();
        let mut sums = vec![0.0f32; tile_rows * PANEL]; // [tile_rows, PANEL]
        for (i, panel) in w[j0 / PANEL * d_in..][..width.div_ceil(PANEL) * d_in]
            .chunks_exact(d_in)
            .enumerate()
        {
            // The panel is one contiguous `[d_in, PANEL]` run: prefill's register tile reads
            // it in place, its 32 sums per row in registers for the whole `k` loop (a strip
            // over rows would load and store them every few weights).
            let cols = PANEL.min(width - i * PANEL);
            for (x_tile, out_tile) in x
                .chunks(tile_rows * d_in)
                .zip(out.chunks_mut(tile_rows * width))
            {
                let sums = &mut sums[..x_tile.len() / d_in * PANEL];
                isa.tile(x_tile, d_in, panel.as_flattened(), sums);
                for (dst, src) in out_tile
                    .chunks_exact_mut(width)
                    .zip(sums.chunks_exact(PANEL))
                {
                    dst[i * PANEL..][..cols].copy_from_slice(&src[..cols]);
                }
            }
        }
    }

    fn dims(w: &ndarray::Array2<Self>) -> (usize, usize) {
        let (panels, d_in) = w.dim();
        (d_in, panels * PANEL)
    }
}
// ANCHOR_END: panel_layout

/// The int8 format (`q8.rs`): a block of `Q8_ROWS x Q8_COLS` codes and one scale per
/// column, widened one block at a time; its strips read the codes straight from the
/// blocks, so they are written per ISA like the scalar ones.
impl WeightElem for Q8Block {
    const NAME: &'static str = "int8";
    const BLOCK_ROWS: usize = Q8_ROWS;
    const BLOCK_COLS: usize = Q8_COLS;
    type Input<'a> = &'a [f32];

    fn prepare(x: &[f32], _d_in: usize) -> &[f32] {
        x
    }

    fn widen_row(w: &[Q8Block], d_out: usize, k: usize, j0: usize, dst: &mut [f32]) {
        let row = &w[k / Q8_ROWS * (d_out / Q8_COLS)..][..d_out / Q8_COLS];
        for (c, d) in dst.iter_mut().enumerate() {
            let j = j0 + c;
            *d = row[j / Q8_COLS].weight(k % Q8_ROWS, j % Q8_COLS);
        }
    }

    fn strip(
        isa: Isa,
        x: &&[f32],
        d_in: usize,
        w: &[Q8Block],
        d_out: usize,
        j0: usize,
        out: &mut [f32],
    ) {
        let x: &[f32] = x;
        let width = out.len() / (x.len() / d_in);
        assert!(
            d_in.is_multiple_of(Q8_ROWS)
                && d_out.is_multiple_of(Q8_COLS)
                && j0.is_multiple_of(Q8_COLS)
                && width.is_multiple_of(Q8_COLS),
            "an int8 strip covers whole blocks"
        );
        match isa {
            // SAFETY: `Isa::Avx512` is only handed out by `Isa::available()` after
            // `is_x86_feature_detected!("avx512f")` said yes on this CPU.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { super::avx512::strip_q8(x, d_in, w, d_out, j0, out) },
            // SAFETY: as above, for `avx2` and `fma`.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { super::avx2::strip_q8(x, d_in, w, d_out, j0, out) },
            _ => super::portable::strip_q8(x, d_in, w, d_out, j0, out),
        }
    }
}

// ANCHOR: w8a8_elem
/// The W8A8 format (`w8a8.rs`): int8 blocks whose strips quantize the activations once
/// per matmul ([`WeightElem::prepare`]) and take integer dot products. Never packed into
/// f32 panels: prefill's rows take the same dot products as decode's, or naive == cached
/// would no longer hold bit for bit.
impl WeightElem for W8a8Block {
    const NAME: &'static str = "w8a8";
    const BLOCK_ROWS: usize = Q8_ROWS;
    const BLOCK_COLS: usize = Q8_COLS;
    const PACKS: bool = false;
    type Input<'a> = Q8Rows;

    fn prepare(x: &[f32], d_in: usize) -> Q8Rows {
        w8a8::quantize_rows(x, d_in)
    }

    fn widen_row(w: &[W8a8Block], d_out: usize, k: usize, j0: usize, dst: &mut [f32]) {
        let row = &w[k / Q8_ROWS * (d_out / Q8_COLS)..][..d_out / Q8_COLS];
        for (c, d) in dst.iter_mut().enumerate() {
            let j = j0 + c;
            *d = row[j / Q8_COLS].weight(k % Q8_ROWS, j % Q8_COLS);
        }
    }

    fn strip(
        isa: Isa,
        x: &Q8Rows,
        _d_in: usize,
        w: &[W8a8Block],
        d_out: usize,
        j0: usize,
        out: &mut [f32],
    ) {
        Kernel::of(isa).strip(x, w, d_out, j0, out);
    }
}
// ANCHOR_END: w8a8_elem

// ANCHOR: bf16a_elem
/// The bf16a format (`bf16a.rs`): bf16 weights in pairs, whose strips round the
/// activations to bf16 once per matmul and take `vdpbf16ps`'s dot products. Never packed
/// into f32 panels, for the reason W8A8 is not.
impl WeightElem for Bf16aBlock {
    const NAME: &'static str = "bf16a";
    const BLOCK_ROWS: usize = BF16A_ROWS;
    const BLOCK_COLS: usize = BF16A_COLS;
    const PACKS: bool = false;
    type Input<'a> = Bf16Rows;

    fn prepare(x: &[f32], d_in: usize) -> Bf16Rows {
        bf16a::round_rows(x, d_in)
    }

    fn widen_row(w: &[Bf16aBlock], d_out: usize, k: usize, j0: usize, dst: &mut [f32]) {
        let row = &w[k / BF16A_ROWS * (d_out / BF16A_COLS)..][..d_out / BF16A_COLS];
        for (c, d) in dst.iter_mut().enumerate() {
            let j = j0 + c;
            *d = row[j / BF16A_COLS].weight(k % BF16A_ROWS, j % BF16A_COLS);
        }
    }

    fn strip(
        isa: Isa,
        x: &Bf16Rows,
        _d_in: usize,
        w: &[Bf16aBlock],
        d_out: usize,
        j0: usize,
        out: &mut [f32],
    ) {
        Bf16aKernel::of(isa).strip(x, w, d_out, j0, out);
    }
}
// ANCHOR_END: bf16a_elem
