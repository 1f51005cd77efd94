//! The matmul contract every weight format's kernels share, checked one way for all.

use kvlab::ops::matmul_on;
use kvlab::simd::{Isa, WeightElem};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `x` (`[n, d_in]`) times `w` (a `[d_in, d_out]` matrix in format `W`): every version
/// this CPU runs gives the portable version's bits, and each of a few rows computed alone
/// (decode) gives the bits it gets among the others (prefill, a batch).
pub fn every_isa_gives_the_portable_bits_row_by_row<W: WeightElem>(
    x: &[f32],
    w: &[W],
    d_in: usize,
    d_out: usize,
) {
    let n = x.len() / d_in;
    let mut reference = vec![0.0; n * d_out];
    matmul_on(Isa::Portable, x, w, &mut reference, d_in, d_out);
    for isa in Isa::available() {
        let mut out = vec![f32::NAN; n * d_out];
        matmul_on(isa, x, w, &mut out, d_in, d_out);
        assert_eq!(
            bits(&out),
            bits(&reference),
            "{isa:?} at n={n} d_in={d_in} d_out={d_out}"
        );
        for r in [0, n / 2, n - 1] {
            let mut single = vec![0.0; d_out];
            matmul_on(isa, &x[r * d_in..][..d_in], w, &mut single, d_in, d_out);
            assert_eq!(
                bits(&single),
                bits(&out[r * d_out..][..d_out]),
                "{isa:?} row {r} at n={n} d_in={d_in} d_out={d_out}"
            );
        }
    }
}
