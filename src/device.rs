//! Where the forward pass runs, and in what number format: the CPU (always), or a CUDA
//! GPU (`--features cuda`). Only the names live here; `src/backend.rs` turns them into
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
