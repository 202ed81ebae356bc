// SPDX-License-Identifier: Apache-2.0
// Host memory given back: free frames beyond the frame cache
// watermark (FrameAllocator::SetCacheBytes) are returned to the host with
// madvise(MADV_DONTNEED). Checked against what the kernel reports: mincore() on the
// freed frames (a frame given back is not resident) and VmRSS of /proc/self/status.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/address_space.h"
#include "engine/frame_allocator.h"
#include "sync/rcu.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = kPageSize;
constexpr uint64_t MiB = 1ull << 20;

/// VmRSS of this process, bytes (what the kernel counts resident).
uint64_t VmRssBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  ADD_FAILURE() << "no VmRSS in /proc/self/status";
  return 0;
}

/// How many of `frames` the kernel reports resident (mincore, one page each).
size_t Resident(const std::vector<void*>& frames) {
  size_t n = 0;
  for (void* f : frames) {
    unsigned char v = 0;
    EXPECT_EQ(mincore(f, P, &v), 0) << strerror(errno);
    n += v & 1;
  }
  return n;
}

TEST(FrameCache, FramesBeyondTheWatermarkGoBackToTheHost) {
  FrameAllocator frames;
  const uint64_t watermark = 8 * MiB;
  frames.SetCacheBytes(watermark);
  EXPECT_EQ(frames.cache_limit_bytes(), watermark);
  const size_t n = 64 * MiB / P;
  std::vector<void*> fs;
  for (size_t i = 0; i < n; i++) {
    fs.push_back(frames.Alloc());
    ASSERT_NE(fs.back(), nullptr);
    memset(fs.back(), 0x5a, P);  // resident now
  }
  EXPECT_EQ(Resident(fs), n);
  const uint64_t host = frames.host_bytes();
  EXPECT_GE(host, n * P);
  const uint64_t rss_full = VmRssBytes();

  for (void* f : fs) frames.Free(f);
  // Frees alone already gave back most (each spill checks the watermark)...
  EXPECT_GE(frames.returned_bytes(), 48 * MiB);
  // ...and the periodic trim brings the cache to the watermark exactly.
  frames.TrimCache();
  EXPECT_LE(frames.cache_bytes(), watermark);
  EXPECT_EQ(frames.cache_bytes() + frames.returned_bytes(), n * P) << "every freed frame cached or given back";
  // The kernel agrees: the frames cached are the only ones of them still resident.
  EXPECT_EQ(Resident(fs) * P, frames.cache_bytes());
  EXPECT_EQ(frames.host_bytes(), host - frames.returned_bytes());
  const uint64_t rss_after = VmRssBytes();
  EXPECT_GE(rss_full, rss_after + 48 * MiB) << "VmRSS " << rss_full << " -> " << rss_after;

  // Frames given back are handed out again (zero-filled) before a new chunk is mapped,
  // the cached ones first; a frame given back is not cleared (it reads as zero), so
  // handing it out leaves it untouched: only the cached frames are resident.
  const uint64_t cached = frames.cache_bytes();
  fs.clear();
  for (size_t i = 0; i < n; i++) {
    fs.push_back(frames.Alloc());
    ASSERT_NE(fs.back(), nullptr);
  }
  EXPECT_EQ(Resident(fs) * P, cached) << "frames given back were written when handed out";
  for (size_t i = 0; i < n; i++)
    ASSERT_EQ(memcmp(fs[i], FrameAllocator::ZeroPage(), P), 0) << "frame " << i << " not zero";
  EXPECT_EQ(frames.host_bytes(), host) << "no new chunk while frames given back were free";
  for (void* f : fs) frames.Free(f);
}

TEST(FrameCache, WithoutAWatermarkEveryFreedFrameIsKept) {
  FrameAllocator frames;
  EXPECT_EQ(frames.cache_limit_bytes(), ~0ull);
  std::vector<void*> fs;
  for (size_t i = 0; i < 4 * MiB / P; i++) fs.push_back(frames.Alloc());
  for (void* f : fs) frames.Free(f);
  frames.TrimCache();
  EXPECT_EQ(frames.returned_bytes(), 0u);
  EXPECT_EQ(frames.cache_bytes(), 4 * MiB);
}

TEST(FrameCache, AnUnmappedSpaceLeavesAtMostTheWatermarkResident) {
  FrameAllocator frames;
  frames.SetCacheBytes(4 * MiB);
  auto as = std::make_unique<AddressSpace>(frames);
  const uint64_t len = 32 * MiB;
  const uint64_t a = as->Mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).value;
  ASSERT_EQ(as->Access(a, len, P, AccessType::kWrite).accesses, len / P);
  EXPECT_EQ(frames.in_use_bytes(), len);
  ASSERT_TRUE(as->Munmap(a, len).ok());
  frames.Reclaim();  // the mmu_gather's frees come back after a grace period
  frames.TrimCache();
  EXPECT_EQ(frames.in_use_frames(), 0);
  EXPECT_LE(frames.cache_bytes(), 4 * MiB);
  EXPECT_GE(frames.returned_bytes(), len - 4 * MiB);
  testing_util::ExpectAllFramesFreed(as, frames);
}

}  // namespace
}  // namespace vmspace
