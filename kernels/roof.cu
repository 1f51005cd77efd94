// roof.cu — the GPU's own ceilings, measured by kvlab itself: how many bytes per second it
// can read from memory, and how many f32 FLOPs per second it can do. `kvlab bench --device
// cuda` divides the model's figures by these (book: roofline.md, cuda.md), as the CPU bench
// divides by its own measured read and FMA roofs (src/lab/roof.rs).
//
//   roof_read:  partial[t] = sum of the float4s thread t visits  x: [n4] float4, partial: [threads]
//   roof_fma:   out[t] = sum over 8 chains of a = fmaf(a, mul, add), `iters` times each
//
// Launch: 1-D, 256 threads per block, any number of blocks (both loops are grid-stride or
// per-thread, so the grid only sets how much work is in flight).
//
// Why these shapes:
// - Decode reads every weight once per token, so its ceiling is a *read*, not a copy (a copy
//   also writes, and `bytes read + written` overstates what a read-only kernel gets). Each
//   thread loads 16-byte float4s, the widest load, so the memory system, not the number of
//   load instructions, is the limit; the sum is written out so the compiler cannot drop the
//   loads. The loop is unrolled by 4 so that four loads are in flight per thread.
// - An FMA is 2 FLOPs in one instruction. Eight independent chains per thread hide the FMA
//   latency (about 4 cycles) without relying on other warps; `mul` and `add` come from the
//   host, so the compiler cannot fold the chain into a constant.
// CPU twins: `cuda::roof::read_partials_cpu` and `cuda::roof::fma_chains_cpu`
// (src/cuda/roof.rs), bit for bit: the sums add small integers exactly, and fmaf rounds once,
// as Rust's f32::mul_add does.

extern "C" __global__ void __launch_bounds__(256) roof_read(const float4* x, long long n4, float* partial) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    float s = 0.0f;
    long long i = t;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        float4 a = x[i], b = x[i + stride], c = x[i + 2 * stride], d = x[i + 3 * stride];
        s += (a.x + a.y + a.z + a.w) + (b.x + b.y + b.z + b.w) + (c.x + c.y + c.z + c.w) +
             (d.x + d.y + d.z + d.w);
    }
    for (; i < n4; i += stride) {
        float4 a = x[i];
        s += a.x + a.y + a.z + a.w;
    }
    partial[t] = s;
}

extern "C" __global__ void __launch_bounds__(256) roof_fma(float* out, int iters, float mul, float add) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float a[8];
#pragma unroll
    for (int j = 0; j < 8; j++) a[j] = (float)((t + j) % 16);
    for (int k = 0; k < iters; k++) {
#pragma unroll
        for (int j = 0; j < 8; j++) a[j] = fmaf(a[j], mul, add);
    }
    out[t] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}
