//! The GPU's own roofs, measured (kernels/roof.cu): the read bandwidth a decode step is
//! bound by, and the f32 FMA rate a prefill is bound by. The data sheet's figures (an H200:
//! 4.8 TB/s, 67 TFLOP/s f32) are what the vendor promises; these are what this GPU, this
//! driver and kernels written like kvlab's reach, measured the same way as the model's own
//! figures (wall time around synchronized launches). `kvlab bench --device cuda` reports
//! the model's speed as fractions of both (src/lab/gpu_bench.rs).

use super::gpu::Gpu;
use super::ops::{check, check_nonzero, int, one_thread_each};
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use serde::Serialize;
use std::time::Instant;

/// Threads per block of both roof kernels (`__launch_bounds__(256)` in roof.cu).
const THREADS: u32 = 256;

/// Independent FMA chains per thread in `roof_fma`.
pub const FMA_CHAINS: usize = 8;

/// The sizes a measurement runs at: large on a real GPU (data many times the L2 cache, work
/// far longer than a launch), small on the CPU emulator or in a test.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RoofSizes {
    /// Bytes `roof_read` reads per launch.
    pub read_bytes: usize,
    /// Blocks of `roof_read`'s grid-stride loop.
    pub read_blocks: usize,
    /// Blocks of 256 threads `roof_fma` runs.
    pub fma_blocks: usize,
    /// FMAs per chain.
    pub fma_iters: usize,
    /// Timed launches; the fastest counts (a roof is the best the machine does).
    pub reps: usize,
}

impl RoofSizes {
    /// For a real GPU: 2 GiB read (an H200's L2 holds 60 MB), and 2^31 FMAs per launch
    /// (about 4 ms at the H200's 67 TFLOP/s).
    pub const GPU: RoofSizes = RoofSizes {
        read_bytes: 2 << 30,
        read_blocks: 8192,
        fma_blocks: 8192,
        fma_iters: 4096,
        reps: 10,
    };

    /// For tests and the CPU emulator, which runs one CUDA thread at a time.
    pub const SMALL: RoofSizes = RoofSizes {
        read_bytes: 1 << 20,
        read_blocks: 16,
        fma_blocks: 4,
        fma_iters: 64,
        reps: 2,
    };
}

/// The two roofs, as measured.
#[derive(Debug, Clone, Serialize)]
pub struct GpuRoof {
    /// Bytes per second `roof_read` read, the best of `sizes.reps` launches.
    pub read_bytes_per_s: f64,
    /// f32 FLOPs per second `roof_fma` did (an FMA is 2), the best of `sizes.reps` launches.
    pub fma_flop_per_s: f64,
    pub sizes: RoofSizes,
}

