// SPDX-License-Identifier: Apache-2.0
// The engine's RCU: quiescent-state-based (QSBR) read-side sections, polled grace
// periods, and the engine's own call_rcu worker (rcu.cc) that runs deferred frees
// after them. It follows liburcu's QSBR flavour (urcu-qsbr: a per-thread counter
// copied from a global one) but polls grace periods instead of waiting for them, as
// the kernel's get_state_synchronize_rcu / poll_state_synchronize_rcu do.
//
// Quiescent states, as the kernel's non-preemptible RCU: a registered thread is
// "online" (a grace period waits for it) only while it is inside the engine, i.e. in
// an RcuEntry scope (every public entry point opens one) or an RcuReadGuard, and it
// goes offline (a quiescent state) when the outermost one closes and whenever it
// sleeps in the engine outside a read section (RcuSleep: the futex and condition
// waits of the engine's locks, as a context switch is a quiescent state in Linux). A
// grace period therefore needs no IPI and never calls membarrier, whose expedited
// IPIs (liburcu's memb flavour, which the engine used before QSBR) cost the rcu_gp thread 3-33% of
// a core on this VM and interrupted the clients' CPUs (docs/performance.md "Two spaces").
//
// Grace periods: gp_seq moves on by 2 when one starts; a thread going online copies
// gp_seq into its Reader slot, going offline stores 0. Grace period g has ended once
// every slot is 0 or at least g, which a scan (one load per registered thread, no
// lock) tells. Nobody ever sleeps waiting for a thread to go offline: the waiters poll
// (the call_rcu worker at its ticks, a space's write sections for their gathers:
// FreePolledGathersLocked (mmu_gather.cc), SynchronizeRcu in growing sleeps). So going
// offline is one release store, and going online a store and one full barrier
// (liburcu's QSBR took three barriers and a check of a futex flag per engine call,
// and its synchronize_rcu read the online threads' counters 100 times in a spin, then
// slept on a futex that every one of them had to wake with a system call).
//
// Threads need not know about RCU: a thread takes a Reader slot on its first entry,
// starts offline, and gives the slot back at exit (kMaxRcuThreads at once).
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include "engine/per_thread.h"

