// scheduler.cpp — runs one block of CUDA threads as fibers, with CUDA's two kinds of meeting
// point: the block barrier (__syncthreads) and the warp shuffle (__shfl_*_sync).
//
// The rule, in one loop (run_block):
//   1. resume every thread that can run, in the chosen order (CUDACPU_ORDER); each runs
//      until it returns, or stops at a barrier or a shuffle;
//   2. release each shuffle whose every lane (its `mask`) has arrived, at the same line;
//   3. release the barrier when every thread of the block has arrived, at the same line;
//   4. if nothing could run and nothing was released, the block can never finish: report a
//      deadlock, with how many threads wait where.
// CUDA requires a barrier to be reached by every thread of the block, and a shuffle by
// every lane its mask names. A kernel that breaks either rule may still appear to work on
// one GPU generation; here it is a clear error naming the line. That is stricter than a
// GPU, on purpose.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace cudacpu {

dim3* current_thread_idx = nullptr;
dim3 current_block_idx, current_block_dim, current_grid_dim;
const char* running_kernel = nullptr;

namespace {

enum class State { Ready, AtBarrier, AtShuffle, Done };

struct Thread {
    Fiber fiber;
    dim3 idx{};
    State state = State::Done;
    Site site{};
    // The pending shuffle, while state == AtShuffle.
    unsigned int mask = 0;
    void* value = nullptr;
    int size = 0;
    ShuffleKind kind = SHFL_IDX;
    int arg = 0;
    int width = 32;
};

// The scheduler's state: one launch at a time (driver.cpp's launch lock), one block at a time.
std::vector<Thread> threads;  // reused from block to block; grows to the largest
Thread* running = nullptr;
void* scheduler_sp = nullptr;
const LaunchSpec* launch = nullptr;
void* shared_memory = nullptr;
std::string failure;  // set by a check inside a fiber; the block stops at the next switch
// How many threads of the block are in each waiting state, kept as they change, so that a
// round of the scheduler does not scan the block to find out.
std::size_t n_done = 0, n_at_barrier = 0, n_at_shuffle = 0;
Site barrier_site{};  // where the first thread of this barrier round waits

std::size_t stack_bytes() {
    const char* kb = std::getenv("CUDACPU_STACK_KB");
#if defined(__SANITIZE_ADDRESS__)
    std::size_t fallback = 512;  // AddressSanitizer's red zones make frames larger
#else
    std::size_t fallback = 64;
#endif
    return (kb ? std::strtoul(kb, nullptr, 10) : fallback) * 1024;
}

// AddressSanitizer must be told when the stack changes, or it mistakes one fiber's frames
// for another's (the annotations of <sanitizer/common_interface_defs.h>). No-ops otherwise.
#if defined(__SANITIZE_ADDRESS__)
const void* scheduler_stack = nullptr;
std::size_t scheduler_stack_size = 0;
void to_fiber(Thread& t) {
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, t.fiber.stack, t.fiber.stack_size);
    cudacpu_switch(&scheduler_sp, t.fiber.sp);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
}
void to_scheduler(Thread& t, bool finished) {
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(finished ? nullptr : &fake, scheduler_stack, scheduler_stack_size);
    cudacpu_switch(&t.fiber.sp, scheduler_sp);
    __sanitizer_finish_switch_fiber(fake, &scheduler_stack, &scheduler_stack_size);
}
void entered_fiber() { __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack, &scheduler_stack_size); }
#else
void to_fiber(Thread& t) { cudacpu_switch(&scheduler_sp, t.fiber.sp); }
void to_scheduler(Thread& t, bool) { cudacpu_switch(&t.fiber.sp, scheduler_sp); }
void entered_fiber() {}
#endif

void thread_main(void* arg) {
    entered_fiber();
    auto* t = static_cast<Thread*>(arg);
    launch->kernel->call(launch->kernel->fn, launch->params);
    t->state = State::Done;
    n_done++;
    to_scheduler(*t, true);
    std::abort();  // a finished fiber is never resumed
}

// Back to the scheduler; returns when this thread is resumed.
void wait_here() { to_scheduler(*running, false); }

std::string where(Site s) {
    std::ostringstream o;
    o << s.file << ":" << s.line;
    return o.str();
}

std::string describe(const dim3& d) {
    std::ostringstream o;
    o << "(" << d.x << "," << d.y << "," << d.z << ")";
    return o.str();
}

std::string block_name() {
    return std::string("kernel ") + launch->kernel->name + ", block " +
           describe(current_block_idx) + " of grid " + describe(current_grid_dim) + ", " +
           describe(current_block_dim) + " threads";
}

