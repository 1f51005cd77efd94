//! Weight storage in bf16 or int8: half, or 1.125 / 4, of the bytes of f32 for every
//! matrix, so that memory-bound decode streams that much less (chapter "Performance to
//! the roof").
//!
//! Rounding f32 → bf16 keeps the sign and the 8-bit exponent and rounds the
//! mantissa from 23 bits to 7, to nearest, ties to even (what PyTorch's
//! `.to(torch.bfloat16)` does): a relative error of at most 2⁻⁸ ≈ 0.4 % per weight.
//! The kernels widen each weight back to f32 exactly (`bits << 16`, see
//! `simd::WeightElem`) and run the same f32 fused-multiply-add chains as the f32
//! model, so within a bf16 model the naive and cached paths still agree bit for
//! bit; against the f32 model the logits move by the rounding of the weights.

use crate::config::Config;
use crate::device::{WeightDtype, WeightLayout};
use crate::error::{Error, Result};
use crate::model::{Layer, Model};
use crate::simd::bf16a::{round_to_bf16a, BF16A_COLS, BF16A_ROWS};
use crate::simd::q8::{self, Q8Block};
use crate::simd::{Bf16aBlock, W8a8Block};
use crate::simd::{Scalar, WeightElem, PANEL};
use half::bf16;
use ndarray::{Array1, Array2};

/// `w` rounded to bf16, element by element (round to nearest, ties to even).
pub fn round_to_bf16(w: &Array2<f32>) -> Array2<bf16> {
    w.mapv(bf16::from_f32)
}

impl Model {
    /// The same model with every weight matrix stored in bf16. The embedding
    /// table stays an f32 array (decode reads one row of it per token) but holds
    /// the bf16-rounded values, so a tied LM head and its embedding still agree;
    /// norms and biases stay f32 (a few thousand numbers, no bandwidth to save).
    pub fn to_bf16(&self) -> Model<bf16> {
        let mut half = self
            .map_matrices(|w, _| Ok(round_to_bf16(w)))
            .expect("rounding to bf16 cannot fail");
        half.embed = self.embed.mapv(|v| bf16::from_f32(v).to_f32());
        half
    }
}

// ANCHOR: to_int8
impl Model {
    /// The same model with every weight matrix stored as int8 blocks (Q8_0: 32 inputs
    /// share a scale, `simd::q8`), 1.125 bytes a weight. As in [`Model::to_bf16`], the
    /// embedding stays an f32 array but holds its rows' Q8_0 values (blocks of 32 along
    /// the row: the very blocks of a tied LM head's columns), and norms and biases stay
    /// f32. Fails, naming the matrix, when a dimension is not a whole number of blocks
    /// (inputs a multiple of 32, outputs of 16) or a weight has no Q8_0 form.
    pub fn to_int8(&self) -> Result<Model<Q8Block>> {
        let quantize =
            |w: &Array2<f32>, name: &str| q8::quantize(w).map_err(|e| int8_error(name, &e));
        let mut embed = self.embed.clone();
        for mut row in embed.rows_mut() {
            let values = q8::round_trip_q8_0(row.as_slice().expect("contiguous rows"))
                .map_err(|e| int8_error("the embedding", &e))?;
            row.assign(&Array1::from(values));
        }
        let mut int8 = self.map_matrices(quantize)?;
        int8.embed = embed;
        Ok(int8)
    }
}

// ANCHOR: to_w8a8
impl Model {
    /// The int8 model ([`Model::to_int8`], the same codes and scales) with each block's
    /// codes reordered for integer dot products: its matmuls quantize their activations
    /// and multiply codes by codes (`simd::w8a8`). Not the int8 model's bits: its
    /// activations are rounded to 8 bits (`kvlab eval --dtype w8a8` says by how much).
    pub fn to_w8a8(&self) -> Result<Model<W8a8Block>> {
        let int8 = self.to_int8().map_err(|e| match e {
            Error::InvalidArgument(m) => {
                Error::InvalidArgument(m.replacen("--dtype int8", "--dtype w8a8", 1))
            }
            e => e,
        })?;
        int8.map_matrices(|w, _| Ok(w.mapv(|block| W8a8Block::from_q8(&block))))
    }
}
// ANCHOR_END: to_w8a8

