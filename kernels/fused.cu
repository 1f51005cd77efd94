// fused.cu — the decode step's kernels, fused so that one launch does the work of two or
// three (kvlab's v1 of each fusion; the unfused kernels stay, and are these kernels' twins).
//
// Why fuse: at batch 1 a 135M model's decode step is ~450 launches of kernels that each
// finish in a few µs; launch overhead, not memory bandwidth, sets the pace. Fusing removes
// launches and the round trips of intermediate vectors through memory:
//
//   fused_rmsnorm_matmul   RMSNorm as the matmul's prologue, and up to three matrices that
//                          share that input in one launch: Q, K and V (+ their biases), or
//                          gate and up.                  replaces rmsnorm + 3 matmuls (+ biases)
//   fused_matmul_residual  x += in · W: the residual add as the matmul's epilogue (the O
//                          projection).                  replaces matmul + add_inplace
//   fused_swiglu_matmul_residual   x += (silu(gate) * up) · W_down: SwiGLU as the down
//                          projection's prologue, the residual as its epilogue.
//                                                        replaces swiglu + matmul + add_inplace
//   rope_kv_append         rotate q and k, write the rotated k and v into the cache.
//                                                        replaces rope + kv_append
//
// A layer goes from 15 launches to 7 (with attention_splitk.cu's two).
//
// The matmuls are v1-shaped (one thread per output column; see matmul.cu): a block of 256
// threads owns one row r and 256 output columns. The prologue puts row r's *input* — after
// RMSNorm, or after SwiGLU — into shared memory once per block, and every thread then runs
// matmul.cu's chain acc = fma(row[k], w[k][c], acc), k = 0, 1, ..., from 0.
//
// Bits: every fused kernel computes each value with the very expressions, in the very order,
// of the unfused kernels it replaces (rmsnorm.cu's 256-thread reduction, swiglu.cu's
// g / (1 + expf(-g)) * up, rope.cu's a*c - b*s, and an epilogue x + acc that is add_inplace's
// x + proj). So fused and unfused give the same bits (tests/cuda_kernels.rs checks it), and
// each row's result depends on that row only: the naive and cached paths, which run these
// same kernels, stay bitwise equal.
//
// CPU twins: ops::rmsnorm + ops::matmul (+ ops::add_bias), ops::matmul + ops::add_inplace,
// ops::swiglu + ops::matmul + ops::add_inplace, ops::apply_rope + PreallocatedCache::write.
//
// The position of a pass (`start_pos`) is read from device memory (`pos[0]`), not passed as a
// number: a CUDA graph replays its kernels with the arguments they were captured with, so a
// value that changes every step must live in memory the host rewrites between replays.
// Kernels that index with it check it against the buffer sizes they were given.

#include <cuda_bf16.h>

#define THREADS 256

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// 1 / sqrt(mean(x_row^2) + eps), by rmsnorm.cu's reduction, line for line (same 256 threads,
// same strides, same shuffles): the same bits as the unfused kernel.
__device__ float block_inv_rms(const float* x_row, int dim, float eps) {
    float sum = 0.0f;
    for (int i = threadIdx.x; i < dim; i += THREADS) sum += x_row[i] * x_row[i];
    __shared__ float warp_sums[THREADS / 32];
    __shared__ float inv_rms;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    sum = warp_sum(sum);
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        float total = lane < THREADS / 32 ? warp_sums[lane] : 0.0f;
        total = warp_sum(total);
        if (lane == 0) inv_rms = 1.0f / sqrtf(total / (float)dim + eps);
    }
    __syncthreads();
    return inv_rms;
}

// matmul.cu's chain for one output: sum_k row[k] * w[k][col], in order of k, from 0.
template <typename W>
__device__ __forceinline__ float dot_column(const float* row, const W* w, int d_in, int width,
                                            int col) {
    float acc = 0.0f;
    for (int k = 0; k < d_in; k++) acc += row[k] * to_f32(w[(size_t)k * width + col]);
    return acc;
}

