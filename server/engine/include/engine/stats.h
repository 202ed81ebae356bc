// SPDX-License-Identifier: Apache-2.0
// Event counters and lock statistics, kept per thread and summed at read time.
//
// Hot paths (faults, lock acquisitions) only touch the calling thread's own block with
// relaxed loads and stores: no shared atomic read-modify-write, no lock. Readers (the
// metrics exporter, GetLockStats, tests) sum all live blocks plus the totals left by
// exited threads. This is Linux's per-CPU vm_event_states / count_vm_event pattern
// (include/linux/vmstat.h), with threads in place of CPUs.
#pragma once

#include <x86intrin.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/per_thread.h"

namespace vmspace {

/// Engine events, counted like /proc/vmstat (names in EventName()).
enum class Event : uint16_t {
  kPgfault,          // completed handle_mm_fault calls (incl. SIGBUS/OOM), as vmstat pgfault
  kFaultAnonZero,    // anonymous read fault mapped the shared zero page
  kFaultAnonWrite,   // anonymous write fault allocated a zeroed frame
  kFaultWpZero,      // write to the zero page: COW into a new frame (do_wp_page)
  kFaultWpReuse,     // write to an exclusive read-only anon page: reuse (do_wp_page)
  kFaultShmem,       // shared anonymous (shmem) fault
  kFaultSegvMaperr,  // access with no VMA
  kFaultSegvAccerr,  // access not allowed by the VMA's protection
  kFaultSigbus,
  kFaultOom,
  kVmaLockSuccess,   // as VMA_LOCK_SUCCESS
  kVmaLockAbort,     // as VMA_LOCK_ABORT
  kVmaLockMiss,      // as VMA_LOCK_MISS
  kFramesAllocated,
  kFramesFreed,
  kPgtablesAllocated,
  kPgtablesFreed,
  kPgmajfault,        // faults that read the page from the backing store (vmstat pgmajfault)
  kFaultFile,         // file page fault: read, or shared write (do_read_fault/do_shared_fault)
  kFaultFileCow,      // write to a private file page: copy into an anon frame (do_cow_fault/wp_page_copy)
  kFaultAroundPages,  // PTEs installed by fault-around (filemap_map_pages), the faulting one included
  kVmaLockRetryFile,  // VMA-lock fault on a file VMA redone under mmap_lock (VM_FAULT_RETRY, vma_lock=anon|around)
  kVmaLockRetryAnonVma,  // VMA-lock COW fault needing an anon_vma redone under mmap_lock (vmf_anon_prepare)
  kFaultRetryDirty,   // shared write fault that dirtied a page, dropped its lock, returned VM_FAULT_RETRY
  kFaultCompleted,    // the same fault ending VM_FAULT_COMPLETED (shared_fault_completion=completed)
  kDirtyThrottled,    // balance_dirty_pages: a writer waited for writeback (dirty > --dirty-bytes)
  kWritebackPages,    // dirty pages written back by the writeback thread (wb_writeback)
  kRcuPolledGathers,  // gathers a space freed itself after a polled grace period (not via call_rcu)
  kRcuSoleReuses,     // retired index nodes a space's only thread took back after its own quiescent state
  kHostFileSyncs,     // fdatasync(2) of a host file after its writeback (FsyncFile, MS_SYNC, shutdown)
  kFaultWpCopy,       // write to an anon page fork shared, still mapped elsewhere: copy (wp_page_copy)
  kCount
};
const char* EventName(Event e);

/// Engine operations, counted by type and errno.
enum class OpType : uint8_t { kMmap, kMunmap, kMprotect, kMadvise, kBrk, kMremap, kCount };
const char* OpTypeName(OpType t);
/// errno values tracked per op type; index 0 is success, the last slot is "other".
inline constexpr std::array<int, 12> kTrackedErrnos = {0,  22 /*EINVAL*/, 12 /*ENOMEM*/,
                                                       17 /*EEXIST*/, 1 /*EPERM*/,
                                                       13 /*EACCES*/, 9 /*EBADF*/,
                                                       75 /*EOVERFLOW*/, 19 /*ENODEV*/,
                                                       95 /*EOPNOTSUPP*/, 11 /*EAGAIN*/, -1};
int ErrnoSlot(int err);

/// Lock classes for lock_stat-like instrumentation (names in LockClassName; LOCKING.md
/// ranks them). kIPagesLock: a File's i_pages lock (the xarray's xa_lock: folio insert,
/// removal, PG_writeback start/end); kWbListLock: the writeback domain's lock (the
/// b_dirty list, as wb->list_lock, and the throttling state balance_dirty_pages waits
/// on); kInvalidateLock: a File's invalidate_lock (read by whoever adds pages to its
/// page cache, written by truncate and hole punching).
enum class LockClass : uint8_t {
  kMmapLock, kVmaLock, kPtl, kPageTableLock, kIMmapRwsem, kIPagesLock, kWbListLock, kAnonVma, kInvalidateLock, kCount
};
enum class LockMode : uint8_t { kRead, kWrite, kCount };
const char* LockClassName(LockClass c);
/// Whether the class is a reader-writer lock (mmap_lock, vma_lock, i_mmap_rwsem,
/// invalidate_lock) with read acquisitions; the others (spinlocks, mutexes) count only
/// LockMode::kWrite, and exporters leave their read cells out.
bool LockClassShared(LockClass c);
const char* LockModeName(LockMode m);

/// Histogram of durations with fixed buckets (upper bounds in seconds, see
/// kDurationBuckets); the last bucket is +Inf.
/// 2.5 ms and 5 ms tell "one scheduler time slice behind a preempted holder" from
/// "several".
inline constexpr std::array<double, 16> kDurationBuckets = {
    1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 1e-1, 1.0};

struct LockStatCell {
  uint64_t acquisitions = 0;
  uint64_t contentions = 0;
  uint64_t wait_ns_total = 0;
  uint64_t wait_ns_max = 0;
  uint64_t hold_ns_total = 0;
  uint64_t hold_ns_max = 0;
  std::array<uint64_t, kDurationBuckets.size() + 1> wait_hist{};  // per bucket (not cumulative)
  std::array<uint64_t, kDurationBuckets.size() + 1> hold_hist{};
};

/// A consistent-enough sum of every thread's counters.
struct StatsSnapshot {
  std::array<uint64_t, static_cast<size_t>(Event::kCount)> events{};
  std::array<std::array<uint64_t, kTrackedErrnos.size()>, static_cast<size_t>(OpType::kCount)>
      ops{};
  std::array<std::array<LockStatCell, static_cast<size_t>(LockMode::kCount)>,
             static_cast<size_t>(LockClass::kCount)>
      locks{};
  uint64_t event(Event e) const { return events[static_cast<size_t>(e)]; }
  const LockStatCell& lock(LockClass c, LockMode m) const {
    return locks[static_cast<size_t>(c)][static_cast<size_t>(m)];
  }
  /// this - base, field by field (for measuring one run).
  StatsSnapshot Minus(const StatsSnapshot& base) const;
};

/// Statistics are kept per locking-profile slot (LockingProfile::stats_slot()), so one
/// daemon can compare profiles side by side. Slot of the calling thread: set by every
/// AddressSpace entry point for the space's profile. One per named profile
/// (LockingProfile::kNamedCount, checked in profile.cc), "custom", and "none": work
/// outside any space (file calls, the writeback thread), the slot of a thread that is
/// in no StatsSlotScope.
inline constexpr int kStatSlots = 8;
inline constexpr int kStatSlotNone = kStatSlots - 1;

namespace stats_internal {
struct LockCell {  // times in TSC ticks (converted to ns by ReadStats)
  std::atomic<uint64_t> acquisitions{0}, contentions{0}, wait_ticks_total{0}, wait_ticks_max{0},
      hold_ticks_total{0}, hold_ticks_max{0};
  std::array<std::atomic<uint64_t>, kDurationBuckets.size() + 1> wait_hist{}, hold_hist{};
};
struct Slot {
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Event::kCount)> events{};
  std::array<std::array<std::atomic<uint64_t>, kTrackedErrnos.size()>,
             static_cast<size_t>(OpType::kCount)>
      ops{};
  std::array<std::array<LockCell, static_cast<size_t>(LockMode::kCount)>,
             static_cast<size_t>(LockClass::kCount)>
      locks{};
};
struct alignas(kDestructiveInterferenceBytes) ThreadBlock {
  std::array<Slot, kStatSlots> slots;
};
inline thread_local constinit int tls_slot = kStatSlotNone;
/// The calling thread's counters for its current profile slot.
inline Slot& Block() { return PerThread<ThreadBlock>::Get().slots[tls_slot]; }
// Single-writer increment: only the owning thread writes its block.
inline void Bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
inline void Max(std::atomic<uint64_t>& c, uint64_t v) {
  if (v > c.load(std::memory_order_relaxed)) c.store(v, std::memory_order_relaxed);
}
/// Histogram bucket of a duration in TSC ticks (thresholds precomputed in ticks).
size_t BucketFor(uint64_t ticks);
}  // namespace stats_internal

