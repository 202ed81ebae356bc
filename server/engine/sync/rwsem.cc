// SPDX-License-Identifier: Apache-2.0
// Linux's rw_semaphore (kernel/locking/rwsem.c, 6.18) in user space; see rwsem.h for
// what is the kernel's and what differs. Function comments name the kernel function
// each one mirrors.
//
// Memory order: the fast paths acquire (down) and release (up) on the count word, as
// the kernel's atomic_long_*_acquire / _release. Every other change of the count is a
// read-modify-write with acq_rel, so it continues the release sequence of the last
// unlock; a reader granted from the queue acquires through its waiter's `task` word
// (store-release by the waker, load-acquire by the reader: smp_store_release /
// smp_load_acquire in the kernel). ThreadSanitizer sees exactly these edges.
#include "sync/rwsem.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>


#include "engine/per_thread.h"
#include "sync/lock_timing.h"
#include "sync/lock_trace.h"
#include "sync/rcu.h"

namespace vmspace {

using sync_internal::EndHold;
using sync_internal::HoldStamp;

namespace {
// Acquisition stamps of the read and the write lock each class is currently held in by
// this thread (a thread holds at most one lock per class at a time; see LOCKING.md).
thread_local uint64_t tls_read_acquired[static_cast<size_t>(LockClass::kCount)];
thread_local uint64_t tls_write_acquired[static_cast<size_t>(LockClass::kCount)];

// `current`: a per-thread address, the task in the owner word (its low bits are free).
alignas(8) thread_local char tls_task;
inline uintptr_t Current() { return reinterpret_cast<uintptr_t>(&tls_task); }

// Owner word flags.
constexpr uintptr_t kReaderOwned = 1;   // RWSEM_READER_OWNED
constexpr uintptr_t kNonspinnable = 2;  // RWSEM_NONSPINNABLE

constexpr uint64_t kWriterMask = RwSem::kWriterLocked;
constexpr uint64_t kReaderMask = ~(RwSem::kReaderBias - 1);
constexpr uint64_t kLockMask = kWriterMask | kReaderMask;
constexpr uint64_t kReadFailedMask =
    kWriterMask | RwSem::kFlagWaiters | RwSem::kFlagHandoff | RwSem::kFlagReadFail;
constexpr int kMaxReadersWakeup = 256;  // MAX_READERS_WAKEUP

// The kernel breaks off optimistic spinning when the spinner should yield the CPU
// (need_resched()). User space cannot know: one optimistic spin lasts at most this long
// over all owners it sees (the kernel's longest reader-owned spin, 25 us).
constexpr uint64_t kSpinLimitNs = 25'000;

enum WakeType { kWakeAny, kWakeReaders, kWakeReadOwned };  // enum rwsem_wake_type

const uint64_t& OwnerSpinTicks() {
  static const uint64_t t = NsToTicks(RwSem::kOwnerSpinNs);
  return t;
}
const uint64_t& SpinLimitTicks() {
  static const uint64_t t = NsToTicks(kSpinLimitNs);
  return t;
}
const uint64_t& HalfMicrosecondTicks() {
  static const uint64_t t = NsToTicks(500);
  return t;
}

inline void CpuRelax() { __builtin_ia32_pause(); }

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
// Sleeps while *word == val (or until a wake-up, possibly spurious: callers re-check).
void FutexWait(std::atomic<uint32_t>& word, uint32_t val) {
  RcuSleep sleep;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, val, nullptr, nullptr, 0);
}
// Wakes a sleeper on word. The word may already be gone (its waiter saw the grant and
// returned): waking an address nobody sleeps on does nothing, and a new sleeper there
// re-checks its own condition.
void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}
}  // namespace

static_assert(sizeof(RwSem) == 40, "struct rw_semaphore's size (count, owner, osq, wait_lock, wait_list)");

// ------------------------------------------------------------------ lock events

// The events of RwSemEvents, in its field order.
enum RwSem::Event : int {
  kOptLock, kOptFail, kOptNospin, kRlockSteal, kRlockFast, kRlockHandoff, kWlockHandoff,
  kSleepReader, kSleepWriter, kWakeReader, kWakeWriter, kEventCount
};

namespace {
constexpr size_t kClasses = static_cast<size_t>(LockClass::kCount);
// One thread's counts, per lock class (written by that thread alone).
struct EventBlock {
  std::atomic<uint64_t> n[kClasses][RwSem::kEventCount] = {};
};
}  // namespace

