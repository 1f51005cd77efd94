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

// geglu — Gemma's gated MLP (GeGLU, Shazeer 2020), in place on `gate`, launched as swiglu:
//
//   gate[i] = gelu(gate[i]) * up[i],   gelu(g) = g/2 * (1 + tanh(sqrt(2/pi) * (g + 0.044715 g^3)))
//
// GELU's tanh approximation (PyTorch's gelu(approximate="tanh"), transformers'
// gelu_pytorch_tanh), written in the CPU's order. CPU twin: ops::geglu / ops::gelu_tanh
// (src/ops.rs); CUDA's tanhf is within 2 ulp of Rust's tanh, so ~1e-7 relative, not bitwise.

// ANCHOR: geglu
extern "C" __global__ void __launch_bounds__(256) geglu(float* gate, const float* up, int count) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float g = gate[i];
    float inner = 0.7978846f * (g + 0.044715f * g * g * g);  // sqrt(2/pi) = 0.7978846 (f32)
    gate[i] = 0.5f * g * (1.0f + tanhf(inner)) * up[i];
}
// ANCHOR_END: geglu
