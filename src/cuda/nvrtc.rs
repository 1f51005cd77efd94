//! The kernels' CUDA C source, and NVRTC, which compiles it to PTX while kvlab runs.
//!
//! Every `kernels/*.cu` file is built into the kvlab binary with `include_str!`, so a
//! binary carries its kernels wherever it goes. At start-up [`crate::cuda::Gpu::new`] hands
//! each file to NVRTC (NVIDIA's run-time compiler, `libnvrtc.so`), which turns it into
//! PTX — NVIDIA's portable assembly — for the GPU's architecture; the driver then
//! assembles the PTX for the exact chip. No CUDA toolkit is needed to *build* kvlab, and
//! NVRTC needs no GPU, so CI compiles every kernel (tests/cuda_kernels.rs) on a machine without one.
//!
//! Two things must be found at run time:
//! - `libnvrtc.so.13`, through `LD_LIBRARY_PATH` (set before the program starts: glibc
//!   reads it once). `scripts/setup-nvrtc.sh` installs NVRTC 13.0 from PyPI into `.venv/`.
//!   Why 13.0: PTX carries a version, and a driver rejects PTX newer than itself
//!   (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`); the H200 this is checked on has driver 13.0.
//! - the CUDA headers, for `cuda_bf16.h` (the bf16 type the weights may be stored in);
//!   see [`cuda_include_dir`].

use crate::error::{Error, Result};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};
use std::path::{Path, PathBuf};

/// One `kernels/*.cu` file: its name, its text, and the entry points kvlab loads from it.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    pub file: &'static str,
    pub source: &'static str,
    pub functions: &'static [&'static str],
}

// ANCHOR: sources
/// Every kernel file, in the order the forward pass first uses them.
pub const KERNELS: &[KernelSource] = &[
    KernelSource {
        file: "embedding.cu",
        source: include_str!("../../kernels/embedding.cu"),
        functions: &["embedding_f32", "embedding_bf16"],
    },
    KernelSource {
        file: "rmsnorm.cu",
        source: include_str!("../../kernels/rmsnorm.cu"),
        functions: &["rmsnorm", "rmsnorm_inplace"],
    },
    KernelSource {
        file: "matmul.cu",
        source: include_str!("../../kernels/matmul.cu"),
        functions: &[
            "matmul_v1_f32",
            "matmul_v1_bf16",
            "matmul_v2_f32",
            "matmul_v2_bf16",
            "matmul_v3_f32",
            "matmul_v3_bf16",
        ],
    },
    KernelSource {
        file: "rope.cu",
        source: include_str!("../../kernels/rope.cu"),
        functions: &["rope"],
    },
    KernelSource {
        file: "kv_append.cu",
        source: include_str!("../../kernels/kv_append.cu"),
        functions: &["kv_append", "kv_append_int8"],
    },
    KernelSource {
        file: "attention.cu",
        source: include_str!("../../kernels/attention.cu"),
        functions: &["attention_v1", "attention_v2", "attention_paged"],
    },
    KernelSource {
        file: "attention_splitk.cu",
        source: include_str!("../../kernels/attention_splitk.cu"),
        functions: &["attention_v3_split", "attention_v3_combine"],
    },
    KernelSource {
        file: "fused.cu",
        source: include_str!("../../kernels/fused.cu"),
        functions: &[
            "fused_rmsnorm_matmul_f32",
            "fused_rmsnorm_matmul_bf16",
            "fused_matmul_residual_f32",
            "fused_matmul_residual_bf16",
            "fused_swiglu_matmul_residual_f32",
            "fused_swiglu_matmul_residual_bf16",
            "rope_kv_append",
        ],
    },
    KernelSource {
        file: "attention_int8.cu",
        source: include_str!("../../kernels/attention_int8.cu"),
        functions: &["attention_int8"],
    },
    KernelSource {
        file: "residual.cu",
        source: include_str!("../../kernels/residual.cu"),
        functions: &["add_inplace", "add_bias"],
    },
    KernelSource {
        file: "swiglu.cu",
        source: include_str!("../../kernels/swiglu.cu"),
        functions: &["swiglu", "geglu"],
    },
    KernelSource {
        file: "argmax.cu",
        source: include_str!("../../kernels/argmax.cu"),
        functions: &["argmax"],
    },
    KernelSource {
        file: "roof.cu",
        source: include_str!("../../kernels/roof.cu"),
        functions: &["roof_read", "roof_fma"],
    },
];
// ANCHOR_END: sources