/// Count one engine event on the calling thread's block (no shared writes).
inline void CountEvent(Event e, uint64_t n = 1) {
  stats_internal::Bump(stats_internal::Block().events[static_cast<size_t>(e)], n);
}
/// Count one engine operation with its result errno (0 = success).
inline void CountOp(OpType t, int err) {
  stats_internal::Bump(stats_internal::Block().ops[static_cast<size_t>(t)][ErrnoSlot(err)]);
}
namespace stats_internal {
/// RecordLock's part for a contended acquisition or one with a hold time.
void RecordLockSlow(LockCell& cell, LockClass c, LockMode m, bool contended, uint64_t wait_ticks,
                    uint64_t hold_ticks);
}  // namespace stats_internal
/// Record one lock acquisition: contended or not, wait and hold time in TSC ticks
/// (NowTicks() differences; 0 = not measured). Inline: an uncontended acquisition is
/// one increment of the calling thread's own counter.
inline void RecordLock(LockClass c, LockMode m, bool contended, uint64_t wait_ticks, uint64_t hold_ticks) {
  auto& cell = stats_internal::Block().locks[static_cast<size_t>(c)][static_cast<size_t>(m)];
  stats_internal::Bump(cell.acquisitions);
  if (__builtin_expect(contended || hold_ticks != 0, 0))
    stats_internal::RecordLockSlow(cell, c, m, contended, wait_ticks, hold_ticks);
}
/// Record only the hold time (ticks) of an acquisition already counted by RecordLock,
/// standing for `weight` acquisitions (hold times are sampled, see lock.h).
void RecordHold(LockClass c, LockMode m, uint64_t hold_ticks, uint64_t weight = 1);

