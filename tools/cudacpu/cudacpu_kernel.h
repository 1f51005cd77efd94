// cudacpu_kernel.h — how a kernel entry point is registered with the emulator.
//
// gen.py ends every generated file with one CUDACPU_REGISTER(name, launch_bound) per
// `extern "C" __global__` function of the .cu file. Registration keeps the function's real
// C++ signature: at launch, `call_thunk<A...>` reads each `kernelParams[i]` as the i-th
// parameter's own type, and runtime.cpp checks every pointer parameter against the live
// allocations first. So a Rust launcher that pushes its arguments in the wrong order, or a
// size where a pointer belongs, is caught at the launch that does it.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace cudacpu {

struct Param {
    std::size_t size;
    bool is_pointer;
    std::string type;  // as the kernel declares it, e.g. "const float*"
};

struct KernelInfo {
    const char* name;
    const char* file;        // kernels/x.cu
    int max_threads;         // __launch_bounds__, or 0 when the kernel declares none
    void* fn;                // the function, as `void (*)(A...)`
    void (*call)(void* fn, void** params);
    std::vector<Param> params;
};

void register_kernel(KernelInfo info);

template <typename T>
std::string type_name() {
    // "std::string cudacpu::type_name() [with T = const float*; ...]" -> "const float*"
    std::string pretty = __PRETTY_FUNCTION__;
    std::size_t from = pretty.find("T = ") + 4;
    std::size_t to = pretty.find_first_of(";]", from);
    return pretty.substr(from, to - from);
}

template <typename... A, std::size_t... I>
void call_with(void (*f)(A...), void** params, std::index_sequence<I...>) {
    f(*static_cast<std::remove_cv_t<A>*>(params[I])...);
}

template <typename... A>
void call_thunk(void* fn, void** params) {
    call_with(reinterpret_cast<void (*)(A...)>(fn), params, std::index_sequence_for<A...>{});
}

template <typename... A>
bool register_entry(const char* name, const char* file, int max_threads, void (*f)(A...)) {
    register_kernel(KernelInfo{name, file, max_threads, reinterpret_cast<void*>(f),
                               &call_thunk<A...>,
                               {Param{sizeof(A), std::is_pointer<A>::value, type_name<A>()}...}});
    return true;
}

}  // namespace cudacpu

#define CUDACPU_REGISTER(name, bound) \
    static bool cudacpu_registered_##name = ::cudacpu::register_entry(#name, CUDACPU_FILE, bound, &name);
