// attention_splitk.cu — attention v3: split-K decode attention (Flash-Decoding, Dao, Haziza,
// Massa & Sizov 2023), for long contexts.
//
//   out[i][h] = softmax_j( q[i][h] · K[j][h / kv_mul] / sqrt(head_dim) ) · V[j][h / kv_mul],
//               j = lo_i ..= pos_i, pos_i = pos[0] + i            (attention.cu's formula;
//               lo_i = 0, or max(0, pos_i - window + 1) for a local layer's window)
//
// Why: attention.cu's v2 gives a decode step n_heads blocks (9 for SmolLM2). An H200 has 132
// SMs, so at a long context 123 of them sit idle while 9 walk thousands of keys each. v3 cuts
// the keys into chunks of CHUNK and gives every (head, chunk) its own block: at 4096 keys,
// 9 x 16 = 144 blocks. Each block produces a *partial* softmax over its chunk, unnormalised:
//
//   m_s = max score in chunk s,  l_s = sum exp(score - m_s),  acc_s = sum exp(score - m_s) · V
//
// and a second kernel merges the partials, exactly as v2 merges its warps:
//
//   m = max_s m_s,  out = sum_s acc_s · exp(m_s - m) / sum_s l_s · exp(m_s - m)
//
// Two launches instead of one, and (n, n_heads, n_splits, head_dim + 2) floats of scratch.
//
//   attention_v3_split    grid (n_heads, n, n_splits), 128 threads (4 warps). Inside a chunk,
//                         v2's scheme: warp w takes keys w, w+4, ..., lanes split head_dim,
//                         online softmax, warps merged through shared memory.
//   attention_v3_combine  grid (n_heads, n), 128 threads, one output dimension per thread.
//
// Bits: chunk s always covers keys max(s*CHUNK, lo) .. min((s+1)*CHUNK, pos+1), and the
// combine reads chunks lo / CHUNK ..= pos / CHUNK, in order (a window skips whole chunks). Both depend only on the row's position, never on how
// many rows the pass has or how big the key buffer (the cache's capacity) is: the naive and
// cached paths, both run through v3, get the same bits. v3 adds in another order than v1/v2,
// so it agrees with them (and the CPU) to ~1e-6, not bit for bit.
//
// `pos` lives in device memory (see fused.cu: what CUDA graphs need). `key_rows` is the
// number of rows the key and value buffers hold; a row whose position is not below it is
// left alone (the host checks positions before launching; this is the device-side fence).
//
// CPU twin: attention::causal_attention (src/attention.rs).

#define CHUNK 256                        // keys per split: ChunkKeys in src/cuda/ops_splitk.rs
#define WARPS 4
#define MAX_HEAD_DIM 256
#define DIMS_PER_LANE (MAX_HEAD_DIM / 32)
#define NEG_INF __int_as_float(0xff800000)

// The first key a query at `pos` sees (attention.cu's first_key).
__device__ __forceinline__ int first_key(int pos, int window) {
    return window > 0 ? max(0, pos - window + 1) : 0;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// part_acc: [n, n_heads, n_splits, head_dim]; part_ml: [n, n_heads, n_splits, 2] (m, l).
extern "C" __global__ void __launch_bounds__(WARPS * 32) attention_v3_split(
    float* part_acc, float* part_ml, const float* q, const float* keys, const float* values,
    const int* pos, int n, int n_heads, int n_kv_heads, int head_dim, int key_rows,
    int n_splits, int window) {
    int h = blockIdx.x, i = blockIdx.y, s = blockIdx.z;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int position = pos[0] + i;
    // ANCHOR: split_window
    int lo = first_key(position, window);
    int first = max(s * CHUNK, lo);
    // A chunk outside this row's keys (or a position the buffers do not hold): nothing to
    // do; the combine never reads it.
    if (position < 0 || position >= key_rows || first > position || (s + 1) * CHUNK <= lo) return;
    int last = min((s + 1) * CHUNK, position + 1);  // one past the chunk's last key
    // ANCHOR_END: split_window
    int kv_dim = n_kv_heads * head_dim;
    int kv_head = h / (n_heads / n_kv_heads);
    const float* q_head = q + ((size_t)i * n_heads + h) * head_dim;
    float scale = 1.0f / sqrtf((float)head_dim);

    float q_part[DIMS_PER_LANE], acc[DIMS_PER_LANE];
    for (int c = 0; c < DIMS_PER_LANE; c++) {
        int d = lane + 32 * c;
        q_part[c] = d < head_dim ? q_head[d] : 0.0f;
        acc[c] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    for (int j = first + warp; j < last; j += WARPS) {
        const float* key = keys + (size_t)j * kv_dim + kv_head * head_dim;
        const float* value = values + (size_t)j * kv_dim + kv_head * head_dim;
        float partial = 0.0f;
        for (int c = 0; c < DIMS_PER_LANE; c++) {
            int d = lane + 32 * c;
            if (d < head_dim) partial += q_part[c] * key[d];
        }
        float score = warp_sum(partial) * scale;
        float m_new = fmaxf(m, score);
        float correction = expf(m - m_new);
        float p = expf(score - m_new);
        l = l * correction + p;
        for (int c = 0; c < DIMS_PER_LANE; c++) {
            int d = lane + 32 * c;
            if (d < head_dim) acc[c] = acc[c] * correction + p * value[d];
        }
        m = m_new;
    }

    // Merge the 4 warps to the chunk's max, but do not divide: the combine divides once.
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
    size_t part = ((size_t)i * n_heads + h) * n_splits + s;
    if (threadIdx.x == 0) {
        float l_all = 0.0f;
        for (int w = 0; w < WARPS; w++) l_all += warp_l[w] * expf(warp_m[w] - m_all);
        part_ml[part * 2] = m_all;
        part_ml[part * 2 + 1] = l_all;
    }
    for (int d = threadIdx.x; d < head_dim; d += WARPS * 32) {
        float o = 0.0f;
        for (int w = 0; w < WARPS; w++) o += warp_acc[w][d] * expf(warp_m[w] - m_all);
        part_acc[part * head_dim + d] = o;
    }
}

// ANCHOR: attention_v3_combine
// out: [n, n_heads, head_dim].
extern "C" __global__ void __launch_bounds__(WARPS * 32) attention_v3_combine(
    float* out, const float* part_acc, const float* part_ml, const int* pos, int n, int n_heads,
    int head_dim, int key_rows, int n_splits, int window) {
    int h = blockIdx.x, i = blockIdx.y;
    int position = pos[0] + i;
    if (position < 0 || position >= key_rows) return;
    // ANCHOR: combine_window
    int from = first_key(max(position, 0), window) / CHUNK;  // chunks from ..= position / CHUNK
    int used = min(position / CHUNK + 1, n_splits);
    // ANCHOR_END: combine_window
    size_t first = ((size_t)i * n_heads + h) * n_splits;
    float m_all = NEG_INF;
    for (int s = from; s < used; s++) m_all = fmaxf(m_all, part_ml[(first + s) * 2]);
    float l_all = 0.0f;
    for (int s = from; s < used; s++) {
        l_all += part_ml[(first + s) * 2 + 1] * expf(part_ml[(first + s) * 2] - m_all);
    }
    float* out_head = out + ((size_t)i * n_heads + h) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += WARPS * 32) {
        float o = 0.0f;
        for (int s = from; s < used; s++) {
            o += part_acc[(first + s) * head_dim + d] * expf(part_ml[(first + s) * 2] - m_all);
        }
        out_head[d] = o / l_all;
    }
}
// ANCHOR_END: attention_v3_combine
