// residual.cu — element-wise additions: the residual connection and the q/k/v biases.
//
//   add_inplace:  x[i] += y[i]                    x, y: `count` f32 (e.g. [n, dim])
//   add_bias:     x[r][c] += bias[c]              x: [rows, width] f32, bias: [width] f32
//
// Launch: 1-D, one thread per element of x, 256 per block (`__launch_bounds__(256)` tells
// the compiler so: it may then budget registers for exactly 256 threads).
// Indices are 64-bit: `blockIdx.x * blockDim.x` is computed in 32 bits unless widened first,
// and would wrap for a count above 2^31 (the host refuses counts above i32 anyway).
// CPU twins: ops::add_inplace and ops::add_bias (src/ops.rs). Each is one f32 addition per
// element, so GPU and CPU agree bit for bit.

extern "C" __global__ void __launch_bounds__(256) add_inplace(float* x, const float* y, int count) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) x[i] += y[i];
}

extern "C" __global__ void __launch_bounds__(256) add_bias(float* x, const float* bias, int rows, int width) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (long long)rows * width) x[i] += bias[i % width];
}
