// driver.cpp — the part of the CUDA driver API (libcuda.so) that cudarc and kvlab call,
// answered on the CPU.
//
// cudarc loads libcuda.so at run time (dlopen, "dynamic-loading"), so this library, named
// libcuda.so and put first on LD_LIBRARY_PATH, stands in for NVIDIA's. The model it presents:
//   - device memory is host memory: a CUdeviceptr is a malloc'd address, and every copy,
//     memset and kernel pointer argument is checked against the live allocations;
//   - streams are synchronous: a kernel runs to completion inside cuLaunchKernel, so the
//     order of a stream is the order of the calls, and events read the wall clock;
//   - a module is NVRTC's real PTX, of which only the `.entry` names are read: the code that
//     runs is the same kernels/*.cu compiled as host C++ (gen.py), looked up by name;
//   - stream capture records launches (their arguments copied at capture time, as CUDA
//     does) into a graph that cuGraphLaunch replays.
// It is NOT named libcuda.so.1: NVRTC 13 itself dlopens libcuda.so.1 and calls the private
// cuGetExportTable without checking for it. NVRTC then finds no driver, which it does not
// need; cudarc tries the name libcuda.so first and finds this one.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include "runtime.h"

namespace cudacpu {
namespace {

// CUresult values (cuda.h).
enum : int {
    SUCCESS = 0,
    INVALID_VALUE = 1,
    OUT_OF_MEMORY = 2,
    INVALID_DEVICE = 101,
    INVALID_IMAGE = 200,
    INVALID_HANDLE = 400,
    NOT_FOUND = 500,
    LAUNCH_OUT_OF_RESOURCES = 701,
    LAUNCH_FAILED = 719,
    NOT_SUPPORTED = 801,
    STREAM_CAPTURE_UNSUPPORTED = 900,
    UNKNOWN = 999,
};

// The device the emulator reports: an H200's limits (so that a launch an H200 would refuse
// is refused here too), and a name that says what it really is.
constexpr const char* DEVICE_NAME = "cpu emulator (kvlab tools/cudacpu)";
constexpr int MAX_THREADS_PER_BLOCK = 1024;
constexpr int DEFAULT_DYNAMIC_SHARED = 48 * 1024;
constexpr int MAX_DYNAMIC_SHARED_OPTIN = 232448;  // 227 KiB on compute capability 9.0

// The driver's tables (allocations, modules, streams) are shared by every OS thread: one
// thread changes or reads them at a time. Copies run outside that lock; kernels run under a
// second one, because the scheduler is one per process (scheduler.cpp).
std::recursive_mutex big_lock;
std::mutex launch_lock;
std::map<std::uintptr_t, std::size_t> allocations;  // base -> bytes
thread_local std::string last_detail;  // what the latest failure on this thread was
thread_local int last_code = SUCCESS;

struct Module {
    std::set<std::string> entries;
};

struct Function {
    const KernelInfo* kernel;
    int max_dynamic_shared = DEFAULT_DYNAMIC_SHARED;
};

struct Graph;
struct Stream {
    Graph* capture = nullptr;  // non-null while capturing
};

struct Graph {
    std::vector<std::function<int()>> nodes;
};

struct Event {
    std::chrono::steady_clock::time_point at;
};

std::map<std::string, KernelInfo>& registry() {
    static std::map<std::string, KernelInfo> kernels;
    return kernels;
}
std::map<std::string, std::unique_ptr<Function>> functions;  // one per kernel, made on demand
Stream default_stream;

int fail(int code, const std::string& detail) {
    last_code = code;
    last_detail = detail;
    std::fprintf(stderr, "cudacpu: %s\n", detail.c_str());
    return code;
}

std::string hex(std::uintptr_t p) {
    std::ostringstream o;
    o << "0x" << std::hex << p;
    return o.str();
}

// Is [p, p + bytes) inside one live allocation? (p == the end is fine for zero bytes.)
bool in_allocation(std::uintptr_t p, std::size_t bytes) {
    auto it = allocations.upper_bound(p);
    if (it == allocations.begin()) return false;
    --it;
    return p >= it->first && p - it->first <= it->second && bytes <= it->second - (p - it->first);
}

int check_range(std::uintptr_t p, std::size_t bytes, const char* what) {
    if (in_allocation(p, bytes)) return SUCCESS;
    return fail(INVALID_VALUE, std::string(what) + ": " + std::to_string(bytes) + " bytes at " +
                                   hex(p) + " are not inside one device allocation");
}

Stream* stream_of(void* s) { return s ? static_cast<Stream*>(s) : &default_stream; }

using Lock = std::unique_lock<std::recursive_mutex>;

// Runs `op` now, outside the lock, or records it into the stream's graph while the stream
// is capturing.
int enqueue(Lock& lock, void* stream, std::function<int()> op) {
    Stream* s = stream_of(stream);
    if (s->capture) {
        s->capture->nodes.push_back(std::move(op));
        return SUCCESS;
    }
    lock.unlock();
    return op();
}

// A fault inside a kernel (a wild pointer) kills the process, as a GPU's would kill the
// context; this says which kernel did it first. AddressSanitizer builds use ASan's report.
void on_fault(int sig) {
    const char* k = running_kernel ? running_kernel : "(no kernel running)";
    const char* a = "cudacpu: fatal signal inside kernel ";
    (void)!write(2, a, std::strlen(a));
    (void)!write(2, k, std::strlen(k));
    const char* b = " (an out-of-bounds access? build with CUDACPU_ASAN=1 to see the line)\n";
    (void)!write(2, b, std::strlen(b));
    signal(sig, SIG_DFL);
    raise(sig);
}

void install_fault_handler() {
#if !defined(__SANITIZE_ADDRESS__)
    static bool done = false;
    if (done) return;
    done = true;
    static char alt[64 * 1024];
    stack_t ss{};
    ss.ss_sp = alt;
    ss.ss_size = sizeof alt;
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_handler = on_fault;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
#endif
}

int launch_now(const Function& f, dim3 grid, dim3 block, std::size_t shared, void** params) {
    const KernelInfo& k = *f.kernel;
    LaunchSpec spec{&k, grid, block, shared, params};
    std::lock_guard<std::mutex> one_launch_at_a_time(launch_lock);
    install_fault_handler();
    running_kernel = k.name;
    static const bool trace = std::getenv("CUDACPU_TRACE") != nullptr;
    auto start = std::chrono::steady_clock::now();
    std::string why = run_launch(spec);
    if (trace)  // CUDACPU_TRACE=1: one line per launch, for finding what the emulator spends time on
        std::fprintf(stderr, "cudacpu: %s grid (%u,%u,%u) block (%u,%u,%u) shared %zu: %.3f ms\n",
                     k.name, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared,
                     std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    running_kernel = nullptr;
    if (!why.empty()) return fail(LAUNCH_FAILED, why);
    return SUCCESS;
}

int launch(Lock& lock, Function* f, dim3 grid, dim3 block, unsigned shared, void* stream,
           void** params, void** extra) {
    if (!f) return fail(INVALID_HANDLE, "cuLaunchKernel: no function");
    const KernelInfo& k = *f->kernel;
    std::string name = k.name;
    if (extra) return fail(NOT_SUPPORTED, name + ": the `extra` launch argument is not emulated");
    if (!params && !k.params.empty()) return fail(INVALID_VALUE, name + ": kernelParams is null");
    if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.x > 0x7fffffffu || grid.y > 65535 ||
        grid.z > 65535)
        return fail(INVALID_VALUE, name + ": grid (" + std::to_string(grid.x) + "," +
                                       std::to_string(grid.y) + "," + std::to_string(grid.z) +
                                       ") is outside the device's limits");
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (threads < 1 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        threads > MAX_THREADS_PER_BLOCK)
        return fail(INVALID_VALUE, name + ": a block of " + std::to_string(threads) +
                                       " threads is outside the device's limits");
    if (k.max_threads > 0 && threads > (unsigned long long)k.max_threads)
        return fail(LAUNCH_OUT_OF_RESOURCES,
                    name + ": launched with " + std::to_string(threads) +
                        " threads per block, but its __launch_bounds__ is " +
                        std::to_string(k.max_threads) + " (" + k.file + ")");
    if ((int)shared > f->max_dynamic_shared)
        return fail(INVALID_VALUE, name + ": " + std::to_string(shared) +
                                       " bytes of dynamic shared memory, over its limit of " +
                                       std::to_string(f->max_dynamic_shared) +
                                       " (raise it with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    // Every pointer argument must point into (or at the end of) a live allocation: a
    // launcher that swapped two arguments, or passed a size as a pointer, stops here.
    for (std::size_t i = 0; i < k.params.size(); i++) {
        if (!k.params[i].is_pointer) continue;
        std::uintptr_t p;
        std::memcpy(&p, params[i], sizeof p);
        if (p != 0 && !in_allocation(p, 0))
            return fail(INVALID_VALUE, name + ": argument " + std::to_string(i) + " (" +
                                           k.params[i].type + ") is " + hex(p) +
                                           ", which points into no device allocation");
    }
    // Copy the arguments now: a captured launch must replay the values of capture time.
    auto bytes = std::make_shared<std::vector<std::vector<unsigned char>>>();
    for (std::size_t i = 0; i < k.params.size(); i++) {
        auto* from = static_cast<unsigned char*>(params[i]);
        bytes->emplace_back(from, from + k.params[i].size);
    }
    return enqueue(lock, stream, [f, grid, block, shared, bytes] {
        std::vector<void*> argv;
        for (auto& b : *bytes) argv.push_back(b.data());
        return launch_now(*f, grid, block, shared, argv.data());
    });
}

const char* error_name(int code) {
    switch (code) {
        case SUCCESS: return "CUDA_SUCCESS";
        case INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
        case OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
        case INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
        case INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
        case INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
        case NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
        case LAUNCH_OUT_OF_RESOURCES: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
        case LAUNCH_FAILED: return "CUDA_ERROR_LAUNCH_FAILED";
        case NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
        case STREAM_CAPTURE_UNSUPPORTED: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
        default: return "CUDA_ERROR_UNKNOWN";
    }
}

}  // namespace

void register_kernel(KernelInfo info) {
    std::string name = info.name;
    registry().emplace(name, std::move(info));
}

}  // namespace cudacpu

// ---- the exported C API ----------------------------------------------------------------------

using namespace cudacpu;
using CUdeviceptr = unsigned long long;

#define API extern "C" __attribute__((visibility("default"))) int
#define LOCK Lock lock(big_lock)

API cuInit(unsigned) { return SUCCESS; }
API cuDriverGetVersion(int* v) { *v = 13000; return SUCCESS; }  // CUDA 13.0, as the H200's
API cuDeviceGetCount(int* n) { *n = 1; return SUCCESS; }
API cuDeviceGet(int* dev, int ordinal) {
    if (ordinal != 0) return fail(INVALID_DEVICE, "the emulator has one device, 0");
    *dev = 0;
    return SUCCESS;
}
API cuDeviceGetName(char* name, int len, int) {
    std::snprintf(name, len, "%s", DEVICE_NAME);
    return SUCCESS;
}
API cuDeviceTotalMem_v2(std::size_t* bytes, int) {
    *bytes = (std::size_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
    return SUCCESS;
}
API cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total) {
    *total = (std::size_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
    *free_bytes = (std::size_t)sysconf(_SC_AVPHYS_PAGES) * sysconf(_SC_PAGESIZE);
    return SUCCESS;
}
API cuDeviceGetUuid(unsigned char* uuid, int) { std::memset(uuid, 0, 16); return SUCCESS; }
API cuDeviceGetUuid_v2(unsigned char* uuid, int) { std::memset(uuid, 0, 16); return SUCCESS; }
API cuDeviceGetAttribute(int* value, int attribute, int) {
    switch (attribute) {
        case 1: *value = MAX_THREADS_PER_BLOCK; break;            // MAX_THREADS_PER_BLOCK
        case 2: case 3: *value = 1024; break;                     // MAX_BLOCK_DIM_X, _Y
        case 4: *value = 64; break;                               // MAX_BLOCK_DIM_Z
        case 5: *value = 0x7fffffff; break;                       // MAX_GRID_DIM_X
        case 6: case 7: *value = 65535; break;                    // MAX_GRID_DIM_Y, _Z
        case 8: *value = DEFAULT_DYNAMIC_SHARED; break;           // MAX_SHARED_MEMORY_PER_BLOCK
        case 10: *value = 32; break;                              // WARP_SIZE
        case 16: *value = 1; break;                               // MULTIPROCESSOR_COUNT
        case 39: *value = MAX_THREADS_PER_BLOCK; break;           // MAX_THREADS_PER_MULTIPROCESSOR
        case 41: *value = 1; break;                               // UNIFIED_ADDRESSING
        case 75: *value = 9; break;                               // COMPUTE_CAPABILITY_MAJOR
        case 76: *value = 0; break;                               // COMPUTE_CAPABILITY_MINOR
        case 97: *value = MAX_DYNAMIC_SHARED_OPTIN; break;        // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        case 115: *value = 0; break;                              // MEMORY_POOLS_SUPPORTED: no async alloc
        default: *value = 0; break;  // clock rates, bus width, ...: not emulated
    }
    return SUCCESS;
}
API cuGetExportTable(const void**, const void*) { return NOT_SUPPORTED; }

static int the_context = 0;  // one context; its address is the handle
API cuDevicePrimaryCtxRetain(void** ctx, int) { *ctx = &the_context; return SUCCESS; }
API cuDevicePrimaryCtxRelease_v2(int) { return SUCCESS; }
API cuCtxSetCurrent(void*) { return SUCCESS; }
API cuCtxGetCurrent(void** ctx) { *ctx = &the_context; return SUCCESS; }
API cuCtxPushCurrent_v2(void*) { return SUCCESS; }
API cuCtxPopCurrent_v2(void** ctx) { if (ctx) *ctx = &the_context; return SUCCESS; }
API cuCtxGetDevice(int* dev) { *dev = 0; return SUCCESS; }
API cuCtxSynchronize() { return SUCCESS; }
API cuCtxGetStreamPriorityRange(int* least, int* greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = 0;
    return SUCCESS;
}

API cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes) {
    LOCK;
    // Exactly `bytes` (at least 1), 256-byte aligned like cudaMalloc: AddressSanitizer then
    // sees a read one element past the end.
    void* p = nullptr;
    if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0)
        return fail(OUT_OF_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes");
    allocations[reinterpret_cast<std::uintptr_t>(p)] = bytes;
    *dptr = reinterpret_cast<std::uintptr_t>(p);
    return SUCCESS;
}
API cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytes, void*) { return cuMemAlloc_v2(dptr, bytes); }
API cuMemFree_v2(CUdeviceptr p) {
    LOCK;
    auto it = allocations.find(p);
    if (it == allocations.end())
        return fail(INVALID_VALUE, "cuMemFree: " + hex(p) + " is not a live allocation");
    allocations.erase(it);
    std::free(reinterpret_cast<void*>(p));
    return SUCCESS;
}
API cuMemFreeAsync(CUdeviceptr p, void*) { return cuMemFree_v2(p); }

API cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, std::size_t bytes, void* stream) {
    LOCK;
    if (int e = check_range(dst, bytes, "cuMemcpyHtoD destination")) return e;
    return enqueue(lock, stream, [=] {
        std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
        return SUCCESS;
    });
}
API cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, std::size_t bytes) {
    return cuMemcpyHtoDAsync_v2(dst, src, bytes, nullptr);
}
API cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, std::size_t bytes, void* stream) {
    LOCK;
    if (int e = check_range(src, bytes, "cuMemcpyDtoH source")) return e;
    return enqueue(lock, stream, [=] {
        std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
        return SUCCESS;
    });
}
API cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, std::size_t bytes) {
    return cuMemcpyDtoHAsync_v2(dst, src, bytes, nullptr);
}
API cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, void* stream) {
    LOCK;
    if (int e = check_range(dst, bytes, "cuMemcpyDtoD destination")) return e;
    if (int e = check_range(src, bytes, "cuMemcpyDtoD source")) return e;
    return enqueue(lock, stream, [=] {
        std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
        return SUCCESS;
    });
}
API cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
    return cuMemcpyDtoDAsync_v2(dst, src, bytes, nullptr);
}
API cuMemsetD8Async(CUdeviceptr dst, unsigned char value, std::size_t bytes, void* stream) {
    LOCK;
    if (int e = check_range(dst, bytes, "cuMemsetD8")) return e;
    return enqueue(lock, stream, [=] {
        std::memset(reinterpret_cast<void*>(dst), value, bytes);
        return SUCCESS;
    });
}
API cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, std::size_t bytes) {
    return cuMemsetD8Async(dst, value, bytes, nullptr);
}

