//! Which W8A8 strip runs: the portable one ([`super::w8a8::strip`], the definition) or
//! an x86 version (`w8a8_x86.rs`), picked from the CPU's features at run time.

use super::isa::Isa;
use super::q8::{Q8_COLS, Q8_ROWS};
use super::w8a8::{strip, Q8Rows, W8a8Block};

/// The W8A8 kernel versions, best first: which one `isa` runs on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// `vpdpbusd` on 512-bit registers (`avx512f`, `avx512bw`, `avx512vnni`).
    Avx512Vnni,
    /// `vpmaddubsw` + `vpmaddwd` on 256-bit registers (`avx2`).
    Avx2,
    /// [`strip`].
    Portable,
}

impl Kernel {
    /// The version `isa` stands for here: AVX-512 without VNNI (Skylake-X) runs AVX2's.
    pub fn of(isa: Isa) -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            let vnni =
                is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vnni");
            match isa {
                Isa::Avx512 if vnni => return Kernel::Avx512Vnni,
                Isa::Avx512 | Isa::Avx2 if is_x86_feature_detected!("avx2") => return Kernel::Avx2,
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
    pub fn strip(self, x: &Q8Rows, w: &[W8a8Block], d_out: usize, j0: usize, out: &mut [f32]) {
        let width = out.len() / x.n;
        assert!(
            out.len() == x.n * width
                && d_out.is_multiple_of(Q8_COLS)
                && j0.is_multiple_of(Q8_COLS)
                && width.is_multiple_of(Q8_COLS)
                && j0 + width <= d_out
                && w.len() * Q8_ROWS * Q8_COLS == x.d_in * d_out,
            "a W8A8 strip covers whole blocks of a [d_in, d_out] matrix"
        );
        match self {
            // SAFETY: `Kernel::Avx512Vnni` is only chosen by `Kernel::of` after
            // `is_x86_feature_detected!` said yes to avx512bw and avx512vnni (and `Isa::Avx512`
            // to avx512f); the shapes are checked above.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Vnni => unsafe { super::w8a8_x86::strip_avx512(x, w, d_out, j0, out) },
            // SAFETY: as above, for avx2.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { super::w8a8_x86::strip_avx2(x, w, d_out, j0, out) },
            _ => strip(x, w, d_out, j0, out),
        }
    }
}
