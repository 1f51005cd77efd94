// swiglu.cu — the SwiGLU activation of the MLP (Shazeer 2020), in place on `gate`:
//
//   gate[i] = silu(gate[i]) * up[i],   silu(g) = g * sigmoid(g) = g / (1 + exp(-g))
//
//   gate, up: [n, hidden] f32, treated as flat arrays of `count` = n * hidden elements.
//
// Launch: 1-D, one thread per element, 256 per block; 64-bit index (see residual.cu).
// CPU twin: ops::swiglu (src/ops.rs). Same formula; CUDA's expf may differ from Rust's exp
// in the last bit (expf is accurate to 2 ulp), so results agree to ~1e-7 relative.
// The fused twin: fused.cu's SWIGLU prologue computes exactly this expression.

extern "C" __global__ void __launch_bounds__(256) swiglu(float* gate, const float* up, int count) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float g = gate[i];
    float silu = g / (1.0f + expf(-g));
    gate[i] = silu * up[i];
}