API cuStreamCreate(void** stream, unsigned) { *stream = new Stream; return SUCCESS; }
API cuStreamCreateWithPriority(void** stream, unsigned, int) { *stream = new Stream; return SUCCESS; }
API cuStreamDestroy_v2(void* stream) {
    LOCK;
    if (stream) delete static_cast<Stream*>(stream);
    return SUCCESS;
}
API cuStreamSynchronize(void* stream) {
    LOCK;
    if (stream_of(stream)->capture)
        return fail(STREAM_CAPTURE_UNSUPPORTED, "cuStreamSynchronize on a stream that is capturing");
    return SUCCESS;  // every operation ran when it was issued
}
API cuStreamQuery(void*) { return SUCCESS; }
API cuStreamWaitEvent(void*, void*, unsigned) { return SUCCESS; }

API cuEventCreate(void** event, unsigned) { *event = new Event{std::chrono::steady_clock::now()}; return SUCCESS; }
API cuEventDestroy_v2(void* event) { delete static_cast<Event*>(event); return SUCCESS; }
API cuEventRecord(void* event, void* stream) {
    LOCK;
    if (stream_of(stream)->capture) return SUCCESS;  // an event node: nothing to time
    static_cast<Event*>(event)->at = std::chrono::steady_clock::now();
    return SUCCESS;
}
API cuEventSynchronize(void*) { return SUCCESS; }
API cuEventQuery(void*) { return SUCCESS; }
API cuEventElapsedTime(float* ms, void* start, void* end) {
    auto d = static_cast<Event*>(end)->at - static_cast<Event*>(start)->at;
    *ms = std::chrono::duration<float, std::milli>(d).count();
    return SUCCESS;
}
API cuEventElapsedTime_v2(float* ms, void* start, void* end) { return cuEventElapsedTime(ms, start, end); }

