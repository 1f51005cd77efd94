// kv_append.cu — write this pass's keys and values into the KV cache.
//
//   k_cache, v_cache: [n_layers, capacity, n_kv_heads * head_dim] f32   (llama2.c's key_cache)
//   k, v:             [n, n_kv_heads * head_dim] f32                   (the n new positions)
//
//   k_cache[layer][start_pos + i][j] = k[i][j]   (and the same for v), for i < n, j < kv_dim
//
// The cache holds n_kv_heads heads, never the repeated query-head copies: under GQA it is
// n_heads / n_kv_heads times smaller (Ainslie et al. 2023). The host has checked that
// start_pos + n <= capacity (Error::CacheFull otherwise) before anything is written.
//
// Launch: 1-D, one thread per element of k (n * kv_dim threads), 256 per block; each thread
// copies one key and one value.
// CPU twin: KvCache::write (src/kv_cache.rs).

extern "C" __global__ void __launch_bounds__(256) kv_append(float* k_cache, float* v_cache, const float* k, const float* v,
                                     int layer, int capacity, int start_pos, int n, int kv_dim) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * kv_dim) return;
    // Row `start_pos` of layer `layer` starts at (layer * capacity + start_pos) * kv_dim, and
    // the n new rows are contiguous from there, just as they are in k and v.
    size_t dst = ((size_t)layer * capacity + start_pos) * kv_dim + idx;
    k_cache[dst] = k[idx];
    v_cache[dst] = v[idx];
}

// ANCHOR: kv_append_int8
// kv_append_int8 — the same write into an int8 cache (`--kv int8`): each new row is
// quantized as it is stored, one symmetric scale per position per KV head.
//
//   k_codes, v_codes:   [n_layers, capacity, n_kv_heads, head_dim] int8
//   k_scales, v_scales: [n_layers, capacity, n_kv_heads] f32
//   scale = max_d |x[d]| / 127,   code[d] = clamp(round(x[d] / scale), -127, 127)   (0 when scale is 0)
//
// The CPU's formula (src/cache/quant/codec.rs, quantize_i8), bit for bit: the max of
// absolute values is exact in any order, the division is IEEE (NVRTC without fast math),
// and roundf rounds half away from zero as Rust's f32::round. So the codes and scales are
// the CPU cache's, and attention_int8 reads what the CPU's int8 cache holds.
//
// Launch: grid (n_kv_heads, n), one warp per (position, KV head); lane l handles
// dimensions l, l + 32, ... of the head.
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;  // the same value in every lane
}

__device__ void quantize_head(signed char* codes, float* scale_out, const float* x, int head_dim, int lane) {
    float abs_max = 0.0f;
    for (int d = lane; d < head_dim; d += 32) abs_max = fmaxf(abs_max, fabsf(x[d]));
    abs_max = warp_max(abs_max);
    float scale = abs_max / 127.0f;
    for (int d = lane; d < head_dim; d += 32) {
        float level = scale > 0.0f ? roundf(x[d] / scale) : 0.0f;
        codes[d] = (signed char)fminf(fmaxf(level, -127.0f), 127.0f);
    }
    if (lane == 0) *scale_out = scale;
}

extern "C" __global__ void __launch_bounds__(32) kv_append_int8(signed char* k_codes, float* k_scales,
                                     signed char* v_codes, float* v_scales, const float* k,
                                     const float* v, int layer, int capacity, int start_pos,
                                     int n_kv_heads, int head_dim) {
    int g = blockIdx.x, i = blockIdx.y, lane = threadIdx.x;  // KV head g of new position i
    size_t kv_dim = (size_t)n_kv_heads * head_dim;
    size_t row = (size_t)layer * capacity + start_pos + i;  // the cache row it goes to
    size_t in = (size_t)i * kv_dim + (size_t)g * head_dim, out = row * kv_dim + (size_t)g * head_dim;
    quantize_head(k_codes + out, k_scales + row * n_kv_heads + g, k + in, head_dim, lane);
    quantize_head(v_codes + out, v_scales + row * n_kv_heads + g, v + in, head_dim, lane);
}
// ANCHOR_END: kv_append_int8
