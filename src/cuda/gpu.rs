//! The GPU itself: a CUDA context and stream, every kernel compiled and loaded, and the
//! checks that turn "no GPU here" into an error message instead of a crash.

use super::nvrtc::{self, KERNELS};
use crate::error::{Error, Result};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    DriverError, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// How kvlab's CPU emulator of a GPU names its device (tools/cudacpu, driver.cpp's DEVICE_NAME).
pub const EMULATOR_NAME: &str = "cpu emulator";

/// Adds what was being done to a CUDA driver error.
pub(crate) trait CudaContextExt<T> {
    fn cuda(self, what: &str) -> Result<T>;
}

impl<T> CudaContextExt<T> for std::result::Result<T, DriverError> {
    fn cuda(self, what: &str) -> Result<T> {
        self.map_err(|e| Error::Cuda(format!("{what}: {e}")))
    }
}

/// Every kernel entry point kvlab launches (see `kernels/*.cu`).
pub(crate) struct Functions {
    pub embedding_f32: CudaFunction,
    pub embedding_bf16: CudaFunction,
    pub rmsnorm: CudaFunction,
    pub rmsnorm_inplace: CudaFunction,
    pub matmul_v1_f32: CudaFunction,
    pub matmul_v1_bf16: CudaFunction,
    pub matmul_v2_f32: CudaFunction,
    pub matmul_v2_bf16: CudaFunction,
    pub matmul_v3_f32: CudaFunction,
    pub matmul_v3_bf16: CudaFunction,
    pub rope: CudaFunction,
    pub kv_append: CudaFunction,
    pub kv_append_int8: CudaFunction,
    pub attention_v1: CudaFunction,
    pub attention_v2: CudaFunction,
    pub attention_paged: CudaFunction,
    pub attention_int8: CudaFunction,
    pub add_inplace: CudaFunction,
    pub add_bias: CudaFunction,
    pub swiglu: CudaFunction,
    pub geglu: CudaFunction,
    pub argmax: CudaFunction,
    pub attention_v3_split: CudaFunction,
    pub attention_v3_combine: CudaFunction,
    pub fused_rmsnorm_matmul_f32: CudaFunction,
    pub fused_rmsnorm_matmul_bf16: CudaFunction,
    pub fused_matmul_residual_f32: CudaFunction,
    pub fused_matmul_residual_bf16: CudaFunction,
    pub fused_swiglu_matmul_residual_f32: CudaFunction,
    pub fused_swiglu_matmul_residual_bf16: CudaFunction,
    pub rope_kv_append: CudaFunction,
    pub roof_read: CudaFunction,
    pub roof_fma: CudaFunction,
}

/// One GPU, ready to run kvlab's kernels. The launch wrappers are in [`super::ops`].
pub struct Gpu {
    pub(crate) ctx: Arc<CudaContext>,
    /// Every kernel and copy goes to this one stream, so they run in the order issued:
    /// no kernel needs to wait for another explicitly.
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) f: Functions,
    name: String,
    capability: (i32, i32),
    driver_version: (i32, i32),
    nvrtc_version: (i32, i32),
    arch: &'static str,
    /// Kernels launched so far: the bench divides it by the tokens decoded. A CUDA graph's
    /// replay counts as one launch, and the kernels queued while capturing it count as none.
    pub(crate) launches: AtomicU64,
    /// True while a graph is being captured (src/cuda/graph.rs).
    pub(crate) capturing: AtomicBool,
}

/// Ok when the CUDA driver library can be loaded; else an error saying so.
///
/// Without this check cudarc *panics* on the first driver call (it loads `libcuda.so`
/// lazily and treats its absence as fatal). The guard turns that into `Error::Cuda`.
pub fn check_driver() -> Result<()> {
    // SAFETY: `is_culib_present` only tries to dlopen libcuda by its usual names and
    // reports whether that worked; it calls nothing inside the library.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::Cuda(
            "no CUDA driver (libcuda.so) found: this machine has no NVIDIA GPU driver installed. \
             Run on the CPU with `--device cpu`"
                .into(),
        ))
    }
}

