#include "engine/frame_allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "engine/lock.h"
#include "engine/rcu.h"
#include "engine/stats.h"

namespace vmspace {

namespace {
constexpr size_t kFrame = 4096;
constexpr size_t kChunk = 2u << 20;
alignas(4096) char g_zero_page[4096];
std::atomic<unsigned> g_next_shard{0};
thread_local int tls_shard = -1;
}  // namespace

FrameAllocator::FrameAllocator(uint64_t limit_bytes) : limit_frames_(limit_bytes / kFrame) {}

FrameAllocator::~FrameAllocator() {
  RcuBarrier();  // frames freed after a grace period come back here first
  for (void* c : chunks_) munmap(c, kChunk);
}

void* FrameAllocator::ZeroPage() { return g_zero_page; }

FrameAllocator::Shard& FrameAllocator::MyShard() {
  if (tls_shard < 0) tls_shard = static_cast<int>(g_next_shard.fetch_add(1) % kShards);
  return shards_[tls_shard];
}

void* FrameAllocator::CarveFrame() {
  RankedGuard<std::mutex> l(chunk_mu_, LockRank::kFrameChunk);
  if (carve_ == carve_end_) {
    void* c = mmap(nullptr, kChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (c == MAP_FAILED) return nullptr;
    chunks_.push_back(c);
    carve_ = static_cast<char*>(c);
    carve_end_ = carve_ + kChunk;
  }
  void* f = carve_;
  carve_ += kFrame;
  return f;  // fresh host memory is already zero
}

void* FrameAllocator::TakeFromGlobal(Shard& s) {
  RankedGuard<std::mutex> l(chunk_mu_, LockRank::kFrameChunk);
  if (global_free_.empty()) return nullptr;
  size_t n = std::min<size_t>(kBatch, global_free_.size());
  s.free.insert(s.free.end(), global_free_.end() - n, global_free_.end());
  global_free_.resize(global_free_.size() - n);
  void* f = s.free.back();
  s.free.pop_back();
  return f;
}

void* FrameAllocator::Alloc() {
  Shard& s = MyShard();
  void* f = nullptr;
  bool fresh = false;
  {
    RankedGuard<std::mutex> l(s.mu, LockRank::kFrameShard);
    if (s.budget == 0 && limit_frames_ != 0) {
      // Reserve up to kBatch frames from the global limit.
      uint64_t cur = reserved_frames_.load(std::memory_order_relaxed);
      uint64_t take;
      do {
        if (cur >= limit_frames_) return nullptr;
        take = std::min<uint64_t>(kBatch, limit_frames_ - cur);
      } while (!reserved_frames_.compare_exchange_weak(cur, cur + take,
                                                       std::memory_order_relaxed));
      s.budget = take;
    }
    if (limit_frames_ != 0) s.budget--;
    s.in_use.store(s.in_use.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (s.free.empty()) f = TakeFromGlobal(s);
    else {
      f = s.free.back();
      s.free.pop_back();
    }
  }
  if (!f) {
    f = CarveFrame();
    fresh = true;
    if (!f) {
      RankedGuard<std::mutex> l(s.mu, LockRank::kFrameShard);
      if (limit_frames_ != 0) s.budget++;
      s.in_use.store(s.in_use.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
      return nullptr;
    }
  }
  if (!fresh) memset(f, 0, kFrame);  // clear_page
  CountEvent(Event::kFramesAllocated);
  return f;
}

void FrameAllocator::Free(void* frame) {
  Shard& s = MyShard();
  RankedGuard<std::mutex> l(s.mu, LockRank::kFrameShard);
  s.free.push_back(frame);
  if (s.free.size() > 2 * kBatch) {
    RankedGuard<std::mutex> g(chunk_mu_, LockRank::kFrameChunk);
    global_free_.insert(global_free_.end(), s.free.end() - kBatch, s.free.end());
    s.free.resize(s.free.size() - kBatch);
  }
  s.in_use.store(s.in_use.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  if (limit_frames_ != 0) {
    s.budget++;
    if (s.budget > 2 * kBatch) {
      reserved_frames_.fetch_sub(kBatch, std::memory_order_relaxed);
      s.budget -= kBatch;
    }
  }
  CountEvent(Event::kFramesFreed);
}

uint64_t FrameAllocator::in_use_bytes() const {
  int64_t n = 0;
  for (const Shard& s : shards_) n += static_cast<int64_t>(s.in_use.load(std::memory_order_relaxed));
  return n > 0 ? static_cast<uint64_t>(n) * kFrame : 0;
}

uint64_t FrameAllocator::host_bytes() const {
  std::lock_guard<std::mutex> l(const_cast<std::mutex&>(chunk_mu_));
  return chunks_.size() * kChunk;
}

}  // namespace vmspace
