// runtime.h — what the emulator's three parts share: fibers (fiber.cpp), the block
// scheduler (scheduler.cpp) and the driver API (driver.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cudacpu_device.h"
#include "cudacpu_kernel.h"

namespace cudacpu {

// ---- fibers: one per CUDA thread of a block ------------------------------------------------

struct Fiber {
    void* sp = nullptr;         // the saved stack pointer while the fiber is suspended
    char* stack = nullptr;      // mmap'd; its lowest page is a guard page
    std::size_t stack_size = 0;
};

// Saves the callee-saved registers on the current stack, stores the stack pointer in
// *save_sp, loads load_sp and restores the registers saved there (fiber.cpp, x86-64 asm).
extern "C" void cudacpu_switch(void** save_sp, void* load_sp);
void fiber_allocate(Fiber& f, std::size_t stack_size);
// Prepares `f` so that the next switch to it calls entry(arg) on its own stack.
void fiber_reset(Fiber& f, void (*entry)(void*), void* arg);

// ---- one launch ----------------------------------------------------------------------------

struct LaunchSpec {
    const KernelInfo* kernel;
    dim3 grid, block;
    std::size_t shared_bytes;
    void** params;
};

// Runs every block of the launch, one after another. One call at a time (the caller holds
// driver.cpp's launch lock). Returns "" on success, otherwise what
// went wrong (a deadlock, a shuffle in divergent code, ...), naming the kernel, the block
// and the kernels/x.cu:N sync points.
std::string run_launch(const LaunchSpec& spec);

// The order in which the scheduler resumes the threads of a block (CUDACPU_ORDER):
// forward, reverse or random:SEED. A kernel that is only correct in one order is missing a
// barrier: running the tests in two orders shows it as a wrong answer.
enum class Order { Forward, Reverse, Random };
struct OrderSetting {
    Order order = Order::Forward;
    std::uint64_t seed = 1;
};
OrderSetting order_setting();

// Set by driver.cpp around a launch, for the crash handler's message.
extern const char* running_kernel;

}  // namespace cudacpu