// ---------------------------------------------------------------------------------------------
// RMSNorm prologue, up to three outputs: out_t[r][c] = (rmsnorm(x[r]) · w_t)[c] (+ bias_t[c]).
// Launch: grid (ceil((d_a + d_b + d_c) / 256), n), 256 threads, d_in floats of dynamic shared
// memory. Output t is skipped when its width is 0; bias_t is read only when bit t of
// bias_mask is set. Columns 0..d_a go to out_a, then d_b to out_b, then d_c to out_c.

// ANCHOR: rmsnorm_matmul
template <typename W>
__device__ void rmsnorm_matmul(float* out_a, float* out_b, float* out_c, const float* x,
                               const float* norm_w, float eps, const W* w_a, const W* w_b,
                               const W* w_c, const float* bias_a, const float* bias_b,
                               const float* bias_c, int bias_mask, int n, int d_in, int d_a,
                               int d_b, int d_c) {
    extern __shared__ float row[];  // [d_in] this block's row, normalized
    int r = blockIdx.y;
    if (r >= n) return;
    const float* x_row = x + (size_t)r * d_in;
    float inv_rms = block_inv_rms(x_row, d_in, eps);
    for (int i = threadIdx.x; i < d_in; i += THREADS) row[i] = norm_w[i] * (x_row[i] * inv_rms);
    __syncthreads();

    int c = blockIdx.x * THREADS + threadIdx.x;
    float* out; const W* w; const float* bias; int width, col, t;
    if (c < d_a) { out = out_a; w = w_a; bias = bias_a; width = d_a; col = c; t = 0; }
    else if (c < d_a + d_b) { out = out_b; w = w_b; bias = bias_b; width = d_b; col = c - d_a; t = 1; }
    else if (c < d_a + d_b + d_c) { out = out_c; w = w_c; bias = bias_c; width = d_c; col = c - d_a - d_b; t = 2; }
    else return;
    float acc = dot_column(row, w, d_in, width, col);
    if (bias_mask & (1 << t)) acc += bias[col];  // add_bias's x + bias
    out[(size_t)r * width + col] = acc;
}
// ANCHOR_END: rmsnorm_matmul

extern "C" __global__ void __launch_bounds__(THREADS) fused_rmsnorm_matmul_f32(
    float* out_a, float* out_b, float* out_c, const float* x, const float* norm_w, float eps,
    const float* w_a, const float* w_b, const float* w_c, const float* bias_a,
    const float* bias_b, const float* bias_c, int bias_mask, int n, int d_in, int d_a, int d_b,
    int d_c) {
    rmsnorm_matmul<float>(out_a, out_b, out_c, x, norm_w, eps, w_a, w_b, w_c, bias_a, bias_b,
                          bias_c, bias_mask, n, d_in, d_a, d_b, d_c);
}

extern "C" __global__ void __launch_bounds__(THREADS) fused_rmsnorm_matmul_bf16(
    float* out_a, float* out_b, float* out_c, const float* x, const float* norm_w, float eps,
    const __nv_bfloat16* w_a, const __nv_bfloat16* w_b, const __nv_bfloat16* w_c,
    const float* bias_a, const float* bias_b, const float* bias_c, int bias_mask, int n,
    int d_in, int d_a, int d_b, int d_c) {
    rmsnorm_matmul<__nv_bfloat16>(out_a, out_b, out_c, x, norm_w, eps, w_a, w_b, w_c, bias_a,
                                  bias_b, bias_c, bias_mask, n, d_in, d_a, d_b, d_c);
}

// ---------------------------------------------------------------------------------------------
// Residual epilogue: x[r][c] += (in[r] · w)[c], with in = a (plain) or silu(a) * b (SwiGLU).
// Launch: grid (ceil(d_out / 256), n), 256 threads, d_in floats of dynamic shared memory.