/// Opens GPU 0, after checking that the driver library is there (so cudarc cannot panic).
fn open_device() -> Result<Arc<CudaContext>> {
    check_driver()?;
    CudaContext::new(0).map_err(|e| {
        Error::Cuda(format!(
            "the CUDA driver is installed but no GPU could be opened ({e}). Run on the CPU with `--device cpu`"
        ))
    })
}

/// Ok when there is a GPU to run on; otherwise the reason. Compiles nothing: the tests use
/// it to tell "no GPU here" (skip) from "a GPU, but kvlab fails on it" (a real failure).
pub fn probe_device() -> Result<()> {
    open_device().map(|_| ())
}

impl Gpu {
    /// Opens GPU 0 and compiles every kernel for it. Never panics: no driver, no NVRTC,
    /// no device, or a kernel that does not compile each come back as `Error::Cuda`.
    pub fn new() -> Result<Gpu> {
        check_driver()?;
        nvrtc::check_nvrtc()?;
        let ctx = open_device()?;
        let name = ctx.name().cuda("reading the GPU's name")?;
        let capability = ctx
            .compute_capability()
            .cuda("reading the compute capability")?;
        let mut version = 0;
        // SAFETY: the driver library is present (check_driver) and initialised (the context
        // above exists); `version` is valid for one write.
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) }
            .result()
            .cuda("reading the driver version")?;
        let driver_version = (version / 1000, version % 1000 / 10);
        let nvrtc_version = nvrtc::nvrtc_version()?;
        // PTX for the GPU's architecture, finished by the driver — unless this NVRTC is newer
        // than the driver, which would refuse its PTX: then machine code (CUBIN) for this GPU.
        let cubin = if nvrtc_version > driver_version
            || std::env::var("KVLAB_CUBIN").as_deref() == Ok("1")
        {
            nvrtc::sm_for(capability.0, capability.1)
        } else {
            None
        };
        let arch = cubin.unwrap_or(nvrtc::arch_for(capability.0, capability.1));

        // Compile each file, load it, and pick out its entry points by name.
        let mut loaded: HashMap<&str, CudaFunction> = HashMap::new();
        for kernel in KERNELS {
            let code = match cubin {
                Some(sm) => Ptx::from_binary(nvrtc::compile_cubin(kernel, sm)?),
                None => nvrtc::compile(kernel, arch)?,
            };
            let module: Arc<CudaModule> = ctx.load_module(code).map_err(|e| {
                Error::Cuda(format!(
                    "the driver rejected the compiled kernels/{} ({e}). If this says \
                     UNSUPPORTED_PTX_VERSION, NVRTC ({}.{}) is newer than the driver ({}.{}): \
                     use an NVRTC no newer than the driver (scripts/setup-nvrtc.sh installs 13.0), \
                     or set KVLAB_CUBIN=1 to compile machine code instead of PTX",
                    kernel.file,
                    nvrtc_version.0,
                    nvrtc_version.1,
                    driver_version.0,
                    driver_version.1
                ))
            })?;
            for &function in kernel.functions {
                let f = module
                    .load_function(function)
                    .cuda(&format!("loading {function} from kernels/{}", kernel.file))?;
                loaded.insert(function, f);
            }
        }
        let mut take = |name: &str| {
            loaded.remove(name).ok_or_else(|| {
                Error::Cuda(format!("internal: kernel {name} is not in nvrtc::KERNELS"))
            })
        };
        let f = Functions {
            embedding_f32: take("embedding_f32")?,
            embedding_bf16: take("embedding_bf16")?,
            rmsnorm: take("rmsnorm")?,
            rmsnorm_inplace: take("rmsnorm_inplace")?,
            matmul_v1_f32: take("matmul_v1_f32")?,
            matmul_v1_bf16: take("matmul_v1_bf16")?,
            matmul_v2_f32: take("matmul_v2_f32")?,
            matmul_v2_bf16: take("matmul_v2_bf16")?,
            matmul_v3_f32: take("matmul_v3_f32")?,
            matmul_v3_bf16: take("matmul_v3_bf16")?,
            rope: take("rope")?,
            kv_append: take("kv_append")?,
            kv_append_int8: take("kv_append_int8")?,
            attention_v1: take("attention_v1")?,
            attention_v2: take("attention_v2")?,
            attention_paged: take("attention_paged")?,
            attention_int8: take("attention_int8")?,
            add_inplace: take("add_inplace")?,
            add_bias: take("add_bias")?,
            swiglu: take("swiglu")?,
            geglu: take("geglu")?,
            argmax: take("argmax")?,
            attention_v3_split: take("attention_v3_split")?,
            attention_v3_combine: take("attention_v3_combine")?,
            fused_rmsnorm_matmul_f32: take("fused_rmsnorm_matmul_f32")?,
            fused_rmsnorm_matmul_bf16: take("fused_rmsnorm_matmul_bf16")?,
            fused_matmul_residual_f32: take("fused_matmul_residual_f32")?,
            fused_matmul_residual_bf16: take("fused_matmul_residual_bf16")?,
            fused_swiglu_matmul_residual_f32: take("fused_swiglu_matmul_residual_f32")?,
            fused_swiglu_matmul_residual_bf16: take("fused_swiglu_matmul_residual_bf16")?,
            rope_kv_append: take("rope_kv_append")?,
            roof_read: take("roof_read")?,
            roof_fma: take("roof_fma")?,
        };
        // A stream of our own, not the legacy default stream: CUDA cannot capture the
        // default stream into a graph (src/cuda/graph.rs). cudarc's cross-stream event
        // tracking is switched off first: kvlab queues everything on this one stream, so
        // there is nothing to track, and events recorded during a capture would end up in
        // the graph.
        // SAFETY: disable_event_tracking's contract is about synchronizing several streams;
        // every buffer kvlab allocates, uses and frees is on this single stream, in order.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .cuda("creating the stream kvlab queues its work on")?;
        Ok(Gpu {
            ctx,
            stream,
            f,
            name,
            capability,
            driver_version,
            nvrtc_version,
            arch,
            launches: AtomicU64::new(0),
            capturing: AtomicBool::new(false),
        })
    }

    /// E.g. `NVIDIA H200 (sm_90, driver 13.0, NVRTC 13.0, code compute_90)`: `compute_XX`
    /// is PTX the driver finished, `sm_XX` machine code from NVRTC.
    pub fn describe(&self) -> String {
        format!(
            "{} (sm_{}{}, driver {}.{}, NVRTC {}.{}, code {})",
            self.name,
            self.capability.0,
            self.capability.1,
            self.driver_version.0,
            self.driver_version.1,
            self.nvrtc_version.0,
            self.nvrtc_version.1,
            self.arch
        )
    }

    /// The CUDA context (for events, memory queries).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream every kvlab kernel and copy is queued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// True on kvlab's CPU emulator of a GPU (tools/cudacpu, whose driver names its device
    /// [`EMULATOR_NAME`]): it runs one CUDA thread at a time, so benches size down there.
    pub fn is_emulator(&self) -> bool {
        self.name.starts_with(EMULATOR_NAME)
    }

    /// Kernels launched on this GPU so far.
    pub fn launches(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }

    pub(crate) fn count_launch(&self) {
        if !self.capturing.load(Ordering::Relaxed) {
            self.launches.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Copies `host` into a new device buffer.
    pub fn upload<T: DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>> {
        self.stream.clone_htod(host).cuda("copying to the GPU")
    }

    /// Copies a device buffer back, after every kernel issued before it has finished.
    ///
    /// `clone_dtoh` only *queues* the copy (`cuMemcpyDtoHAsync`). Into pageable memory, as
    /// a `Vec` is, the driver happens to finish it before returning, but CUDA does not
    /// promise that, so the stream is synchronized before the host reads the `Vec`.
    pub fn download<T: DeviceRepr, S: DevicePtr<T>>(&self, device: &S) -> Result<Vec<T>> {
        let host = self
            .stream
            .clone_dtoh(device)
            .cuda("copying from the GPU")?;
        self.synchronize()?;
        Ok(host)
    }

    /// A new device buffer of `len` zeros.
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize) -> Result<CudaSlice<T>> {
        // A zero-length allocation is an error in CUDA; one element costs nothing.
        self.stream
            .alloc_zeros(len.max(1))
            .cuda("allocating GPU memory")
    }

    /// Waits until every kernel issued so far has finished (for timing).
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().cuda("waiting for the GPU")
    }
}