/// Sum of all threads' counters since process start, over all profile slots (slot < 0)
/// or for one slot. Safe from any thread.
StatsSnapshot ReadStats(int slot = -1);

/// Attributes the calling thread's statistics to `slot` until the scope ends.
class StatsSlotScope {
 public:
  explicit StatsSlotScope(int slot) : prev_(stats_internal::tls_slot) { stats_internal::tls_slot = slot; }
  ~StatsSlotScope() { stats_internal::tls_slot = prev_; }
  StatsSlotScope(const StatsSlotScope&) = delete;
  StatsSlotScope& operator=(const StatsSlotScope&) = delete;

 private:
  int prev_;
};

/// Whether lock timing is recorded (--lock-stats=on|off). Acquisition counts are kept
/// either way; with it off no clock is read on lock paths.
void SetLockStatsEnabled(bool on);
namespace stats_internal {
inline std::atomic<bool> g_lock_stats{true};
}
inline bool LockStatsEnabled() { return stats_internal::g_lock_stats.load(std::memory_order_relaxed); }

/// Timestamp for lock timing: the TSC (one rdtsc, no scaling on the hot path). Lock
/// statistics are kept in ticks and converted to ns when read (TicksToNs).
inline uint64_t NowTicks() { return __rdtsc(); }
/// TSC ticks to nanoseconds (calibrated against CLOCK_MONOTONIC at start-up).
uint64_t TicksToNs(uint64_t ticks);
/// Nanoseconds to TSC ticks (the same calibration), for spin bounds.
uint64_t NsToTicks(uint64_t ns);

/// Render a /proc/lock_stat-like table (times in microseconds) from a snapshot.
std::string FormatLockStat(const StatsSnapshot& s);

}  // namespace vmspace
