// SPDX-License-Identifier: Apache-2.0
// Truncate racing a fault on the page it removes, racing fork's copy of the page's PTE
// and racing a fault that brings the page in (the second and third tests, below),
// replayed deterministically with test hooks:
//   1. thread A write-faults on page 0 of a MAP_SHARED memfd mapping: the fault finds the
//      page cached, locks its folio, sees it below i_size, and stops
//      (g_file_fault_test_hook) before it installs the PTE;
//   2. ftruncate(fd, 0) on the main thread sets i_size and runs its first unmap pass,
//      which finds no PTE, and stops (g_truncate_test_hook stage 1);
//   3. A installs its PTE, unlocks the folio and completes its write;
//   4. truncate removes the folio from the page cache and stops before its second unmap
//      pass (stage 2), where the test waits for every queued RCU callback (RcuBarrier).
// The PTE A installed still maps the folio's frame there, so the frame must not have
// been freed yet: a frame freed while a PTE maps it is handed to another page, and
// accesses through the stale PTE read and write that page (in the mlock stress test a
// reader of the memfd saw another page's contents). Linux frees the folio only when its
// last PTE reference goes (truncate_cleanup_folio -> unmap_mapping_folio, mm/truncate.c,
// Linux 6.18); the engine frees the folios truncate removed after its second pass.
#include <sys/mman.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <memory>
#include <thread>

#include "engine/address_space.h"
#include "engine/file.h"
#include "filemap.h"
#include "fork.h"
#include "fork_access.h"
#include "memory.h"
#include "profiles.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = 4096;
constexpr uint64_t kShm = 0x300000000000;
constexpr uint64_t kTag = 0x6b6b00000000a11cull;

struct Race {
  std::atomic<MmStruct*> fault_mm{nullptr};  // armed: the space whose file fault stops
  std::atomic<File*> file{nullptr};          // the file whose truncate stops
  std::atomic<bool> a_locked{false}, b_pass1{false}, a_done{false};
  FrameAllocator* frames = nullptr;
  AddressSpace* as = nullptr;
  int64_t in_use_before = 0, in_use_after = 0;
  bool stale_read_ok = false;
  uint64_t stale_value = 0;
  bool stage2_seen = false;
};
Race* g_race = nullptr;

void Wait(const std::atomic<bool>& b) {
  while (!b.load()) std::this_thread::yield();
}

void FaultHook(MmStruct* mm, uint64_t) {
  MmStruct* expect = mm;
  if (!g_race->fault_mm.compare_exchange_strong(expect, nullptr)) return;  // once
  g_race->a_locked = true;
  Wait(g_race->b_pass1);
}

void TruncateHook(File* f, int stage) {
  if (f != g_race->file.load()) return;
  if (stage == 1) {
    g_race->b_pass1 = true;
    Wait(g_race->a_done);
    return;
  }
  g_race->stage2_seen = true;
  g_race->in_use_before = g_race->frames->in_use_frames();
  RcuBarrier();  // every callback queued so far has run
  g_race->in_use_after = g_race->frames->in_use_frames();
  // A's PTE is still there until the second pass: the access goes through it (the
  // TLB-hit path: no lock; truncate holds invalidate_lock, above any space's locks).
  uint64_t v = 0;
  g_race->stale_read_ok = g_race->as->ReadMemory(kShm, &v, sizeof v).ok();
  g_race->stale_value = v;
}

struct TruncateRace : ::testing::TestWithParam<const char*> {};

