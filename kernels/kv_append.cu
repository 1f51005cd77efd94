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