template <typename W, bool SWIGLU>
__device__ void matmul_residual(float* x, const float* a, const float* b, const W* w, int n,
                                int d_in, int d_out) {
    extern __shared__ float row[];  // [d_in] this block's input row
    int r = blockIdx.y;
    if (r >= n) return;
    const float* a_row = a + (size_t)r * d_in;
    const float* b_row = b + (size_t)r * d_in;
    for (int i = threadIdx.x; i < d_in; i += THREADS) {
        if (SWIGLU) {
            float g = a_row[i];
            float silu = g / (1.0f + expf(-g));  // swiglu.cu's expression
            row[i] = silu * b_row[i];
        } else {
            row[i] = a_row[i];
        }
    }
    __syncthreads();
    int c = blockIdx.x * THREADS + threadIdx.x;
    if (c >= d_out) return;
    float acc = dot_column(row, w, d_in, d_out, c);
    size_t idx = (size_t)r * d_out + c;
    x[idx] = x[idx] + acc;  // add_inplace's x + proj
}

extern "C" __global__ void __launch_bounds__(THREADS) fused_matmul_residual_f32(
    float* x, const float* in, const float* w, int n, int d_in, int d_out) {
    matmul_residual<float, false>(x, in, in, w, n, d_in, d_out);
}

extern "C" __global__ void __launch_bounds__(THREADS) fused_matmul_residual_bf16(
    float* x, const float* in, const __nv_bfloat16* w, int n, int d_in, int d_out) {
    matmul_residual<__nv_bfloat16, false>(x, in, in, w, n, d_in, d_out);
}

extern "C" __global__ void __launch_bounds__(THREADS) fused_swiglu_matmul_residual_f32(
    float* x, const float* gate, const float* up, const float* w, int n, int d_in, int d_out) {
    matmul_residual<float, true>(x, gate, up, w, n, d_in, d_out);
}

extern "C" __global__ void __launch_bounds__(THREADS) fused_swiglu_matmul_residual_bf16(
    float* x, const float* gate, const float* up, const __nv_bfloat16* w, int n, int d_in,
    int d_out) {
    matmul_residual<__nv_bfloat16, true>(x, gate, up, w, n, d_in, d_out);
}

// ---------------------------------------------------------------------------------------------
// RoPE + KV append. q: [n, n_heads, head_dim] rotated in place; k, v: [n, n_kv_heads, head_dim]
// read; the rotated k and v written to rows pos[0] + i of layer `layer` of the caches
// [layers, capacity, n_kv_heads * head_dim]. cos/sin: [table_rows, head_dim / 2].
// Launch: 1-D, one thread per (row, head, pair): n * (n_heads + n_kv_heads) * head_dim/2
// threads, 256 per block. A key head's thread also copies the two values of its pair.

extern "C" __global__ void __launch_bounds__(THREADS) rope_kv_append(
    float* q, const float* k, const float* v, float* k_cache, float* v_cache,
    const float* cos_table, const float* sin_table, const int* pos, int n, int n_heads,
    int n_kv_heads, int head_dim, int layer, int capacity, int table_rows) {
    int half = head_dim / 2;
    int heads = n_heads + n_kv_heads;
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * heads * half) return;
    int i = (int)(idx / ((long long)heads * half));
    int rest = (int)(idx % ((long long)heads * half));
    int h = rest / half, p = rest % half;
    int position = pos[0] + i;
    // The host checked pos + n against both; this keeps a wrong pos[0] from writing anywhere.
    if (position < 0 || position >= capacity || position >= table_rows) return;
    size_t t = (size_t)position * half + p;
    float c = cos_table[t], s = sin_table[t];
    if (h < n_heads) {
        float* head = q + ((size_t)i * n_heads + h) * head_dim;
        float a = head[p], b = head[p + half];
        head[p] = a * c - b * s;  // rope.cu's expressions
        head[p + half] = b * c + a * s;
    } else {
        int kv_dim = n_kv_heads * head_dim;
        size_t src = (size_t)i * kv_dim + (size_t)(h - n_heads) * head_dim;
        size_t dst = ((size_t)layer * capacity + position) * kv_dim + (size_t)(h - n_heads) * head_dim;
        float a = k[src + p], b = k[src + p + half];
        k_cache[dst + p] = a * c - b * s;
        k_cache[dst + p + half] = b * c + a * s;
        v_cache[dst + p] = v[src + p];
        v_cache[dst + p + half] = v[src + p + half];
    }
}
