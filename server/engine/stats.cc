// SPDX-License-Identifier: Apache-2.0
#include "engine/stats.h"
#include "engine/retained_memory.h"

#include <x86intrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

namespace vmspace {

const char* EventName(Event e) {
  switch (e) {
    case Event::kPgfault: return "pgfault";
    case Event::kFaultAnonZero: return "anon_zero_page";
    case Event::kFaultAnonWrite: return "anon_write";
    case Event::kFaultWpZero: return "wp_copy_zero";
    case Event::kFaultWpReuse: return "wp_reuse";
    case Event::kFaultShmem: return "shmem";
    case Event::kFaultSegvMaperr: return "segv_maperr";
    case Event::kFaultSegvAccerr: return "segv_accerr";
    case Event::kFaultSigbus: return "sigbus";
    case Event::kFaultOom: return "oom";
    case Event::kVmaLockSuccess: return "vma_lock_success";
    case Event::kVmaLockAbort: return "vma_lock_abort";
    case Event::kVmaLockMiss: return "vma_lock_miss";
    case Event::kFramesAllocated: return "frames_allocated";
    case Event::kFramesFreed: return "frames_freed";
    case Event::kPgtablesAllocated: return "pgtables_allocated";
    case Event::kPgtablesFreed: return "pgtables_freed";
    case Event::kPgmajfault: return "pgmajfault";
    case Event::kFaultFile: return "file";
    case Event::kFaultFileCow: return "file_cow";
    case Event::kFaultAroundPages: return "fault_around_pages";
    case Event::kVmaLockRetryFile: return "vma_lock_retry_file";
    case Event::kVmaLockRetryAnonVma: return "vma_lock_retry_anon_vma";
    case Event::kFaultRetryDirty: return "fault_retry_dirty";
    case Event::kFaultCompleted: return "fault_completed";
    case Event::kDirtyThrottled: return "dirty_throttled";
    case Event::kWritebackPages: return "writeback_pages";
    case Event::kRcuPolledGathers: return "rcu_polled_gathers";
    case Event::kRcuSoleReuses: return "rcu_sole_reuses";
    case Event::kHostFileSyncs: return "host_file_syncs";
    case Event::kFaultWpCopy: return "wp_copy";
    case Event::kCount: break;
  }
  return "?";
}

const char* OpTypeName(OpType t) {
  switch (t) {
    case OpType::kMmap: return "mmap";
    case OpType::kMunmap: return "munmap";
    case OpType::kMprotect: return "mprotect";
    case OpType::kMadvise: return "madvise";
    case OpType::kBrk: return "brk";
    case OpType::kMremap: return "mremap";
    case OpType::kCount: break;
  }
  return "?";
}

int ErrnoSlot(int err) {
  for (size_t i = 0; i + 1 < kTrackedErrnos.size(); i++)
    if (kTrackedErrnos[i] == err) return static_cast<int>(i);
  return static_cast<int>(kTrackedErrnos.size() - 1);
}

const char* LockClassName(LockClass c) {
  switch (c) {
    case LockClass::kMmapLock: return "mmap_lock";
    case LockClass::kVmaLock: return "vma_lock";
    case LockClass::kPtl: return "ptl";
    case LockClass::kPageTableLock: return "page_table_lock";
    case LockClass::kIMmapRwsem: return "i_mmap_rwsem";
    case LockClass::kIPagesLock: return "i_pages_lock";
    case LockClass::kWbListLock: return "wb_list_lock";
    case LockClass::kAnonVma: return "anon_vma";
    case LockClass::kInvalidateLock: return "invalidate_lock";
    case LockClass::kCount: break;
  }
  return "?";
}

bool LockClassShared(LockClass c) {
  return c == LockClass::kMmapLock || c == LockClass::kVmaLock || c == LockClass::kIMmapRwsem ||
         c == LockClass::kInvalidateLock;
}

const char* LockModeName(LockMode m) { return m == LockMode::kRead ? "read" : "write"; }

StatsSnapshot StatsSnapshot::Minus(const StatsSnapshot& b) const {
  StatsSnapshot r = *this;
  for (size_t i = 0; i < events.size(); i++) r.events[i] -= b.events[i];
  for (size_t t = 0; t < ops.size(); t++)
    for (size_t i = 0; i < ops[t].size(); i++) r.ops[t][i] -= b.ops[t][i];
  for (size_t c = 0; c < locks.size(); c++)
    for (size_t m = 0; m < locks[c].size(); m++) {
      LockStatCell& x = r.locks[c][m];
      const LockStatCell& y = b.locks[c][m];
      x.acquisitions -= y.acquisitions;
      x.contentions -= y.contentions;
      x.wait_ns_total -= y.wait_ns_total;
      x.hold_ns_total -= y.hold_ns_total;
      for (size_t k = 0; k < x.wait_hist.size(); k++) {
        x.wait_hist[k] -= y.wait_hist[k];
        x.hold_hist[k] -= y.hold_hist[k];
      }
      // maxima cannot be subtracted; they stay as totals since start
    }
  return r;
}

namespace {
// TSC calibration, done once at start-up (static initialisation), so the hot path
// never checks a guard: ns = ticks * ns_per_tick.
struct TscClock {
  double ns_per_tick;
  std::array<uint64_t, kDurationBuckets.size()> bucket_ticks;  // upper bounds in ticks
  TscClock() {
    auto t0 = std::chrono::steady_clock::now();
    uint64_t c0 = __rdtsc();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto t1 = std::chrono::steady_clock::now();
    uint64_t c1 = __rdtsc();
    double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
    ns_per_tick = c1 > c0 ? ns / static_cast<double>(c1 - c0) : 1.0;
    for (size_t i = 0; i < kDurationBuckets.size(); i++)
      bucket_ticks[i] = static_cast<uint64_t>(kDurationBuckets[i] * 1e9 / ns_per_tick);
  }
};
const TscClock g_clock;
}  // namespace

uint64_t TicksToNs(uint64_t ticks) {
  return static_cast<uint64_t>(static_cast<double>(ticks) * g_clock.ns_per_tick);
}

uint64_t NsToTicks(uint64_t ns) {
  return static_cast<uint64_t>(static_cast<double>(ns) / g_clock.ns_per_tick);
}

namespace stats_internal {
size_t BucketFor(uint64_t ticks) {
  for (size_t i = 0; i < kDurationBuckets.size(); i++)
    if (ticks <= g_clock.bucket_ticks[i]) return i;
  return kDurationBuckets.size();
}
}  // namespace stats_internal

void SetLockStatsEnabled(bool on) { stats_internal::g_lock_stats.store(on, std::memory_order_relaxed); }

void stats_internal::RecordLockSlow(LockCell& cell, LockClass c, LockMode m, bool contended, uint64_t wait_ticks,
                                    uint64_t hold_ticks) {
  if (contended) {
    Bump(cell.contentions);
    if (wait_ticks) {
      Bump(cell.wait_ticks_total, wait_ticks);
      Max(cell.wait_ticks_max, wait_ticks);
      Bump(cell.wait_hist[BucketFor(wait_ticks)]);
    }
  }
  if (hold_ticks) RecordHold(c, m, hold_ticks);
}

void RecordHold(LockClass c, LockMode m, uint64_t hold_ticks, uint64_t weight) {
  using namespace stats_internal;
  auto& cell = Block().locks[static_cast<size_t>(c)][static_cast<size_t>(m)];
  Bump(cell.hold_ticks_total, hold_ticks * weight);
  Max(cell.hold_ticks_max, hold_ticks);
  Bump(cell.hold_hist[BucketFor(hold_ticks)], weight);
}

StatsSnapshot ReadStats(int slot) {
  using namespace stats_internal;
  StatsSnapshot s;
  PerThread<ThreadBlock>::ForEach([&](const ThreadBlock& blk) {
    const ThreadBlock* tb = &blk;
    for (int k = 0; k < kStatSlots; k++) {
      if (slot >= 0 && k != slot) continue;
      const Slot* b = &tb->slots[k];
      for (size_t i = 0; i < s.events.size(); i++)
        s.events[i] += b->events[i].load(std::memory_order_relaxed);
      for (size_t t = 0; t < s.ops.size(); t++)
        for (size_t i = 0; i < s.ops[t].size(); i++)
          s.ops[t][i] += b->ops[t][i].load(std::memory_order_relaxed);
      for (size_t c = 0; c < s.locks.size(); c++)
        for (size_t m = 0; m < s.locks[c].size(); m++) {
          LockStatCell& x = s.locks[c][m];
          const auto& y = b->locks[c][m];
          x.acquisitions += y.acquisitions.load(std::memory_order_relaxed);
          x.contentions += y.contentions.load(std::memory_order_relaxed);
          x.wait_ns_total += TicksToNs(y.wait_ticks_total.load(std::memory_order_relaxed));
          x.wait_ns_max = std::max(x.wait_ns_max, TicksToNs(y.wait_ticks_max.load(std::memory_order_relaxed)));
          x.hold_ns_total += TicksToNs(y.hold_ticks_total.load(std::memory_order_relaxed));
          x.hold_ns_max = std::max(x.hold_ns_max, TicksToNs(y.hold_ticks_max.load(std::memory_order_relaxed)));
          for (size_t k2 = 0; k2 < x.wait_hist.size(); k2++) {
            x.wait_hist[k2] += y.wait_hist[k2].load(std::memory_order_relaxed);
            x.hold_hist[k2] += y.hold_hist[k2].load(std::memory_order_relaxed);
          }
        }
    }
  });
  return s;
}

std::string FormatLockStat(const StatsSnapshot& s) {
  std::string out;
  char line[512];
  snprintf(line, sizeof line, "lock_stat version 0.4 (vmspace; times in us)\n");
  out += line;
  snprintf(line, sizeof line, "%-24s %12s %14s %14s %14s %14s %14s %14s %14s\n", "class name",
           "contentions", "waittime-max", "waittime-total", "waittime-avg", "acquisitions",
           "holdtime-max", "holdtime-total", "holdtime-avg");
  out += line;
  for (size_t c = 0; c < s.locks.size(); c++)
    for (size_t m = 0; m < s.locks[c].size(); m++) {
      const LockStatCell& x = s.locks[c][m];
      if (x.acquisitions == 0) continue;
      std::string name = std::string(LockClassName(static_cast<LockClass>(c))) +
                         (m == 0 ? "-R:" : "-W:");
      double wavg = x.contentions ? x.wait_ns_total / 1e3 / x.contentions : 0;
      double havg = x.acquisitions ? x.hold_ns_total / 1e3 / x.acquisitions : 0;
      snprintf(line, sizeof line,
               "%-24s %12llu %14.2f %14.2f %14.2f %14llu %14.2f %14.2f %14.2f\n", name.c_str(),
               (unsigned long long)x.contentions, x.wait_ns_max / 1e3, x.wait_ns_total / 1e3,
               wavg, (unsigned long long)x.acquisitions, x.hold_ns_max / 1e3,
               x.hold_ns_total / 1e3, havg);
      out += line;
    }
  return out;
}

}  // namespace vmspace

namespace vmspace {

uint64_t ThreadStatsBytes() {
  return PerThread<stats_internal::ThreadBlock>::BlockCount() * sizeof(stats_internal::ThreadBlock);
}

}  // namespace vmspace