impl Gpu {
    /// One launch of `roof_read` over `x` (`[n4]` float4, as `4 * n4` f32), one partial sum
    /// per thread into `partial` (`[blocks * 256]`).
    pub fn roof_read(
        &self,
        x: &CudaSlice<f32>,
        partial: &mut CudaSlice<f32>,
        blocks: usize,
    ) -> Result<()> {
        check_nonzero("roof_read", &[("blocks", blocks)])?;
        let n4 = x.len() / 4;
        let threads = blocks
            .checked_mul(THREADS as usize)
            .ok_or_else(|| Error::Cuda(format!("roof_read: {blocks} blocks is too many")))?;
        check("roof_read partial", partial.len(), threads)?;
        int("roof_read blocks", blocks)?;
        let n4_i = n4 as i64;
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.f.roof_read);
        b.arg(x).arg(&n4_i).arg(partial);
        // SAFETY: roof_read(x, n4, partial) matches the kernel; it reads x[..4 * n4] (n4 is
        // x.len() / 4) and writes partial[..blocks * 256] (checked above); `blocks` is at
        // least 1 and fits the grid (checked as an i32).
        unsafe { self.launch(&mut b, cfg, "roof_read") }
    }

    /// One launch of `roof_fma`: `out` (`[blocks * 256]`) gets each thread's sum of its
    /// [`FMA_CHAINS`] chains of `iters` FMAs.
    pub fn roof_fma(
        &self,
        out: &mut CudaSlice<f32>,
        iters: usize,
        mul: f32,
        add: f32,
    ) -> Result<()> {
        let iters_i = int("roof_fma iters", iters)?;
        // The kernel has no bounds check: every thread of every block writes its element.
        if out.is_empty() || !out.len().is_multiple_of(THREADS as usize) {
            return Err(Error::Cuda(format!(
                "roof_fma: out holds {} values, not a whole number of blocks of {THREADS}",
                out.len()
            )));
        }
        let cfg = one_thread_each(out.len(), THREADS)?;
        let mut b = self.stream.launch_builder(&self.f.roof_fma);
        b.arg(out).arg(&iters_i).arg(&mul).arg(&add);
        // SAFETY: roof_fma(out, iters, mul, add) matches the kernel; one thread per element
        // of `out` (whole blocks of 256, checked above), each writing its own element only.
        unsafe { self.launch(&mut b, cfg, "roof_fma") }
    }

    /// Measures both roofs at `sizes`.
    pub fn measure_roof(&self, sizes: RoofSizes) -> Result<GpuRoof> {
        let floats = sizes.read_bytes / 16 * 4; // whole float4s
        let read_threads = sizes.read_blocks.max(1) * THREADS as usize;
        let x = self.zeros::<f32>(floats)?;
        let mut partial = self.zeros::<f32>(read_threads)?;
        let read_s = self.best_of(sizes.reps, || {
            self.roof_read(&x, &mut partial, sizes.read_blocks)
        })?;
        drop(x);

        let fma_threads = sizes.fma_blocks.max(1) * THREADS as usize;
        let mut out = self.zeros::<f32>(fma_threads)?;
        // mul < 1 keeps every chain finite however long it runs (it converges to add / (1 - mul)).
        let fma_s = self.best_of(sizes.reps, || {
            self.roof_fma(&mut out, sizes.fma_iters, 0.999, 0.5)
        })?;
        let flops = 2.0 * (fma_threads * FMA_CHAINS * sizes.fma_iters) as f64;
        Ok(GpuRoof {
            read_bytes_per_s: (floats * 4) as f64 / read_s,
            fma_flop_per_s: flops / fma_s,
            sizes,
        })
    }

    /// The fastest of `reps` timed runs of `launch`, in seconds, after one untimed warm-up.
    fn best_of(&self, reps: usize, mut launch: impl FnMut() -> Result<()>) -> Result<f64> {
        launch()?;
        self.synchronize()?;
        let mut best = f64::INFINITY;
        for _ in 0..reps.max(1) {
            let t = Instant::now();
            launch()?;
            self.synchronize()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok(best)
    }
}

/// `roof_read`'s output, on the CPU: thread `t` of `threads` sums float4 number `t`,
/// `t + threads`, ... of `x`, in the kernel's order (four float4s a step while four remain).
pub fn read_partials_cpu(x: &[f32], threads: usize) -> Vec<f32> {
    let n4 = x.len() / 4;
    let sum4 = |i: usize| (x[4 * i] + x[4 * i + 1]) + x[4 * i + 2] + x[4 * i + 3];
    (0..threads)
        .map(|t| {
            let mut s = 0.0f32;
            let mut i = t;
            while i + 3 * threads < n4 {
                s +=
                    ((sum4(i) + sum4(i + threads)) + sum4(i + 2 * threads)) + sum4(i + 3 * threads);
                i += 4 * threads;
            }
            while i < n4 {
                s += sum4(i);
                i += threads;
            }
            s
        })
        .collect()
}

/// `roof_fma`'s output, on the CPU: `f32::mul_add` rounds once, as CUDA's `fmaf` does.
pub fn fma_chains_cpu(threads: usize, iters: usize, mul: f32, add: f32) -> Vec<f32> {
    (0..threads)
        .map(|t| {
            let mut a: [f32; FMA_CHAINS] = std::array::from_fn(|j| ((t + j) % 16) as f32);
            for _ in 0..iters {
                for v in &mut a {
                    *v = v.mul_add(mul, add);
                }
            }
            ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
        })
        .collect()
}
