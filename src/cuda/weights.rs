//! The model's weights on the GPU, uploaded once (llama2.c's `memory_map_weights`, on the device).
//!
//! Matrices keep the CPU model's layout — linear weights `[d_in, d_out]`, the embedding
//! `[vocab, dim]`, the LM head `[dim, vocab]` — so every kernel indexes exactly as its CPU
//! twin does. They are stored in f32 (the CPU's numbers, for tight checks) or bf16 (half the
//! bytes: decode streams every weight once per token, so half the bytes is nearly half the
//! time). Norm weights, biases and the RoPE tables stay f32 whatever the choice: they are a
//! few thousand floats, and rounding them would buy nothing.

use super::gpu::Gpu;
use crate::config::Config;
use crate::device::GpuDtype;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::ops;
use cudarc::driver::CudaSlice;
use half::bf16;
use ndarray::{Array1, Array2};

/// A matrix's numbers on the GPU, in one of the two weight formats.
pub enum WeightData {
    F32(CudaSlice<f32>),
    /// Each value rounded to the nearest bf16 (8 bits of mantissa: ~3 significant digits).
    Bf16(CudaSlice<bf16>),
}

/// A row-major `[rows, cols]` matrix on the GPU.
pub struct GpuMatrix {
    pub data: WeightData,
    pub rows: usize,
    pub cols: usize,
}

impl GpuMatrix {
    /// Uploads a row-major `[rows, cols]` matrix, converting to `dtype`.
    pub fn from_host(
        gpu: &Gpu,
        host: &[f32],
        rows: usize,
        cols: usize,
        dtype: GpuDtype,
    ) -> Result<GpuMatrix> {
        if host.len() != rows * cols {
            return Err(Error::Cuda(format!(
                "internal: a [{rows}, {cols}] matrix needs {} values, got {}",
                rows * cols,
                host.len()
            )));
        }
        let data = match dtype {
            GpuDtype::F32 => WeightData::F32(gpu.upload(host)?),
            GpuDtype::Bf16 => {
                // Round to nearest even, as PyTorch's `.to(torch.bfloat16)` does.
                let rounded: Vec<bf16> = host.iter().map(|&v| bf16::from_f32(v)).collect();
                WeightData::Bf16(gpu.upload(&rounded)?)
            }
        };
        Ok(GpuMatrix { data, rows, cols })
    }

    fn upload(gpu: &Gpu, host: &Array2<f32>, dtype: GpuDtype) -> Result<GpuMatrix> {
        let (rows, cols) = host.dim();
        let standard = host.as_standard_layout(); // a no-op for kvlab's arrays
        let values = standard
            .as_slice()
            .ok_or_else(|| Error::Cuda("internal: weight not contiguous".into()))?;
        GpuMatrix::from_host(gpu, values, rows, cols, dtype)
    }

    pub fn dtype(&self) -> GpuDtype {
        match self.data {
            WeightData::F32(_) => GpuDtype::F32,
            WeightData::Bf16(_) => GpuDtype::Bf16,
        }
    }

    /// Bytes on the GPU.
    pub fn bytes(&self) -> usize {
        self.rows * self.cols * bytes_per_value(self.dtype())
    }
}

pub fn bytes_per_value(dtype: GpuDtype) -> usize {
    match dtype {
        GpuDtype::F32 => 4,
        GpuDtype::Bf16 => 2,
    }
}

/// One transformer block's weights on the GPU (the CPU's `model::Layer`).
pub struct GpuLayer {
    /// `[dim]`
    pub attn_norm: CudaSlice<f32>,
    /// `[dim, n_heads * head_dim]`
    pub wq: GpuMatrix,
    /// `[dim, n_kv_heads * head_dim]`
    pub wk: GpuMatrix,
    /// `[dim, n_kv_heads * head_dim]`
    pub wv: GpuMatrix,
    /// `[n_heads * head_dim, dim]`
    pub wo: GpuMatrix,
    /// Optional q/k/v biases (Qwen2): `[n_heads * head_dim]`, `[kv_dim]`, `[kv_dim]`.
    pub bq: Option<CudaSlice<f32>>,
    pub bk: Option<CudaSlice<f32>>,
    pub bv: Option<CudaSlice<f32>>,
    /// `[dim]`
    pub mlp_norm: CudaSlice<f32>,
    /// `[dim, hidden]`
    pub w_gate: GpuMatrix,
    /// `[dim, hidden]`
    pub w_up: GpuMatrix,
    /// `[hidden, dim]`
    pub w_down: GpuMatrix,
    /// Gemma 3's QK-norm weights, `[head_dim]` each (absent for Llama).
    pub q_norm: Option<CudaSlice<f32>>,
    pub k_norm: Option<CudaSlice<f32>>,
    /// Gemma 3's sandwich norms of the attention's and the MLP's outputs, `[dim]` each.
    pub post_attn_norm: Option<CudaSlice<f32>>,
    pub post_mlp_norm: Option<CudaSlice<f32>>,
}

/// RoPE's cos and sin for every position the model can reach, computed once on the host
/// by `ops::rope_cos_sin` (the CPU's own tables), so both devices rotate by the same angles.
pub struct RopeTables {
    /// `[positions, head_dim / 2]`
    pub cos: CudaSlice<f32>,
    /// `[positions, head_dim / 2]`
    pub sin: CudaSlice<f32>,
    pub positions: usize,
    pub half: usize,
}

