//! Where the forward pass runs, and in what number format: the CPU (always), or a CUDA
//! GPU (`--features cuda`); the CPU's weights in f32, bf16 or int8, the GPU's in f32 or bf16. Only the names live here; `src/backend.rs` turns them into
//! a running model and its decoders.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    Cpu,
    Cuda,
}

/// Number format of the weights on the GPU (activations and sums stay f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuDtype {
    /// Same numbers as the CPU: for tight GPU-vs-CPU checks.
    F32,
    /// Half the bytes per weight: what decode, being memory-bound, wants.
    Bf16,
}

impl GpuDtype {
    pub fn name(self) -> &'static str {
        match self {
            GpuDtype::F32 => "f32",
            GpuDtype::Bf16 => "bf16",
        }
    }
}

/// Number format of the weights on the CPU (activations and sums stay f32): f32 as
/// loaded, bf16 from `Model::to_bf16` (half the bytes) or int8 from `Model::to_int8`
/// (Q8_0 blocks, 1.125 bytes a weight; book: roofline.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightDtype {
    /// As loaded: the reference numbers.
    #[default]
    F32,
    /// Each weight rounded to bf16: half the bytes for memory-bound decode.
    Bf16,
    /// int8 blocks with a scale per 32 inputs (Q8_0, `Model::to_int8`): 1.125 bytes a weight.
    Int8,
    /// The int8 blocks with the activations quantized to int8 too, per row in blocks of
    /// 32: integer dot products (`Model::to_w8a8`). Not int8's bits: a different model.
    W8a8,
    /// bf16 weights times activations rounded to bf16, in pairs: AVX-512 BF16's
    /// `vdpbf16ps` (`Model::to_bf16a`). Not bf16's bits: a different model.
    Bf16a,
}

/// How f32 and bf16 weight matrices lie in memory on the CPU (int8 blocks have their
/// own): panel by panel, 32 output columns of every row in one contiguous run (what decode
/// streams best), or row after row as loaded (`[d_in, d_out]`: the plain twin). Same
/// numbers, same bits out; only the speed differs (book: roofline.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightLayout {
    /// `[d_out / 32, d_in]` panels of 32 columns (`Model::to_panels`).
    #[default]
    Panels,
    /// `[d_in, d_out]`, as loaded.
    Rows,
}

impl WeightLayout {
    pub fn name(self) -> &'static str {
        match self {
            WeightLayout::Panels => "panels",
            WeightLayout::Rows => "rows",
        }
    }
}

impl WeightDtype {
    pub fn name(self) -> &'static str {
        match self {
            WeightDtype::F32 => "f32",
            WeightDtype::Bf16 => "bf16",
            WeightDtype::Int8 => "int8",
            WeightDtype::W8a8 => "w8a8",
            WeightDtype::Bf16a => "bf16a",
        }
    }
}