void RwSem::Inc(Event e, uint64_t n) const {
  std::atomic<uint64_t>& c = PerThread<EventBlock>::Get().n[static_cast<size_t>(cls_)][e];
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

RwSemEvents RwSem::ClassEvents(LockClass cls) {
  const size_t k = static_cast<size_t>(cls);
  uint64_t sum[kEventCount] = {};
  PerThread<EventBlock>::ForEach([&](const EventBlock& b) {
    for (int e = 0; e < kEventCount; e++) sum[e] += b.n[k][e].load(std::memory_order_relaxed);
  });
  RwSemEvents out;
  uint64_t* f[kEventCount] = {&out.opt_lock,     &out.opt_fail,     &out.opt_nospin,   &out.rlock_steal,
                              &out.rlock_fast,   &out.rlock_handoff, &out.wlock_handoff, &out.sleep_reader,
                              &out.sleep_writer, &out.wake_reader,  &out.wake_writer};
  for (int e = 0; e < kEventCount; e++) *f[e] = sum[e];
  return out;
}

RwSemEvents RwSemEvents::Minus(const RwSemEvents& b) const {
  RwSemEvents d;
  d.opt_lock = opt_lock - b.opt_lock;
  d.opt_fail = opt_fail - b.opt_fail;
  d.opt_nospin = opt_nospin - b.opt_nospin;
  d.rlock_steal = rlock_steal - b.rlock_steal;
  d.rlock_fast = rlock_fast - b.rlock_fast;
  d.rlock_handoff = rlock_handoff - b.rlock_handoff;
  d.wlock_handoff = wlock_handoff - b.wlock_handoff;
  d.sleep_reader = sleep_reader - b.sleep_reader;
  d.sleep_writer = sleep_writer - b.sleep_writer;
  d.wake_reader = wake_reader - b.wake_reader;
  d.wake_writer = wake_writer - b.wake_writer;
  return d;
}

// ------------------------------------------------------------------ wait lock

void RwSem::WaitLock::LockSlow() {
  // Holders are brief (a queue update): spin a little while it is held but not slept on.
  for (int i = 0; i < 100; i++) {
    uint32_t c = word_.load(std::memory_order_relaxed);
    if (c == 0 && word_.compare_exchange_weak(c, 1, std::memory_order_acquire, std::memory_order_relaxed)) return;
    if (c == 2) break;
    CpuRelax();
  }
  while (word_.exchange(2, std::memory_order_acquire) != 0) FutexWait(word_, 2);
}

void RwSem::WaitLock::Unlock() {
  if (word_.exchange(0, std::memory_order_release) == 2) FutexWake(&word_);
}

// enum owner_state.
enum RwSem::OwnerState : int {
  kOwnerNull = 1 << 0,
  kOwnerWriter = 1 << 1,
  kOwnerReader = 1 << 2,
  kOwnerNonspinnable = 1 << 3,
};
namespace {
constexpr int kOwnerSpinnable = 1 | 2 | 4;  // OWNER_SPINNABLE
}  // namespace

// struct rwsem_waiter, on the waiting thread's stack; linked into the queue under
// wait_lock.
struct RwSem::Waiter {
  Waiter* prev = nullptr;
  Waiter* next = nullptr;
  bool write = false;
  uintptr_t task_id = 0;
  // Readers: 1 while waiting, 0 once granted (the kernel clears waiter->task). The
  // reader sleeps on it.
  std::atomic<uint32_t> task{1};
  // Writers: the futex word they sleep on; a waker sets 1 (wake_q_add + wake_up_q).
  std::atomic<uint32_t> wake{0};
  std::atomic<bool> handoff_set{false};
  uint64_t timeout = 0;  // NowTicks() after which the waiter may ask for the handoff
};

// DEFINE_WAKE_Q: the futex words to wake once wait_lock is dropped.
struct RwSem::WakeQ {
  std::atomic<uint32_t>* words[kMaxReadersWakeup];
  int n = 0;
  bool empty() const { return n == 0; }
  void Add(std::atomic<uint32_t>* w) { words[n++] = w; }
  void WakeUp() {  // wake_up_q
    for (int i = 0; i < n; i++) FutexWake(words[i]);
    n = 0;
  }
};

RwSem::RwSem(LockClass cls, LockRank rank, uint64_t wait_timeout_ns)
    : wait_timeout_us_(static_cast<uint32_t>(std::min<uint64_t>(wait_timeout_ns / 1000, UINT32_MAX))),
      cls_(cls),
      rank_(rank) {}

// The NowTicks() after which a waiter that queued at t0 may ask for the handoff.
uint64_t RwSem::WaitDeadline(uint64_t t0) const {
  static const uint64_t ticks_per_us = NsToTicks(1'000'000) / 1000;
  return wait_timeout_us_ == 0 ? t0 : t0 + wait_timeout_us_ * ticks_per_us;
}

// ------------------------------------------------------------------ owner word

// rwsem_set_owner()
void RwSem::SetOwner() { owner_.store(Current(), std::memory_order_relaxed); }

// __rwsem_set_reader_owned(): keeps the nonspinnable bit. Skips the store when the
// word already says so (the same thread reading again).
void RwSem::SetReaderOwned(uintptr_t task) {
  const uintptr_t o = owner_.load(std::memory_order_relaxed);
  const uintptr_t v = task | kReaderOwned | (o & kNonspinnable);
  if (o != v) owner_.store(v, std::memory_order_relaxed);
}

// rwsem_set_nonspinnable(): only while reader-owned.
void RwSem::SetNonspinnable() {
  uintptr_t o = owner_.load(std::memory_order_relaxed);
  do {
    if (!(o & kReaderOwned) || (o & kNonspinnable)) return;
  } while (!owner_.compare_exchange_weak(o, o | kNonspinnable, std::memory_order_relaxed));
}

// clear_nonspinnable()
void RwSem::ClearNonspinnable() {
  if (owner_.load(std::memory_order_relaxed) & kNonspinnable)
    owner_.fetch_and(~kNonspinnable, std::memory_order_relaxed);
}

// ------------------------------------------------------------------ wait queue

// The queue is circular: wait_head_->prev is the newest waiter (list_add_tail on the
// kernel's list_head).
void RwSem::AddWaiter(Waiter* w) {  // rwsem_add_waiter (the caller sets WAITERS)
  if (!wait_head_) {
    w->next = w->prev = w;
    wait_head_ = w;
    return;
  }
  w->next = wait_head_;
  w->prev = wait_head_->prev;
  w->prev->next = w;
  wait_head_->prev = w;
}

void RwSem::DelWaiter(Waiter* w) {  // list_del
  if (w->next == w) {
    wait_head_ = nullptr;
    return;
  }
  w->prev->next = w->next;
  w->next->prev = w->prev;
  if (wait_head_ == w) wait_head_ = w->next;
}

bool RwSem::QueueEmpty() const { return wait_head_ == nullptr; }
RwSem::Waiter* RwSem::FirstWaiter() const { return wait_head_; }

// rwsem_mark_wake(): grants the lock to the waiter(s) at the head and queues their
// wake-ups. A writer at the head is only woken (it takes the lock itself, and may be
// beaten to it); readers are granted here, all of them (up to 256, also those behind
// writers) in one batch.
void RwSem::MarkWake(int wake_type, WakeQ& q) {
  Waiter* first = FirstWaiter();
  if (first->write) {
    // Woken already and not yet back to sleep (every unlock with WAITERS calls here):
    // it will try again anyway, no second futex wake needed.
    if (wake_type == kWakeAny && first->wake.exchange(1, std::memory_order_acq_rel) == 0) {
      q.Add(&first->wake);
      Inc(kWakeWriter);
    }
    return;
  }
  if (static_cast<int64_t>(count_.load(std::memory_order_relaxed)) < 0) return;  // too many readers
  uint64_t adjustment = 0;
  if (wake_type != kWakeReadOwned) {
    // Grant the first reader before counting the others, so a writer that stole the
    // lock is noticed early.
    adjustment = kReaderBias;
    const uint64_t old = count_.fetch_add(adjustment, std::memory_order_acq_rel);
    if (old & kWriterMask) {
      // Waited "too" long for writers to give the lock up: ask for the handoff.
      if (NowTicks() > first->timeout) {
        if (!(old & kFlagHandoff)) {
          adjustment -= kFlagHandoff;
          Inc(kRlockHandoff);
        }
        first->handoff_set.store(true, std::memory_order_relaxed);
      }
      count_.fetch_sub(adjustment, std::memory_order_acq_rel);
      return;
    }
    SetReaderOwned(first->task_id);
  }
  // Phase-fair: every queued reader is eligible, whatever its place (writers keep
  // their order). First take them off the queue and count them, and add their biases
  // before any of them can run (and unlock).
  Waiter* granted[kMaxReadersWakeup];
  int woken = 0;
  for (Waiter *w = wait_head_, *last = wait_head_->prev; woken < kMaxReadersWakeup;) {
    Waiter* next = w->next;
    const bool at_end = w == last;
    if (!w->write) {
      DelWaiter(w);
      granted[woken++] = w;
    }
    if (at_end) break;
    w = next;
  }
  Inc(kWakeReader, static_cast<uint64_t>(woken));
  adjustment = static_cast<uint64_t>(woken) * kReaderBias - adjustment;
  // HANDOFF and WAITERS only change under wait_lock: this read cannot race with them.
  const uint64_t old = count_.load(std::memory_order_relaxed);
  if (QueueEmpty()) {
    adjustment -= kFlagWaiters;
    if (old & kFlagHandoff) adjustment -= kFlagHandoff;
  } else if (woken && (old & kFlagHandoff)) {
    adjustment -= kFlagHandoff;  // a reader got it: writers need not be forced out
  }
  if (adjustment) count_.fetch_add(adjustment, std::memory_order_acq_rel);
  // Second pass: once `task` is 0 the reader may return and its waiter vanish; only
  // the address (for the futex wake) is used afterwards.
  for (int i = 0; i < woken; i++) {
    std::atomic<uint32_t>* word = &granted[i]->task;
    word->store(0, std::memory_order_release);
    q.Add(word);
  }
}

// rwsem_cond_wake_waiter(): after a slow path changed the count, wake the head if the
// lock is not writer-owned: readers only while readers hold it, anyone if it is free.
void RwSem::CondWakeWaiter(uint64_t count, WakeQ& q) {
  if (count & kWriterMask) return;
  int wake_type;
  if (count & kReaderMask) {
    wake_type = kWakeReaders;
  } else {
    wake_type = kWakeAny;
    ClearNonspinnable();
  }
  MarkWake(wake_type, q);
}

// rwsem_wake(): an unlock that saw WAITERS.
void RwSem::Wake() {
  WakeQ q;
  wait_lock_.Lock();
  if (!QueueEmpty()) MarkWake(kWakeAny, q);
  wait_lock_.Unlock();
  q.WakeUp();
}

// rwsem_try_write_lock(): under wait_lock. Takes the lock (and leaves the queue), or
// sets the handoff bit if w has waited past its timeout and finds the lock taken.
bool RwSem::TryWriteLock(Waiter* w) {
  Waiter* first = FirstWaiter();
  uint64_t count = count_.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    const bool has_handoff = count & kFlagHandoff;
    // Honour the handoff only if the first waiter set it (for itself).
    if (has_handoff && first->handoff_set.load(std::memory_order_relaxed) && w != first) return false;
    next = count;
    if (count & kLockMask) {
      if (has_handoff || NowTicks() <= w->timeout) return false;
      next |= kFlagHandoff;
    } else {
      next |= kWriterLocked;
      next &= ~kFlagHandoff;
      if (wait_head_->next == wait_head_) next &= ~kFlagWaiters;  // list_is_singular
    }
  } while (!count_.compare_exchange_weak(count, next, std::memory_order_acq_rel, std::memory_order_relaxed));
  if (next & kFlagHandoff) {
    first->handoff_set.store(true, std::memory_order_relaxed);
    Inc(kWlockHandoff);
    return false;
  }
  DelWaiter(w);
  SetOwner();
  return true;
}

