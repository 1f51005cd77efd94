//! The bf16a strips on x86: `vdpbf16ps` where the CPU has AVX-512 BF16, its two fused
//! multiply-adds and two flushes on AVX2 elsewhere (see `bf16a.rs` for why they give
//! [`super::bf16a::strip`]'s bits).

use super::bf16a::{Bf16Rows, Bf16aBlock, BF16A_COLS, BF16A_ROWS, PAIRS};
use std::arch::x86_64::*;

/// Rows of `x` one AVX-512 tile covers.
const TILE_ROWS: usize = 6;
/// Blocks (of 16 columns) one AVX-512 tile covers: 6 x 4 sums, 4 weight registers and
/// one broadcast fill 29 of the 32 registers.
const TILE_BLOCKS: usize = 4;

// ANCHOR: avx512
/// AVX-512 BF16. The strip's blocks are taken four at a time (64 columns) and the rows of
/// `x` six at a time: a tile of 6 x 4 registers of sums, each one output's chain, kept in
/// registers over the whole `d_in` loop, advanced pair by pair (one `vdpbf16ps` per pair
/// and register: the four weight registers are read once per pair for all six rows), then
/// stored once. Decode (one row) runs four independent chains, prefill twenty-four; edges
/// take tiles of one row or one block.
///
/// # Safety
/// The CPU must support `avx512f` and `avx512bf16`; the shapes must be those
/// `Kernel::strip` checks.
#[target_feature(enable = "avx512f,avx512bf16")]
pub unsafe fn strip_avx512(
    x: &Bf16Rows,
    w: &[Bf16aBlock],
    d_out: usize,
    j0: usize,
    out: &mut [f32],
) {
    let width = out.len() / x.n;
    let blocks = width / BF16A_COLS;
    let mut c = 0;
    while c < blocks {
        let four = blocks - c >= TILE_BLOCKS;
        let mut r = 0;
        while r < x.n {
            let six = x.n - r >= TILE_ROWS;
            let at = Tile {
                x,
                w,
                blocks_per_row: d_out / BF16A_COLS,
                first_block: j0 / BF16A_COLS + c,
                r0: r,
                c0: c,
                width,
            };
            // SAFETY: the tile's rows and blocks are inside `x`, `w` and `out` (checked
            // just above); the caller guarantees the features.
            unsafe {
                match (six, four) {
                    (true, true) => tile_avx512::<TILE_ROWS, TILE_BLOCKS>(at, out),
                    (true, false) => tile_avx512::<TILE_ROWS, 1>(at, out),
                    (false, true) => tile_avx512::<1, TILE_BLOCKS>(at, out),
                    (false, false) => tile_avx512::<1, 1>(at, out),
                }
            }
            r += if six { TILE_ROWS } else { 1 };
        }
        c += if four { TILE_BLOCKS } else { 1 };
    }
}

/// Where one tile sits: rows `r0..` of `x` and `out`, blocks `c0..` of the strip (block
/// column `first_block..` of `w`, `[d_in / 32, blocks_per_row]`).
#[derive(Clone, Copy)]
struct Tile<'a> {
    x: &'a Bf16Rows,
    w: &'a [Bf16aBlock],
    blocks_per_row: usize,
    first_block: usize,
    r0: usize,
    c0: usize,
    width: usize,
}

