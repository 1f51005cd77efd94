// attention.cu — causal self-attention with grouped-query heads (GQA, Ainslie et al. 2023):
//
//   out[i][h] = softmax_j( q[i][h] · K[j][h / kv_mul] / sqrt(head_dim) ) · V[j][h / kv_mul],
//               over keys j = first_key(pos) ..= pos, pos = start_pos + i (the causal mask)
//
//   first_key(pos) = 0 for a layer that sees the whole prefix (window = 0), and
//   max(0, pos - window + 1) for a local layer of Gemma 3 (window = 512): it sees its own
//   position and the window - 1 before it (transformers: kv_idx > q_idx - sliding_window).
//   The window is a launch argument, one per layer; it depends only on pos, like the mask.
//
//   q, out:        [n, n_heads, head_dim] f32     row i is position start_pos + i
//   keys, values:  [start_pos + n, n_kv_heads, head_dim] f32, rows 0, 1, 2, ... (a row stride
//                  of n_kv_heads * head_dim floats)
//   kv_mul = n_heads / n_kv_heads: query heads h = 0..kv_mul-1 read KV head 0, and so on.
//
// One kernel serves both generation paths, exactly like causal_attention on the CPU:
//   - naive path: start_pos = 0, n = the whole sequence, keys/values = this pass's K and V;
//   - cached path: keys/values = one layer of the KV cache ([capacity, n_kv_heads, head_dim],
//     of which rows 0..start_pos+n are filled); n = the prompt for a prefill, n = 1 for a
//     decode step (then the mask is a no-op: the one query sees every cached key);
//   - several new tokens meeting a warm cache get the rectangular mask: row i sees keys
//     0 ..= start_pos + i.
//
// CPU twin: attention::causal_attention (src/attention.rs); attention_paged's twin is
// attention::attention_over with attention::Paged rows.
//
//   v1  one thread per (row i, head h): a line-by-line port of the CPU code. Launch: 1-D,
//       n * n_heads threads, 128 per block. The thread walks the keys three times (max,
//       sum of exponentials, weighted sum of values), recomputing each score instead of
//       storing it, so it needs no scratch memory. It is slow where it matters most: a
//       decode step has n = 1, so the whole GPU runs n_heads threads (9 for SmolLM2).
//
//   v2  one block per (row i, head h), the decode-attention kernel: a decode step launches
//       n_heads blocks, each of 4 warps. Warp w takes keys w, w+4, w+8, ...; its 32 lanes
//       split head_dim (lane l holds dimensions l, l+32, ...), so a score is 32 partial dot
//       products and a warp shuffle. Each warp keeps an *online softmax* (Milakov &
//       Gimelshein 2018, the idea inside FlashAttention): a running max m, a running sum l
//       of exp(score - m), and a running weighted sum of values, rescaled by exp(m_old -
//       m_new) whenever the max grows. One pass over the keys, no score array. At the end
//       the 4 warps merge their (m, l, acc) through shared memory.
//
// Both versions compute a row's output from that row's query and keys 0..=pos only, in an
// order that depends only on pos: the naive and cached paths get bitwise-identical results.
// v1 forms each score as the CPU does (an FMA chain over d), v2 splits it across 32 lanes;
// and CUDA's expf is not Rust's exp. So GPU and CPU agree to ~1e-6 relative, not bitwise.

#define NEG_INF __int_as_float(0xff800000)

// ANCHOR: first_key
// The first key a query at `pos` sees: the whole prefix, or the last `window` positions.
__device__ __forceinline__ int first_key(int pos, int window) {
    return window > 0 ? max(0, pos - window + 1) : 0;
}
// ANCHOR_END: first_key

// ---------------------------------------------------------------------------------------------
// v1: one thread per (query row, head).

extern "C" __global__ void __launch_bounds__(128) attention_v1(float* out, const float* q, const float* keys,
                                        const float* values, int n, int start_pos, int n_heads,
                                        int n_kv_heads, int head_dim, int window) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // = i * n_heads + h
    if (idx >= n * n_heads) return;
    int i = idx / n_heads, h = idx % n_heads;
    int pos = start_pos + i;  // this query's position: it sees keys lo..=pos
    int lo = first_key(pos, window);
    int kv_dim = n_kv_heads * head_dim;
    int kv_head = h / (n_heads / n_kv_heads);  // GQA: the KV head this query head reads
    const float* q_head = q + (size_t)idx * head_dim;
    float* out_head = out + (size_t)idx * head_dim;
    float scale = 1.0f / sqrtf((float)head_dim);

    // Pass 1: the largest score (subtracting it keeps expf from overflowing).
    float max_score = NEG_INF;
    for (int j = lo; j <= pos; j++) {
        const float* key = keys + (size_t)j * kv_dim + kv_head * head_dim;
        float dot = 0.0f;
        for (int d = 0; d < head_dim; d++) dot += q_head[d] * key[d];
        max_score = fmaxf(max_score, dot * scale);
    }
    // Pass 2: the softmax denominator.
    float sum = 0.0f;
    for (int j = lo; j <= pos; j++) {
        const float* key = keys + (size_t)j * kv_dim + kv_head * head_dim;
        float dot = 0.0f;
        for (int d = 0; d < head_dim; d++) dot += q_head[d] * key[d];
        sum += expf(dot * scale - max_score);
    }
    // Pass 3: out = sum_j p_j * V[j], accumulated in `out` (this thread owns that row-head).
    for (int d = 0; d < head_dim; d++) out_head[d] = 0.0f;
    for (int j = lo; j <= pos; j++) {
        const float* key = keys + (size_t)j * kv_dim + kv_head * head_dim;
        const float* value = values + (size_t)j * kv_dim + kv_head * head_dim;
        float dot = 0.0f;
        for (int d = 0; d < head_dim; d++) dot += q_head[d] * key[d];
        float p = expf(dot * scale - max_score) / sum;
        for (int d = 0; d < head_dim; d++) out_head[d] += p * value[d];
    }
}