namespace vmspace {

/// A callback queued for after a grace period (the kernel's struct callback_head,
/// include/linux/types.h, Linux 6.18): embedded in what it frees, so queueing
/// allocates nothing. Owned by the RCU code from CallRcu until the callback runs.
struct rcu_head {
  rcu_head* next;
  void (*func)(rcu_head*);
};

namespace rcu_internal {
/// A full barrier for ordinary memory: on x86-64 a locked add to the stack, the kernel's
/// own __smp_mb (arch/x86/include/asm/barrier.h, Linux 6.18; 2 ns here against mfence's 16).
inline void SmpMb() {
#if defined(__x86_64__)
  __asm__ __volatile__("lock; addl $0,0(%%rsp)" ::: "memory", "cc");
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}
/// The grace-period state (the kernel's struct rcu_state, kernel/rcu/tree.h): gp_seq,
/// the grace-period counter, odd values only, 2 apart; a thread going online copies
/// it. Written only by grace-period starts (rcu.cc). The struct fills its own
/// kDestructiveInterferenceBytes, so no other variable can share the line every
/// engine call reads (before, the linker put rmap.cc's anon_vma id counter there).
struct alignas(kDestructiveInterferenceBytes) RcuState {
  std::atomic<uint64_t> gp_seq{1};
};
extern RcuState rcu_state;
/// A registered thread's reader state, alone in its cache-line pair: a grace-period
/// scan reads it, and nothing else any thread writes shares the lines.
struct alignas(kDestructiveInterferenceBytes) Reader {
  /// 0 while offline; while online, the gp_seq the thread read when it went online.
  std::atomic<uint64_t> ctr{0};
};
/// The registered threads' Readers (rcu.cc): slots [0, reader_slots) are scanned without
/// a lock. A thread's slot is zero when it exits and then reused; a scan that reads a
/// reused slot sees either 0 or a counter no older than the scan, so it can only ever
/// wait for threads that were online before it.
inline constexpr int kMaxRcuThreads = 4096;
extern Reader readers[kMaxRcuThreads];
extern std::atomic<int> reader_slots;
/// Never online: the Reader of a thread not registered yet.
extern Reader unregistered_reader;
/// The calling thread's RCU state (one TLS block, zero at thread start).
struct ThreadState {
  bool registered;
  int depth;       // open RcuEntry scopes and read guards: online while > 0, except asleep
  int read_depth;  // of them, RcuReadGuards (the thread must not go offline)
  uint64_t id;     // RcuThreadId(): unique in the process, set at registration
  uint64_t qs;     // RcuQsCount(): times the thread went offline
};
// constinit: no TLS wrapper call on each access (UBSan also took the wrapper's result
// for a null pointer).
extern constinit thread_local ThreadState tls;
extern constinit thread_local Reader* reader;
void RegisterSlow();
/// Online: publish the counter, then a full barrier, so a grace period that starts
/// after the store sees the thread, and the thread's reads of RCU-protected pointers
/// come after it (liburcu's _urcu_qsbr_thread_online).
inline void Online() {
  reader->ctr.store(rcu_state.gp_seq.load(std::memory_order_relaxed), std::memory_order_relaxed);
  SmpMb();
}
/// Offline (a quiescent state): a release store, so every access of the read section
/// is done before a grace-period scan can see the 0. No second barrier: nobody sleeps
/// waiting for this thread (grace periods are polled), so there is nobody to wake.
inline void Offline() {
  reader->ctr.store(0, std::memory_order_release);
  tls.qs++;
}
inline bool IsOnline() { return reader->ctr.load(std::memory_order_relaxed) != 0; }
inline void Enter() {
  if (__builtin_expect(!tls.registered, 0)) RegisterSlow();
  if (tls.depth++ == 0) Online();
}
inline void Exit() {
  if (--tls.depth == 0) Offline();
}
/// Starts a grace period: moves gp_seq on and returns the new value, the grace
/// period's number. Never blocks.
uint64_t StartGracePeriod();
/// Scans the registered threads once (lock-free: one load of each used slot) and
/// returns the highest number up to which every grace period has ended (grace period
/// g has ended iff the result is >= g). The caller may free what it unlinked before
/// the start of any ended grace period.
uint64_t PollGracePeriods();
#if defined(__SANITIZE_THREAD__)
// TSan cannot see the grace periods' barriers: model them as release/acquire on a token.
extern char gp_token;
#endif
}  // namespace rcu_internal

/// Whether the calling thread is online (a grace period waits for it).
inline bool RcuOnline() { return rcu_internal::IsOnline(); }

/// A cookie for a grace period that starts after this call, started at once unless
/// another one is still in progress (then the first RcuPollState that finds that one
/// ended starts it): what was unlinked before the call may be freed once
/// RcuPollState(cookie) is true. As start_poll_synchronize_rcu (kernel/rcu/tree.c,
/// Linux 6.18). Never blocks; any lock may be held.
uint64_t RcuStartPoll();
/// Whether the grace period of `cookie` (RcuStartPoll) has ended, as
/// poll_state_synchronize_rcu. Without `scan` it only reads what earlier scans found
/// (one load); with it, it scans the registered threads (one load of each, no lock)
/// when that is not enough. Never blocks; any lock may be held.
bool RcuPollState(uint64_t cookie, bool scan);

/// The RCU tick: the number of kRcuGpIntervalUs periods since start-up, read from the
/// TSC (NowTicks; no system call). The kernel's grace-period machinery runs on the
/// scheduler tick (rcu_sched_clock_irq, kernel/rcu/tree.c, Linux 6.18): a callback queued
/// now waits at least for the next tick before a grace period can serve it. A polled
/// batch that must keep that latency (VmaCache, kRwsem form) asks for its grace period
/// only once RcuTick() has moved past the value it was queued at.
uint64_t RcuTick();
/// Tests: while nonzero, RcuTick() returns this value instead of reading the clock.
inline std::atomic<uint64_t> g_rcu_tick_test_value{0};

/// Registers the calling thread with the RCU registry if it is not yet (idempotent, cheap); it
/// stays offline. For threads that wait for grace periods (synchronize_rcu) without
/// entering the engine through an RcuEntry.
inline void RcuThread() {
  if (__builtin_expect(!rcu_internal::tls.registered, 0)) rcu_internal::RegisterSlow();
}

/// The calling thread's RCU identity: nonzero once it is registered (by its first
/// RcuEntry, RcuReadGuard or RcuThread), and never reused in the process's life (its
/// Reader slot is). MmStruct::NoteRcuReader keeps the one thread that uses a space.
inline uint64_t RcuThreadId() { return rcu_internal::tls.id; }
/// Quiescent states the calling thread has passed (the times it went offline: the end
/// of an engine call, a sleep in the engine). What only this thread could have reached,
/// and unlinked while this read n, may be freed by it once this reads more than n: the
/// single-CPU grace period (Tiny RCU, kernel/rcu/tiny.c, Linux 6.18: a quiescent state
/// of the only CPU ends a grace period). Thread-local: no other thread reads or writes it.
inline uint64_t RcuQsCount() { return rcu_internal::tls.qs; }

/// The scope of one engine call (every public entry point opens one first): the thread
/// is online until the outermost scope closes, then offline (a quiescent state).
/// Nests. Inside it the thread must not sleep except through RcuSleep (the engine's
/// locks and waits do).
class RcuEntry {
 public:
  RcuEntry() { rcu_internal::Enter(); }
  ~RcuEntry() { rcu_internal::Exit(); }
  RcuEntry(const RcuEntry&) = delete;
  RcuEntry& operator=(const RcuEntry&) = delete;
};

/// RAII read-side critical section (rcu_read_lock / rcu_read_unlock): the thread is
/// online and does not go offline until it ends, even where it sleeps (as sleeping in
/// a memb read section, that only delays grace periods). Nests.
class RcuReadGuard {
 public:
  RcuReadGuard() {
    rcu_internal::Enter();
    rcu_internal::tls.read_depth++;
  }
  ~RcuReadGuard() {
#if defined(__SANITIZE_THREAD__)
    __tsan_release(&rcu_internal::gp_token);
#endif
    rcu_internal::tls.read_depth--;
    rcu_internal::Exit();
  }
  RcuReadGuard(const RcuReadGuard&) = delete;
  RcuReadGuard& operator=(const RcuReadGuard&) = delete;
};

/// Around a sleep in the engine (a futex or condition wait): an online thread outside
/// any read section goes offline for the sleep and back online after it, so a grace
/// period never waits for a sleeper (which might sleep on a lock whose holder waits
/// for that grace period). In a read section it stays online. As a context switch in
/// Linux (rcu_note_context_switch).
class RcuSleep {
 public:
  RcuSleep() : offline_(rcu_internal::tls.read_depth == 0 && rcu_internal::IsOnline()) {
    if (offline_) rcu_internal::Offline();
  }
  ~RcuSleep() {
    if (offline_) rcu_internal::Online();
  }
  RcuSleep(const RcuSleep&) = delete;
  RcuSleep& operator=(const RcuSleep&) = delete;