// ANCHOR: to_bf16a
impl Model {
    /// The same model with every weight matrix in bf16 pairs for `vdpbf16ps`
    /// (`simd::bf16a`): the bf16 model's weights ([`Model::to_bf16`]'s rounding, with
    /// denormals flushed to zero), whose matmuls round their activations to bf16 too. As
    /// there, the embedding stays f32 holding the rounded values. Fails, naming the
    /// matrix, when a dimension is not a whole number of blocks (inputs a multiple of 32,
    /// outputs of 16).
    pub fn to_bf16a(&self) -> Result<Model<Bf16aBlock>> {
        let mut paired = self.map_matrices(|w, name| {
            let (d_in, d_out) = w.dim();
            if d_in == 0 || !d_in.is_multiple_of(BF16A_ROWS) || !d_out.is_multiple_of(BF16A_COLS) {
                return Err(Error::InvalidArgument(format!(
                    "--dtype bf16a: {name}: a {d_in} x {d_out} matrix does not split into blocks of \
                     {BF16A_ROWS} inputs x {BF16A_COLS} outputs: use --dtype bf16 for this model"
                )));
            }
            Ok(Array2::from_shape_fn((d_in / BF16A_ROWS, d_out / BF16A_COLS), |(kb, jb)| {
                Bf16aBlock::from_fn(|k, j| w[[kb * BF16A_ROWS + k, jb * BF16A_COLS + j]])
            }))
        })?;
        paired.embed = self.embed.mapv(|v| round_to_bf16a(v).to_f32());
        Ok(paired)
    }
}
// ANCHOR_END: to_bf16a

impl Model<Q8Block> {
    /// The plain twin: the f32 model whose weights are this model's exact int8 values.
    /// Its logits are bit for bit this model's (`tests/paths_int8.rs`).
    pub fn dequantize(&self) -> Model {
        self.map_matrices(|w, _| Ok(q8::dequantize(w)))
            .expect("dequantizing cannot fail")
    }
}
// ANCHOR_END: to_int8

impl<E: WeightElem> Model<E> {
    /// The same model with every weight matrix (the seven of each layer and the LM head)
    /// converted by `convert(matrix, name)`; the embedding, norms and biases are kept.
    /// The one place the conversions above (bf16, int8, panels, back to f32) walk the model.
    pub fn map_matrices<F: WeightElem>(
        &self,
        convert: impl Fn(&Array2<E>, &str) -> Result<Array2<F>>,
    ) -> Result<Model<F>> {
        let layers = self
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let c = |w, name: &str| convert(w, &format!("layer {i} {name}"));
                Ok(Layer {
                    attn_norm: l.attn_norm.clone(),
                    wq: c(&l.wq, "wq")?,
                    wk: c(&l.wk, "wk")?,
                    wv: c(&l.wv, "wv")?,
                    wo: c(&l.wo, "wo")?,
                    bq: l.bq.clone(),
                    bk: l.bk.clone(),
                    bv: l.bv.clone(),
                    mlp_norm: l.mlp_norm.clone(),
                    w_gate: c(&l.w_gate, "w_gate")?,
                    w_up: c(&l.w_up, "w_up")?,
                    w_down: c(&l.w_down, "w_down")?,
                    q_norm: l.q_norm.clone(),
                    k_norm: l.k_norm.clone(),
                    post_attn_norm: l.post_attn_norm.clone(),
                    post_mlp_norm: l.post_mlp_norm.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Model {
            config: self.config.clone(),
            embed: self.embed.clone(),
            layers,
            final_norm: self.final_norm.clone(),
            lm_head: convert(&self.lm_head, "the LM head")?,
            tied_embeddings: self.tied_embeddings,
        })
    }
}

impl<E: WeightElem + Clone> Model<E> {
    /// A copy of the weights under `config`, which must describe the same shapes: how a
    /// setting changes the outputs, all else equal (the Gemma 3 reference test runs the
    /// real weights with every layer global, to show that the window matters).
    pub fn with_config(&self, config: Config) -> Result<Model<E>> {
        config.validate()?;
        let shape = |c: &Config| {
            (
                c.hidden_size,
                c.intermediate_size,
                c.num_hidden_layers,
                c.num_attention_heads,
                c.n_kv_heads(),
                c.head_dim(),
                c.vocab_size,
                c.model_type.clone(),
            )
        };
        if shape(&config) != shape(&self.config) {
            return Err(Error::InvalidArgument(
                "with_config: the new config describes other shapes than the weights".into(),
            ));
        }
        let mut model = self.map_matrices(|w, _| Ok(w.clone()))?;
        model.config = config;
        Ok(model)
    }
}

// ANCHOR: to_panels
impl<S: Scalar> Model<S> {
    /// The same model with every weight matrix stored panel by panel (`[d_out / 32, d_in]`
    /// of 32 columns: see `simd::WeightElem for [S; PANEL]`), the layout decode streams
    /// in one sequential run. Fails, naming the matrix, when an output dimension is not a
    /// multiple of 32 (small test models): such a model keeps the row layout.
    pub fn to_panels(&self) -> Result<Model<[S; PANEL]>> {
        self.map_matrices(|w, name| {
            to_panels(w).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "--layout panels: {name} has {} output columns, not a multiple of {PANEL}: use --layout rows for this model",
                    w.ncols()
                ))
            })
        })
    }
}

