// SPDX-License-Identifier: Apache-2.0
// The lock timeline: a sampled record of lock waits and holds, faults and operations
// per daemon thread, for `vmspace trace-locks` (the TraceLocks call) and `vmspace
// replay --timeline`. Off by default; off, the hot paths pay one relaxed load of the
// enabled flag (LockTraceEnabled). On, every thread that records keeps a bounded ring
// of its own events (sync/lock_trace.cc); LockTraceStop collects the rings. What is
// recorded when on: every contended wait of an instrumented lock (RwSem, SpinLock)
// with its class, mode and the holder the lock's owner word names; one hold in
// sync_internal::kHoldSampleEvery per thread (the lock statistics' hold sample); one
// fault in kFaultSampleEvery per thread with its address; every operation (OpTrace).
// The kernel's nearest equivalent is the lock:contention_begin/end tracepoints with
// perf lock contention (tools/perf/builtin-lock.c, Linux 6.18).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/stats.h"

namespace vmspace {

/// What a TraceEvent is.
enum class TraceKind : uint8_t {
  kLockWait,  // a contended acquisition: from the wait's begin to the grant
  kLockHold,  // a sampled hold: from the acquisition to the release
  kFault,     // a sampled page fault (handle_mm_fault and its retries)
  kOp,        // one operation of a space (a call, or an op of a Batch stream)
};
/// "lock_wait", "lock_hold", "fault", "op".
const char* TraceKindName(TraceKind k);

/// One recorded event. Times in nanoseconds since LockTraceStart.
struct TraceEvent {
  uint64_t begin_ns = 0;
  uint64_t dur_ns = 0;
  /// The space of the operation the thread was running (0: none known, e.g. a wait
  /// of the writeback thread, or an operation that began before the trace did).
  uint64_t space_id = 0;
  /// The address range [start, end) of the enclosing operation (a fault: its address,
  /// end = start + 1 page), 0/0 if none.
  uint64_t start = 0, end = 0;
  /// The Linux thread id of the daemon thread that recorded it.
  uint32_t tid = 0;
  /// Waits: the thread id of the holder the lock's owner word named when the wait
  /// began (a writer, or the last reader in of a reader-owned lock), 0 if unknown
  /// (no owner recorded, or a thread that recorded no event).
  uint32_t holder_tid = 0;
  /// Waits: whether readers held the lock (the owner word's reader-owned bit).
  bool holder_readers = false;
  TraceKind kind = TraceKind::kOp;
  /// Waits and holds: the lock class and mode. Faults: kWrite for a write access.
  LockClass cls = LockClass::kMmapLock;
  LockMode mode = LockMode::kRead;
  /// Operations: the syscall's name (a static string); others: null.
  const char* name = nullptr;
};

/// One fault in this many (per thread) is recorded while the trace is on.
inline constexpr uint32_t kFaultSampleEvery = 16;
/// Events one thread's ring keeps (the newest; older ones are counted as dropped).
inline constexpr size_t kTraceRingEvents = 8192;

namespace lock_trace_internal {
inline std::atomic<bool> g_enabled{false};
/// The enclosing operation of this thread while tracing (set by OpTrace).
struct Context {
  uint64_t space_id = 0, start = 0, end = 0;
};
inline thread_local Context tls_ctx;
void OpBegin(uint64_t space_id, uint64_t start, uint64_t end, uint64_t* t0, Context* saved);
void OpEnd(const char* name, uint64_t t0, const Context& saved);
}  // namespace lock_trace_internal

/// Whether the trace is on (one relaxed load: the hot paths' only cost when off).
inline bool LockTraceEnabled() { return lock_trace_internal::g_enabled.load(std::memory_order_relaxed); }

/// Turns the trace on, emptying every ring. False if a trace is already on (one at a
/// time per process).
bool LockTraceStart();
/// Turns the trace off and returns the events recorded since LockTraceStart, ordered by
/// begin time, at most `max_events` (the earliest kept); *dropped (if not null) gets the
/// number left out (ring overflow plus the cap). Does nothing (returns none) if the
/// trace is not on.
std::vector<TraceEvent> LockTraceStop(size_t max_events, uint64_t* dropped = nullptr);

/// For the lifetime of one operation on a space: while the trace is on, its events are
/// attributed to `space_id` and the range [start, start + len), and the operation is
/// recorded as a kOp event named `name` (a static string). Off: one relaxed load.
class OpTrace {
 public:
  OpTrace(uint64_t space_id, const char* name, uint64_t start = 0, uint64_t len = 0) : name_(name) {
    if (__builtin_expect(LockTraceEnabled(), 0)) {
      on_ = true;
      lock_trace_internal::OpBegin(space_id, start, start + len, &t0_, &saved_);
    }
  }
  ~OpTrace() {
    if (__builtin_expect(on_, 0)) lock_trace_internal::OpEnd(name_, t0_, saved_);
  }
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;

 private:
  const char* const name_;
  bool on_ = false;
  uint64_t t0_ = 0;
  lock_trace_internal::Context saved_;
};

}  // namespace vmspace
