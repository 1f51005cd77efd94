//! Where the forward pass runs, and in what number format: the CPU (always), or a CUDA
//! GPU (`--features cuda`); the CPU's weights in f32 or bf16, the GPU's likewise. Only the names live here; `src/backend.rs` turns them into
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
/// loaded, or bf16 from `Model::to_bf16` (half the bytes, book: roofline.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightDtype {
    /// As loaded: the reference numbers.
    #[default]
    F32,
    /// Each weight rounded to bf16: half the bytes for memory-bound decode.
    Bf16,
}

impl WeightDtype {
    pub fn name(self) -> &'static str {
        match self {
            WeightDtype::F32 => "f32",
            WeightDtype::Bf16 => "bf16",
        }
    }
}