// ANCHOR: cpu_weights
/// A model's weights in the format one CPU run asked for (`--dtype`, `--layout`),
/// converted once. Every CPU path takes its weights from here (`Backend::cpu` for
/// `generate`, `batch_model` for the engine, `kvlab chat`, `kvlab bench`), so a request
/// served, chatted, generated or timed runs on the same bits.
pub enum CpuWeights<'a> {
    /// f32 rows: the loaded model itself, no copy.
    F32Rows(&'a Model),
    F32Panels(Model<[f32; PANEL]>),
    Bf16Rows(Model<bf16>),
    Bf16Panels(Model<[bf16; PANEL]>),
    /// Q8_0 blocks, their own layout whatever `--layout` says.
    Int8(Model<Q8Block>),
    /// Q8_0 blocks for integer dot products, activations quantized too.
    W8a8(Model<W8a8Block>),
    /// bf16 pairs for `vdpbf16ps`, activations rounded to bf16 too.
    Bf16a(Model<Bf16aBlock>),
}

impl<'a> CpuWeights<'a> {
    /// `model` in `dtype` and (f32, bf16) `layout`. int8 fails on a model whose
    /// matrices do not split into whole blocks; panels fall back to rows for a model whose
    /// output dimensions are not multiples of 32, unless `strict` (see [`panels_if`]).
    pub fn convert(
        model: &'a Model,
        dtype: WeightDtype,
        layout: WeightLayout,
        strict: bool,
    ) -> Result<CpuWeights<'a>> {
        Ok(match dtype {
            WeightDtype::F32 => match panels_if(model, layout, strict)? {
                Some(panels) => CpuWeights::F32Panels(panels),
                None => CpuWeights::F32Rows(model),
            },
            WeightDtype::Bf16 => {
                let half = model.to_bf16();
                match panels_if(&half, layout, strict)? {
                    Some(panels) => CpuWeights::Bf16Panels(panels),
                    None => CpuWeights::Bf16Rows(half),
                }
            }
            WeightDtype::Int8 => CpuWeights::Int8(model.to_int8()?),
            WeightDtype::W8a8 => CpuWeights::W8a8(model.to_w8a8()?),
            WeightDtype::Bf16a => CpuWeights::Bf16a(model.to_bf16a()?),
        })
    }

    /// `job` run on these weights, whatever their element type: Rust has no generic
    /// closures, so a job generic over the element is a type implementing [`OnWeights`].
    pub fn run<J: OnWeights>(&self, job: J) -> J::Out {
        match self {
            CpuWeights::F32Rows(model) => job.run(*model),
            CpuWeights::F32Panels(model) => job.run(model),
            CpuWeights::Bf16Rows(model) => job.run(model),
            CpuWeights::Bf16Panels(model) => job.run(model),
            CpuWeights::Int8(model) => job.run(model),
            CpuWeights::W8a8(model) => job.run(model),
            CpuWeights::Bf16a(model) => job.run(model),
        }
    }
}

/// Work on a model of any weight element (see [`CpuWeights::run`]).
pub trait OnWeights {
    type Out;
    fn run<E: WeightElem>(self, model: &Model<E>) -> Self::Out;
}
// ANCHOR_END: cpu_weights

/// The panel form of `model` when `layout` asks for panels, `None` for rows: where every
/// CPU run picks its layout ([`CpuWeights::convert`]). A model without a panel form keeps
/// its rows, unless `strict` (the user named `--layout panels`), which refuses it with
/// [`Model::to_panels`]'s one-line error.
pub fn panels_if<S: Scalar>(
    model: &Model<S>,
    layout: WeightLayout,
    strict: bool,
) -> Result<Option<Model<[S; PANEL]>>> {
    if layout == WeightLayout::Rows {
        return Ok(None);
    }
    match model.to_panels() {
        Ok(panels) => Ok(Some(panels)),
        Err(e) if strict => Err(e),
        Err(_) => Ok(None),
    }
}

/// `w` (`[d_in, d_out]`, row layout) as `[d_out / PANEL, d_in]` panels: the same numbers,
/// each panel's 32 columns of every row side by side. `None` unless `d_out` is a
/// (non-zero) multiple of [`PANEL`].
pub fn to_panels<S: Scalar>(w: &Array2<S>) -> Option<Array2<[S; PANEL]>> {
    let (d_in, d_out) = w.dim();
    if d_out == 0 || !d_out.is_multiple_of(PANEL) {
        return None;
    }
    let rows = w.as_standard_layout();
    let rows = rows.as_slice().expect("standard layout");
    Some(Array2::from_shape_fn((d_out / PANEL, d_in), |(p, k)| {
        std::array::from_fn(|c| rows[k * d_out + p * PANEL + c])
    }))
}
// ANCHOR_END: to_panels

fn int8_error(what: &str, problem: &str) -> Error {
    Error::InvalidArgument(format!(
        "--dtype int8: {what}: {problem}: use --dtype f32 or bf16 for this model"
    ))
}

/// Bytes one weight takes in format `E` (int8 blocks: 576 bytes for 512 weights).
pub fn bytes_per_weight<E: WeightElem>() -> f64 {
    std::mem::size_of::<E>() as f64 / (E::BLOCK_ROWS * E::BLOCK_COLS) as f64
}