// Who waits where, e.g. "96 threads at __syncthreads() kernels/rmsnorm.cu:44; 32 returned".
std::string census(std::size_t n) {
    std::map<std::string, int> counts;
    for (std::size_t i = 0; i < n; i++) {
        const Thread& t = threads[i];
        switch (t.state) {
            case State::AtBarrier: counts["at __syncthreads() " + where(t.site)]++; break;
            case State::AtShuffle: counts["at a shuffle " + where(t.site)]++; break;
            case State::Done: counts["returned"]++; break;
            case State::Ready: counts["ready"]++; break;
        }
    }
    std::ostringstream o;
    bool first = true;
    for (auto& [what, count] : counts) {
        o << (first ? "" : "; ") << count << (count == 1 ? " thread " : " threads ") << what;
        first = false;
    }
    return o.str();
}

// The lane whose value lane `lane` (0..31) receives, or -1 for "keeps its own".
int source_lane(const Thread& t, int lane) {
    int width = t.width;
    int base = lane / width * width;
    switch (t.kind) {
        case SHFL_IDX: return base + ((t.arg % width) + width) % width;
        case SHFL_UP: return lane - t.arg >= base ? lane - t.arg : -1;
        case SHFL_DOWN: return lane + t.arg < base + width ? lane + t.arg : -1;
        case SHFL_XOR: {
            int src = lane ^ t.arg;
            return src >= base && src < base + width ? src : -1;
        }
    }
    return -1;
}

// Releases the complete shuffle of each warp that has one. Sets `failure` for a broken one.
bool release_shuffles(std::size_t n) {
    bool released = false;
    if (n_at_shuffle == 0) return false;
    for (std::size_t warp_start = 0; warp_start < n; warp_start += 32) {
        std::size_t lanes = std::min<std::size_t>(32, n - warp_start);
        for (std::size_t l = 0; l < lanes; l++) {
            const Thread& first = threads[warp_start + l];
            if (first.state != State::AtShuffle) continue;
            unsigned int mask = first.mask;
            bool complete = true;
            for (int m = 0; m < 32; m++) {
                if (!(mask >> m & 1u)) continue;
                if ((std::size_t)m >= lanes) {
                    failure = "a shuffle at " + where(first.site) + " names lane " +
                              std::to_string(m) + " in its mask, but this warp has only " +
                              std::to_string(lanes) + " lanes (the block is not a multiple of 32)";
                    return false;
                }
                const Thread& other = threads[warp_start + m];
                if (other.state != State::AtShuffle) {
                    complete = false;
                    continue;
                }
                if (other.site.line != first.site.line || other.site.file != first.site.file ||
                    other.mask != mask || other.kind != first.kind || other.size != first.size ||
                    other.width != first.width) {
                    failure = "shuffle in divergent code: lanes of warp " +
                              std::to_string(warp_start / 32) + " wait at " + where(first.site) +
                              " and at " + where(other.site) +
                              " (every lane of a shuffle's mask must reach the same shuffle)";
                    return false;
                }
            }
            if (!(mask >> l & 1u)) {
                failure = "lane " + std::to_string(l) + " runs the shuffle at " +
                          where(first.site) + " but its own mask leaves it out";
                return false;
            }
            if (!complete) continue;
            // Every lane of the mask is here: exchange, reading every value before writing.
            unsigned char before[32][8];
            for (int m = 0; m < 32; m++)
                if (mask >> m & 1u) std::memcpy(before[m], threads[warp_start + m].value, first.size);
            for (int m = 0; m < 32; m++) {
                if (!(mask >> m & 1u)) continue;
                Thread& t = threads[warp_start + m];
                int src = source_lane(t, m);
                if (src >= 0 && !(mask >> src & 1u)) {
                    failure = "lane " + std::to_string(m) + " of the shuffle at " + where(t.site) +
                              " reads lane " + std::to_string(src) +
                              ", which its mask leaves out (the value is undefined on a GPU)";
                    return false;
                }
                if (src >= 0) std::memcpy(t.value, before[src], first.size);
                t.state = State::Ready;
                n_at_shuffle--;
            }
            released = true;
            break;  // this warp's next shuffle, if any, waits for the next round
        }
    }
    return released;
}

// ANCHOR: release_barrier
// Releases the block barrier when every thread waits at it. Sets `failure` for a broken one.
bool release_barrier(std::size_t n) {
    // Someone is still on the way (at a shuffle), or nobody waits.
    if (n_at_barrier == 0 || n_at_shuffle > 0 || n_at_barrier + n_done != n) return false;
    if (n_done > 0) {
        failure = "__syncthreads() at " + where(barrier_site) + " after " +
                  std::to_string(n_done) +
                  " threads of the block returned (every thread must reach a barrier)";
        return false;
    }
    for (std::size_t i = 0; i < n; i++) threads[i].state = State::Ready;
    n_at_barrier = 0;
    return true;
}
// ANCHOR_END: release_barrier

std::uint64_t next_random(std::uint64_t& s) {  // xorshift64*
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
}

