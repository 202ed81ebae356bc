// SPDX-License-Identifier: Apache-2.0
// Dirty accounting, the dirty limits, balance_dirty_pages and the writeback thread
// (mm/page-writeback.c balance_dirty_pages_ratelimited, domain_dirty_limits;
// fs/fs-writeback.c wb_writeback over the b_dirty inode list; Linux 6.18). See
// engine/writeback.h for what is modelled.
//
// Simplifications: one domain (no per-BDI or per-memcg limits), no ratelimiting of the
// check (every dirtying write checks the global figure: it is one atomic load), no
// pause-time control loop: a writer over the limit waits for writeback passes until
// the figure is back under it or a pass cleaned nothing (the backing store refuses
// writes), and no dirty_expire_centisecs (writeback runs only above the background
// threshold, on fsync/msync, at the last close and at shutdown).
#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/stats.h"
#include "engine/writeback.h"
#include "filemap.h"
#include "sync/lockdep.h"
#include "sync/kthread.h"
#include "sync/mutex.h"

namespace vmspace {

namespace {

/// The writeback domain and its thread (global_wb_domain + the bdi flusher).
struct Domain {
  /// wb->list_lock (lock class wb_list_lock): the dirty-inode list and the thread and
  /// throttling state below. Nothing is taken under it (but starting the thread);
  /// readers of the figures (ReadWritebackStats, GetDirtyLimits) do not take it.
  Mutex mu{LockRank::kWbListLock, LockClass::kWbListLock};
  std::condition_variable_any work_cv;  // the thread waits here for work
  std::condition_variable_any done_cv;  // throttled writers wait here for a pass to end
  std::vector<std::weak_ptr<File>> b_dirty ABSL_GUARDED_BY(mu);  // files with dirty pages (inode b_dirty list)
  std::thread thread ABSL_GUARDED_BY(mu);
  bool running ABSL_GUARDED_BY(mu) = false;
  bool stop ABSL_GUARDED_BY(mu) = false;
  bool kick ABSL_GUARDED_BY(mu) = false;     // a throttled writer (or new limits) asks for a pass
  bool stalled ABSL_GUARDED_BY(mu) = false;  // the last pass cleaned nothing: wait for a kick
  uint64_t last_cleaned ABSL_GUARDED_BY(mu) = 0;
  std::atomic<uint64_t> passes{0}, throttled{0};  // written under mu
};
// Never destroyed: the thread may still run while static destructors do.
Domain& D() {
  static Domain* d = new Domain;
  return *d;
}
std::atomic<uint64_t> g_nr_dirty{0};  // NR_FILE_DIRTY, pages
std::atomic<uint64_t> g_nr_writeback{0};  // NR_WRITEBACK, pages
std::atomic<uint64_t> g_bg_bytes{DirtyLimits{}.dirty_background_bytes};  // written under mu
std::atomic<uint64_t> g_limit_bytes{DirtyLimits{}.dirty_bytes};

bool Over(const std::atomic<uint64_t>& bytes) {
  return g_nr_dirty.load(std::memory_order_relaxed) > (bytes.load(std::memory_order_relaxed) >> kPageShift);
}
bool OverBackground() { return Over(g_bg_bytes); }
bool OverLimit() { return Over(g_limit_bytes); }

/// wb_workfn / wb_writeback: writes back every file on b_dirty while above the
/// background threshold or asked to.
void WritebackThread() {
  pthread_setname_np(pthread_self(), "writeback");
  KthreadAffinity();  // not the CPU of the pinned thread that dirtied the first page
  RcuThread();  // WriteRange reads the page cache under RCU and waits for grace periods
  Domain& d = D();
  d.mu.Lock();
  for (;;) {
    while (!(d.stop || d.kick || (OverBackground() && !d.b_dirty.empty() && !d.stalled))) d.work_cv.wait(d.mu);
    if (d.stop) break;
    d.kick = false;
    std::vector<std::weak_ptr<File>> list;
    list.swap(d.b_dirty);
    d.mu.Unlock();
    uint64_t cleaned = 0;
    for (auto& w : list) {
      std::shared_ptr<File> f = w.lock();  // __iget: the inode stays while we write it
      if (!f) continue;
      f->on_dirty_list.store(false, std::memory_order_release);  // re-dirtying re-registers it
      const uint64_t before = f->nrdirty.load(std::memory_order_relaxed);
      f->WriteRange(0, ~0ull);  // a failure counts in wb_err: fsync reports it
      const uint64_t after = f->nrdirty.load(std::memory_order_relaxed);
      cleaned += before - std::min(before, after);
    }
    if (cleaned) CountEvent(Event::kWritebackPages, cleaned);
    d.mu.Lock();
    d.passes.fetch_add(1, std::memory_order_relaxed);
    d.last_cleaned = cleaned;
    d.stalled = cleaned == 0;
    d.done_cv.notify_all();
  }
  d.mu.Unlock();
}

/// Starts the thread if needed and wakes it.
void WakeLocked(Domain& d, bool kick) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d.mu) {
  if (!d.running) {
    d.running = true;
    d.thread = std::thread(WritebackThread);
  }
  if (kick) {
    d.kick = true;
    d.stalled = false;
  }
  d.work_cv.notify_one();
}

}  // namespace

