// embedding.cu — token embedding: copy row `tokens[r]` of the table into row `r` of `out`.
//
//   out[r][d] = table[tokens[r]][d] * scale     out: [n, dim] f32, table: [vocab, dim], tokens: [n]
//
// `scale` is 1 for Llama (x * 1.0f is x exactly: the same bits as a plain copy) and √dim
// for Gemma, which scales its embedding (not its tied LM head); the CPU multiplies the
// copied row by the same f32, so the product is the CPU's to the bit.
//
// Launch: 1-D, one thread per output element (n * dim threads), 256 per block.
// Consecutive threads copy consecutive `d` of one row, so reads and writes are coalesced.
// The host checks every token id against the vocabulary before copying it to the GPU (a bad
// id is an Error::TokenOutOfRange). The kernel checks again, because the ids sit in device
// memory that a CUDA graph replays with whatever the host last wrote there: an id >= vocab
// gives a row of NaN (visible downstream), never an out-of-bounds read.
//
// CPU twin: the `x.row_mut(i).assign(&self.embed.row(token))` loop in Model::forward_hidden
// (src/model.rs). Two entry points: the table in f32, or in bf16 (widened to f32 on the fly:
// bf16 -> f32 is exact, so the f32 and bf16 models start from the same numbers they store).

#include <cuda_bf16.h>

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ void embedding(float* out, const T* table, const unsigned int* tokens, int n, int dim,
                          int vocab, float scale) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * dim) return;
    int r = (int)(idx / dim);
    int d = (int)(idx % dim);
    unsigned int token = tokens[r];
    out[idx] = token < (unsigned int)vocab ? to_f32(table[(size_t)token * dim + d]) * scale
                                           : __int_as_float(0x7fc00000);
}

extern "C" __global__ void __launch_bounds__(256) embedding_f32(float* out, const float* table,
                                         const unsigned int* tokens, int n, int dim, int vocab,
                                         float scale) {
    embedding<float>(out, table, tokens, n, dim, vocab, scale);
}

extern "C" __global__ void __launch_bounds__(256) embedding_bf16(float* out, const __nv_bfloat16* table,
                                          const unsigned int* tokens, int n, int dim, int vocab,
                                          float scale) {
    embedding<__nv_bfloat16>(out, table, tokens, n, dim, vocab, scale);
}
