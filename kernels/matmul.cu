// matmul.cu — a linear layer: out = x · W, with f32 sums.
//
//   out[r][c] = sum_k x[r][k] * w[k][c]     x: [n, d_in] f32, w: [d_in, d_out], out: [n, d_out] f32
//
// W is kvlab's `[d_in, d_out]` layout (PyTorch's `[d_out, d_in]`, transposed at load time),
// stored in f32 or bf16. A bf16 weight is widened to f32 as it is read (exact: bf16 is the top
// 16 bits of an f32), and every product and sum is f32.
//
// CPU twin: ops::matmul (src/ops.rs).
//
// Two versions, numbered as in llm.c's dev/cuda (v1 the plain port, each next one faster):
//
//   v1  one thread per output element. Launch: 1-D, n * d_out threads, 256 per block.
//       Neighbouring threads compute neighbouring columns c of one row, so their reads of
//       w[k][c] are one coalesced 128-byte line per warp; x[r][k] is one broadcast value.
//       Every thread reads its whole column of W from memory (L2 helps): fine for a decode
//       step (n = 1, each weight is needed once anyway), wasteful for a prefill, where each
//       weight is re-read once per row.
//
//   v2  shared-memory tiles (the classic CUDA C Programming Guide matmul). Launch: blocks of
//       16 x 16 threads, grid (ceil(d_out / 16), ceil(n / 16)); each block computes a 16 x 16
//       tile of `out`. The block walks k in steps of 16: it loads a 16 x 16 tile of x and one
//       of W into shared memory (each element read from memory once per block, not once per
//       thread), and every thread then adds 16 products from shared memory. That cuts the
//       memory traffic of a prefill by 16x. For a decode step (n = 1) only one row of the
//       tile is real, so v2 gains nothing there.
//
//   v3  split-K for decode (a matrix-vector product). Measured on an H200 (book: cuda.md), v1
//       and v2 read a 576 x 1536 weight at 139-188 GB/s, 4 % of the GPU's read roof: each
//       output is one thread's chain of d_in dependent FMAs, and a decode step has only
//       d_out = 192..1536 of those threads, too few to keep the memory system busy. v3 gives
//       each output 32 threads: block (8 columns x 32 slices of k), 256 threads; slice s adds
//       k = s, s + 32, s + 64, ... in order (its own FMA chain, d_in / 32 long), then one
//       thread per column adds the 32 slice sums in order s = 0..31. Launch: grid
//       (ceil(d_out / 8), min(n, 65535)); a block walks rows blockIdx.y, + gridDim.y, ...
//       The order of every sum depends on d_in alone, never on n, so v3 is row-independent
//       too: the naive and cached paths give the same bits with it. It is *not* the CPU's
//       chain, so v3 agrees with the CPU to the rounding-error bound, not bit for bit.
//
// v1 and v2 add the products of one output element in the same order, k = 0, 1, 2, ...,
// each as one fused multiply-add, starting from 0. So:
//   - the result for a row never depends on how many rows are in the launch: the naive path
//     (all rows every step) and the cached path (one row) get bitwise-identical numbers;
//   - v1 and v2 give the same bits as each other;
//   - and the same bits as the CPU, whose ops::matmul computes exactly this chain too
//     (`acc = x.mul_add(w, acc)` from 0.0, in order of k). tests/cuda.rs reports both.
// (`acc += x * w` is compiled to one FMA because NVRTC contracts by default, --fmad=true.)

#include <cuda_bf16.h>

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

// ---------------------------------------------------------------------------------------------
// v1: one thread per output element.

// ANCHOR: matmul_v1
template <typename W>
__device__ void matmul_v1(float* out, const float* x, const W* w, int n, int d_in, int d_out) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * d_out) return;
    int r = (int)(idx / d_out);
    int c = (int)(idx % d_out);
    const float* x_row = x + (size_t)r * d_in;
    float acc = 0.0f;
    for (int k = 0; k < d_in; k++) acc += x_row[k] * to_f32(w[(size_t)k * d_out + c]);
    out[idx] = acc;
}
// ANCHOR_END: matmul_v1

extern "C" __global__ void __launch_bounds__(256) matmul_v1_f32(float* out, const float* x, const float* w,
                                         int n, int d_in, int d_out) {
    matmul_v1<float>(out, x, w, n, d_in, d_out);
}

