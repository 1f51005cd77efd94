// cudacpu_device.h — what a kernels/*.cu file sees when the CPU emulator compiles it as
// host C++ (g++ -include this file). Chapter "The CUDA backend", section "The kernels on
// your CPU".
//
// CUDA C is C++ with a handful of extras. On the CPU each extra becomes something plain:
//   __global__, __device__, __forceinline__, __launch_bounds__(n)   erased (the launch
//       bound is read by tools/cudacpu/gen.py and checked at every launch instead)
//   __shared__ T x[N];        a function-local static: one copy, shared by every thread of
//       the block, because the emulator runs one block at a time
//   extern __shared__ T x[];  rewritten by gen.py into a pointer to the launch's dynamic
//       shared memory (the `sharedMemBytes` of cuLaunchKernel)
//   threadIdx, blockIdx, blockDim, gridDim    the running fiber's coordinates
//   __syncthreads(), __shfl_*_sync()          calls into the fiber scheduler (runtime.cpp):
//       the calling CUDA thread stops there until the barrier or the shuffle releases it
//   __nv_bfloat16             a 16-bit struct with the same bits as cuda_bf16.h's
// Everything else (the arithmetic, the indexing, the loops) is the kernel's own code,
// compiled as it is: that is what the emulator checks.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace cudacpu {

struct dim3 {
    unsigned int x, y, z;
};

// The coordinates of the running CUDA thread. One launch runs at a time in the whole
// process (a lock in driver.cpp), so plain globals are enough; the scheduler points
// `current_thread_idx` at the running fiber's coordinates before it switches to it.
// (Thread-locals would let two test threads run kernels at once, but in a library loaded
// with dlopen every access to one is a call: they made the emulator 30 % slower.)
extern dim3* current_thread_idx;
extern dim3 current_block_idx, current_block_dim, current_grid_dim;

// Where a barrier or a shuffle was written: reported when a launch deadlocks.
struct Site {
    const char* file;
    int line;
};

enum ShuffleKind { SHFL_IDX = 0, SHFL_UP = 1, SHFL_DOWN = 2, SHFL_XOR = 3 };

void syncthreads(Site site);
// Hands this lane's `size` bytes at `value` to its warp and waits until every lane of
// `mask` has done the same; then overwrites `value` with the source lane's bytes.
void shuffle(unsigned int mask, void* value, int size, ShuffleKind kind, int arg, int width,
             Site site);
void* dynamic_shared();

template <typename T>
inline T shfl(ShuffleKind kind, unsigned int mask, T value, int arg, Site site,
              int width = 32) {
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    shuffle(mask, &value, (int)sizeof(T), kind, arg, width, site);
    return value;
}

// The device library the kernels call, in the namespace every kernel file `using`s.
namespace device {

struct __nv_bfloat16 {
    uint16_t bits;
};

// CUDA's vector type for 16-byte loads (kernels/roof.cu), with its alignment.
struct alignas(16) float4 {
    float x, y, z, w;
};

inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
inline float __uint_as_float(unsigned int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
inline int __float_as_int(float f) {
    int i;
    std::memcpy(&i, &f, 4);
    return i;
}
inline unsigned int __float_as_uint(float f) {
    unsigned int i;
    std::memcpy(&i, &f, 4);
    return i;
}
// bf16 is the top half of an f32: widening is exact.
inline float __bfloat162float(__nv_bfloat16 b) {
    return __uint_as_float((unsigned int)b.bits << 16);
}
// Round to nearest, ties to even, as cuda_bf16.h's __float2bfloat16 (NaN stays NaN).
inline __nv_bfloat16 __float2bfloat16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return {(uint16_t)(u >> 16)};
}

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __fdividef(float a, float b) { return a / b; }
template <typename T>
inline T __ldg(const T* p) { return *p; }

// Atomics: one launch runs on one OS thread and fibers switch only at barriers and
// shuffles, so a read-modify-write cannot be interrupted: a plain one is atomic here.
template <typename T>
inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <typename T>
inline T atomicMax(T* p, T v) { T old = *p; *p = old > v ? old : v; return old; }
template <typename T>
inline T atomicMin(T* p, T v) { T old = *p; *p = old < v ? old : v; return old; }
template <typename T>
inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <typename T>
inline T atomicCAS(T* p, T expected, T v) { T old = *p; if (old == expected) *p = v; return old; }

constexpr int warpSize = 32;

}  // namespace device
}  // namespace cudacpu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__ __restrict

#define threadIdx (*::cudacpu::current_thread_idx)
#define blockIdx (::cudacpu::current_block_idx)
#define blockDim (::cudacpu::current_block_dim)
#define gridDim (::cudacpu::current_grid_dim)

#define CUDACPU_SITE (::cudacpu::Site{__FILE__, __LINE__})
#define __syncthreads() ::cudacpu::syncthreads(CUDACPU_SITE)
#define __shfl_sync(mask, v, lane, ...) \
    ::cudacpu::shfl(::cudacpu::SHFL_IDX, mask, v, lane, CUDACPU_SITE, ##__VA_ARGS__)
#define __shfl_up_sync(mask, v, delta, ...) \
    ::cudacpu::shfl(::cudacpu::SHFL_UP, mask, v, delta, CUDACPU_SITE, ##__VA_ARGS__)
#define __shfl_down_sync(mask, v, delta, ...) \
    ::cudacpu::shfl(::cudacpu::SHFL_DOWN, mask, v, delta, CUDACPU_SITE, ##__VA_ARGS__)
#define __shfl_xor_sync(mask, v, lane_mask, ...) \
    ::cudacpu::shfl(::cudacpu::SHFL_XOR, mask, v, lane_mask, CUDACPU_SITE, ##__VA_ARGS__)