TEST_P(TruncateRace, AFolioAFaultMappedDuringTruncateIsFreedOnlyAfterTheSecondUnmapPass) {
  FrameAllocator frames{1ull << 26};
  testing_util::ScratchDir dir;
  FileTable files(frames, dir.path);
  auto as = std::make_unique<AddressSpace>(frames, testing_profiles::ProfileOptions(GetParam()));
  SysResult fd = files.CreateShmem("race", P);
  ASSERT_TRUE(fd.ok());
  ASSERT_EQ(as->Mmap(kShm, P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, files.Get(fd.value)).value, kShm);
  // The page cached, not mapped: written once, then its PTE zapped.
  ASSERT_TRUE(as->WriteMemory(kShm, &kTag, sizeof kTag).ok());
  ASSERT_EQ(as->Madvise(kShm, P, MADV_DONTNEED).error, 0);
  RcuBarrier();  // nothing queued from before

  Race race;
  race.frames = &frames;
  race.as = as.get();
  race.file = files.Get(fd.value)->file.get();
  g_race = &race;
  g_file_fault_test_hook = &FaultHook;
  g_truncate_test_hook = &TruncateHook;
  race.fault_mm = &AddressSpaceTestAccess::Mm(*as);

  std::thread a([&] {
    const uint64_t v = kTag;
    EXPECT_TRUE(as->WriteMemory(kShm, &v, sizeof v).ok());
    race.a_done = true;
  });
  Wait(race.a_locked);
  EXPECT_EQ(files.Truncate(fd.value, 0), 0);
  a.join();
  g_file_fault_test_hook = nullptr;
  g_truncate_test_hook = nullptr;
  g_race = nullptr;

  ASSERT_TRUE(race.stage2_seen);
  EXPECT_EQ(race.in_use_after, race.in_use_before)
      << "the folio's frame was freed while A's PTE still mapped it";
  EXPECT_TRUE(race.stale_read_ok);
  EXPECT_EQ(race.stale_value, kTag);
  // After the second pass the page is gone: SIGBUS beyond EOF, no frame left for it.
  uint64_t v = 0;
  EXPECT_EQ(as->ReadMemory(kShm, &v, sizeof v).stop.outcome, FaultOutcome::kSigbus);
  EXPECT_EQ(as->Validate(), "");
  as.reset();
  files.Close(fd.value);
  RcuBarrier();
  EXPECT_EQ(frames.in_use_frames(), 0) << "frames leaked (>0) or freed twice (<0)";
}

