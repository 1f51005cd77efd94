//! The number formats a weight matrix may be stored in, and how each becomes f32.
//!
//! bf16 ("brain float", Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep Learning Training") is the top half of an f32: same sign
//! and 8-bit exponent, 7 mantissa bits instead of 23. Widening is therefore exact —
//! put the 16 bits back on top, zeros below (`bits << 16`) — and the kernels can run
//! the very same f32 chain of fused multiply-adds on the widened value. Halving the
//! bytes per weight halves what memory-bound decode must stream.

use half::bf16;

/// A weight element: f32 as loaded, or bf16 (half the bytes).
pub trait WeightElem: Copy + Send + Sync + 'static {
    /// The format's name in reports ("f32", "bf16").
    const NAME: &'static str;

    /// The exact f32 value of this weight.
    fn to_f32(self) -> f32;

    /// 16 consecutive weights from `p`, widened to f32.
    ///
    /// # Safety
    /// `p` must point to 16 readable elements, and the CPU must support `avx512f`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512;

    /// 8 consecutive weights from `p`, widened to f32.
    ///
    /// # Safety
    /// `p` must point to 8 readable elements, and the CPU must support `avx2`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

impl WeightElem for f32 {
    const NAME: &'static str = "f32";

    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> std::arch::x86_64::__m512 {
        // SAFETY: the caller guarantees 16 readable f32 at `p` and avx512f.
        unsafe { std::arch::x86_64::_mm512_loadu_ps(p) }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: the caller guarantees 8 readable f32 at `p` and avx2.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
}

impl WeightElem for bf16 {
    const NAME: &'static str = "bf16";

    /// `bits << 16`: exact (what `half::bf16::to_f32` does too, spelled out).
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits((self.to_bits() as u32) << 16)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const bf16) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees 16 readable bf16 (32 bytes) at `p` and avx512f;
        // zero-extend each u16 to u32, shift it to the top half: the exact f32.
        unsafe {
            let halves = _mm256_loadu_si256(p as *const __m256i);
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(halves)))
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const bf16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees 8 readable bf16 (16 bytes) at `p` and avx2.
        unsafe {
            let halves = _mm_loadu_si128(p as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(halves)))
        }
    }
}
