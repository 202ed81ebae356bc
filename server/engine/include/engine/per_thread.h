// PerThread<Block>: one Block per thread, written only by its thread, summed by readers.
//
// The pattern behind the engine's statistics and the daemon's RPC counters (Linux's
// per-CPU counters, with threads in place of CPUs): the hot path touches only the
// calling thread's block; readers walk every block under the registry lock. A block of
// an exited thread keeps its counts and is handed to the next new thread, so totals
// are preserved and the number of blocks is bounded by the peak thread count.
#pragma once

#include <atomic>
#include <mutex>
#include <vector>

namespace vmspace {

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
