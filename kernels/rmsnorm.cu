// rmsnorm.cu — RMSNorm (Zhang & Sennrich 2019), one row at a time:
//
//   out[r][i] = weight[i] * (x[r][i] * inv_rms),   inv_rms = 1 / sqrt(mean_i(x[r][i]^2) + eps)
//
//   x, out: [n, dim] f32     weight: [dim] f32 (norm weights stay f32 even in a bf16 model:
//                                               they are dim floats, nothing to save)
//
// Launch: one block per row (grid = n), 256 threads. Each thread sums the squares of
// elements tid, tid+256, ...; the block then adds the 256 partial sums with warp shuffles
// and one round through shared memory.
//
// Why the naive and cached paths still agree bit for bit: the order of that sum depends
// only on `dim` and the block size, never on how many rows are in the launch. A row's
// result is the same in a 500-row prefill as in a 1-row decode step (the "row
// independence" of src/ops.rs). It is NOT the CPU's order (the CPU adds left to right),
// so GPU and CPU agree to ~1e-6 relative, not bitwise.
//
// CPU twin: ops::rmsnorm (src/ops.rs).
//
// Two entry points, one body: `rmsnorm` writes another buffer (the input of a sub-block,
// and Gemma 3's sandwich norms of a sub-block's output), `rmsnorm_inplace` normalises its
// own rows (Gemma 3's QK-norm: each head of each query and key row is one row of head_dim).
// In place is safe: every thread reads the element it writes, and the barrier after the sum
// of squares keeps all reads of the sum before any write.

#define THREADS 256

// Sum of `v` over the 32 lanes of a warp; every lane gets the same total (the butterfly
// pairs the same values in every lane, and a + b == b + a exactly).
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ void rmsnorm_rows(float* out, const float* x, const float* weight, float eps, int n,
                             int dim) {
    int r = blockIdx.x;
    if (r >= n) return;  // whole block leaves together: no thread waits at a barrier alone
    const float* x_row = x + (size_t)r * dim;
    float* out_row = out + (size_t)r * dim;

    // 1. Each thread: its strided share of the sum of squares.
    float sum = 0.0f;
    for (int i = threadIdx.x; i < dim; i += THREADS) sum += x_row[i] * x_row[i];

    // 2. The block: 8 warps reduce in registers, warp 0 reduces their 8 results.
    __shared__ float warp_sums[THREADS / 32];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    sum = warp_sum(sum);
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    __shared__ float inv_rms;
    if (warp == 0) {
        float total = lane < THREADS / 32 ? warp_sums[lane] : 0.0f;
        total = warp_sum(total);
        if (lane == 0) inv_rms = 1.0f / sqrtf(total / (float)dim + eps);
    }
    __syncthreads();

    // 3. Scale: the same expression, in the same order, as the CPU.
    for (int i = threadIdx.x; i < dim; i += THREADS) out_row[i] = weight[i] * (x_row[i] * inv_rms);
}

extern "C" __global__ void __launch_bounds__(THREADS) rmsnorm(float* out, const float* x, const float* weight, float eps,
                                   int n, int dim) {
    rmsnorm_rows(out, x, weight, eps, n, dim);
}

extern "C" __global__ void __launch_bounds__(THREADS) rmsnorm_inplace(float* x, const float* weight, float eps, int n,
                                           int dim) {
    rmsnorm_rows(x, x, weight, eps, n, dim);
}
