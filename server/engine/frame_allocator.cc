#include "engine/frame_allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "engine/per_thread.h"
#include "engine/stats.h"
#include "sync/mutex.h"
#include "sync/rcu.h"

namespace vmspace {

namespace {
constexpr size_t kFrame = 4096;
constexpr size_t kChunk = 2u << 20;
alignas(4096) char g_zero_page[4096];
}  // namespace

struct FrameAllocator::State {
  struct alignas(64) Shard {
    Mutex mu{LockRank::kFrameShard};
    std::vector<void*> free ABSL_GUARDED_BY(mu);
    uint64_t budget ABSL_GUARDED_BY(mu) = 0;  // frames reserved from the limit, not in use
    std::atomic<int64_t> in_use{0};  // written under mu, read by in_use_frames()
  };
  explicit State(uint64_t limit) : limit_frames(limit) {}

  Shard& MyShard() { return shards[vmspace::ThreadShard()]; }
  // Free() of one frame with s.mu held.
  void FreeLocked(Shard& s, void* frame) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void* CarveFrame();
  void* TakeFromGlobal(Shard& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Takes one frame of the limit from the shard's budget (refilled from the global
  // limit); false if the limit is reached. Unreserve gives one back.
  bool Reserve(Shard& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void Unreserve(Shard& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void DebugAlloc(void* f);
  void DebugFree(void* f);

  const uint64_t limit_frames;  // 0 = unlimited
  std::atomic<uint64_t> reserved_frames{0};  // sum of budgets + frames and tables in use
  std::atomic<int64_t> table_frames{0};      // page-table pages charged (ChargeTable)
  Mutex reclaim_mu{LockRank::kReclaim};
  std::vector<DeferredFrees*> deferred ABSL_GUARDED_BY(reclaim_mu);
  std::array<Shard, kShards> shards;
  Mutex chunk_mu{LockRank::kFrameChunk};
  std::vector<void*> chunks ABSL_GUARDED_BY(chunk_mu);       // 2 MiB host mappings
  std::vector<void*> global_free ABSL_GUARDED_BY(chunk_mu);  // frames shards gave back
  char* carve ABSL_GUARDED_BY(chunk_mu) = nullptr;
  char* carve_end ABSL_GUARDED_BY(chunk_mu) = nullptr;
  Mutex debug_mu{LockRank::kFrameDebug};
  std::unordered_set<void*> debug_in_use ABSL_GUARDED_BY(debug_mu);  // lockdep builds only
};

FrameAllocator::FrameAllocator(uint64_t limit_bytes) : s_(std::make_unique<State>(limit_bytes / kFrame)) {}

FrameAllocator::~FrameAllocator() {
  RcuBarrier();  // frames freed after a grace period come back here first
  MutexLock l(s_->chunk_mu);
  for (void* c : s_->chunks) munmap(c, kChunk);
}

void* FrameAllocator::ZeroPage() { return g_zero_page; }

void* FrameAllocator::State::CarveFrame() {
  MutexLock l(chunk_mu);
  if (carve == carve_end) {
    void* c = mmap(nullptr, kChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (c == MAP_FAILED) return nullptr;
    chunks.push_back(c);
    carve = static_cast<char*>(c);
    carve_end = carve + kChunk;
  }
  void* f = carve;
  carve += kFrame;
  return f;  // fresh host memory is already zero
}

void* FrameAllocator::State::TakeFromGlobal(Shard& s) {
  MutexLock l(chunk_mu);
  if (global_free.empty()) return nullptr;
  size_t n = std::min<size_t>(kBatch, global_free.size());
  s.free.insert(s.free.end(), global_free.end() - n, global_free.end());
  global_free.resize(global_free.size() - n);
  void* f = s.free.back();
  s.free.pop_back();
  return f;
}

void FrameAllocator::State::DebugAlloc(void* f) {
  if (!kLockdep) return;
  MutexLock l(debug_mu);
  if (!debug_in_use.insert(f).second) {
    fprintf(stderr, "vmspace: bad frame state: %p handed out while in use\n", f);
    abort();
  }
}

void FrameAllocator::State::DebugFree(void* f) {
  if (!kLockdep) return;
  MutexLock l(debug_mu);
  if (debug_in_use.erase(f) != 1) {
    fprintf(stderr, "vmspace: bad frame state: %p freed but not in use (double free?)\n", f);
    abort();
  }
}

bool FrameAllocator::State::Reserve(Shard& s) {
  if (limit_frames == 0) return true;
  if (s.budget == 0) {
    // Reserve up to kBatch frames from the global limit.
    uint64_t cur = reserved_frames.load(std::memory_order_relaxed);
    uint64_t take;
    do {
      if (cur >= limit_frames) return false;
      take = std::min<uint64_t>(kBatch, limit_frames - cur);
    } while (!reserved_frames.compare_exchange_weak(cur, cur + take, std::memory_order_relaxed));
    s.budget = take;
  }
  s.budget--;
  return true;
}

void FrameAllocator::State::Unreserve(Shard& s) {
  if (limit_frames == 0) return;
  s.budget++;
  if (s.budget > 2 * kBatch) {
    reserved_frames.fetch_sub(kBatch, std::memory_order_relaxed);
    s.budget -= kBatch;
  }
}

void* FrameAllocator::Alloc() {
  State::Shard& s = s_->MyShard();
  void* f = nullptr;
  bool fresh = false;
  {
    MutexLock l(s.mu);
    if (!s_->Reserve(s)) return nullptr;
    s.in_use.store(s.in_use.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (s.free.empty()) {
      f = s_->TakeFromGlobal(s);
    } else {
      f = s.free.back();
      s.free.pop_back();
    }
  }
  if (!f) {
    f = s_->CarveFrame();
    fresh = true;
    if (!f) {
      MutexLock l(s.mu);
      s_->Unreserve(s);
      s.in_use.store(s.in_use.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
      return nullptr;
    }
  }
  if (!fresh) memset(f, 0, kFrame);  // clear_page
  s_->DebugAlloc(f);
  CountEvent(Event::kFramesAllocated);
  return f;
}

void FrameAllocator::State::FreeLocked(Shard& s, void* frame) {
  DebugFree(frame);
  s.free.push_back(frame);
  if (s.free.size() > kShardHigh) {
    MutexLock g(chunk_mu);
    global_free.insert(global_free.end(), s.free.begin(), s.free.begin() + kBatch);  // the coldest
    s.free.erase(s.free.begin(), s.free.begin() + kBatch);
  }
  s.in_use.store(s.in_use.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  Unreserve(s);
}

void FrameAllocator::Free(void* frame) {
  State::Shard& s = s_->MyShard();
  MutexLock l(s.mu);
  s_->FreeLocked(s, frame);
  CountEvent(Event::kFramesFreed);
}

static_assert(FrameAllocator::kShards == kThreadShards);

void FrameAllocator::FreeBatch(std::vector<void*>& frames, int shard) {
  if (frames.empty()) return;
  State::Shard& s = s_->shards[static_cast<size_t>(shard)];
  {
    MutexLock l(s.mu);
    for (void* f : frames) s_->FreeLocked(s, f);
  }
  CountEvent(Event::kFramesFreed, frames.size());
  frames.clear();
}

bool FrameAllocator::ChargeTable() {
  State::Shard& s = s_->MyShard();
  MutexLock l(s.mu);
  if (!s_->Reserve(s)) return false;
  s_->table_frames.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void FrameAllocator::UnchargeTable() {
  State::Shard& s = s_->MyShard();
  MutexLock l(s.mu);
  s_->Unreserve(s);
  s_->table_frames.fetch_sub(1, std::memory_order_relaxed);
}

void FrameAllocator::AddDeferredFrees(DeferredFrees* d) {
  MutexLock l(s_->reclaim_mu);
  s_->deferred.push_back(d);
}

void FrameAllocator::RemoveDeferredFrees(DeferredFrees* d) {
  MutexLock l(s_->reclaim_mu);
  s_->deferred.erase(std::remove(s_->deferred.begin(), s_->deferred.end(), d), s_->deferred.end());
}

void FrameAllocator::FlushDeferredFrees() {
  MutexLock l(s_->reclaim_mu);
  for (DeferredFrees* d : s_->deferred) d->FlushDeferredFrees();
}

void FrameAllocator::Reclaim() {
  FlushDeferredFrees();
  RcuBarrier();
}

int64_t FrameAllocator::in_use_frames() const {
  int64_t n = 0;
  for (const State::Shard& s : s_->shards) n += s.in_use.load(std::memory_order_relaxed);
  return n;
}

uint64_t FrameAllocator::in_use_bytes() const {
  int64_t n = in_use_frames();
  return n > 0 ? static_cast<uint64_t>(n) * kFrame : 0;
}

uint64_t FrameAllocator::host_bytes() const {
  MutexLock l(s_->chunk_mu);
  return s_->chunks.size() * kChunk;
}

uint64_t FrameAllocator::table_bytes() const {
  const int64_t n = s_->table_frames.load(std::memory_order_relaxed);
  return n > 0 ? static_cast<uint64_t>(n) * kFrame : 0;
}

uint64_t FrameAllocator::limit_bytes() const { return s_->limit_frames * kFrame; }

}  // namespace vmspace
