// rope.cu — rotary position embeddings (Su et al. 2021), applied to queries and keys in place.
//
// Hugging Face's "rotate half" layout: in every head, dimension i pairs with i + head_dim/2,
// and the pair turns by the angle of the token's position:
//
//   x'[i]        = x[i] * cos - x[i + half] * sin
//   x'[i + half] = x[i + half] * cos + x[i] * sin
//
//   q: [n, n_heads, head_dim]   k: [n, n_kv_heads, head_dim]   (row i is position start_pos + i)
//   cos_table, sin_table: [max_positions, head_dim / 2], f32
//
// The tables are computed once on the host by ops::rope_cos_sin (f64, rounded to f32) and
// uploaded with the weights, so the GPU rotates by exactly the CPU's angles. The position is
// the token's true position (start_pos + i), never a row of the cache.
//
// Launch: 1-D, one thread per (row, head, pair): n * (n_heads + n_kv_heads) * head_dim/2
// threads, 256 per block. Queries and keys share one launch: one kernel fewer per layer.
//
// CPU twin: ops::apply_rope (src/ops.rs), called once for q and once for k.

extern "C" __global__ void __launch_bounds__(256) rope(float* q, float* k, const float* cos_table, const float* sin_table,
                                int n, int n_heads, int n_kv_heads, int head_dim, int start_pos) {
    int half = head_dim / 2;
    int heads = n_heads + n_kv_heads;  // query heads first, then key heads
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * heads * half) return;
    int i = (int)(idx / ((long long)heads * half));  // row (token) in this pass
    int rest = (int)(idx % ((long long)heads * half));
    int h = rest / half;  // head, counting query heads then key heads
    int p = rest % half;  // pair index

    float* head = h < n_heads ? q + ((size_t)i * n_heads + h) * head_dim
                              : k + ((size_t)i * n_kv_heads + (h - n_heads)) * head_dim;
    size_t t = (size_t)(start_pos + i) * half + p;
    float c = cos_table[t], s = sin_table[t];
    float a = head[p], b = head[p + half];
    head[p] = a * c - b * s;
    head[p + half] = b * c + a * s;
}
