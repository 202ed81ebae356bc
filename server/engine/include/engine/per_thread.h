// SPDX-License-Identifier: Apache-2.0
// PerThread<Block>: one Block per thread, written only by its thread, summed by readers.
//
// The pattern behind the engine's statistics and the daemon's RPC counters (Linux's
// per-CPU counters, with threads in place of CPUs): the hot path touches only the
// calling thread's block; readers walk every block under the registry lock. A block of
// an exited thread keeps its counts and is handed to the next new thread, so totals
// are preserved and the number of blocks is bounded by the peak thread count.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

namespace vmspace {

/// Alignment (and so size granule) of data one thread writes often and other threads
/// must not share a cache line with: per-thread cells, per-space and per-client
/// objects (the kernel's ____cacheline_aligned_in_smp and SLAB_HWCACHE_ALIGN caches).
/// Two 64-byte lines, not one: the L2 adjacent-line prefetcher of these CPUs (AMD Zen;
/// Intel's spatial prefetcher) fetches lines in 128-byte pairs, so a write to one line
/// of a pair also takes the other CPU's prefetched copy of its neighbour (folly's
/// hardware_destructive_interference_size is 128 on x86-64 for this reason). Measured
/// with perf (docs/performance.md "Two spaces"): two spaces on two threads of one process took 31%
/// more samples per seed-004 round than the same spaces in two processes while the
/// spaces' indexes and the bench's sessions shared lines; 14% with 64-byte alignment;
/// 4-10% with 128.
inline constexpr std::size_t kDestructiveInterferenceBytes = 128;
/// Shards of the engine's per-CPU-like free lists (frames, tree nodes).
inline constexpr int kThreadShards = 16;
/// The calling thread's shard in [0, kThreadShards), assigned round robin at its first
/// call and fixed for its life: the engine's smp_processor_id() for those lists.
inline int ThreadShard() {
  static constinit thread_local int shard = -1;
  if (__builtin_expect(shard < 0, 0)) {
    static std::atomic<unsigned> next{0};
    shard = static_cast<int>(next.fetch_add(1, std::memory_order_relaxed) % kThreadShards);
  }
  return shard;
}

template <typename Block>
class PerThread {
 public:
  /// The calling thread's block (registered on first use; cheap afterwards).
  static Block& Get() {
    Block* b = tls_;
    if (__builtin_expect(b == nullptr, 0)) b = Register();
    return *b;
  }
  /// Blocks made so far (those of live threads and those kept from exited ones), under
  /// the registry lock: the peak number of threads that used Block at once.
  static size_t BlockCount() {
    Registry& r = Reg();
    std::lock_guard<std::mutex> l(r.mu);
    return r.all.size();
  }
  /// Calls fn(const Block&) for every block ever registered, under the registry lock.
  template <typename Fn>
  static void ForEach(Fn&& fn) {
    Registry& r = Reg();
    std::lock_guard<std::mutex> l(r.mu);
    for (const Block* b : r.all) fn(*b);
  }

 private:
  struct Registry {
    std::mutex mu;
    std::vector<Block*> all;
    std::vector<Block*> retired;
  };
  static Registry& Reg() {
    static Registry* r = new Registry;  // never destroyed: threads may exit after main
    return *r;
  }
  struct Retirer {
    ~Retirer() {
      if (tls_) {
        std::lock_guard<std::mutex> l(Reg().mu);
        Reg().retired.push_back(tls_);
        tls_ = nullptr;
      }
    }
  };
  static Block* Register() {
    (void)&retirer_;  // odr-use: instantiates the thread-exit hook
    Registry& r = Reg();
    std::lock_guard<std::mutex> l(r.mu);
    Block* b;
    if (!r.retired.empty()) {
      b = r.retired.back();
      r.retired.pop_back();
    } else {
      b = new Block();
      r.all.push_back(b);
    }
    tls_ = b;
    return b;
  }
  // constinit: no dynamic initialisation, so no TLS wrapper call on hot paths.
  static inline thread_local constinit Block* tls_ = nullptr;
  static inline thread_local Retirer retirer_;
};

}  // namespace vmspace