/// What to tell someone whose NVRTC cannot be loaded.
pub const NVRTC_HELP: &str = "NVRTC (libnvrtc.so.13, NVIDIA's run-time CUDA compiler) could not be loaded. \
     Run `bash scripts/setup-nvrtc.sh` and, in the same shell, the `export LD_LIBRARY_PATH=...` \
     line it prints, before starting kvlab (or point LD_LIBRARY_PATH at a CUDA 13.0 toolkit's lib64)";

/// Ok when `libnvrtc` can be loaded; otherwise an error that says how to get it.
pub fn check_nvrtc() -> Result<()> {
    // SAFETY: `is_culib_present` only tries to dlopen the NVRTC library by its usual names
    // and reports whether that worked; it calls nothing inside the library.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::Cuda(NVRTC_HELP.into()))
    }
}

/// NVRTC's version, `(major, minor)`: (13, 0) for the wheel `setup-nvrtc.sh` installs.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    check_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (checked above), and both pointers are valid for one write.
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    status
        .result()
        .map_err(|e| Error::Cuda(format!("nvrtcVersion failed: {e:?}")))?;
    Ok((major, minor))
}

/// The folder holding `cuda_bf16.h`, which every kernel that reads bf16 weights includes.
///
/// Looked for, in order: `$CUDA_INCLUDE_DIR`; `../include` beside every folder of
/// `LD_LIBRARY_PATH` (a wheel's `nvidia/cu13/lib` sits beside `nvidia/cu13/include`, a
/// toolkit's `lib64` beside `include`); the `.venv/` that `scripts/setup-nvrtc.sh` makes, in
/// the current folder or in the source tree; `/usr/local/cuda/include`.
pub fn cuda_include_dir() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = std::env::var_os("CUDA_INCLUDE_DIR") {
        candidates.push(PathBuf::from(dir));
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        candidates.extend(std::env::split_paths(&paths).map(|lib| lib.join("../include")));
    }
    for root in [
        PathBuf::from("."),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")),
    ] {
        candidates.extend(venv_include_dirs(&root));
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    candidates
        .into_iter()
        .find(|dir| dir.join("cuda_bf16.h").is_file())
}

/// `root/.venv/lib/python3.*/site-packages/nvidia/cu13/include`, for any Python 3.
fn venv_include_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root.join(".venv/lib")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|python| python.path().join("site-packages/nvidia/cu13/include"))
        .collect()
}

/// The PTX target for a GPU of compute capability `major.minor`.
///
/// PTX for an older architecture runs on every newer one (the driver compiles it up), so
/// a GPU newer than this list gets `compute_90`, the newest PTX an NVRTC 13.0 writes that
/// every Hopper-or-later driver accepts.
pub fn arch_for(major: i32, minor: i32) -> &'static str {
    match (major, minor) {
        (..=6, _) => "compute_60",
        (7, 0..=4) => "compute_70",
        (7, _) => "compute_75",
        (8, 0) => "compute_80",
        (8, 1..=6) => "compute_86",
        (8, _) => "compute_89",
        _ => "compute_90",
    }
}

/// The machine-code target (`sm_XX`) for a GPU of compute capability `major.minor`, when
/// NVRTC 13 knows it (it compiles for Turing, sm_75, and newer).
pub fn sm_for(major: i32, minor: i32) -> Option<&'static str> {
    Some(match (major, minor) {
        (7, 5) => "sm_75",
        (8, 0) => "sm_80",
        (8, 6) => "sm_86",
        (8, 7) => "sm_87",
        (8, 9) => "sm_89",
        (9, 0) => "sm_90",
        (10, 0) => "sm_100",
        (12, 0) => "sm_120",
        _ => return None,
    })
}

fn include_dir() -> Result<PathBuf> {
    cuda_include_dir().ok_or_else(|| {
        Error::Cuda(
            "cuda_bf16.h not found: the kernels include it. Run `bash scripts/setup-nvrtc.sh` and export \
             the CUDA_INCLUDE_DIR it prints, or set CUDA_INCLUDE_DIR to a CUDA toolkit's include folder"
                .into(),
        )
    })
}