 private:
  const bool offline_;
};

/// A quiescent state in the middle of a long engine call, where the call holds no
/// RCU-protected pointer and no lock (between the pages of a walk): if a grace period
/// started after the thread went online, the thread goes offline and back online, so
/// that grace period no longer waits for it. Nothing otherwise (two loads). Without it
/// one walk over a huge range (Access, ReadMemory, a populate) held back every
/// SynchronizeRcu of the daemon, another tenant's fsync included, for the whole walk.
/// As cond_resched() -> rcu_all_qs() of the kernel's non-preemptible RCU
/// (kernel/sched/core.c __cond_resched, kernel/rcu/tree_plugin.h rcu_all_qs, Linux
/// 6.18). Not in a read section (RcuReadGuard): there it does nothing.
inline void RcuQuiescentState() {
  using namespace rcu_internal;
  if (tls.read_depth != 0) return;
  const uint64_t ctr = reader->ctr.load(std::memory_order_relaxed);
  if (ctr == 0 || ctr >= rcu_state.gp_seq.load(std::memory_order_relaxed)) return;
  Offline();
  Online();
}

/// One grace period at most per kRcuGpIntervalUs microseconds: the call_rcu worker
/// (rcu.cc) waits that long after the start of one grace period before it starts the
/// next, and every callback queued meanwhile joins it. It bounds the grace periods to
/// about 2000 a second under constant churn (each costs the worker a scan of the
/// registered threads, and the threads it waited for a futex wake-up), and keeps what
/// is in flight (a grace period's worth of freed VMAs, nodes and frames) small enough
/// to come back from the CPU caches: at 1000 µs and with 4096-node gathers the
/// rwsem-form profiles ran 20-30% slower (docs/performance.md "What is in flight").
inline constexpr int kRcuGpIntervalUs = 500;
/// The call_rcu worker checks a grace period it started this long after the start, as
/// well as at the next tick: threads leave their engine calls within microseconds, so
/// most grace periods have ended by then, and their callbacks run a tick earlier.
inline constexpr int kRcuGpCheckUs = 50;
/// Empty polls of its queue (one per kRcuGpIntervalUs) after which the call_rcu worker
/// stops polling and sleeps until a CallRcu wakes it: ~8 ms of idle polling.
inline constexpr int kRcuIdlePolls = 16;

/// Queues fn(head) to run after a grace period (call_rcu): on the engine's call_rcu
/// worker thread, after a grace period that starts after this call, in queue order
/// (callbacks queued earlier by any thread run first). Takes the worker's queue lock
/// (LockRank::kRcuQueue, a leaf) for a few instructions; any lock may be held. Wakes the
/// worker only when it stopped polling (kRcuIdlePolls). The
/// callback must start with RcuCallbackBegin(head) and end with RcuCallbackEnd(), and
/// must not call RcuBarrier or SynchronizeRcu. As kernel/rcu/tree.c call_rcu (Linux 6.18).
void CallRcu(struct rcu_head* head, void (*fn)(struct rcu_head*));
/// First statement of every call_rcu callback (TSan: pairs with CallRcu and the grace period).
inline void RcuCallbackBegin(struct rcu_head* head) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(head);
  __tsan_acquire(&rcu_internal::gp_token);
#else
  (void)head;
#endif
}
/// Last statement of every call_rcu callback (TSan: rcu_barrier() waits for it, so what
/// the callback did happens before RcuBarrier() returns).
inline void RcuCallbackEnd() {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(&rcu_internal::gp_token);
#endif
}
/// Waits for a grace period (synchronize_rcu). Must not be called in a read section.
void SynchronizeRcu();
/// Waits until every callback queued so far (by any thread) has run (rcu_barrier).
/// Must not be called from a callback or in a read section. Also declared in the
/// public engine/address_space.h.
void RcuBarrier();

}  // namespace vmspace
