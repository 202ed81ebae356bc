// SPDX-License-Identifier: Apache-2.0
// Seed 003: the i_mmap_rwsem scope of mmap's VMA link (i_mmap_scope = wide | narrow)
// and the race that made the 2023 "narrow" proposal unsafe.
//
// Between mmap's VMA-tree insert and its i_mmap insert, a test hook (the point where
// the narrow path would yield) drives, on other threads: (1) a read fault on the new
// VMA under the per-VMA lock (the VMA is in the tree and, with the hook set, published
// not write-locked, as in Linux 6.4-rc before "mm: lock newly mapped VMA which can be
// modified after it becomes visible"), which maps a page-cache page; (2) a truncate of
// the file to 0, which either completes (narrow: i_mmap_rwsem is free, and its
// unmap_mapping_range walks an i_mmap that does not hold the VMA yet) or queues on
// i_mmap_rwsem (wide: mmap holds it for write across both inserts) and then zaps the
// PTE. After mmap returns, a read of the faulted page must be SIGBUS (beyond EOF);
// under narrow the stale PTE lets it succeed: the race. Deterministic: the hook orders
// the steps, so narrow hits on the first iteration and wide never does.
#include <sys/mman.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "engine/address_space.h"
#include "engine/file.h"
#include "filemap.h"
#include "mm.h"
#include "vma.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = kPageSize;
constexpr uint64_t kFilePages = 16;
constexpr uint64_t kFaultPage = 3;
// Bound on each step's wait: only a hang (the failure being tested) reaches it.
constexpr auto kHang = std::chrono::seconds(30);

/// What the hook does and saw, for one mmap.
struct HookRun {
  AddressSpace* as = nullptr;
  FileTable* files = nullptr;
  uint64_t file_id = 0;
  File* file = nullptr;
  std::thread faulter, truncater;
  FaultResult fault;
  std::atomic<bool> fault_done{false}, truncate_done{false};
  bool truncate_queued = false;  // truncate waited on i_mmap_rwsem (held by mmap)
  bool ran = false;
};
HookRun* g_run = nullptr;

bool WaitFor(const std::function<bool()>& cond) {
  const auto end = std::chrono::steady_clock::now() + kHang;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

void Hook(MmStruct*, uint64_t start) {
  HookRun& r = *g_run;
  r.ran = true;
  r.faulter = std::thread([&r, start] {
    r.fault = r.as->Fault(start + kFaultPage * P, AccessType::kRead);
    r.fault_done = true;
  });
  if (!WaitFor([&] { return r.fault_done.load(); })) return;  // the fault could not get in: no window
  r.truncater = std::thread([&r] {
    EXPECT_EQ(r.files->Truncate(r.file_id, 0), 0);
    r.truncate_done = true;
  });
  WaitFor([&] { return r.truncate_done.load() || r.file->i_mmap_rwsem.waiters() > 0; });
  r.truncate_queued = !r.truncate_done.load();
}

/// Runs up to `max_iters` mmap+fault+truncate rounds; returns the iteration (1-based)
/// at which a page beyond EOF stayed mapped, or 0 if it never did.
int RaceIterations(IMmapScope scope, int max_iters) {
  FrameAllocator frames;
  testing_util::ScratchDir dir;
  FileTable files(frames, dir.path);
  SysResult id = files.Open("bin", OpenFlags{.write = true, .create = true});
  EXPECT_TRUE(id.ok());
  SpaceOptions o;
  std::string err;
  EXPECT_TRUE(LockingProfile::Parse("linux-6.15", &o.profile, &err));
  o.i_mmap_scope = scope;
  AddressSpace as(frames, o);
  std::vector<uint8_t> data(kFilePages * P, 0x7f);
  int hit = 0;
  g_mmap_region_test_hook.store(&Hook);
  for (int i = 1; i <= max_iters && !hit; i++) {
    EXPECT_EQ(files.Write(id.value, 0, data.data(), data.size()).value, data.size());  // cached, size 16 pages
    HookRun run;
    run.as = &as;
    run.files = &files;
    run.file_id = id.value;
    run.file = files.Get(id.value)->file.get();
    g_run = &run;
    SysResult m = as.Mmap(0, kFilePages * P, PROT_READ, MAP_SHARED, 0, files.Get(id.value));
    EXPECT_TRUE(m.ok());
    if (run.faulter.joinable()) run.faulter.join();
    if (run.truncater.joinable()) run.truncater.join();
    EXPECT_TRUE(run.ran);
    EXPECT_TRUE(run.fault_done);
    EXPECT_EQ(run.fault.outcome, FaultOutcome::kMinor);  // the page was mapped in the window
    EXPECT_EQ(run.fault.path, LockPath::kVmaLock);
    // Wide: truncate had to wait for mmap's i_mmap_rwsem; narrow: it never does.
    EXPECT_EQ(run.truncate_queued, scope == IMmapScope::kWide);
    FaultResult after = as.Fault(m.value + kFaultPage * P, AccessType::kRead);
    if (after.outcome == FaultOutcome::kNone) hit = i;  // still mapped: a page beyond EOF
    else EXPECT_EQ(after.outcome, FaultOutcome::kSigbus);
    EXPECT_TRUE(as.Munmap(m.value, kFilePages * P).ok());
  }
  g_mmap_region_test_hook.store(nullptr);
  g_run = nullptr;
  files.Close(id.value);
  return hit;
}

TEST(IMmapScope, NarrowMissesAVisibleVmaWideNever) {
  constexpr int kIters = 20;
  const int narrow = RaceIterations(IMmapScope::kNarrow, kIters);
  const int wide = RaceIterations(IMmapScope::kWide, kIters);
  printf("i_mmap_scope race: narrow hit after %d iteration(s); wide: %s in %d iterations\n", narrow,
         wide ? "HIT" : "no hit", kIters);
  RecordProperty("narrow_race_iterations", narrow);
  EXPECT_EQ(narrow, 1);  // expected: the narrow scope is unsafe
  EXPECT_EQ(wide, 0);
}

// Without the hook both scopes link a new file VMA into the tree and i_mmap, and the
// space stays valid; wide takes i_mmap_rwsem once per mmap, as narrow does.
TEST(IMmapScope, BothScopesLinkTheVma) {
  for (IMmapScope scope : {IMmapScope::kWide, IMmapScope::kNarrow}) {
    SCOPED_TRACE(IMmapScopeName(scope));
    FrameAllocator frames;
    auto h = NewShmemFile(frames, "/memfd:x (deleted)", 8 * P);
    SpaceOptions o;
    o.i_mmap_scope = scope;
    AddressSpace as(frames, o);
    SysResult m = as.Mmap(0, 8 * P, PROT_READ | PROT_WRITE, MAP_SHARED, 0, h);
    ASSERT_TRUE(m.ok());
    {
      ReadGuard l(h->file->i_mmap_rwsem);
      EXPECT_EQ(h->file->i_mmap.size(), 1u);
    }
    EXPECT_TRUE(as.Access(m.value, 8 * P, P, AccessType::kWrite).ok());
    EXPECT_EQ(as.Validate(), "");
    EXPECT_TRUE(as.Munmap(m.value, 8 * P).ok());
    ReadGuard l(h->file->i_mmap_rwsem);
    EXPECT_EQ(h->file->i_mmap.size(), 0u);
  }
}

}  // namespace
}  // namespace vmspace
