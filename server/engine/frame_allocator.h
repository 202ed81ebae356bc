// FrameAllocator: real 4 KiB page frames for all address spaces of a process, with a
// daemon-wide limit (Linux's page allocator and a memory cgroup limit in one).
//
// Frames are carved from 2 MiB chunks obtained from the host with mmap and recycled
// through free lists. The allocator is split into shards (a thread always uses the same
// shard), each with its own lock, free list and a budget of frames reserved from the
// global limit in batches of kBatch; so the fault path touches the shared limit
// counter once per kBatch allocations (Linux's per-CPU page lists and batched
// vmstat updates). Frames freed are kept for reuse, not returned to the host.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace vmspace {

class FrameAllocator {
 public:
  /// `limit_bytes`: the most frame memory that may be in use at once; 0 = unlimited.
  /// The limit is exact up to the budgets held by shards (at most
  /// kShards * 2 * kBatch frames may be refused early when the limit is nearly reached).
  explicit FrameAllocator(uint64_t limit_bytes = 0);
  ~FrameAllocator();
  FrameAllocator(const FrameAllocator&) = delete;
  FrameAllocator& operator=(const FrameAllocator&) = delete;

  /// A zero-filled 4 KiB frame (4 KiB aligned), or nullptr if the limit would be
  /// exceeded (the caller turns that into VM_FAULT_OOM / RESOURCE_EXHAUSTED).
  void* Alloc();
  /// Returns a frame obtained from Alloc(). Never pass the zero page.
  void Free(void* frame);

  /// The shared read-only zero page (ZERO_PAGE(0)): mapped for anonymous read faults.
  static void* ZeroPage();

  /// Frames in use (allocated and not freed), in bytes.
  uint64_t in_use_bytes() const;
  /// Host memory held in chunks, in bytes.
  uint64_t host_bytes() const;
  uint64_t limit_bytes() const { return limit_frames_ * 4096; }

  static constexpr int kShards = 16;
  static constexpr uint64_t kBatch = 32;

 private:
  struct alignas(64) Shard {
    std::mutex mu;
    std::vector<void*> free;  // guarded by mu
    uint64_t budget = 0;      // guarded by mu: frames reserved from the limit, not in use
    std::atomic<uint64_t> in_use{0};  // written under mu, read by in_use_bytes()
  };
  Shard& MyShard();
  void* CarveFrame();
  void* TakeFromGlobal(Shard& s);  // refill s.free from the global list; s.mu held

  const uint64_t limit_frames_;  // 0 = unlimited
  std::atomic<uint64_t> reserved_frames_{0};  // sum of budgets + frames in use
  std::array<Shard, kShards> shards_;
  std::mutex chunk_mu_;
  std::vector<void*> chunks_;  // guarded by chunk_mu_: 2 MiB host mappings
  std::vector<void*> global_free_;  // guarded by chunk_mu_: frames shards gave back
  char* carve_ = nullptr;      // guarded by chunk_mu_
  char* carve_end_ = nullptr;  // guarded by chunk_mu_
};

}  // namespace vmspace
