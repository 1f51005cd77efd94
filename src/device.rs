//! Where the forward pass runs: the CPU (always), or a CUDA GPU (`--features cuda`).
//!
//! Both devices give the generation loop a [`Decoder`]; everything above it —
//! sampling, timing, the naive-vs-cached comparison — is shared.

use crate::error::Result;
use crate::generate::{cpu_decoder, Decoder, PathKind};
use crate::model::Model;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    Cpu,
    Cuda,
}

/// Number format of the weights on the GPU (activations and sums stay f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum GpuDtype {
    /// Same numbers as the CPU: for tight GPU-vs-CPU checks.
    F32,
    /// Half the bytes per weight: what decode, being memory-bound, wants.
    Bf16,
}

/// A model ready to run on one device.
pub enum Backend<'a> {
    Cpu(&'a Model),
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::GpuModel),
}

impl<'a> Backend<'a> {
    /// Prepares `model` for `device` (on CUDA: compiles the kernels and uploads the weights).
    pub fn new(device: Device, model: &'a Model, gpu_dtype: GpuDtype) -> Result<Backend<'a>> {
        match device {
            Device::Cpu => Ok(Backend::Cpu(model)),
            #[cfg(feature = "cuda")]
            Device::Cuda => Ok(Backend::Cuda(crate::cuda::GpuModel::upload(
                model, gpu_dtype,
            )?)),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda => {
                let _ = gpu_dtype;
                Err(crate::error::Error::Cuda(
                    "this kvlab was built without CUDA support: rebuild with `cargo build --release --features cuda`".into(),
                ))
            }
        }
    }

    /// A fresh decoder for one request of `prompt_len + max_new_tokens` positions.
    pub fn decoder(
        &self,
        path: PathKind,
        prompt_len: usize,
        max_new_tokens: usize,
    ) -> Result<Box<dyn Decoder + '_>> {
        match self {
            Backend::Cpu(model) => Ok(cpu_decoder(model, path, prompt_len, max_new_tokens)),
            #[cfg(feature = "cuda")]
            Backend::Cuda(gpu) => gpu.decoder(path, prompt_len + max_new_tokens),
        }
    }

    pub fn device(&self) -> Device {
        match self {
            Backend::Cpu(_) => Device::Cpu,
            #[cfg(feature = "cuda")]
            Backend::Cuda(_) => Device::Cuda,
        }
    }

    /// A one-line description (device name, weight format).
    pub fn describe(&self) -> String {
        match self {
            Backend::Cpu(_) => format!("cpu ({} threads, f32)", rayon::current_num_threads()),
            #[cfg(feature = "cuda")]
            Backend::Cuda(gpu) => gpu.describe(),
        }
    }
}