API cuModuleLoadData(void** module, const void* image) {
    LOCK;
    // PTX is text; an entry point reads `.visible .entry name(`.
    const char* ptx = static_cast<const char*>(image);
    if (std::strncmp(ptx, "\x7f" "ELF", 4) == 0)
        return fail(INVALID_IMAGE, "the emulator loads PTX, not a CUBIN (unset KVLAB_CUBIN)");
    auto m = std::make_unique<Module>();
    for (const char* at = std::strstr(ptx, ".entry "); at; at = std::strstr(at + 1, ".entry ")) {
        const char* name = at + 7;
        std::size_t len = std::strcspn(name, "( \t\n");
        std::string entry(name, len);
        if (!registry().count(entry))
            return fail(NOT_FOUND, "the PTX defines kernel " + entry +
                                       ", which this build of the emulator does not have: "
                                       "rebuild it (bash scripts/build-cudacpu.sh)");
        m->entries.insert(entry);
    }
    if (m->entries.empty()) return fail(INVALID_IMAGE, "the module holds no .entry");
    *module = m.release();
    return SUCCESS;
}
API cuModuleUnload(void* module) { delete static_cast<Module*>(module); return SUCCESS; }
API cuModuleGetFunction(void** function, void* module, const char* name) {
    LOCK;
    auto* m = static_cast<Module*>(module);
    if (!m || !m->entries.count(name)) return fail(NOT_FOUND, std::string("no kernel ") + name + " in this module");
    auto& f = functions[name];
    if (!f) f = std::make_unique<Function>(Function{&registry().at(name)});
    *function = f.get();
    return SUCCESS;
}
API cuFuncSetAttribute(void* function, int attribute, int value) {
    LOCK;
    auto* f = static_cast<Function*>(function);
    if (attribute == 8) {  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        if (value < 0 || value > MAX_DYNAMIC_SHARED_OPTIN)
            return fail(INVALID_VALUE, std::string(f->kernel->name) + ": " + std::to_string(value) +
                                           " bytes of dynamic shared memory is over the device's " +
                                           std::to_string(MAX_DYNAMIC_SHARED_OPTIN));
        f->max_dynamic_shared = value;
    }
    return SUCCESS;
}
API cuFuncGetAttribute(int* value, int attribute, void* function) {
    auto* f = static_cast<Function*>(function);
    switch (attribute) {
        case 0: *value = f->kernel->max_threads ? f->kernel->max_threads : MAX_THREADS_PER_BLOCK; break;
        case 8: *value = f->max_dynamic_shared; break;
        default: *value = 0;
    }
    return SUCCESS;
}
API cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void* stream, void** params, void** extra) {
    LOCK;
    return launch(lock, static_cast<Function*>(function), dim3{gx, gy, gz}, dim3{bx, by, bz}, shared,
                  stream, params, extra);
}

