//! Attention v3, split-K (Flash-Decoding; kernels/attention_splitk.cu): the keys cut into
//! chunks of [`CHUNK_KEYS`], one block per (head, chunk), partial softmaxes merged by a second
//! kernel. One safe function and the scratch it needs. Chapter "The CUDA backend".
//! CPU twin: `attention::causal_attention`.

use super::gpu::Gpu;
use super::ops::{check, check_heads, check_nonzero, int, window_arg};
use crate::attention::Heads;
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, LaunchConfig, PushKernelArg};

/// Keys per split (`CHUNK` in attention_splitk.cu).
pub const CHUNK_KEYS: usize = 256;

/// The partial softmaxes of v3, for passes of up to `rows` queries over up to `key_rows` keys.
pub struct SplitKScratch {
    /// `[rows, n_heads, splits, head_dim]` each chunk's unnormalised weighted sum of values
    pub acc: CudaSlice<f32>,
    /// `[rows, n_heads, splits, 2]` each chunk's (max score, sum of exponentials)
    pub ml: CudaSlice<f32>,
    pub rows: usize,
    pub key_rows: usize,
    pub heads: Heads,
}

impl SplitKScratch {
    pub fn new(gpu: &Gpu, rows: usize, key_rows: usize, heads: Heads) -> Result<SplitKScratch> {
        check_heads("split-K scratch", heads)?;
        check_nonzero("split-K scratch", &[("rows", rows), ("key rows", key_rows)])?;
        let splits = key_rows.div_ceil(CHUNK_KEYS);
        let parts = rows
            .checked_mul(heads.n_heads)
            .and_then(|p| p.checked_mul(splits))
            .ok_or_else(|| Error::Cuda("split-K scratch size overflows".into()))?;
        let acc_len = parts
            .checked_mul(heads.head_dim)
            .ok_or_else(|| Error::Cuda("split-K scratch size overflows".into()))?;
        int("split-K scratch size", acc_len)?;
        Ok(SplitKScratch {
            acc: gpu.zeros(acc_len)?,
            ml: gpu.zeros(parts * 2)?,
            rows,
            key_rows,
            heads,
        })
    }

    /// Whether this scratch serves a pass of `rows` queries over `key_rows` keys.
    pub fn fits(&self, rows: usize, key_rows: usize, heads: Heads) -> bool {
        rows <= self.rows
            && key_rows <= self.key_rows
            && (heads.n_heads, heads.n_kv_heads, heads.head_dim)
                == (
                    self.heads.n_heads,
                    self.heads.n_kv_heads,
                    self.heads.head_dim,
                )
    }
}

impl Gpu {
    // ANCHOR: attention_v3
    /// Causal attention of `n` queries at positions `start_pos..start_pos + n` over `keys`
    /// and `values` (`[key_rows, n_kv_heads, head_dim]`, `key_rows >= start_pos + n`), split
    /// into chunks of [`CHUNK_KEYS`] keys. `pos` is the device copy of `start_pos` the
    /// kernels read (see [`Gpu::rope_kv_append`]). The grid has `ceil(key_rows / CHUNK_KEYS)`
    /// chunks whatever the position, so a graph captured once serves every step; chunks past
    /// a row's position return at once, and so do chunks wholly below a local layer's
    /// `window`. CPU twin: `attention::causal_attention`.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_v3(
        &self,
        out: &mut CudaViewMut<f32>,
        q: &CudaView<f32>,
        keys: &CudaView<f32>,
        values: &CudaView<f32>,
        pos: &CudaView<i32>,
        start_pos: usize,
        n: usize,
        heads: Heads,
        scratch: &mut SplitKScratch,
        window: Option<usize>,
    ) -> Result<()> {
        let Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        } = heads;
        check_heads("attention v3", heads)?;
        check_nonzero("attention v3", &[("n", n)])?;
        let kv_dim = n_kv_heads * head_dim;
        let key_rows = keys.len() / kv_dim;
        if values.len() < key_rows * kv_dim || start_pos + n > key_rows {
            return Err(Error::Cuda(format!(
                "internal: attention v3 over positions 0..{} needs that many rows of keys and \
                 values; got {} and {} values of rows of {kv_dim}",
                start_pos + n,
                keys.len(),
                values.len()
            )));
        }
        if !scratch.fits(n, key_rows, heads) {
            return Err(Error::Cuda(format!(
                "internal: split-K scratch for {} rows over {} keys, asked for {n} over {key_rows}",
                scratch.rows, scratch.key_rows
            )));
        }
        let q_len = n * n_heads * head_dim;
        check("attention v3 q", q.len(), q_len)?;
        check("attention v3 out", out.len(), q_len)?;
        check("attention v3 pos", pos.len(), 1)?;
        int("attention v3 kv size", key_rows * kv_dim)?;
        let splits = key_rows.div_ceil(CHUNK_KEYS);
        if n > 65535 || splits > 65535 {
            return Err(Error::Cuda(format!(
                "attention v3 takes at most 65535 queries and 65535 chunks per launch, got {n} and {splits}"
            )));
        }
        let (n_i, nh_i, nkv_i, hd_i, kr_i, sp_i) = (
            int("n", n)?,
            int("n_heads", n_heads)?,
            int("n_kv_heads", n_kv_heads)?,
            int("head_dim", head_dim)?,
            int("key rows", key_rows)?,
            int("splits", splits)?,
        );
        let w_i = window_arg(window)?;
        let split_cfg = LaunchConfig {
            grid_dim: (n_heads as u32, n as u32, splits as u32),
            block_dim: (128, 1, 1), // WARPS * 32 in attention_splitk.cu
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.f.attention_v3_split);
        b.arg(&mut scratch.acc).arg(&mut scratch.ml);
        b.arg(q).arg(keys).arg(values).arg(pos);
        b.arg(&n_i)
            .arg(&nh_i)
            .arg(&nkv_i)
            .arg(&hd_i)
            .arg(&kr_i)
            .arg(&sp_i)
            .arg(&w_i);
        // SAFETY: attention_v3_split(part_acc, part_ml, q, keys, values, pos, n, n_heads,
        // n_kv_heads, head_dim, key_rows, n_splits, window) matches the kernel. Block (h, i, s) reads
        // q below n*n_heads*head_dim (checked), keys and values of rows below pos[0]+i+1, which
        // the kernel keeps <= key_rows = the rows the buffers hold (checked), KV head
        // h / kv_mul < n_kv_heads (divisibility checked), and writes part (i*n_heads+h)*splits+s
        // < rows*n_heads*splits of the scratch (fits: checked), head_dim <= 256 (checked).
        unsafe { self.launch(&mut b, split_cfg, "attention_v3_split") }?;

        let combine_cfg = LaunchConfig {
            grid_dim: (n_heads as u32, n as u32, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.f.attention_v3_combine);
        b.arg(out).arg(&scratch.acc).arg(&scratch.ml).arg(pos);
        b.arg(&n_i)
            .arg(&nh_i)
            .arg(&hd_i)
            .arg(&kr_i)
            .arg(&sp_i)
            .arg(&w_i);
        // SAFETY: attention_v3_combine(out, part_acc, part_ml, pos, n, n_heads, head_dim,
        // key_rows, n_splits, window) matches the kernel; it reads the parts the split kernel
        // wrote (chunks first_key/CHUNK ..= pos/CHUNK < n_splits, of rows < n) and writes out below n*n_heads*head_dim
        // (checked).
        unsafe { self.launch(&mut b, combine_cfg, "attention_v3_combine") }
    }
    // ANCHOR_END: attention_v3
}