// ANCHOR: run_block
std::string run_block(std::size_t n, std::vector<std::size_t>& order, std::uint64_t& rng) {
    const dim3 b = current_block_dim;
    for (std::size_t i = 0; i < n; i++) {
        Thread& t = threads[i];
        t.idx = dim3{(unsigned)(i % b.x), (unsigned)(i / b.x % b.y), (unsigned)(i / (b.x * b.y))};
        t.state = State::Ready;
        fiber_reset(t.fiber, thread_main, &t);
    }
    n_done = n_at_barrier = n_at_shuffle = 0;
    OrderSetting setting = order_setting();
    while (true) {
        if (setting.order == Order::Random) {
            for (std::size_t i = 0; i < n; i++) order[i] = i;
            for (std::size_t i = n; i > 1; i--) std::swap(order[i - 1], order[next_random(rng) % i]);
        }
        for (std::size_t k = 0; k < n; k++) {
            std::size_t i = setting.order == Order::Forward   ? k
                            : setting.order == Order::Reverse ? n - 1 - k
                                                              : order[k];
            Thread& t = threads[i];
            if (t.state != State::Ready) continue;
            running = &t;
            current_thread_idx = &t.idx;
            to_fiber(t);
            if (!failure.empty()) return failure;
        }
        if (n_done == n) return "";
        if (release_shuffles(n) || release_barrier(n)) continue;
        if (!failure.empty()) return failure;
        return "deadlock: " + census(n);
    }
}
// ANCHOR_END: run_block

}  // namespace

OrderSetting order_setting() {
    static OrderSetting setting = [] {
        OrderSetting s;
        const char* v = std::getenv("CUDACPU_ORDER");
        if (!v || !std::strcmp(v, "forward")) return s;
        if (!std::strcmp(v, "reverse")) {
            s.order = Order::Reverse;
        } else if (!std::strncmp(v, "random", 6)) {
            s.order = Order::Random;
            if (v[6] == ':') s.seed = std::strtoull(v + 7, nullptr, 10) | 1;
        } else {
            std::fprintf(stderr, "cudacpu: CUDACPU_ORDER=%s is not forward, reverse or random:SEED\n", v);
            std::exit(2);
        }
        return s;
    }();
    return setting;
}

void syncthreads(Site site) {
    running->state = State::AtBarrier;
    running->site = site;
    if (n_at_barrier++ == 0) {
        barrier_site = site;
    } else if (site.line != barrier_site.line || site.file != barrier_site.file) {
        failure = "threads wait at two different barriers, " + where(barrier_site) + " and " +
                  where(site) + " (a __syncthreads() in divergent code)";
    }
    wait_here();
}

void shuffle(unsigned int mask, void* value, int size, ShuffleKind kind, int arg, int width,
             Site site) {
    if (width <= 0 || width > 32 || (width & (width - 1))) {
        failure = "a shuffle at " + where(site) + " has width " + std::to_string(width) +
                  " (it must be a power of two, at most 32)";
        wait_here();
    }
    Thread& t = *running;
    t.state = State::AtShuffle;
    n_at_shuffle++;
    t.site = site;
    t.mask = mask;
    t.value = value;
    t.size = size;
    t.kind = kind;
    t.arg = arg;
    t.width = width;
    wait_here();
}

void* dynamic_shared() { return shared_memory; }

std::string run_launch(const LaunchSpec& spec) {
    launch = &spec;
    failure.clear();
    std::size_t n = (std::size_t)spec.block.x * spec.block.y * spec.block.z;
    if (threads.size() < n) {
        std::size_t old = threads.size();
        threads.resize(n);
        for (std::size_t i = old; i < n; i++) fiber_allocate(threads[i].fiber, stack_bytes());
    }
    // The launch's dynamic shared memory, exactly its size (so that AddressSanitizer sees
    // a read past its end); never null, as on a GPU. Filled with 0xff bytes (f32 NaN), not
    // zeros, so that a kernel reading shared memory it never wrote gets NaN, not a lucky 0.
    std::vector<unsigned char> shared(spec.shared_bytes ? spec.shared_bytes : 1, 0xff);
    shared_memory = shared.data();
    std::vector<std::size_t> order(n);
    std::uint64_t rng = order_setting().seed;
    current_grid_dim = spec.grid;
    current_block_dim = spec.block;
    std::string result;
    for (unsigned z = 0; z < spec.grid.z && result.empty(); z++)
        for (unsigned y = 0; y < spec.grid.y && result.empty(); y++)
            for (unsigned x = 0; x < spec.grid.x && result.empty(); x++) {
                current_block_idx = dim3{x, y, z};
                std::string why = run_block(n, order, rng);
                if (!why.empty()) result = why + " (" + block_name() + ")";
            }
    running = nullptr;
    launch = nullptr;
    shared_memory = nullptr;
    return result;
}

}  // namespace cudacpu
