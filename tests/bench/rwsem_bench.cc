// SPDX-License-Identifier: Apache-2.0
// RwSem (mmap_lock as Linux's rw_semaphore) against the implementation it replaced:
// glibc's writer-preferring pthread_rwlock with the same lock-stat instrumentation
// (a copy kept only here, for this comparison).
//
// Each thread loops over {take the lock for read or write, do the section's work,
// release, do some work outside}. Mixes: read-mostly (2% writes: faults vs mmap/munmap)
// and write-heavy (50%), with 2 and 4 threads. items_per_second counts acquisitions of
// all threads; the counters give the contended fraction of the lock stats.
//   build/tests/bench/rwsem_bench --benchmark_repetitions=3
#include <benchmark/benchmark.h>
#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "engine/stats.h"
#include "sync/lock_timing.h"
#include "sync/rwsem.h"

namespace vmspace {
namespace {

// The old RwSem (sync/rwsem.cc before the rw_semaphore): trylock, else a timed
// blocking acquisition; counted and sampled like the new one.
class PthreadRwSem {
 public:
  PthreadRwSem() {
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&rw_, &a);
    pthread_rwlockattr_destroy(&a);
  }
  ~PthreadRwSem() { pthread_rwlock_destroy(&rw_); }
  void LockRead() {
    bool contended = pthread_rwlock_tryrdlock(&rw_) != 0;
    uint64_t wait = contended ? sync_internal::TimedWait([&] { pthread_rwlock_rdlock(&rw_); }) : 0;
    RecordLock(LockClass::kMmapLock, LockMode::kRead, contended, wait, 0);
    read_stamp_ = sync_internal::HoldStamp();
  }
  void UnlockRead() {
    sync_internal::EndHold(LockClass::kMmapLock, LockMode::kRead, read_stamp_);
    pthread_rwlock_unlock(&rw_);
  }
  void LockWrite() {
    bool contended = pthread_rwlock_trywrlock(&rw_) != 0;
    uint64_t wait = contended ? sync_internal::TimedWait([&] { pthread_rwlock_wrlock(&rw_); }) : 0;
    RecordLock(LockClass::kMmapLock, LockMode::kWrite, contended, wait, 0);
    write_stamp_ = sync_internal::HoldStamp();
  }
  void UnlockWrite() {
    sync_internal::EndHold(LockClass::kMmapLock, LockMode::kWrite, write_stamp_);
    pthread_rwlock_unlock(&rw_);
  }

 private:
  pthread_rwlock_t rw_;
  uint64_t write_stamp_ = 0;
  static thread_local uint64_t read_stamp_;
};
thread_local uint64_t PthreadRwSem::read_stamp_ = 0;

struct NewRwSem : RwSem {
  NewRwSem() : RwSem(LockClass::kMmapLock, LockRank::kMmapLock) {}
};

// What the sections touch: a few cache lines, written under write, read under read.
struct alignas(64) Data {
  std::atomic<uint64_t> v[32];
};

inline void Work(int n) {
  for (int i = 0; i < n; i++) benchmark::DoNotOptimize(i);
}

template <typename Lock>
void BM_Mix(benchmark::State& state) {
  static Lock lock;
  static Data data;
  const int write_pct = static_cast<int>(state.range(0));
  uint64_t rng = 0x9e3779b97f4a7c15ull * (state.thread_index() + 1);
  const StatsSnapshot before = state.thread_index() == 0 ? ReadStats() : StatsSnapshot{};
  for (auto _ : state) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    if (static_cast<int>(rng % 100) < write_pct) {
      lock.LockWrite();
      for (auto& x : data.v) x.store(x.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      Work(100);  // an mmap/munmap section: tree and VMA changes
      lock.UnlockWrite();
    } else {
      lock.LockRead();
      uint64_t s = 0;
      for (auto& x : data.v) s += x.load(std::memory_order_relaxed);
      benchmark::DoNotOptimize(s);
      Work(50);  // a fault under mmap_lock read
      lock.UnlockRead();
    }
    Work(100);  // outside the lock
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    const StatsSnapshot d = ReadStats().Minus(before);
    const LockStatCell& r = d.lock(LockClass::kMmapLock, LockMode::kRead);
    const LockStatCell& w = d.lock(LockClass::kMmapLock, LockMode::kWrite);
    auto frac = [](uint64_t a, uint64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0; };
    state.counters["read_contended"] = frac(r.contentions, r.acquisitions);
    state.counters["write_contended"] = frac(w.contentions, w.acquisitions);
    state.counters["wait_us_per_acq"] =
        frac(r.wait_ns_total + w.wait_ns_total, r.acquisitions + w.acquisitions) / 1000.0;
  }
}

BENCHMARK_TEMPLATE(BM_Mix, NewRwSem)->Name("RwSem/mix")->ArgName("write_pct")->Arg(2)->Arg(50)->Threads(2)->Threads(4)->UseRealTime();
BENCHMARK_TEMPLATE(BM_Mix, PthreadRwSem)->Name("PthreadRwlock/mix")->ArgName("write_pct")->Arg(2)->Arg(50)->Threads(2)->Threads(4)->UseRealTime();

}  // namespace
}  // namespace vmspace

BENCHMARK_MAIN();
