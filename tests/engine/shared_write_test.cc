// SPDX-License-Identifier: Apache-2.0
// Shared write faults and dirty throttling (seed 002): pgfault per page with
// shared_fault_completion = retry (2, as Linux before 5.19) and completed (1, as this
// machine's kernel: a memfd write loop's getrusage min_flt and vmstat pgfault count 1
// per page), under every profile; writers from many spaces under a small dirty limit
// all finish (the throttled writer holds no engine lock: lockdep builds assert it in
// balance_dirty_pages) with their data on the host file.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/address_space.h"
#include "engine/file.h"
#include "engine/stats.h"
#include "engine/writeback.h"
#include "filemap.h"
#include "sync/lockdep.h"
#include "profiles.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = kPageSize;

uint64_t Ev(Event e) { return ReadStats().event(e); }
uint64_t Acquisitions(LockClass c) { return ReadStats().lock(c, LockMode::kWrite).acquisitions; }

SpaceOptions Opts(const std::string& profile, SharedFaultCompletion c) {
  SpaceOptions o;
  std::string err;
  EXPECT_TRUE(LockingProfile::Parse(profile, &o.profile, &err)) << err;
  o.shared_fault_completion = c;
  return o;
}

class SharedWriteTest : public ::testing::TestWithParam<const char*> {};

// Writing each page of a MAP_SHARED|MAP_ANONYMOUS (shmem) mapping once: the first
// write of a page dirties it and drops the fault's lock; retry runs handle_mm_fault a
// second time (pgfault 2 per page, min_flt 1), completed does not (1 per page). A
// second pass takes no fault.
TEST_P(SharedWriteTest, ShmemPgfaultPerPage) {
  constexpr uint64_t kPages = 64;
  for (SharedFaultCompletion c : {SharedFaultCompletion::kRetry, SharedFaultCompletion::kCompleted}) {
    SCOPED_TRACE(SharedFaultCompletionName(c));
    FrameAllocator frames;
    AddressSpace as(frames, Opts(GetParam(), c));
    SysResult m = as.Mmap(0, kPages * P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS);
    ASSERT_TRUE(m.ok());
    const StatsSnapshot before = ReadStats();
    AccessResult a = as.Access(m.value, kPages * P, P, AccessType::kWrite);
    ASSERT_TRUE(a.ok());
    const StatsSnapshot d = ReadStats().Minus(before);
    const bool retry = c == SharedFaultCompletion::kRetry;
    EXPECT_EQ(a.faults, kPages);  // min_flt: a RETRY is accounted once
    // linux-6.4 (vma_lock=anon) first tries each file fault under the VMA lock and
    // retries it under mmap_lock at once (vma_lock_retry_file); that attempt is not a
    // pgfault (mm_account_fault skips a fault that answered VM_FAULT_RETRY unhandled).
    EXPECT_EQ(d.event(Event::kPgfault), kPages * (retry ? 2 : 1));
    EXPECT_EQ(d.event(Event::kFaultRetryDirty), retry ? kPages : 0);
    EXPECT_EQ(d.event(Event::kFaultCompleted), retry ? 0 : kPages);
    EXPECT_EQ(d.event(Event::kFaultShmem), kPages);
    // The retried attempt takes mmap_lock (read) once per page.
    if (retry) {
      EXPECT_GE(d.lock(LockClass::kMmapLock, LockMode::kRead).acquisitions, kPages);
    }
    AccessResult again = as.Access(m.value, kPages * P, P, AccessType::kWrite);
    EXPECT_EQ(again.faults, 0u);
    // A single Fault() reports the vm_fault_t bit.
    SysResult m2 = as.Mmap(0, P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS);
    FaultResult f = as.Fault(m2.value, AccessType::kWrite);
    EXPECT_EQ(f.outcome, FaultOutcome::kMinor);
    EXPECT_EQ(f.faults, 1u);
    EXPECT_EQ(f.vm_fault & (VM_FAULT_RETRY | VM_FAULT_COMPLETED), retry ? VM_FAULT_RETRY : VM_FAULT_COMPLETED);
    EXPECT_EQ(as.Validate(), "");
  }
}

