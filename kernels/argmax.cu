// argmax.cu — index of the largest logit (greedy decoding without copying the logits back).
//
//   out[0] = the smallest i such that x[i] is the maximum of x[0..count)
//
// Ties go to the lowest index, as ops::argmax (src/ops.rs) and torch.argmax do.
//
// Launch: ONE block of 1024 threads (grid = 1). Each thread scans x[tid], x[tid + 1024], ...
// keeping its best (value, index); warps then merge pairs with shuffles, and warp 0 merges the
// 32 warp winners. One block is plenty: a 49k-entry vocabulary is 48 loads per thread, and
// the point is to copy 4 bytes to the host instead of 4 * vocab.
//
// CPU twin: ops::argmax (src/ops.rs). NaN logits are never picked here (NaN > v is false);
// the CPU can only return a NaN if it sits at index 0.

#define THREADS 1024

// Is (v, i) better than (best_v, best_i)? Larger value, or equal value and lower index.
__device__ __forceinline__ bool better(float v, int i, float best_v, int best_i) {
    return v > best_v || (v == best_v && i < best_i);
}

// The best pair across a warp's 32 lanes; every lane ends with the same winner.
__device__ __forceinline__ void warp_best(float& v, int& i) {
    for (int offset = 16; offset > 0; offset /= 2) {
        float other_v = __shfl_xor_sync(0xffffffffu, v, offset);
        int other_i = __shfl_xor_sync(0xffffffffu, i, offset);
        if (better(other_v, other_i, v, i)) { v = other_v; i = other_i; }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) argmax(unsigned int* out, const float* x, int count) {
    const float neg_inf = __int_as_float(0xff800000);
    const int no_index = 0x7fffffff;  // loses every tie
    float best_v = neg_inf;
    int best_i = no_index;
    for (int i = threadIdx.x; i < count; i += THREADS) {
        if (better(x[i], i, best_v, best_i)) { best_v = x[i]; best_i = i; }
    }

    __shared__ float warp_v[THREADS / 32];
    __shared__ int warp_i[THREADS / 32];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    warp_best(best_v, best_i);
    if (lane == 0) { warp_v[warp] = best_v; warp_i[warp] = best_i; }
    __syncthreads();
    if (warp == 0) {
        best_v = warp_v[lane];  // THREADS / 32 == 32: one warp winner per lane
        best_i = warp_i[lane];
        warp_best(best_v, best_i);
        // All -inf (or NaN) logits: fall back to index 0, as the CPU does.
        if (lane == 0) out[0] = best_i == no_index ? 0u : (unsigned int)best_i;
    }
}