// ---------------------------------------------------------------------------------------------
// v2: one block per (query row, head), warps over keys, lanes over head_dim, online softmax.

#define WARPS 4
#define MAX_HEAD_DIM 256                 // the host refuses larger heads
#define DIMS_PER_LANE (MAX_HEAD_DIM / 32)

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;  // the same value in every lane
}

// Where attention finds position j's key and value (the GPU twin of the CPU's `KvRows`):
// rows one after another (a contiguous cache, or this pass's K and V)...
struct ContiguousRows {
    const float* keys;
    const float* values;
    int kv_dim;
    __device__ const float* key(int j) const { return keys + (size_t)j * kv_dim; }
    __device__ const float* value(int j) const { return values + (size_t)j * kv_dim; }
};

// ANCHOR: paged_rows
// ...or PagedAttention's blocks (Kwon et al. 2023): position j is row j % block_size of
// block block_table[j / block_size] of a pool [n_blocks, block_size, kv_dim] (one layer).
// CPU twin: attention::Paged (src/attention.rs). The only difference is this address.
struct PagedRows {
    const float* k_pool;
    const float* v_pool;
    const int* block_table;
    int block_size;
    int kv_dim;
    __device__ size_t row(int j) const {
        return ((size_t)block_table[j / block_size] * block_size + j % block_size) * kv_dim;
    }
    __device__ const float* key(int j) const { return k_pool + row(j); }
    __device__ const float* value(int j) const { return v_pool + row(j); }
};
// ANCHOR_END: paged_rows

// The body of v2, for any layout: the arithmetic per (row, head) is the same whatever
// `rows` is, so the contiguous and paged kernels give bitwise-identical outputs.
template <typename Rows>
__device__ void attention_v2_rows(float* out, const float* q, Rows rows, int n, int start_pos,
                                  int n_heads, int n_kv_heads, int head_dim, int window) {
    int h = blockIdx.x, i = blockIdx.y;  // grid: (n_heads, n)
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int pos = start_pos + i;
    int kv_head = h / (n_heads / n_kv_heads);
    const float* q_head = q + ((size_t)i * n_heads + h) * head_dim;
    float* out_head = out + ((size_t)i * n_heads + h) * head_dim;
    float scale = 1.0f / sqrtf((float)head_dim);

    // This lane's share of the query, and of the running weighted sum of values.
    float q_part[DIMS_PER_LANE], acc[DIMS_PER_LANE];
    for (int c = 0; c < DIMS_PER_LANE; c++) {
        int d = lane + 32 * c;
        q_part[c] = d < head_dim ? q_head[d] : 0.0f;
        acc[c] = 0.0f;
    }

    // One pass over this warp's keys, with the online softmax.
    float m = NEG_INF;  // the largest score so far
    float l = 0.0f;     // sum of exp(score - m) so far
    for (int j = first_key(pos, window) + warp; j <= pos; j += WARPS) {
        const float* key = rows.key(j) + kv_head * head_dim;
        const float* value = rows.value(j) + kv_head * head_dim;
        float partial = 0.0f;
        for (int c = 0; c < DIMS_PER_LANE; c++) {
            int d = lane + 32 * c;
            if (d < head_dim) partial += q_part[c] * key[d];
        }
        float score = warp_sum(partial) * scale;
        float m_new = fmaxf(m, score);
        float correction = expf(m - m_new);  // rescales what was summed under the old max (0 at first)
        float p = expf(score - m_new);
        l = l * correction + p;
        for (int c = 0; c < DIMS_PER_LANE; c++) {
            int d = lane + 32 * c;
            if (d < head_dim) acc[c] = acc[c] * correction + p * value[d];
        }
        m = m_new;
    }

    // Merge the warps: rescale each to the common max, add, divide by the common sum.
    // A warp that had no key (fewer than WARPS keys) has m = -inf and l = 0, and weighs exp(-inf) = 0.
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

extern "C" __global__ void __launch_bounds__(WARPS * 32) attention_v2(float* out, const float* q, const float* keys,
                                        const float* values, int n, int start_pos, int n_heads,
                                        int n_kv_heads, int head_dim, int window) {
    ContiguousRows rows = {keys, values, n_kv_heads * head_dim};
    attention_v2_rows(out, q, rows, n, start_pos, n_heads, n_kv_heads, head_dim, window);
}

// attention_paged: v2 reading keys and values through a block table. Launch as v2:
// grid (n_heads, n), 128 threads. k_pool, v_pool: [n_blocks, block_size, n_kv_heads, head_dim];
// block_table: the sequence's blocks in order, covering positions 0..start_pos+n (entries
// below a window's first key are never read).
extern "C" __global__ void __launch_bounds__(WARPS * 32) attention_paged(float* out, const float* q, const float* k_pool,
                                           const float* v_pool, const int* block_table,
                                           int block_size, int n, int start_pos, int n_heads,
                                           int n_kv_heads, int head_dim, int window) {
    PagedRows rows = {k_pool, v_pool, block_table, block_size, n_kv_heads * head_dim};
    attention_v2_rows(out, q, rows, n, start_pos, n_heads, n_kv_heads, head_dim, window);
}