// A private mapping's write faults never drop the lock (no page-cache page dirtied).
TEST_P(SharedWriteTest, PrivateWritesNotAffected) {
  FrameAllocator frames;
  AddressSpace as(frames, Opts(GetParam(), SharedFaultCompletion::kRetry));
  SysResult m = as.Mmap(0, 16 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
  const StatsSnapshot before = ReadStats();
  ASSERT_TRUE(as.Access(m.value, 16 * P, P, AccessType::kWrite).ok());
  const StatsSnapshot d = ReadStats().Minus(before);
  EXPECT_EQ(d.event(Event::kPgfault), 16u);
  EXPECT_EQ(d.event(Event::kFaultRetryDirty), 0u);
}

INSTANTIATE_TEST_SUITE_P(Profiles, SharedWriteTest, testing_profiles::AllProfiles(), testing_profiles::ProfileName());

/// Restores the default dirty limits at the end of a test.
struct LimitsScope {
  explicit LimitsScope(DirtyLimits l) { SetDirtyLimits(l); }
  ~LimitsScope() { SetDirtyLimits(DirtyLimits{}); }
};

// Host file, read then written through MAP_SHARED: the write is wp_page_shared, which
// dirties the page: retry counts 2 pgfaults for it; the read fault 1. msync writes the
// page back and write-protects it, so the next write faults (and dirties) again.
TEST(SharedWriteFile, HostFileWriteAfterRead) {
  for (SharedFaultCompletion c : {SharedFaultCompletion::kRetry, SharedFaultCompletion::kCompleted}) {
    SCOPED_TRACE(SharedFaultCompletionName(c));
    FrameAllocator frames;
    testing_util::ScratchDir dir;
    FileTable files(frames, dir.path);
    SysResult id = files.Open("f", OpenFlags{.write = true, .create = true});
    ASSERT_TRUE(id.ok());
    ASSERT_EQ(files.Truncate(id.value, 4 * P), 0);
    {
      SpaceOptions o = Opts("linux-6.15", c);
      o.fault_around_bytes = P;  // one page per read fault
      AddressSpace as(frames, o);
      SysResult m = as.Mmap(0, 4 * P, PROT_READ | PROT_WRITE, MAP_SHARED, 0, files.Get(id.value));
      ASSERT_TRUE(m.ok());
      const bool retry = c == SharedFaultCompletion::kRetry;
      uint64_t pf = Ev(Event::kPgfault);
      ASSERT_TRUE(as.Access(m.value, 4 * P, P, AccessType::kRead).ok());
      EXPECT_EQ(Ev(Event::kPgfault) - pf, 4u);
      pf = Ev(Event::kPgfault);
      AccessResult w = as.Access(m.value, 4 * P, P, AccessType::kWrite);
      EXPECT_EQ(w.faults, 4u);
      EXPECT_EQ(Ev(Event::kPgfault) - pf, retry ? 8u : 4u);
      FileStat st;
      ASSERT_TRUE(files.Stat(id.value, &st).ok());
      EXPECT_EQ(st.dirty_pages, 4u);
      EXPECT_EQ(ReadWritebackStats().dirty_pages, 4u);
      const uint64_t i_pages0 = Acquisitions(LockClass::kIPagesLock);
      ASSERT_TRUE(as.Msync(m.value, 4 * P, MS_SYNC).ok());
      // folio_start_writeback and folio_end_writeback take each page's i_pages lock.
      EXPECT_EQ(Acquisitions(LockClass::kIPagesLock) - i_pages0, 8u);
      ASSERT_TRUE(files.Stat(id.value, &st).ok());
      EXPECT_EQ(st.dirty_pages, 0u);
      EXPECT_EQ(ReadWritebackStats().dirty_pages, 0u);
      pf = Ev(Event::kPgfault);
      EXPECT_EQ(as.Access(m.value, P, P, AccessType::kWrite).faults, 1u);
      EXPECT_EQ(Ev(Event::kPgfault) - pf, retry ? 2u : 1u);
    }
    files.Close(id.value);
  }
  EXPECT_EQ(ReadWritebackStats().dirty_pages, 0u);
}

// The page-cache and writeback locks in the lock statistics, and NR_WRITEBACK: pwrite
// of N new pages adds each to the page cache under the i_pages lock and joins the file
// to the writeback list once (wb_list_lock, __mark_inode_dirty); fsync takes each
// page's i_pages lock twice (folio_start_writeback, folio_end_writeback), and while it
// waits for the last page's folio lock the pages it started count under writeback.
TEST(SharedWriteFile, PageCacheAndWritebackLocks) {
  constexpr uint64_t kPages = 32;
  FrameAllocator frames;
  testing_util::ScratchDir dir;
  FileTable files(frames, dir.path);
  SysResult id = files.Open("l", OpenFlags{.write = true, .create = true});
  ASSERT_TRUE(id.ok());
  File& f = *files.Get(id.value)->file;
  std::vector<uint8_t> page(P, 0x6b);
  const uint64_t wb0 = Acquisitions(LockClass::kWbListLock), i_pages0 = Acquisitions(LockClass::kIPagesLock);
  for (uint64_t k = 0; k < kPages; k++) ASSERT_EQ(files.Write(id.value, k * P, page.data(), P).value, P);
  EXPECT_EQ(Acquisitions(LockClass::kWbListLock) - wb0, 1u);
  EXPECT_EQ(Acquisitions(LockClass::kIPagesLock) - i_pages0, kPages);  // filemap_add_folio
  EXPECT_EQ(ReadWritebackStats().dirty_pages, kPages);
  EXPECT_EQ(ReadWritebackStats().writeback_pages, 0u);
  Folio* last;
  {
    RcuReadGuard g;
    last = f.pages.Load(kPages - 1);
  }
  ASSERT_NE(last, nullptr);
  last->Lock();
  const uint64_t i_pages1 = Acquisitions(LockClass::kIPagesLock);
  std::thread fsync([&] { EXPECT_EQ(files.Fsync(id.value), 0); });
  while (ReadWritebackStats().writeback_pages != kPages - 1) std::this_thread::yield();  // a hang is the failure
  EXPECT_EQ(f.nrwriteback.load(), kPages - 1);
  last->Unlock();
  fsync.join();
  EXPECT_EQ(Acquisitions(LockClass::kIPagesLock) - i_pages1, 2 * kPages);
  EXPECT_EQ(ReadWritebackStats().writeback_pages, 0u);
  EXPECT_EQ(f.nrwriteback.load(), 0u);
  EXPECT_EQ(ReadWritebackStats().dirty_pages, 0u);
  files.Close(id.value);
}

// fsync waits for pages another writer already took for I/O (filemap_fdatawait): the
// writeback thread clears a page's dirty bit and sets PG_writeback before it writes;
// an fsync in between finds nothing dirty and must still wait for that write, else it
// returns 0 before the data is on the host file.
TEST(SharedWriteFile, FsyncWaitsForAPageUnderAnotherWritersWriteback) {
  FrameAllocator frames;
  testing_util::ScratchDir dir;
  FileTable files(frames, dir.path);
  SysResult id = files.Open("w", OpenFlags{.write = true, .create = true});
  ASSERT_TRUE(id.ok());
  File& f = *files.Get(id.value)->file;
  std::vector<uint8_t> page(P, 0x5a);
  ASSERT_EQ(files.Write(id.value, 0, page.data(), P).value, P);
  Folio* folio;
  {
    RcuReadGuard g;
    folio = f.pages.Load(0);
  }
  ASSERT_NE(folio, nullptr);
  folio->Lock();  // as WriteRange's step 1 on the writeback thread
  ASSERT_TRUE(f.ClearDirty(folio));
  f.StartWriteback(folio);
  folio->Unlock();
  std::atomic<bool> returned{false};
  std::thread fsync([&] {
    EXPECT_EQ(files.Fsync(id.value), 0);
    returned.store(true);
  });
  // Long enough for an fsync that does not wait to return (it has nothing to write);
  // one that waits cannot return, however long this takes.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(returned.load()) << "fsync returned while a page was under writeback";
  f.EndWriteback(folio);
  fsync.join();
  EXPECT_TRUE(returned.load());
  EXPECT_EQ(f.nrwriteback.load(), 0u);
  files.Close(id.value);
}

// Many writers in many spaces over a 64-page dirty limit: they are throttled, the
// writeback thread cleans their pages, every writer finishes (no deadlock; a hang is
// the failure), the dirty figure ends near the limit, and the data reaches the files:
// every page's tag, written while its writer was being throttled, is on the host file
// after fsync.
TEST(SharedWriteFile, ThrottledWritersManySpaces) {
  constexpr int kSpaces = 4, kThreadsPerSpace = 2;
  constexpr uint64_t kPagesPerThread = 256, kLimitPages = 64;
  LimitsScope limits({.dirty_bytes = kLimitPages * P, .dirty_background_bytes = kLimitPages * P / 2});
  FrameAllocator frames;
  testing_util::ScratchDir dir;
  FileTable files(frames, dir.path);
  const uint64_t throttled0 = Ev(Event::kDirtyThrottled), wb0 = Ev(Event::kWritebackPages);
  std::vector<uint64_t> ids;
  std::vector<std::unique_ptr<AddressSpace>> spaces;
  std::vector<uint64_t> addrs;
  for (int s = 0; s < kSpaces; s++) {
    SysResult id = files.Open("f" + std::to_string(s), OpenFlags{.write = true, .create = true});
    ASSERT_TRUE(id.ok());
    ASSERT_EQ(files.Truncate(id.value, kThreadsPerSpace * kPagesPerThread * P), 0);
    ids.push_back(id.value);
    spaces.push_back(std::make_unique<AddressSpace>(
        frames, Opts(s % 2 ? "linux-6.0" : "linux-6.15",
                     s % 2 ? SharedFaultCompletion::kRetry : SharedFaultCompletion::kCompleted)));
    SysResult m = spaces.back()->Mmap(0, kThreadsPerSpace * kPagesPerThread * P, PROT_READ | PROT_WRITE,
                                      MAP_SHARED, 0, files.Get(id.value));
    ASSERT_TRUE(m.ok());
    addrs.push_back(m.value);
  }
  std::vector<std::thread> writers;
  std::atomic<uint64_t> faults{0};
  for (int s = 0; s < kSpaces; s++)
    for (int t = 0; t < kThreadsPerSpace; t++)
      writers.emplace_back([&, s, t] {
        for (uint64_t k = 0; k < kPagesPerThread; k++) {
          const uint64_t page = t * kPagesPerThread + k;
          const uint64_t tag = (uint64_t{0x5eed} << 48) | (uint64_t(s) << 32) | page;
          CopyResult r = spaces[s]->WriteMemory(addrs[s] + page * P + 8, &tag, sizeof tag);
          EXPECT_TRUE(r.ok());
          faults += r.faults;
        }
      });
  for (auto& w : writers) w.join();
  // At least one fault per page; more where writeback cleaned (write-protected) a page
  // between its fault and the re-executed store, which then faults again.
  EXPECT_GE(faults.load(), kSpaces * kThreadsPerSpace * kPagesPerThread);
  EXPECT_GT(Ev(Event::kDirtyThrottled) - throttled0, 0u);
  EXPECT_GT(Ev(Event::kWritebackPages) - wb0, 0u);
  // Each writer dirties its page before it checks: at most one page per writer over.
  EXPECT_LE(ReadWritebackStats().dirty_pages, kLimitPages + kSpaces * kThreadsPerSpace);
  EXPECT_EQ(ReadWritebackStats().throttled_now, 0u);
  // Data safety: the throttled writers' stores, and one after the run, reach the host
  // file on fsync.
  for (int s = 0; s < kSpaces; s++) {
    const char marker[] = "seed-002";
    ASSERT_TRUE(spaces[s]->WriteMemory(addrs[s] + 17 * P + 100, marker, sizeof marker).ok());
    ASSERT_EQ(files.Fsync(ids[s]), 0);
    int fd = open((dir.path + "/f" + std::to_string(s)).c_str(), O_RDONLY);
    uint64_t wrong = 0;
    for (uint64_t page = 0; page < kThreadsPerSpace * kPagesPerThread; page++) {
      uint64_t tag = 0;
      ASSERT_EQ(pread(fd, &tag, sizeof tag, static_cast<off_t>(page * P + 8)), static_cast<ssize_t>(sizeof tag));
      wrong += tag != ((uint64_t{0x5eed} << 48) | (uint64_t(s) << 32) | page);
    }
    char buf[sizeof marker] = {};
    ASSERT_EQ(pread(fd, buf, sizeof buf, 17 * P + 100), static_cast<ssize_t>(sizeof buf));
    close(fd);
    EXPECT_EQ(wrong, 0u) << "file " << s;
    EXPECT_STREQ(buf, marker);
    EXPECT_EQ(spaces[s]->Validate(), "");
  }
  spaces.clear();
  for (uint64_t id : ids) files.Close(id);
}

// pwrite (FileTable::Write) dirties pages too and throttles over the limit. One call
// dirties all 256 pages before it balances (FileTable::Write throttles once per call):
// 64 one-page writes raced the background writeback that the ninth one starts, and
// lost it now and then (the writer never passed 16 dirty pages: no throttle).
TEST(SharedWriteFile, WriteFileThrottles) {
  LimitsScope limits({.dirty_bytes = 16 * P, .dirty_background_bytes = 8 * P});
  FrameAllocator frames;
  testing_util::ScratchDir dir;
  FileTable files(frames, dir.path);
  SysResult id = files.Open("w", OpenFlags{.write = true, .create = true});
  ASSERT_TRUE(id.ok());
  const uint64_t throttled0 = Ev(Event::kDirtyThrottled);
  std::vector<uint8_t> data(256 * P, 0x5a);
  ASSERT_EQ(files.Write(id.value, 0, data.data(), data.size()).value, data.size());
  EXPECT_GT(Ev(Event::kDirtyThrottled) - throttled0, 0u);
  EXPECT_LE(ReadWritebackStats().dirty_pages, 17u);
  files.Close(id.value);
}

// balance_dirty_pages with an engine lock held aborts in lockdep builds (the check
// that keeps every throttled writer above free of locks).
TEST(SharedWriteFileDeathTest, ThrottleWithLockHeldAborts) {
  if (!kLockdep) GTEST_SKIP() << "built without VMSPACE_LOCKDEP";
  EXPECT_DEATH(
      {
        FrameAllocator frames;
        testing_util::ScratchDir dir;
        FileTable files(frames, dir.path);
        SysResult id = files.Open("d", OpenFlags{.write = true, .create = true});
        File& f = *files.Get(id.value)->file;
        MutexLock l(f.i_rwsem);
        BalanceDirtyPagesRatelimited(f);
      },
      "balance_dirty_pages with an engine lock held");
}

}  // namespace
}  // namespace vmspace