// fork's copy of a private memfd mapping racing a truncate of the memfd to 0. The
// mapping has an anon_vma (one page written, a private copy), so fork copies its PTEs,
// the page-cache PTE of page 0 among them; the child VMA is in i_mmap already. The copy
// stops (g_copy_pte_range_test_hook) after it read the parent's entries and before it
// installs the child's, and waits up to 300 ms for the truncate, run meanwhile on
// another thread, to finish. Without the parent's PTE lock held across the read and
// the install, the truncate finishes there (it cleared the parent's entries, found the
// child's empty and freed page 0), and the child is left mapping the freed frame. With
// it, the truncate waits for the copy and then clears the child's entries too.
std::atomic<MmStruct*> g_copy_mm{nullptr};
std::atomic<bool> g_in_copy{false}, g_truncated{false};
void CopyHook(MmStruct* mm, uint64_t) {
  MmStruct* expect = mm;
  if (!g_copy_mm.compare_exchange_strong(expect, nullptr)) return;  // once
  g_in_copy = true;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (!g_truncated.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
}

TEST_P(TruncateRace, ForksCopyOfAPageCachePteIsSeenByATruncateRunningBesideIt) {
  FrameAllocator frames{1ull << 26};
  testing_util::ScratchDir dir;
  FileTable files(frames, dir.path);
  auto as = std::make_unique<AddressSpace>(frames, testing_profiles::ProfileOptions(GetParam()));
  SysResult fd = files.CreateShmem("race", 2 * P);
  ASSERT_TRUE(fd.ok());
  ASSERT_EQ(as->Mmap(kShm, 2 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, 0, files.Get(fd.value)).value, kShm);
  uint64_t v = 0;
  ASSERT_TRUE(as->ReadMemory(kShm, &v, sizeof v).ok());  // page 0: the page cache's, read-only
  ASSERT_TRUE(as->WriteMemory(kShm + P, &kTag, sizeof kTag).ok());  // page 1: a private copy
  ASSERT_NE(testing_fork::PteAt(*as, kShm) & kPtePresent, 0u);

  g_in_copy = false, g_truncated = false;
  g_copy_mm = &AddressSpaceTestAccess::Mm(*as);
  g_copy_pte_range_test_hook = &CopyHook;
  std::thread truncator([&] {
    while (!g_in_copy.load()) std::this_thread::yield();
    EXPECT_EQ(files.Truncate(fd.value, 0), 0);
    g_truncated = true;
  });
  int err = -1;
  std::unique_ptr<AddressSpace> child = as->DupMmap(&err);
  truncator.join();
  g_copy_pte_range_test_hook = nullptr;
  ASSERT_EQ(err, 0);
  ASSERT_TRUE(child);
  RcuBarrier();  // page 0's frame is free now

  EXPECT_EQ(testing_fork::PteAt(*child, kShm) & kPtePresent, 0u)
      << "the child maps page 0 of the truncated memfd (a freed frame)";
  for (AddressSpace* s : {as.get(), child.get()}) {
    EXPECT_EQ(s->ReadMemory(kShm, &v, sizeof v).stop.outcome, FaultOutcome::kSigbus);
    EXPECT_EQ(s->ReadMemory(kShm + P, &v, sizeof v).stop.outcome, FaultOutcome::kSigbus);
    EXPECT_EQ(s->Validate(), "");
  }
  child.reset();
  as.reset();
  files.Close(fd.value);
  RcuBarrier();
  EXPECT_EQ(frames.in_use_frames(), 0) << "frames leaked (>0) or freed twice (<0)";
}

// A page brought into the page cache while a truncate runs. A read fault on page 1 of a
// two-page host file checked i_size before the truncate to one page set it, and stops
// (g_add_folio_test_hook) before it adds the page; it waits up to 300 ms for the
// truncate, run meanwhile on the main thread, to remove the file's pages
// (g_truncate_test_hook stage 2), and the truncate waits up to 300 ms there for the
// fault to finish. Without invalidate_lock the fault adds the page and reads the host
// file's old data into it after the truncate's removal and before the host file is
// truncated; the page stays cached beyond EOF, and when the file grows again its old
// data shows where zeros belong. With it the truncate waits for the fault and removes
// the page, or the fault waits for the truncate and reads zeros.
std::atomic<File*> g_add_file{nullptr}, g_trunc_file{nullptr};
std::atomic<bool> g_adding{false}, g_trunc_removed{false}, g_fault_done{false};
void WaitFor(const std::atomic<bool>& b) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (!b.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
}
void AddFolioHook(File* f, uint64_t index) {
  File* expect = f;
  if (index != 1 || !g_add_file.compare_exchange_strong(expect, nullptr)) return;  // once
  g_adding = true;
  WaitFor(g_trunc_removed);
}
void TruncateStageHook(File* f, int stage) {
  if (f != g_trunc_file.load() || stage != 2) return;
  g_trunc_removed = true;
  WaitFor(g_fault_done);
}

TEST_P(TruncateRace, APageAFaultBringsInDuringTruncateDoesNotOutliveIt) {
  FrameAllocator frames{1ull << 26};
  testing_util::ScratchDir dir;
  {
    std::ofstream out(dir.path + "/data");
    out << std::string(P, 'a') << std::string(P, 'b');
  }
  FileTable files(frames, dir.path);
  auto as = std::make_unique<AddressSpace>(frames, testing_profiles::ProfileOptions(GetParam()));
  SysResult fd = files.Open("data", {.write = true});
  ASSERT_TRUE(fd.ok());
  ASSERT_EQ(as->Mmap(kShm, 2 * P, PROT_READ, MAP_SHARED | MAP_FIXED, 0, files.Get(fd.value)).value, kShm);

  File* file = files.Get(fd.value)->file.get();
  g_adding = false, g_trunc_removed = false, g_fault_done = false;
  g_add_file = file;
  g_trunc_file = file;
  g_add_folio_test_hook = &AddFolioHook;
  g_truncate_test_hook = &TruncateStageHook;
  std::thread a([&] {
    uint8_t b = 0;
    as->ReadMemory(kShm + P, &b, 1);  // 'b', or SIGBUS if it ran after the truncate's size change
    g_fault_done = true;
  });
  while (!g_adding.load()) std::this_thread::yield();
  EXPECT_EQ(files.Truncate(fd.value, P), 0);
  a.join();
  g_add_folio_test_hook = nullptr;
  g_truncate_test_hook = nullptr;

  // The fault may still bring page 1 in after the truncate (it checked i_size before
  // it): then it reads the truncated host file's zeros and answers SIGBUS, and the page
  // stays cached beyond EOF, as filemap_fault leaves it in Linux.
  ASSERT_EQ(files.Truncate(fd.value, 2 * P), 0);  // grow again: page 1 is a hole
  std::string page(P, 'x');
  ASSERT_EQ(files.Read(fd.value, P, page.data(), P).value, P);
  EXPECT_EQ(page, std::string(P, '\0')) << "data the truncate discarded came back";
  EXPECT_EQ(as->Validate(), "");
  as.reset();
  files.Close(fd.value);
  RcuBarrier();
  EXPECT_EQ(frames.in_use_frames(), 0) << "frames leaked (>0) or freed twice (<0)";
}

INSTANTIATE_TEST_SUITE_P(Profiles, TruncateRace, testing_profiles::AllProfiles(), testing_profiles::ProfileName());

}  // namespace
}  // namespace vmspace