impl RopeTables {
    pub fn new(gpu: &Gpu, positions: usize, head_dim: usize, theta: f64) -> Result<RopeTables> {
        let half = head_dim / 2;
        let (mut cos, mut sin) = (
            Vec::with_capacity(positions * half),
            Vec::with_capacity(positions * half),
        );
        for pos in 0..positions {
            let (c, s) = ops::rope_cos_sin(pos, head_dim, theta);
            cos.extend(c);
            sin.extend(s);
        }
        Ok(RopeTables {
            cos: gpu.upload(&cos)?,
            sin: gpu.upload(&sin)?,
            positions,
            half,
        })
    }
}

/// The whole model on the GPU (the CPU's `model::Model`).
pub struct GpuWeights {
    /// `[vocab, dim]`
    pub embed: GpuMatrix,
    pub layers: Vec<GpuLayer>,
    /// `[dim]`
    pub final_norm: CudaSlice<f32>,
    /// `[dim, vocab]`: like the CPU model, a transposed copy of `embed` when they are tied.
    pub lm_head: GpuMatrix,
    /// The angles at `rope_theta`: every layer of a Llama, Gemma 3's global layers.
    pub rope: RopeTables,
    /// Gemma 3's local layers turn at their own base (10,000): a second table.
    pub rope_local: Option<RopeTables>,
}

impl GpuWeights {
    pub fn upload(gpu: &Gpu, model: &Model, dtype: GpuDtype) -> Result<GpuWeights> {
        let c: &Config = &model.config;
        let vector = |v: &Array1<f32>| -> Result<CudaSlice<f32>> { gpu.upload(&v.to_vec()) };
        let optional = |v: &Option<Array1<f32>>| v.as_ref().map(vector).transpose();
        let matrix = |m: &Array2<f32>| GpuMatrix::upload(gpu, m, dtype);
        let mut layers = Vec::with_capacity(model.layers.len());
        for layer in &model.layers {
            layers.push(GpuLayer {
                attn_norm: vector(&layer.attn_norm)?,
                wq: matrix(&layer.wq)?,
                wk: matrix(&layer.wk)?,
                wv: matrix(&layer.wv)?,
                wo: matrix(&layer.wo)?,
                bq: optional(&layer.bq)?,
                bk: optional(&layer.bk)?,
                bv: optional(&layer.bv)?,
                mlp_norm: vector(&layer.mlp_norm)?,
                w_gate: matrix(&layer.w_gate)?,
                w_up: matrix(&layer.w_up)?,
                w_down: matrix(&layer.w_down)?,
                q_norm: optional(&layer.q_norm)?,
                k_norm: optional(&layer.k_norm)?,
                post_attn_norm: optional(&layer.post_attn_norm)?,
                post_mlp_norm: optional(&layer.post_mlp_norm)?,
            });
        }
        let (positions, head_dim) = (c.max_position_embeddings, c.head_dim());
        // One table per RoPE base the layers use (Config::layer_rope_theta): a second one
        // only when some layer is local.
        let (full_theta, local_theta) = c.rope_bases();
        let local_theta = c.has_local_layers().then_some(local_theta);
        Ok(GpuWeights {
            embed: matrix(&model.embed)?,
            layers,
            final_norm: vector(&model.final_norm)?,
            lm_head: matrix(&model.lm_head)?,
            rope: RopeTables::new(gpu, positions, head_dim, full_theta)?,
            rope_local: local_theta
                .map(|theta| RopeTables::new(gpu, positions, head_dim, theta))
                .transpose()?,
        })
    }

    /// The RoPE table of layer `layer`: a local layer's base, or the global one.
    pub fn rope_of(&self, config: &Config, layer: usize) -> &RopeTables {
        match &self.rope_local {
            Some(local) if config.layer_window(layer).is_some() => local,
            _ => &self.rope,
        }
    }

    /// Bytes one decode step reads from weights: every layer matrix, norm and bias, the
    /// final norm, the LM head, and one row of the embedding (only the token's row is read).
    pub fn bytes_read_per_token(&self) -> usize {
        let f32s = |v: &CudaSlice<f32>| v.len() * 4;
        let optional = |v: &Option<CudaSlice<f32>>| v.as_ref().map_or(0, f32s);
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                f32s(&l.attn_norm)
                    + l.wq.bytes()
                    + l.wk.bytes()
                    + l.wv.bytes()
                    + l.wo.bytes()
                    + optional(&l.bq)
                    + optional(&l.bk)
                    + optional(&l.bv)
                    + f32s(&l.mlp_norm)
                    + l.w_gate.bytes()
                    + l.w_up.bytes()
                    + l.w_down.bytes()
                    + [&l.q_norm, &l.k_norm, &l.post_attn_norm, &l.post_mlp_norm]
                        .into_iter()
                        .map(optional)
                        .sum::<usize>()
            })
            .sum();
        let embed_row = self.embed.cols * bytes_per_value(self.embed.dtype());
        layers + f32s(&self.final_norm) + self.lm_head.bytes() + embed_row
    }
}