void AccountDirtied(File& f) {
  g_nr_dirty.fetch_add(1, std::memory_order_relaxed);
  if (!f.on_dirty_list.exchange(true, std::memory_order_acq_rel)) {  // __mark_inode_dirty
    Domain& d = D();
    MutexLock l(d.mu);
    d.b_dirty.push_back(f.weak_from_this());
    if (OverBackground()) WakeLocked(d, false);
  }
}

void AccountCleaned(uint64_t pages) { g_nr_dirty.fetch_sub(pages, std::memory_order_relaxed); }

void AccountWriteback(int64_t pages) {
  g_nr_writeback.fetch_add(static_cast<uint64_t>(pages), std::memory_order_relaxed);
}

void BalanceDirtyPagesRatelimited(File& f) {
  if (f.shmem()) return;  // no BDI_CAP_WRITEBACK: nothing to wait for
  VMSPACE_LOCK_ASSERT(LockdepDepth() == 0, "balance_dirty_pages with an engine lock held");
  if (!OverBackground()) return;  // the free-run zone below (bg + limit) / 2 is not modelled
  Domain& d = D();
  MutexLock l(d.mu);
  if (!OverLimit()) {
    WakeLocked(d, false);  // wb_start_background_writeback
    return;
  }
  CountEvent(Event::kDirtyThrottled);
  d.throttled.fetch_add(1, std::memory_order_relaxed);
  while (OverLimit() && !d.stop) {
    WakeLocked(d, true);
    const uint64_t gen = d.passes.load(std::memory_order_relaxed);
    RcuSleep sleep;
    while (!(d.passes.load(std::memory_order_relaxed) != gen || !OverLimit() || d.stop)) d.done_cv.wait(d.mu);
    if (d.passes.load(std::memory_order_relaxed) != gen && d.last_cleaned == 0) break;  // no progress (EIO)
  }
  d.throttled.fetch_sub(1, std::memory_order_relaxed);
}

void SetDirtyLimits(const DirtyLimits& in) {
  DirtyLimits l = in;
  l.dirty_bytes = std::max<uint64_t>(l.dirty_bytes, kPageSize);
  if (l.dirty_background_bytes >= l.dirty_bytes) l.dirty_background_bytes = l.dirty_bytes / 2;  // domain_dirty_limits
  Domain& d = D();
  MutexLock g(d.mu);
  g_limit_bytes.store(l.dirty_bytes, std::memory_order_relaxed);
  g_bg_bytes.store(l.dirty_background_bytes, std::memory_order_relaxed);
  if (d.running || OverBackground()) WakeLocked(d, true);
  d.done_cv.notify_all();
}

DirtyLimits GetDirtyLimits() {
  return {g_limit_bytes.load(std::memory_order_relaxed), g_bg_bytes.load(std::memory_order_relaxed)};
}

WritebackStats ReadWritebackStats() {
  const Domain& d = D();
  return {g_nr_dirty.load(std::memory_order_relaxed), g_nr_writeback.load(std::memory_order_relaxed),
          d.passes.load(std::memory_order_relaxed), d.throttled.load(std::memory_order_relaxed)};
}

void StopWriteback() {
  Domain& d = D();
  std::thread t;
  {
    MutexLock g(d.mu);
    if (!d.running) return;
    d.stop = true;
    d.work_cv.notify_all();
    d.done_cv.notify_all();
    t = std::move(d.thread);
  }
  t.join();
  MutexLock g(d.mu);
  d.running = false;
  d.stop = false;
}

}  // namespace vmspace
