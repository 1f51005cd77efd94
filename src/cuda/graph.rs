//! CUDA graphs: the cached path's decode step captured once, then replayed with one launch
//! per token. Chapter "The CUDA backend", section "What graphs buy".
//!
//! A decode step of SmolLM2-135M at batch 1 is ~213 kernel launches with the fused kernels
//! (~453 without), each a few µs of CPU and driver work while the kernels themselves take
//! about as long: the GPU waits for the CPU. Stream capture records the launches into a graph
//! instead of running them (`cuStreamBeginCapture` ... `cuStreamEndCapture`); the graph is
//! instantiated once and replayed with `cuGraphLaunch`, which hands the driver the whole step
//! at once.
//!
//! What a replay cannot change: every kernel's arguments — pointers, sizes, grid. So
//! everything that differs between steps is read from GPU memory the host rewrites before
//! each replay: the token id (`st.tokens`, read by the embedding kernel) and the position
//! (`st.pos`, read by the fused RoPE + KV append and by split-K attention, whose grid covers
//! the cache's whole capacity and skips the chunks past the position). The buffers a graph
//! points into (the decoder's `RunState` and KV cache, the model's weights) live at least as
//! long as the decoder that owns the graph, and are never reallocated under it.
//!
//! Capture is per stream, not per thread: anything queued on the [`super::Gpu`]'s stream while
//! a step is being captured — by another thread sharing that `Gpu` — would be recorded into
//! the graph instead of running. kvlab's decoders run on one thread; a test that captures
//! opens a `Gpu` of its own.

use super::forward::{GpuKvSource, RunState};
use super::gpu::CudaContextExt;
use super::kv_cache::GpuKvCache;
use super::GpuModel;
use crate::error::{Error, Result};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::CudaGraph;
use std::sync::atomic::Ordering;

/// One decode step (the fused forward pass of one token, then the greedy argmax), captured.
pub struct DecodeGraph {
    graph: CudaGraph,
}

impl GpuModel {
    // ANCHOR: graph_step
    /// One cached decode step of `token`, replayed from `graph` (captured on the first call).
    /// Leaves the logits in `st.logits` and the greedy token in `st.next_token`, on the GPU.
    pub(crate) fn graph_step(
        &self,
        token: u32,
        cache: &mut GpuKvCache,
        st: &mut RunState,
        graph: &mut Option<DecodeGraph>,
    ) -> Result<()> {
        let mut kv = GpuKvSource::Cache(cache);
        let start_pos = self.begin_pass(1, &kv, st)?;
        // The step's inputs go to the GPU before the replay: the graph reads them there.
        self.stage_inputs(&[token], start_pos, &kv, st)?;
        if graph.is_none() {
            *graph = Some(self.capture_step(start_pos, &mut kv, st)?);
        }
        if let Some(g) = graph {
            g.graph
                .launch()
                .cuda("replaying the decode step's CUDA graph")?;
            self.gpu.count_launch();
        }
        if let GpuKvSource::Cache(cache) = kv {
            cache.advance(1);
        }
        Ok(())
    }
    // ANCHOR_END: graph_step

    /// Records one decode step's kernels into a graph, without running them.
    fn capture_step(
        &self,
        start_pos: usize,
        kv: &mut GpuKvSource,
        st: &mut RunState,
    ) -> Result<DecodeGraph> {
        if !self.fused {
            return Err(Error::InvalidArgument(
                "CUDA graphs replay the fused kernels: turn them on too".into(),
            ));
        }
        let gpu = &*self.gpu;
        // THREAD_LOCAL: only this thread's unsafe-while-capturing calls are refused.
        gpu.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .cuda("starting a CUDA graph capture")?;
        gpu.capturing.store(true, Ordering::Relaxed);
        let queued = self
            .forward_kernels(1, start_pos, kv, st)
            .and_then(|()| gpu.argmax(&mut st.next_token.as_view_mut(), &st.logits.as_view()));
        gpu.capturing.store(false, Ordering::Relaxed);
        // End the capture even when queuing failed, or the stream stays in capture mode.
        let ended = gpu
            .stream
            .end_capture(CUgraphInstantiate_flags(0))
            .cuda("ending the CUDA graph capture");
        queued?;
        let graph =
            ended?.ok_or_else(|| Error::Cuda("the CUDA graph capture recorded nothing".into()))?;
        graph
            .upload()
            .cuda("uploading the decode step's CUDA graph")?;
        Ok(DecodeGraph { graph })
    }
}
