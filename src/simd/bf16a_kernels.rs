//! Which bf16a strip runs: the portable one ([`super::bf16a::strip`], the definition) or
//! an x86 version (`bf16a_x86.rs`), picked from the CPU's features at run time.

use super::bf16a::{strip, Bf16Rows, Bf16aBlock, BF16A_COLS, BF16A_ROWS};
use super::isa::Isa;

/// The bf16a kernel versions, best first: which one `isa` runs on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// `vdpbf16ps` on 512-bit registers (`avx512f`, `avx512bf16`: Zen 4, Sapphire Rapids).
    Avx512Bf16,
    /// Two fused multiply-adds and two flushes per pair on 256-bit registers (`avx2`).
    Avx2,
    /// [`strip`].
    Portable,
}

impl Kernel {
    /// The version `isa` stands for here: AVX-512 without BF16 (Skylake-X, Ice Lake) runs AVX2's.
    pub fn of(isa: Isa) -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            let bf16 = is_x86_feature_detected!("avx512bf16");
            match isa {
                Isa::Avx512 if bf16 => return Kernel::Avx512Bf16,
                Isa::Avx512 | Isa::Avx2
                    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") =>
                {
                    return Kernel::Avx2
                }
                _ => {}
            }
        }
        let _ = isa;
        Kernel::Portable
    }

    /// Every version this CPU can run, best first (the last is always `Portable`).
    pub fn available() -> Vec<Kernel> {
        let mut kernels: Vec<Kernel> = Isa::available().into_iter().map(Kernel::of).collect();
        kernels.dedup();
        kernels
    }

    /// [`strip`] as this version computes it (the same bits).
    pub fn strip(self, x: &Bf16Rows, w: &[Bf16aBlock], d_out: usize, j0: usize, out: &mut [f32]) {
        let width = out.len() / x.n;
        assert!(
            out.len() == x.n * width
                && d_out.is_multiple_of(BF16A_COLS)
                && j0.is_multiple_of(BF16A_COLS)
                && width.is_multiple_of(BF16A_COLS)
                && j0 + width <= d_out
                && w.len() * BF16A_ROWS * BF16A_COLS == x.d_in * d_out,
            "a bf16a strip covers whole blocks of a [d_in, d_out] matrix"
        );
        match self {
            // SAFETY: `Kernel::Avx512Bf16` is only chosen by `Kernel::of` after
            // `is_x86_feature_detected!` said yes to avx512bf16 (and `Isa::Avx512` to
            // avx512f); the shapes are checked above.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Bf16 => unsafe { super::bf16a_x86::strip_avx512(x, w, d_out, j0, out) },
            // SAFETY: as above, for avx2 and fma.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { super::bf16a_x86::strip_avx2(x, w, d_out, j0, out) },
            _ => strip(x, w, d_out, j0, out),
        }
    }
}
