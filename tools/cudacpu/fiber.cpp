// fiber.cpp — user-space threads: one stack per CUDA thread, and a switch between stacks.
//
// A CUDA thread runs until it reaches __syncthreads() or a shuffle, where it must wait for
// the other threads of its block or warp. An OS thread per CUDA thread would be far too
// heavy (1024 per block), so each CUDA thread is a fiber: its own small stack, and a switch
// that saves six registers and the stack pointer. Switching is a function call, so the
// compiler has already saved every other register it cares about (the x86-64 System V ABI:
// rbx, rbp, r12-r15 are callee-saved). The ABI also makes the SSE and x87 control words
// callee-saved, but no kernel changes the rounding mode, so every fiber shares the one it
// started with and the switch leaves them alone (they cost more than the rest of it).

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>

#include "runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

// void cudacpu_switch(void** save_sp /* rdi */, void* load_sp /* rsi */)
asm(R"(
    .text
    .globl cudacpu_switch
    .hidden cudacpu_switch
    .type cudacpu_switch, @function
cudacpu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cudacpu_switch, .-cudacpu_switch

    .globl cudacpu_fiber_start
    .hidden cudacpu_fiber_start
    .type cudacpu_fiber_start, @function
cudacpu_fiber_start:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size cudacpu_fiber_start, .-cudacpu_fiber_start
)");

extern "C" void cudacpu_fiber_start();

namespace cudacpu {

void fiber_allocate(Fiber& f, std::size_t stack_size) {
    const std::size_t page = 4096;
    stack_size = (stack_size + page - 1) / page * page + page;
    // mmap, not malloc: untouched pages cost nothing, and the guard page turns a stack
    // overflow into a fault at once instead of a silent write into a neighbour's stack.
    void* base = mmap(nullptr, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (base == MAP_FAILED) {
        std::fprintf(stderr, "cudacpu: cannot map a %zu-byte fiber stack\n", stack_size);
        std::abort();
    }
    mprotect(base, page, PROT_NONE);
    f.stack = static_cast<char*>(base);
    f.stack_size = stack_size;
}

void fiber_reset(Fiber& f, void (*entry)(void*), void* arg) {
#if defined(__SANITIZE_ADDRESS__)
    // A fiber abandoned mid-kernel (a failed launch) leaves its frames' red zones poisoned.
    ASAN_UNPOISON_MEMORY_REGION(f.stack + 4096, f.stack_size - 4096);
#endif
    // The frame cudacpu_switch pops, from the lowest address up:
    //   r15, r14, r13 = entry, r12 = arg, rbx, rbp, return address = cudacpu_fiber_start.
    // The return address sits 8 bytes below a 16-byte boundary, so that after `ret`
    // cudacpu_fiber_start's `call` sees the ABI's stack alignment.
    auto top = reinterpret_cast<std::uintptr_t>(f.stack + f.stack_size) & ~std::uintptr_t{15};
    auto* frame = reinterpret_cast<std::uint64_t*>(top - 8 - 48);
    frame[0] = 0;                                          // r15
    frame[1] = 0;                                          // r14
    frame[2] = reinterpret_cast<std::uint64_t>(entry);     // r13
    frame[3] = reinterpret_cast<std::uint64_t>(arg);       // r12
    frame[4] = 0;                                          // rbx
    frame[5] = 0;                                          // rbp
    frame[6] = reinterpret_cast<std::uint64_t>(&cudacpu_fiber_start);
    f.sp = frame;
}

}  // namespace cudacpu