API cuStreamBeginCapture_v2(void* stream, int) {
    LOCK;
    Stream* s = stream_of(stream);
    if (s->capture) return fail(INVALID_VALUE, "cuStreamBeginCapture: the stream is already capturing");
    s->capture = new Graph;
    return SUCCESS;
}
API cuStreamEndCapture(void* stream, void** graph) {
    LOCK;
    Stream* s = stream_of(stream);
    if (!s->capture) return fail(INVALID_VALUE, "cuStreamEndCapture: the stream is not capturing");
    *graph = s->capture;
    s->capture = nullptr;
    return SUCCESS;
}
API cuStreamIsCapturing(void* stream, int* status) {
    LOCK;
    *status = stream_of(stream)->capture ? 1 : 0;  // ACTIVE : NONE
    return SUCCESS;
}
API cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long) {
    *exec = new Graph(*static_cast<Graph*>(graph));
    return SUCCESS;
}
API cuGraphUpload(void*, void*) { return SUCCESS; }
API cuGraphLaunch(void* exec, void* stream) {
    LOCK;
    if (stream_of(stream)->capture) return fail(NOT_SUPPORTED, "launching a graph while capturing");
    lock.unlock();
    for (auto& node : static_cast<Graph*>(exec)->nodes)
        if (int e = node()) return e;
    return SUCCESS;
}
API cuGraphDestroy(void* graph) { delete static_cast<Graph*>(graph); return SUCCESS; }
API cuGraphExecDestroy(void* exec) { delete static_cast<Graph*>(exec); return SUCCESS; }

API cuGetErrorName(int code, const char** name) { *name = error_name(code); return SUCCESS; }
API cuGetErrorString(int code, const char** text) {
    LOCK;
    // The standard name, plus what the emulator found when this was its latest error:
    // the deadlock report or the bad argument then reaches kvlab's error message.
    static thread_local std::string message;
    message = error_name(code);
    if (code == last_code && !last_detail.empty()) message += " (cudacpu: " + last_detail + ")";
    *text = message.c_str();
    return SUCCESS;
}