// ------------------------------------------------------------------ optimistic spinning

// rwsem_owner_state()
RwSem::OwnerState RwSem::StateOf(uintptr_t owner) {
  if (owner & kNonspinnable) return kOwnerNonspinnable;
  if (owner & kReaderOwned) return kOwnerReader;
  return owner ? kOwnerWriter : kOwnerNull;
}

// rwsem_try_write_lock_unqueued(): steal the lock from the queue unless it is held or
// handed off.
bool RwSem::TryWriteLockUnqueued() {
  uint64_t count = count_.load(std::memory_order_relaxed);
  while (!(count & (kLockMask | kFlagHandoff))) {
    if (count_.compare_exchange_weak(count, count | kWriterLocked, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
      SetOwner();
      Inc(kOptLock);
      return true;
    }
  }
  return false;
}

// rwsem_can_spin_on_owner(): not if spinning was disabled on a reader-owned lock. A
// writer owner is taken to be running (the kernel asks owner_on_cpu(); the bounded
// spin in SpinOnOwner stands in for it).
bool RwSem::CanSpinOnOwner() {
  if (owner_.load(std::memory_order_relaxed) & kNonspinnable) {
    Inc(kOptFail);
    return false;
  }
  return true;
}

// rwsem_spin_on_owner(): spins while the same writer owns the lock and is "running":
// here, for at most kOwnerSpinNs (the kernel spins while owner->on_cpu, which user
// space cannot see). Returns the state of the new owner, or nonspinnable.
RwSem::OwnerState RwSem::SpinOnOwner() const {
  const uintptr_t owner = owner_.load(std::memory_order_relaxed);
  const OwnerState state = StateOf(owner);
  if (state != kOwnerWriter) return state;
  const uint64_t deadline = NowTicks() + OwnerSpinTicks();
  for (unsigned i = 1;; i++) {
    const uintptr_t now = owner_.load(std::memory_order_relaxed);
    if (now != owner) return StateOf(now);
    if (!(i & 0xf) && NowTicks() > deadline) return kOwnerNonspinnable;  // !owner_on_cpu()
    CpuRelax();
  }
}

// rwsem_optimistic_spin(): spin on the owner and try for the lock whenever it changes.
// Stops when the writer owner is taken not to be running, when readers have held it
// past the threshold ((10 + readers/2) us, at most 25 us; the lock then becomes
// nonspinnable until the readers are gone), or at kSpinLimitNs in all. One spinner at
// a time (the osq, reduced to a flag: others queue).
bool RwSem::OptimisticSpin() {
  if (osq_.exchange(true, std::memory_order_acquire)) {
    Inc(kOptFail);
    return false;
  }
  bool taken = false;
  int prev_state = kOwnerNull;
  unsigned loop = 0;
  const uint64_t start = NowTicks();
  uint64_t rspin_threshold = 0;
  for (;;) {
    const OwnerState state = SpinOnOwner();
    if (!(state & kOwnerSpinnable)) break;
    taken = TryWriteLockUnqueued();
    if (taken) break;
    if (state == kOwnerReader) {
      if (prev_state != kOwnerReader) {
        // Re-armed at every reader phase (a writer may get in between two).
        if (owner_.load(std::memory_order_relaxed) & kNonspinnable) break;
        // rwsem_rspin_threshold()
        uint64_t readers = count_.load(std::memory_order_relaxed) >> kReaderShift;
        if (readers > 30) readers = 30;
        rspin_threshold = NowTicks() + (20 + readers) * HalfMicrosecondTicks();
        loop = 0;
      } else if (!(++loop & 0xf) && NowTicks() > rspin_threshold) {
        SetNonspinnable();
        Inc(kOptNospin);
        break;
      }
    }
    if (NowTicks() - start > SpinLimitTicks()) break;  // need_resched()
    prev_state = state;
    CpuRelax();
  }
  osq_.store(false, std::memory_order_release);
  if (!taken) Inc(kOptFail);
  return taken;
}

// ------------------------------------------------------------------ slow paths

// rwsem_down_read_slowpath(): `count` is the count after our reader bias was added.
// Returns whether the reader queued (a contended acquisition); *wait_ticks is then the
// time from queueing to the grant (0 with lock stats off).
bool RwSem::DownReadSlowpath(uint64_t count, uint64_t* wait_ticks) {
  uint64_t adjustment = -kReaderBias;
  const uint64_t rcnt = count >> kReaderShift;
  WakeQ q;
  // Do not steal from a sleeping waiter while other readers visibly hold the lock (a
  // stream of readers would starve it): queue.
  const bool reader_owned = owner_.load(std::memory_order_relaxed) & kReaderOwned;
  if (!(reader_owned && rcnt > 1 && !(count & kWriterLocked)) &&
      !(count & (kWriterLocked | kFlagHandoff))) {
    // Reader lock stealing: our bias already counts, no writer, no handoff.
    SetReaderOwned(Current());
    Inc(kRlockSteal);
    if (rcnt == 1 && (count & kFlagWaiters)) {  // first reader in: bring the queued ones
      wait_lock_.Lock();
      if (!QueueEmpty()) MarkWake(kWakeReadOwned, q);
      wait_lock_.Unlock();
      q.WakeUp();
    }
    return false;
  }

  Waiter w;
  w.task_id = Current();
  const uint64_t t0 = NowTicks();
  w.timeout = WaitDeadline(t0);
  wait_lock_.Lock();
  if (QueueEmpty()) {
    // No one waits and no writer holds it: our bias already counts, we have it.
    if (!(count_.load(std::memory_order_acquire) & kWriterMask)) {
      wait_lock_.Unlock();
      SetReaderOwned(Current());
      Inc(kRlockFast);
      return false;
    }
    adjustment += kFlagWaiters;
  }
  AddWaiter(&w);
  // Waiting now, no longer actively locking: take our bias back (and set WAITERS).
  count = count_.fetch_add(adjustment, std::memory_order_acq_rel) + adjustment;
  CondWakeWaiter(count, q);
  wait_lock_.Unlock();
  q.WakeUp();
  while (w.task.load(std::memory_order_acquire)) {
    FutexWait(w.task, 1);
    Inc(kSleepReader);
  }
  if (LockStatsEnabled()) {
    const uint64_t t1 = NowTicks();
    *wait_ticks = t1 > t0 ? t1 - t0 : 1;
  }
  return true;
}

// rwsem_down_write_slowpath(): optimistic spinning, then the queue. Returns whether
// the writer spun or slept (a contended acquisition) and the time it took.
bool RwSem::DownWriteSlowpath(uint64_t* wait_ticks) {
  const uint64_t t0 = NowTicks();
  auto finish = [&](bool contended) {
    if (contended && LockStatsEnabled()) {
      const uint64_t t1 = NowTicks();
      *wait_ticks = t1 > t0 ? t1 - t0 : 1;
    }
    return contended;
  };
  // A lock that is free (only WAITERS set) is taken by the first try without spinning:
  // like a stealing reader, that is not a contended acquisition.
  const uint64_t c = count_.load(std::memory_order_relaxed);
  if (!(c & (kLockMask | kFlagHandoff)) && TryWriteLockUnqueued()) return finish(false);
  if (CanSpinOnOwner() && OptimisticSpin()) return finish(true);

  Waiter w;
  w.write = true;
  w.task_id = Current();
  w.timeout = WaitDeadline(NowTicks());
  WakeQ q;
  wait_lock_.Lock();
  AddWaiter(&w);
  if (FirstWaiter() != &w) {
    // Not first: the lock may have become free (or reader-owned) while we queued.
    CondWakeWaiter(count_.load(std::memory_order_acquire), q);
    if (!q.empty()) {
      wait_lock_.Unlock();
      q.WakeUp();
      wait_lock_.Lock();
    }
  } else {
    count_.fetch_or(kFlagWaiters, std::memory_order_acq_rel);
  }
  while (!TryWriteLock(&w)) {
    wait_lock_.Unlock();
    // After setting the handoff, spin on a writer owner: when it lets go (OWNER_NULL),
    // try again without sleeping.
    const bool retry = w.handoff_set.load(std::memory_order_relaxed) && SpinOnOwner() == kOwnerNull;
    if (!retry) {
      FutexWait(w.wake, 0);  // returns at once if a waker already set it
      Inc(kSleepWriter);
      w.wake.store(0, std::memory_order_relaxed);  // set_current_state(): the next wake-up counts
    }
    wait_lock_.Lock();
  }
  wait_lock_.Unlock();
  return finish(true);
}

// ------------------------------------------------------------------ API

void RwSem::LockRead() {
  LockdepAcquire(rank_, this);
  // __down_read_common() / rwsem_read_trylock()
  const uint64_t count = count_.fetch_add(kReaderBias, std::memory_order_acquire) + kReaderBias;
  bool contended = false;
  uint64_t wait = 0;
  if (__builtin_expect(!(count & kReadFailedMask), 1)) SetReaderOwned(Current());
  else {
    lock_trace_internal::TraceWait trace(cls_, LockMode::kRead, owner_.load(std::memory_order_relaxed), Current());
    contended = DownReadSlowpath(count, &wait);
    trace.Done(contended);
  }
  RecordLock(cls_, LockMode::kRead, contended, wait, 0);
  tls_read_acquired[static_cast<size_t>(cls_)] = HoldStamp();
}

void RwSem::UnlockRead() {
  EndHold(cls_, LockMode::kRead, tls_read_acquired[static_cast<size_t>(cls_)], Current());
  UnlockReadUnaccounted();
  LockdepRelease(rank_, this);
}

bool RwSem::TryLockReadUnaccounted() {
  // down_read_trylock(): add a reader bias while the count allows readers.
  uint64_t c = count_.load(std::memory_order_relaxed);
  while (!(c & kReadFailedMask)) {
    if (count_.compare_exchange_weak(c, c + kReaderBias, std::memory_order_acquire, std::memory_order_relaxed)) {
      SetReaderOwned(Current());
      return true;
    }
  }
  return false;
}

void RwSem::UnlockReadUnaccounted() {
  // __up_read(): the last reader out wakes the queue.
  const uint64_t count = count_.fetch_sub(kReaderBias, std::memory_order_release) - kReaderBias;
  if (__builtin_expect((count & (kLockMask | kFlagWaiters)) == kFlagWaiters, 0)) {
    ClearNonspinnable();
    Wake();
  }
}

void RwSem::LockWrite() {
  LockdepAcquire(rank_, this);
  DownWrite();
  tls_write_acquired[static_cast<size_t>(cls_)] = HoldStamp();
}

void RwSem::LockWriteNested() {
  LockdepAcquireNested(rank_, this);
  DownWrite();
  // The hold stamp of the class stays the outer lock's (one per class and thread): the
  // nested hold is timed from the outer acquisition.
}

void RwSem::DownWrite() {
  // __down_write_common() / rwsem_write_trylock()
  uint64_t expected = 0;
  bool contended = false;
  uint64_t wait = 0;
  if (__builtin_expect(count_.compare_exchange_strong(expected, kWriterLocked, std::memory_order_acquire,
                                                      std::memory_order_relaxed), 1))
    SetOwner();
  else {
    lock_trace_internal::TraceWait trace(cls_, LockMode::kWrite, owner_.load(std::memory_order_relaxed), Current());
    contended = DownWriteSlowpath(&wait);
    trace.Done(contended);
  }
  RecordLock(cls_, LockMode::kWrite, contended, wait, 0);
}

void RwSem::UnlockWrite() {
  EndHold(cls_, LockMode::kWrite, tls_write_acquired[static_cast<size_t>(cls_)], Current());
  // __up_write()
  owner_.store(0, std::memory_order_relaxed);
  const uint64_t old = count_.fetch_sub(kWriterLocked, std::memory_order_release);
  if (__builtin_expect(old & kFlagWaiters, 0)) Wake();
  LockdepRelease(rank_, this);
}

void RwSem::DowngradeWrite() {
  EndHold(cls_, LockMode::kWrite, tls_write_acquired[static_cast<size_t>(cls_)], Current());
  // __downgrade_write(): nothing of the write section may leak past it (release).
  const uint64_t old = count_.fetch_add(kReaderBias - kWriterLocked, std::memory_order_release);
  SetReaderOwned(Current());
  if (old & kFlagWaiters) {  // rwsem_downgrade_wake()
    WakeQ q;
    wait_lock_.Lock();
    if (!QueueEmpty()) MarkWake(kWakeReadOwned, q);
    wait_lock_.Unlock();
    q.WakeUp();
  }
  RecordLock(cls_, LockMode::kRead, false, 0, 0);
  tls_read_acquired[static_cast<size_t>(cls_)] = HoldStamp();
}

void RwSem::AssertHeld() const {
  VMSPACE_LOCK_ASSERT(LockdepHeld(this), "mmap_assert_locked: lock not held");
}

void RwSem::AssertWriteHeld() const {
  VMSPACE_LOCK_ASSERT(LockdepHeld(this) && (count_.load(std::memory_order_relaxed) & kWriterLocked) &&
                          owner_.load(std::memory_order_relaxed) == Current(),
                      "mmap_assert_write_locked: lock not held for write");
}

size_t RwSem::waiters() {
  wait_lock_.Lock();
  size_t n = 0;
  if (Waiter* h = wait_head_) {
    n = 1;
    for (Waiter* w = h->next; w != h; w = w->next) n++;
  }
  wait_lock_.Unlock();
  return n;
}

}  // namespace vmspace
