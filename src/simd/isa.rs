//! Which instruction set this CPU offers kvlab's kernels, asked once at run time.

use serde::Serialize;
use std::sync::OnceLock;

/// An instruction set the kernels have a version for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Isa {
    /// 16-lane f32 vectors (`avx512f`).
    Avx512,
    /// 8-lane f32 vectors with fused multiply-add (`avx2` + `fma`).
    Avx2,
    /// Plain Rust (`f32::mul_add`): the reference the others must match.
    Portable,
}

impl Isa {
    /// The best version this CPU can run, detected once (`cpuid`) and remembered.
    pub fn detected() -> Isa {
        static DETECTED: OnceLock<Isa> = OnceLock::new();
        *DETECTED.get_or_init(|| Isa::available()[0])
    }

    /// Every version this CPU can run, best first (the last is always `Portable`).
    pub fn available() -> Vec<Isa> {
        let mut isas = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") {
                isas.push(Isa::Avx512);
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                isas.push(Isa::Avx2);
            }
        }
        isas.push(Isa::Portable);
        isas
    }

    /// f32 lanes per vector register.
    pub fn lanes(self) -> usize {
        match self {
            Isa::Avx512 => 16,
            Isa::Avx2 => 8,
            Isa::Portable => 1,
        }
    }
}
