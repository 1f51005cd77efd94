// attention_int8.cu — decode attention over an int8 KV cache, dequantized in registers
// (book: kv-quantization.md).
//
//   out[i][h] = softmax_j( q[i][h] · K'[j][h / kv_mul] / sqrt(head_dim) ) · V'[j][h / kv_mul],
//               over keys j = first_key ..= start_pos + i (the causal mask; attention.cu
//               says how a local layer's window moves the first key)
//   K'[j][g][d] = k_codes[j][g][d] * k_scales[j][g]       (int8, one f32 scale per token per KV head)
//   V'[j][g][d] = v_codes[j][g][d] * v_scales[j][g]
//
//   q, out:             [n, n_heads, head_dim] f32     row i is position start_pos + i
//   k_codes, v_codes:   [start_pos + n, n_kv_heads, head_dim] int8
//   k_scales, v_scales: [start_pos + n, n_kv_heads] f32
//
// The cache layout of `--kv int8` on the CPU (src/cache/quant/side.rs, Int8PerToken with
// group = head_dim); CPU twin: attention::attention_over with cache::quant::QuantRows.
//
// The kernel is attention.cu's v2 (one block of 4 warps per (row, head); warps over keys,
// lanes over head_dim; online softmax, Milakov & Gimelshein 2018) with one change: each
// lane loads its int8 codes (a quarter of the f32 bytes) and its row's scale, and multiplies
// them in registers. No f32 copy of the cache is ever made: decode is memory-bound, and the
// bytes read are what quantizing the cache saves. Like v2 it agrees with the CPU to ~1e-6
// relative (its score is a 32-lane shuffle sum, CUDA's expf is not Rust's exp), not bitwise.

#define NEG_INF __int_as_float(0xff800000)
#define WARPS 4
#define MAX_HEAD_DIM 256                 // the host refuses larger heads
#define DIMS_PER_LANE (MAX_HEAD_DIM / 32)

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;  // the same value in every lane
}

// ANCHOR: attention_int8
extern "C" __global__ void __launch_bounds__(WARPS * 32) attention_int8(float* out, const float* q, const signed char* k_codes,
                                          const float* k_scales, const signed char* v_codes,
                                          const float* v_scales, int n, int start_pos,
                                          int n_heads, int n_kv_heads, int head_dim, int window) {
    int h = blockIdx.x, i = blockIdx.y;  // grid: (n_heads, n)
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int pos = start_pos + i;
    int kv_head = h / (n_heads / n_kv_heads);
    int kv_dim = n_kv_heads * head_dim;
    const float* q_head = q + ((size_t)i * n_heads + h) * head_dim;
    float* out_head = out + ((size_t)i * n_heads + h) * head_dim;
    float scale = 1.0f / sqrtf((float)head_dim);

    float q_part[DIMS_PER_LANE], acc[DIMS_PER_LANE];
    for (int c = 0; c < DIMS_PER_LANE; c++) {
        int d = lane + 32 * c;
        q_part[c] = d < head_dim ? q_head[d] : 0.0f;
        acc[c] = 0.0f;
    }

    float m = NEG_INF, l = 0.0f;
    int first_key = window > 0 ? max(0, pos - window + 1) : 0;  // attention.cu's first_key
    for (int j = first_key + warp; j <= pos; j += WARPS) {
        size_t row = (size_t)j * kv_dim + kv_head * head_dim;
        // One scale per (token, KV head): the same for the whole warp, one load each.
        float k_scale = k_scales[(size_t)j * n_kv_heads + kv_head];
        float v_scale = v_scales[(size_t)j * n_kv_heads + kv_head];
        float partial = 0.0f;
        for (int c = 0; c < DIMS_PER_LANE; c++) {
            int d = lane + 32 * c;
            // Dequantized in a register: the f32 key never exists in memory.
            if (d < head_dim) partial += q_part[c] * ((float)k_codes[row + d] * k_scale);
        }
        float score = warp_sum(partial) * scale;
        float m_new = fmaxf(m, score);
        float correction = expf(m - m_new);
        float p = expf(score - m_new);
        l = l * correction + p;
        for (int c = 0; c < DIMS_PER_LANE; c++) {
            int d = lane + 32 * c;
            if (d < head_dim) acc[c] = acc[c] * correction + p * ((float)v_codes[row + d] * v_scale);
        }
        m = m_new;
    }

    // Merge the warps, as v2 does.
    __shared__ float warp_m[WARPS], warp_l[WARPS];
    __shared__ float warp_acc[WARPS][MAX_HEAD_DIM];
    if (lane == 0) { warp_m[warp] = m; warp_l[warp] = l; }
    for (int c = 0; c < DIMS_PER_LANE; c++) {
        int d = lane + 32 * c;
        if (d < head_dim) warp_acc[warp][d] = acc[c];
    }
    __syncthreads();
    float m_all = NEG_INF;
    for (int w = 0; w < WARPS; w++) m_all = fmaxf(m_all, warp_m[w]);
    float l_all = 0.0f;
    for (int w = 0; w < WARPS; w++) l_all += warp_l[w] * expf(warp_m[w] - m_all);
    for (int d = threadIdx.x; d < head_dim; d += WARPS * 32) {
        float o = 0.0f;
        for (int w = 0; w < WARPS; w++) o += warp_acc[w][d] * expf(warp_m[w] - m_all);
        out_head[d] = o / l_all;
    }
}
// ANCHOR_END: attention_int8
