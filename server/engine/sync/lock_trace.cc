// SPDX-License-Identifier: Apache-2.0
// The lock timeline's rings and their collection (engine/lock_trace.h,
// sync/lock_trace.h).
#include "sync/lock_trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace vmspace {

const char* TraceKindName(TraceKind k) {
  switch (k) {
    case TraceKind::kLockWait: return "lock_wait";
    case TraceKind::kLockHold: return "lock_hold";
    case TraceKind::kFault: return "fault";
    case TraceKind::kOp: return "op";
  }
  return "?";
}

namespace lock_trace_internal {
namespace {

// One event as recorded: raw ticks and the owner word; converted when collected.
struct RawEvent {
  uint64_t begin, end;
  uint64_t space_id, start, stop;
  uintptr_t holder;
  const char* name;
  TraceKind kind;
  LockClass cls;
  LockMode mode;
};

// One thread's ring. Written by its thread, read by LockTraceStop, both under mu.
struct Ring {
  std::mutex mu;
  uint64_t gen = 0;   // the trace its events belong to
  uint64_t head = 0;  // events appended in that trace (the ring keeps the last kTraceRingEvents)
  uint32_t tid = 0;
  uintptr_t task = 0;  // the thread's lock-owner task word, once seen
  bool live = false;   // a thread owns it (guarded by Registry::mu)
  RawEvent ev[kTraceRingEvents];
};

struct Registry {
  std::mutex mu;  // the ring list; taken after no Ring::mu
  std::vector<std::unique_ptr<Ring>> rings;
  bool tracing = false;  // one trace at a time (under mu)
  uint64_t gen = 0;     // current trace generation (under mu)
  std::atomic<uint64_t> cur_gen{0};
  uint64_t base_ticks = 0;
};
Registry& Reg() {
  static Registry* r = new Registry;  // never destroyed: threads may record after main
  return *r;
}

// The calling thread's ring; handed back (not freed) at thread exit.
struct Owner {
  Ring* ring = nullptr;
  ~Owner() {
    if (ring) {
      std::lock_guard<std::mutex> l(Reg().mu);
      ring->live = false;
    }
  }
};
thread_local Owner tls_owner;

Ring* MyRing() {
  if (__builtin_expect(tls_owner.ring != nullptr, 1)) return tls_owner.ring;
  Registry& r = Reg();
  std::lock_guard<std::mutex> l(r.mu);
  Ring* ring = nullptr;
  // A ring of an exited thread is reused once its events are no longer wanted (it
  // holds none of the current trace).
  for (auto& x : r.rings)
    if (!x->live && (x->gen != r.gen || x->head == 0)) {
      ring = x.get();
      break;
    }
  if (!ring) {
    r.rings.push_back(std::make_unique<Ring>());
    ring = r.rings.back().get();
  }
  std::lock_guard<std::mutex> rl(ring->mu);
  ring->live = true;
  ring->tid = static_cast<uint32_t>(syscall(SYS_gettid));
  ring->task = 0;
  ring->head = 0;
  ring->gen = r.gen;
  tls_owner.ring = ring;
  return ring;
}

// Appends `e` to the calling thread's ring (emptied first if it holds an older trace's).
void Append(const RawEvent& e, uintptr_t self) {
  Ring* ring = MyRing();
  const uint64_t gen = Reg().cur_gen.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> l(ring->mu);
  if (ring->gen != gen) {
    ring->gen = gen;
    ring->head = 0;
  }
  if (self) ring->task = self;
  ring->ev[ring->head++ % kTraceRingEvents] = e;
}

}  // namespace

void Record(TraceKind kind, LockClass cls, LockMode mode, uint64_t begin, uint64_t end, uintptr_t holder,
            uintptr_t self, uint64_t start, uint64_t stop) {
  Append(RawEvent{begin, end, tls_ctx.space_id, start, stop, holder, nullptr, kind, cls, mode}, self);
}

void OpBegin(uint64_t space_id, uint64_t start, uint64_t end, uint64_t* t0, Context* saved) {
  *saved = tls_ctx;
  tls_ctx = Context{space_id, start, end};
  *t0 = NowTicks();
}

void OpEnd(const char* name, uint64_t t0, const Context& saved) {
  Append(RawEvent{t0, NowTicks(), tls_ctx.space_id, tls_ctx.start, tls_ctx.end, 0, name, TraceKind::kOp,
                  LockClass::kMmapLock, LockMode::kRead},
         0);
  tls_ctx = saved;
}

}  // namespace lock_trace_internal

using lock_trace_internal::Reg;

bool LockTraceStart() {
  auto& r = Reg();
  {
    std::lock_guard<std::mutex> l(r.mu);
    if (r.tracing) return false;
    r.tracing = true;
    r.gen++;
    r.base_ticks = NowTicks();
    r.cur_gen.store(r.gen, std::memory_order_relaxed);
  }
  lock_trace_internal::g_enabled.store(true, std::memory_order_release);
  return true;
}

std::vector<TraceEvent> LockTraceStop(size_t max_events, uint64_t* dropped) {
  auto& r = Reg();
  std::vector<TraceEvent> out;
  uint64_t lost = 0;
  std::lock_guard<std::mutex> l(r.mu);
  if (!r.tracing) {
    if (dropped) *dropped = 0;
    return out;
  }
  lock_trace_internal::g_enabled.store(false, std::memory_order_release);
  r.tracing = false;
  const uint64_t base = r.base_ticks;
  std::unordered_map<uintptr_t, uint32_t> tid_of_task;
  struct Taken {
    lock_trace_internal::RawEvent e;
    uint32_t tid;
  };
  std::vector<Taken> raw;
  for (auto& ring : r.rings) {
    std::lock_guard<std::mutex> rl(ring->mu);
    if (ring->task) tid_of_task[ring->task] = ring->tid;
    if (ring->gen != r.gen) continue;
    const uint64_t n = std::min<uint64_t>(ring->head, kTraceRingEvents);
    lost += ring->head - n;
    for (uint64_t i = ring->head - n; i < ring->head; i++) raw.push_back({ring->ev[i % kTraceRingEvents], ring->tid});
    ring->head = 0;  // drained: the ring may be handed to a new thread
  }
  std::sort(raw.begin(), raw.end(), [](const Taken& a, const Taken& b) { return a.e.begin < b.e.begin; });
  if (raw.size() > max_events) {
    lost += raw.size() - max_events;
    raw.resize(max_events);
  }
  out.reserve(raw.size());
  constexpr uintptr_t kReaderOwned = 1, kFlags = 3;  // RwSem's owner word flags
  for (const Taken& t : raw) {
    const auto& e = t.e;
    TraceEvent x;
    x.begin_ns = e.begin > base ? TicksToNs(e.begin - base) : 0;
    x.dur_ns = e.end > e.begin ? TicksToNs(e.end - e.begin) : 0;
    x.space_id = e.space_id;
    x.start = e.start;
    x.end = e.stop;
    x.tid = t.tid;
    x.kind = e.kind;
    x.cls = e.cls;
    x.mode = e.mode;
    x.name = e.name;
    if (e.kind == TraceKind::kLockWait && e.holder) {
      x.holder_readers = e.holder & kReaderOwned;
      auto it = tid_of_task.find(e.holder & ~kFlags);
      if (it != tid_of_task.end()) x.holder_tid = it->second;
    }
    out.push_back(x);
  }
  if (dropped) *dropped = lost;
  return out;
}

}  // namespace vmspace
