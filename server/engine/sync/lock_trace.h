// SPDX-License-Identifier: Apache-2.0
// The recording side of the lock timeline (engine/lock_trace.h): the hooks the locks
// and the fault path call. Each costs one relaxed load of the enabled flag while the
// trace is off; on, an event is appended to the calling thread's ring under the ring's
// own (uncontended) lock.
#pragma once

#include <cstdint>

#include "engine/lock_trace.h"
#include "engine/stats.h"
#include "engine/types.h"

namespace vmspace::lock_trace_internal {

/// Appends one event of the calling thread. `begin`/`end` in NowTicks() ticks; `holder`
/// the lock's owner word when the wait began (task | flags, see RwSem), `self` the
/// calling thread's task (0 if the lock has none): how holders are named.
void Record(TraceKind kind, LockClass cls, LockMode mode, uint64_t begin, uint64_t end, uintptr_t holder,
            uintptr_t self, uint64_t start, uint64_t stop);

/// One wait of a lock's slow path, as lock:contention_begin / contention_end: built
/// before the wait (with the owner word), Done(contended) after the grant.
class TraceWait {
 public:
  TraceWait(LockClass cls, LockMode mode, uintptr_t holder, uintptr_t self) {
    if (__builtin_expect(LockTraceEnabled(), 0)) {
      cls_ = cls;
      mode_ = mode;
      holder_ = holder;
      self_ = self;
      t0_ = NowTicks();
    }
  }
  void Done(bool contended) {
    if (__builtin_expect(t0_ != 0, 0) && contended) {
      const Context& c = tls_ctx;
      Record(TraceKind::kLockWait, cls_, mode_, t0_, NowTicks(), holder_, self_, c.start, c.end);
    }
  }

 private:
  uint64_t t0_ = 0;
  uintptr_t holder_ = 0, self_ = 0;
  LockClass cls_ = LockClass::kMmapLock;
  LockMode mode_ = LockMode::kRead;
};

/// A sampled hold (its acquisition stamp from sync_internal::HoldStamp) that ends now.
inline void TraceHold(LockClass cls, LockMode mode, uint64_t stamp, uint64_t now, uintptr_t self) {
  if (__builtin_expect(LockTraceEnabled(), 0)) {
    const Context& c = tls_ctx;
    Record(TraceKind::kLockHold, cls, mode, stamp, now, 0, self, c.start, c.end);
  }
}

inline thread_local uint32_t tls_fault_ctr = 0;

/// For the lifetime of one fault (as mm/memory.c handle_mm_fault's caller, the
/// architecture's do_user_addr_fault): one in kFaultSampleEvery per thread is recorded
/// while the trace is on, with its address and access.
class FaultTrace {
 public:
  FaultTrace(uint64_t addr, AccessType acc) {
    if (__builtin_expect(LockTraceEnabled(), 0) && (++tls_fault_ctr & (kFaultSampleEvery - 1)) == 0) {
      addr_ = addr & kPageMask;
      write_ = acc == AccessType::kWrite;
      saved_ = tls_ctx;
      tls_ctx.start = addr_;
      tls_ctx.end = addr_ + kPageSize;
      t0_ = NowTicks();
    }
  }
  ~FaultTrace() {
    if (__builtin_expect(t0_ != 0, 0)) {
      tls_ctx = saved_;
      Record(TraceKind::kFault, LockClass::kMmapLock, write_ ? LockMode::kWrite : LockMode::kRead, t0_,
             NowTicks(), 0, 0, addr_, addr_ + kPageSize);
    }
  }
  FaultTrace(const FaultTrace&) = delete;
  FaultTrace& operator=(const FaultTrace&) = delete;

 private:
  uint64_t t0_ = 0, addr_ = 0;
  bool write_ = false;
  Context saved_;
};

}  // namespace vmspace::lock_trace_internal