/// `R` rows x `C` blocks of outputs: their chains over every pair of `d_in`, in order.
///
/// # Safety
/// As [`strip_avx512`]; rows `r0..r0 + R` and blocks `c0..c0 + C` exist.
#[target_feature(enable = "avx512f,avx512bf16")]
#[inline]
unsafe fn tile_avx512<const R: usize, const C: usize>(t: Tile, out: &mut [f32]) {
    let half = t.x.d_in / 2;
    let rows: [&[u32]; R] = std::array::from_fn(|r| &t.x.pairs[(t.r0 + r) * half..][..half]);
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    for kb in 0..t.x.d_in / BF16A_ROWS {
        let blocks = &t.w[kb * t.blocks_per_row + t.first_block..][..C];
        for p in 0..PAIRS {
            // SAFETY: `pairs[p]` is 16 u32, 64 bytes (the block is 64-byte aligned); a
            // 512-bit integer vector and `__m512bh` have the same size and any bits are valid.
            let w_p: [__m512bh; C] = std::array::from_fn(|c| unsafe {
                std::mem::transmute::<__m512i, __m512bh>(_mm512_load_si512(
                    blocks[c].pairs[p].as_ptr().cast(),
                ))
            });
            for r in 0..R {
                let x_pair = rows[r][kb * PAIRS + p];
                // SAFETY: as above, a broadcast pair reinterpreted.
                let x_p = unsafe {
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(x_pair as i32))
                };
                for c in 0..C {
                    acc[r][c] = _mm512_dpbf16_ps(acc[r][c], x_p, w_p[c]);
                }
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        for (c, acc_rc) in acc_r.iter().enumerate() {
            let o = &mut out[(t.r0 + r) * t.width + (t.c0 + c) * BF16A_COLS..][..BF16A_COLS];
            // SAFETY: `o` is 16 f32.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr(), *acc_rc) };
        }
    }
}
// ANCHOR_END: avx512

/// AVX2 (no bf16 instruction): each pair widened to two f32 vectors (the low half
/// shifted up, the high half masked), then [`super::bf16a::step`] as written: a fused
/// multiply-add of the odd products, a flush, the even products, a flush. A block's 16
/// columns are two 256-bit halves, run side by side.
///
/// # Safety
/// The CPU must support `avx2` and `fma`; the shapes must be those `Kernel::strip` checks.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn strip_avx2(x: &Bf16Rows, w: &[Bf16aBlock], d_out: usize, j0: usize, out: &mut [f32]) {
    let width = out.len() / x.n;
    let blocks = width / BF16A_COLS;
    let high = _mm256_set1_epi32(0xffff_0000u32 as i32);
    let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let min_normal = _mm256_set1_ps(f32::MIN_POSITIVE);
    // A denormal (or zero) lane keeps only its sign: NaN compares false and stays.
    let flush = |v: __m256| {
        let tiny = _mm256_cmp_ps::<_CMP_LT_OQ>(_mm256_and_ps(v, magnitude), min_normal);
        _mm256_andnot_ps(_mm256_and_ps(tiny, magnitude), v)
    };
    out.fill(0.0);
    for kb in 0..x.d_in / BF16A_ROWS {
        let row = &w[kb * (d_out / BF16A_COLS) + j0 / BF16A_COLS..][..blocks];
        for (r, out_r) in out.chunks_exact_mut(width).enumerate() {
            let x_pairs = x.block(r, kb);
            for (block, out_b) in row.iter().zip(out_r.chunks_exact_mut(BF16A_COLS)) {
                let (lo, hi) = out_b.split_at_mut(8);
                // SAFETY: `lo` and `hi` are 8 f32 each.
                let mut acc =
                    unsafe { [_mm256_loadu_ps(lo.as_ptr()), _mm256_loadu_ps(hi.as_ptr())] };
                for (p, &x_pair) in x_pairs.iter().enumerate() {
                    let x_odd = _mm256_set1_ps(f32::from_bits(x_pair & 0xffff_0000));
                    let x_even = _mm256_set1_ps(f32::from_bits(x_pair << 16));
                    for (h, acc_h) in acc.iter_mut().enumerate() {
                        // SAFETY: `pairs[p][8h..8h + 8]` is 8 u32.
                        let w_p =
                            unsafe { _mm256_loadu_si256(block.pairs[p][h * 8..].as_ptr().cast()) };
                        let w_odd = _mm256_castsi256_ps(_mm256_and_si256(w_p, high));
                        let w_even = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(w_p));
                        *acc_h = flush(_mm256_fmadd_ps(x_odd, w_odd, *acc_h));
                        *acc_h = flush(_mm256_fmadd_ps(x_even, w_even, *acc_h));
                    }
                }
                // SAFETY: as the loads.
                unsafe {
                    _mm256_storeu_ps(lo.as_mut_ptr(), acc[0]);
                    _mm256_storeu_ps(hi.as_mut_ptr(), acc[1]);
                }
            }
        }
    }
}