/// Compiles one kernel file to PTX for `arch` (e.g. `"compute_90"`).
///
/// A compile error comes back with NVRTC's log, which names the file and line.
pub fn compile(kernel: &KernelSource, arch: &'static str) -> Result<Ptx> {
    check_nvrtc()?;
    let include = include_dir()?;
    let options = CompileOptions {
        arch: Some(arch),
        include_paths: vec![include.to_string_lossy().into_owned()],
        // The program's name is what NVRTC's error messages call the file.
        name: Some(kernel.file.into()),
        // Defaults kept on purpose: IEEE-exact division and sqrt (`--prec-div`,
        // `--prec-sqrt`), no flush-to-zero, and FMA contraction on (`a * b + c` becomes
        // one fused multiply-add, as every CUDA build does unless told otherwise).
        ..Default::default()
    };
    compile_ptx_with_opts(kernel.source, options).map_err(|e| match e {
        CompileError::CompileError { log, .. } => Error::Cuda(format!(
            "NVRTC could not compile kernels/{} for {arch}:\n{}",
            kernel.file,
            log.to_string_lossy()
        )),
        other => Error::Cuda(format!(
            "NVRTC failed on kernels/{} for {arch}: {other:?}",
            kernel.file
        )),
    })
}

/// Compiles one kernel file straight to CUBIN: machine code for exactly one kind of GPU
/// (`sm` such as `"sm_90"`), instead of PTX.
///
/// Why both: PTX is portable, but the driver must finish compiling it, and a driver refuses
/// PTX from an NVRTC newer than itself. A CUBIN needs no such step, and CUDA's minor-version
/// compatibility lets a CUBIN built by any 13.x NVRTC load on any 13.y driver. kvlab uses
/// PTX, and switches to CUBIN when the NVRTC it found is newer than the driver.
pub fn compile_cubin(kernel: &KernelSource, sm: &'static str) -> Result<Vec<u8>> {
    use cudarc::nvrtc::{result, sys};
    use std::ffi::CString;
    check_nvrtc()?;
    let include = include_dir()?;
    let fail = |what: &str| {
        Error::Cuda(format!(
            "NVRTC ({what}) failed on kernels/{} for {sm}",
            kernel.file
        ))
    };
    let source = CString::new(kernel.source).map_err(|_| fail("a NUL byte in the source"))?;
    let name = CString::new(kernel.file).map_err(|_| fail("a NUL byte in the name"))?;
    let program =
        result::create_program(&source, Some(&name)).map_err(|e| fail(&format!("{e:?}")))?;
    let options = [
        format!("--gpu-architecture={sm}"),
        format!("--include-path={}", include.display()),
    ];
    // SAFETY: `program` was just created by create_program (its source and name outlive it)
    // and is destroyed only at the end of this function, which every path reaches.
    let compiled = unsafe { result::compile_program(program, &options) };
    let cubin = match compiled {
        Err(_) => {
            // SAFETY: as above; the log is a NUL-terminated byte buffer NVRTC fills in.
            let log = unsafe { result::get_program_log(program) }.unwrap_or_default();
            let log: Vec<u8> = log
                .iter()
                .map(|&c| c as u8)
                .take_while(|&c| c != 0)
                .collect();
            Err(Error::Cuda(format!(
                "NVRTC could not compile kernels/{} for {sm}:\n{}",
                kernel.file,
                String::from_utf8_lossy(&log)
            )))
        }
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: `program` compiled; `size` is valid for one write.
            unsafe { sys::nvrtcGetCUBINSize(program, &mut size) }
                .result()
                .map_err(|e| fail(&format!("nvrtcGetCUBINSize: {e:?}")))
                .and_then(|()| {
                    let mut cubin = vec![0u8; size];
                    // SAFETY: `cubin` holds exactly the `size` bytes NVRTC said it will write.
                    unsafe { sys::nvrtcGetCUBIN(program, cubin.as_mut_ptr().cast()) }
                        .result()
                        .map_err(|e| fail(&format!("nvrtcGetCUBIN: {e:?}")))?;
                    Ok(cubin)
                })
        }
    };
    // SAFETY: `program` came from create_program and is destroyed exactly once, here.
    let _ = unsafe { result::destroy_program(program) };
    cubin
}
