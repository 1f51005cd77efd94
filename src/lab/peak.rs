//! The compute roof: how many f32 FLOP/s this machine can do at best, so that
//! prefill (compute-bound) can be printed as a fraction of it, as decode
//! (memory-bound) is printed as a fraction of the memory bandwidth
//! (`lab::bench::memory_bandwidth`). Roofline model: Williams, Waterman & Patterson 2009.
//!
//! The measurement: every thread runs independent chains of fused multiply-adds
//! on registers only (no memory traffic), as wide as the detected instruction set
//! allows ([`Isa::detected`]). Twelve chains per thread hide the FMA latency
//! (4 cycles on Zen 4 and recent Intel cores, 1-2 issued per cycle). One FMA on
//! a 16-lane register is 32 FLOPs (a multiply and an add per lane).

use crate::simd::Isa;
use serde::Serialize;
use std::time::Instant;

/// The measured f32 FMA peak.
#[derive(Debug, Clone, Serialize)]
pub struct FmaPeak {
    /// Instruction set the loop used.
    pub isa: Isa,
    /// f32 lanes per vector.
    pub lanes: usize,
    pub threads: usize,
    /// All threads together, best of the passes.
    pub gflop_s: f64,
    pub per_thread_gflop_s: f64,
}

/// Independent accumulator chains per thread.
const CHAINS: usize = 12;
/// Iterations per pass (each: `CHAINS` vector FMAs). ~0.1 s per pass on a 3 GHz core.
const ITERATIONS: usize = 20_000_000;

// ANCHOR: fma_peak
/// Measures the f32 FMA peak with the detected instruction set on all rayon threads.
pub fn fma_peak() -> FmaPeak {
    fma_peak_with(Isa::detected(), ITERATIONS)
}

/// [`fma_peak`] with a chosen instruction set and pass length (tests use short ones).
pub fn fma_peak_with(isa: Isa, iterations: usize) -> FmaPeak {
    let threads = rayon::current_num_threads();
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t = Instant::now();
        let flops: f64 = rayon::broadcast(|_| fma_chains(isa, iterations))
            .iter()
            .sum();
        best = best.max(flops / t.elapsed().as_secs_f64());
    }
    FmaPeak {
        isa,
        lanes: isa.lanes(),
        threads,
        gflop_s: best / 1e9,
        per_thread_gflop_s: best / 1e9 / threads as f64,
    }
}

// ANCHOR_END: fma_peak

/// Runs the chains on this thread; returns the FLOPs done.
fn fma_chains(isa: Isa, iterations: usize) -> f64 {
    let sum = match isa {
        // SAFETY: `Isa::Avx512` is only handed out when the CPU has avx512f.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::chains_avx512(iterations) },
        // SAFETY: `Isa::Avx2` is only handed out when the CPU has avx2 and fma.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::chains_avx2(iterations) },
        _ => chains_portable(iterations),
    };
    std::hint::black_box(sum);
    (2 * CHAINS * isa.lanes().max(8) * iterations) as f64
}

/// 8 lanes of scalar `mul_add` per chain (the compiler may vectorise them).
fn chains_portable(iterations: usize) -> f32 {
    let mut acc = [[1.0f32; 8]; CHAINS];
    let (mul, add) = std::hint::black_box((0.9999f32, 1e-4f32));
    for _ in 0..iterations {
        for chain in acc.iter_mut() {
            for a in chain.iter_mut() {
                *a = a.mul_add(mul, add);
            }
        }
    }
    acc.iter().flatten().sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::CHAINS;
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must support `avx512f`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn chains_avx512(iterations: usize) -> f32 {
        let (mul, add) = std::hint::black_box((0.9999f32, 1e-4f32));
        let (mul, add) = (_mm512_set1_ps(mul), _mm512_set1_ps(add));
        let mut acc = [_mm512_set1_ps(1.0); CHAINS];
        for _ in 0..iterations {
            for a in acc.iter_mut() {
                *a = _mm512_fmadd_ps(*a, mul, add);
            }
        }
        acc.iter().map(|&a| _mm512_reduce_add_ps(a)).sum()
    }

    /// # Safety
    /// The CPU must support `avx2` and `fma`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn chains_avx2(iterations: usize) -> f32 {
        let (mul, add) = std::hint::black_box((0.9999f32, 1e-4f32));
        let (mul, add) = (_mm256_set1_ps(mul), _mm256_set1_ps(add));
        let mut acc = [_mm256_set1_ps(1.0); CHAINS];
        for _ in 0..iterations {
            for a in acc.iter_mut() {
                *a = _mm256_fmadd_ps(*a, mul, add);
            }
        }
        let mut lanes = [0.0f32; 8];
        let mut sum = 0.0;
        for a in acc {
            // SAFETY: `lanes` holds 8 f32.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), a) };
            sum += lanes.iter().sum::<f32>();
        }
        sum
    }
}