extern "C" __global__ void __launch_bounds__(256) matmul_v1_bf16(float* out, const float* x, const __nv_bfloat16* w,
                                          int n, int d_in, int d_out) {
    matmul_v1<__nv_bfloat16>(out, x, w, n, d_in, d_out);
}

// ---------------------------------------------------------------------------------------------
// v2: 16 x 16 output tiles, x and W staged through shared memory.

#define TILE 16

// ANCHOR: matmul_v2
template <typename W>
__device__ void matmul_v2(float* out, const float* x, const W* w, int n, int d_in, int d_out) {
    __shared__ float x_tile[TILE][TILE];  // [row in tile][k in tile]
    __shared__ float w_tile[TILE][TILE];  // [k in tile][column in tile]
    int tx = threadIdx.x, ty = threadIdx.y;
    int r = blockIdx.y * TILE + ty;  // this thread's output row
    int c = blockIdx.x * TILE + tx;  // this thread's output column

    float acc = 0.0f;
    for (int k0 = 0; k0 < d_in; k0 += TILE) {
        // Each thread loads one element of each tile (zero where the tile overhangs the
        // matrix; the loop below never adds those zeros, so edges do not change the sums).
        int kx = k0 + tx, kw = k0 + ty;
        x_tile[ty][tx] = (r < n && kx < d_in) ? x[(size_t)r * d_in + kx] : 0.0f;
        w_tile[ty][tx] = (kw < d_in && c < d_out) ? to_f32(w[(size_t)kw * d_out + c]) : 0.0f;
        __syncthreads();  // the tiles are complete before anyone reads them

        int k_len = min(TILE, d_in - k0);
        for (int kk = 0; kk < k_len; kk++) acc += x_tile[ty][kk] * w_tile[kk][tx];
        __syncthreads();  // everyone is done reading before the next loads overwrite them
    }
    if (r < n && c < d_out) out[(size_t)r * d_out + c] = acc;
}
// ANCHOR_END: matmul_v2

extern "C" __global__ void __launch_bounds__(TILE * TILE) matmul_v2_f32(float* out, const float* x, const float* w,
                                         int n, int d_in, int d_out) {
    matmul_v2<float>(out, x, w, n, d_in, d_out);
}

extern "C" __global__ void __launch_bounds__(TILE * TILE) matmul_v2_bf16(float* out, const float* x, const __nv_bfloat16* w,
                                          int n, int d_in, int d_out) {
    matmul_v2<__nv_bfloat16>(out, x, w, n, d_in, d_out);
}

// ---------------------------------------------------------------------------------------------
// v3: split-K, 32 slices of k per output column, for decode.

#define V3_COLS 8     // output columns per block
#define V3_SLICES 32  // slices of k per column: 8 x 32 = 256 threads

// ANCHOR: matmul_v3
template <typename W>
__device__ void matmul_v3(float* out, const float* x, const W* w, int n, int d_in, int d_out) {
    __shared__ float partial[V3_SLICES][V3_COLS];  // [slice][column in block]
    int col = threadIdx.x % V3_COLS;    // neighbouring threads read neighbouring columns of W
    int slice = threadIdx.x / V3_COLS;  // k = slice, slice + 32, ...
    int c = blockIdx.x * V3_COLS + col;
    for (int r = blockIdx.y; r < n; r += gridDim.y) {  // the same r for the whole block
        const float* x_row = x + (size_t)r * d_in;
        float acc = 0.0f;
        if (c < d_out)
            for (int k = slice; k < d_in; k += V3_SLICES) acc += x_row[k] * to_f32(w[(size_t)k * d_out + c]);
        partial[slice][col] = acc;
        __syncthreads();  // every slice's sum is in shared memory
        if (slice == 0 && c < d_out) {
            float sum = partial[0][col];
            for (int s = 1; s < V3_SLICES; s++) sum += partial[s][col];
            out[(size_t)r * d_out + c] = sum;
        }
        __syncthreads();  // read before the next row overwrites them
    }
}
// ANCHOR_END: matmul_v3

extern "C" __global__ void __launch_bounds__(V3_COLS * V3_SLICES) matmul_v3_f32(float* out, const float* x, const float* w,
                                         int n, int d_in, int d_out) {
    matmul_v3<float>(out, x, w, n, d_in, d_out);
}

extern "C" __global__ void __launch_bounds__(V3_COLS * V3_SLICES) matmul_v3_bf16(float* out, const float* x, const __nv_bfloat16* w,
                                          int n, int d_in, int d_out) {
    matmul_v3<__nv_bfloat16>(out, x, w, n, d_in, d_out);
}
