// SPDX-License-Identifier: Apache-2.0
// The mlock family (mm/mlock.c, Linux 6.18): VM_LOCKED / VM_LOCKONFAULT with splits
// and merges, locked_vm, RLIMIT_MEMLOCK and CAP_IPC_LOCK (EPERM, ENOMEM, EAGAIN),
// populate, mlockall's def_flags; and mlock/munlock racing faults, MADV_DONTNEED and
// truncate with exact frame accounting. The errnos are those measured on a 6.18 kernel
// (tests/oracle cases 90-9f compare the same ops against it).
#include <fcntl.h>
#include <sys/mman.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "engine/address_space.h"
#include "engine/file.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t kBase = 0x200000000000ull;
constexpr uint64_t P = kPageSize;

SpaceOptions NoCap(uint64_t limit) {
  SpaceOptions o;
  o.rlimit_memlock = limit;
  o.cap_ipc_lock = false;
  return o;
}

TEST(Mlock, SplitMergeAndFlags) {
  FrameAllocator frames;
  auto as = std::make_unique<AddressSpace>(frames);
  ASSERT_TRUE(as->Mmap(kBase, 8 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  EXPECT_EQ(as->Mlock(kBase, P, 2).error, EINVAL);  // only MLOCK_ONFAULT
  // An unaligned start locks the pages it touches: [base, base + 2 pages).
  ASSERT_TRUE(as->Mlock(kBase + 2 * P + 1, P).ok());
  auto v = as->Maps(kBase, kBase + 8 * P);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[1].start, kBase + 2 * P);
  EXPECT_EQ(v[1].end, kBase + 4 * P);
  EXPECT_EQ(AddressSpace::VmFlagsString(v[1].flags), "rd wr mr mw me lo ac");
  EXPECT_EQ(v[1].rss_pages, 2u);  // populated with write faults (private writable)
  EXPECT_EQ(as->Counters().locked_vm_pages, 2u);
  // Onfault: no populate, "lo lf".
  ASSERT_TRUE(as->Mlock(kBase + 5 * P, P, MLOCK_ONFAULT).ok());
  v = as->Maps(kBase + 5 * P, kBase + 6 * P);
  EXPECT_EQ(AddressSpace::VmFlagsString(v[0].flags), "rd wr mr mw me lo lf ac");
  EXPECT_EQ(v[0].rss_pages, 0u);
  EXPECT_EQ(as->Counters().locked_vm_pages, 3u);
  // Locking again with other bits changes flags without counting twice.
  ASSERT_TRUE(as->Mlock(kBase + 5 * P, P).ok());
  EXPECT_EQ(as->Counters().locked_vm_pages, 3u);
  // munlock of everything merges what it can: page 5 was populated by the second mlock
  // (an anon_vma of its own), so [0, 5) and [5, 8) stay apart.
  ASSERT_TRUE(as->Munlock(kBase, 8 * P).ok());
  v = as->Maps(kBase, kBase + 8 * P);
  ASSERT_EQ(v.size(), 2u) << as->RenderMaps();
  EXPECT_EQ(v[0].end, kBase + 5 * P);
  EXPECT_EQ(v[1].flags & VM_LOCKED_MASK, 0u);
  EXPECT_EQ(as->Counters().locked_vm_pages, 0u);
  EXPECT_EQ(as->Validate(), "");
  testing_util::ExpectAllFramesFreed(as, frames);
}

TEST(Mlock, HolesAndProtNone) {
  FrameAllocator frames;
  auto as = std::make_unique<AddressSpace>(frames);
  ASSERT_TRUE(as->Mmap(kBase, 4 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  // A hole at the end: ENOMEM, the VMA before it stays locked, nothing populated.
  EXPECT_EQ(as->Mlock(kBase + 3 * P, 2 * P).error, ENOMEM);
  auto v = as->Maps(kBase + 3 * P, kBase + 4 * P);
  EXPECT_TRUE(v[0].flags & VM_LOCKED);
  EXPECT_EQ(v[0].rss_pages, 0u);
  EXPECT_EQ(as->Counters().locked_vm_pages, 1u);
  // Starting in a hole: ENOMEM, nothing changed.
  EXPECT_EQ(as->Mlock(kBase + 4 * P, P).error, ENOMEM);
  EXPECT_EQ(as->Munlock(kBase + 4 * P, P).error, ENOMEM);
  EXPECT_TRUE(as->Mlock(kBase, 0).ok());
  EXPECT_TRUE(as->Mlock(kBase, ~0ull).ok());  // the length rounds to 0
  EXPECT_EQ(as->Mlock(0xfffffffffffff000ull, 2 * P).error, EINVAL);
  // PROT_NONE: locked, but the populate fails (EFAULT, reported ENOMEM).
  ASSERT_TRUE(as->Mmap(kBase + 8 * P, 2 * P, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  EXPECT_EQ(as->Mlock(kBase + 8 * P, 2 * P).error, ENOMEM);
  v = as->Maps(kBase + 8 * P, kBase + 10 * P);
  EXPECT_EQ(AddressSpace::VmFlagsString(v[0].flags), "mr mw me lo");
  EXPECT_EQ(as->Counters().locked_vm_pages, 3u);
  // msync(MS_INVALIDATE) of a locked VMA: EBUSY; MS_ASYNC is fine.
  EXPECT_EQ(as->Msync(kBase + 3 * P, P, MS_INVALIDATE).error, EBUSY);
  EXPECT_TRUE(as->Msync(kBase + 3 * P, P, MS_ASYNC).ok());
  EXPECT_TRUE(as->Msync(kBase, P, MS_INVALIDATE).ok());
  // MADV_DONTNEED on a locked VMA stays EINVAL.
  EXPECT_EQ(as->Madvise(kBase + 3 * P, P, MADV_DONTNEED).error, EINVAL);
  // munmap gives the locked pages back.
  ASSERT_TRUE(as->Munmap(kBase, 16 * P).ok());
  EXPECT_EQ(as->Counters().locked_vm_pages, 0u);
  EXPECT_EQ(as->Validate(), "");
  testing_util::ExpectAllFramesFreed(as, frames);
}

TEST(Mlock, RlimitAndCapability) {
  FrameAllocator frames;
  auto as = std::make_unique<AddressSpace>(frames, NoCap(4 * P));
  ASSERT_TRUE(as->Mmap(kBase, 16 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  ASSERT_TRUE(as->Mlock(kBase, 4 * P).ok());
  EXPECT_EQ(as->Mlock(kBase, 5 * P).error, ENOMEM);
  // Already-locked pages of the range are not counted twice, but 5 pages are still 1 over.
  EXPECT_EQ(as->Mlock(kBase + P, 4 * P).error, ENOMEM);
  EXPECT_TRUE(as->Mlock(kBase + P, 3 * P).ok());
  // MAP_LOCKED beyond the limit: EAGAIN, also when replacing locked pages (locked_vm
  // counts them until they are gone).
  EXPECT_EQ(as->Mmap(kBase + 32 * P, P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_LOCKED).error,
            EAGAIN);
  EXPECT_EQ(as->Mmap(kBase, 4 * P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_LOCKED).error, EAGAIN);
  ASSERT_TRUE(as->Munlock(kBase, 4 * P).ok());
  ASSERT_TRUE(as->Mmap(kBase + 32 * P, 4 * P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_LOCKED).ok());
  EXPECT_EQ(as->Counters().locked_vm_pages, 4u);
  // mlockall(MCL_CURRENT) with total_vm beyond the limit: ENOMEM; MCL_FUTURE is fine and
  // makes a new mapping count (EAGAIN over the limit).
  EXPECT_EQ(as->Mlockall(MCL_CURRENT).error, ENOMEM);
  ASSERT_TRUE(as->Munmap(kBase + 32 * P, 4 * P).ok());
  ASSERT_TRUE(as->Mlockall(MCL_FUTURE).ok());
  EXPECT_EQ(as->Mmap(kBase + 48 * P, 5 * P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).error, EAGAIN);
  ASSERT_TRUE(as->Mmap(kBase + 48 * P, 4 * P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  EXPECT_EQ(AddressSpace::VmFlagsString(as->Maps(kBase + 48 * P, kBase + 49 * P)[0].flags), "rd mr mw me lo");
  ASSERT_TRUE(as->Munlockall().ok());
  // RLIMIT_MEMLOCK 0 without CAP_IPC_LOCK: can_do_mlock fails (EPERM) for mlock,
  // mlockall and MAP_LOCKED; munlock and munlockall still work.
  as->SetRlimitMemlock(0);
  EXPECT_EQ(as->Mlock(kBase, P).error, EPERM);
  EXPECT_EQ(as->Mlockall(MCL_FUTURE).error, EPERM);
  EXPECT_EQ(as->Mmap(kBase + 64 * P, P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_LOCKED).error,
            EPERM);
  EXPECT_TRUE(as->Munlock(kBase, P).ok());
  EXPECT_TRUE(as->Munlockall().ok());
  // With CAP_IPC_LOCK the limit does not apply.
  as->SetCapIpcLock(true);
  EXPECT_TRUE(as->Mlock(kBase, 16 * P).ok());
  EXPECT_EQ(as->Counters().locked_vm_pages, 16u);
  EXPECT_EQ(as->Mlockall(0).error, EINVAL);
  EXPECT_EQ(as->Mlockall(MCL_ONFAULT).error, EINVAL);
  EXPECT_EQ(as->Mlockall(8).error, EINVAL);
  EXPECT_EQ(as->Validate(), "");
  testing_util::ExpectAllFramesFreed(as, frames);
}

TEST(Mlock, MlockallCurrentOnfaultAndFuture) {
  FrameAllocator frames;
  SpaceOptions o;
  o.cap_ipc_lock = true;
  auto as = std::make_unique<AddressSpace>(frames, o);
  ASSERT_TRUE(as->Mmap(kBase, 4 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  ASSERT_TRUE(as->Mmap(kBase + 8 * P, 4 * P, PROT_READ, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED).ok());
  ASSERT_TRUE(as->Mlockall(MCL_CURRENT | MCL_ONFAULT).ok());
  for (const VmaInfo& v : as->Maps()) {
    EXPECT_EQ(v.flags & VM_LOCKED_MASK, uint64_t{VM_LOCKED_MASK});
    EXPECT_EQ(v.rss_pages, 0u);  // onfault: nothing populated
  }
  ASSERT_TRUE(as->Mlockall(MCL_CURRENT).ok());  // now populated, VM_LOCKONFAULT gone
  auto v = as->Maps();
  EXPECT_EQ(v[0].rss_pages, 4u);
  EXPECT_EQ(v[1].rss_pages, 4u);
  EXPECT_FALSE(v[0].flags & VM_LOCKONFAULT);
  EXPECT_EQ(as->Counters().locked_vm_pages, 8u);
  ASSERT_TRUE(as->Mlockall(MCL_FUTURE | MCL_ONFAULT).ok());
  // MCL_FUTURE alone leaves the current VMAs as they are.
  EXPECT_EQ(as->Counters().locked_vm_pages, 8u);
  ASSERT_TRUE(as->Mmap(kBase + 16 * P, 2 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  v = as->Maps(kBase + 16 * P, kBase + 18 * P);
  EXPECT_EQ(AddressSpace::VmFlagsString(v[0].flags), "rd wr mr mw me lo lf ac");
  EXPECT_EQ(v[0].rss_pages, 0u);
  ASSERT_TRUE(as->Munlockall().ok());
  EXPECT_EQ(as->Counters().locked_vm_pages, 0u);
  ASSERT_TRUE(as->Mmap(kBase + 32 * P, P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  EXPECT_FALSE(as->Maps(kBase + 32 * P, kBase + 33 * P)[0].flags & VM_LOCKED);
  EXPECT_EQ(as->Validate(), "");
  testing_util::ExpectAllFramesFreed(as, frames);
}

// mlock/munlock on one thread, faults, MADV_DONTNEED and truncate of a shared file
// mapping on others: every round ends with the space's invariants (locked_vm included)
// and, at the end, every frame given back.
TEST(MlockRace, AgainstFaultsDontneedAndTruncate) {
  FrameAllocator frames;
  FileTable files(frames, "");
  SpaceOptions o;
  o.cap_ipc_lock = true;
  auto as = std::make_unique<AddressSpace>(frames, o);
  const uint64_t kLen = 64 * P;
  auto fid = files.CreateShmem("race", kLen);
  ASSERT_TRUE(fid.ok());
  ASSERT_TRUE(as->Mmap(kBase, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  ASSERT_TRUE(as->Mmap(kBase + kLen, kLen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, files.Get(fid.value)).ok());
  const int rounds = testing_util::Iterations(200);
  for (int round = 0; round < rounds; round++) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> th;
    th.emplace_back([&] {  // faults over both mappings
      uint64_t i = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        as->Fault(kBase + (i % 128) * P, (i & 1) ? AccessType::kWrite : AccessType::kRead);
        i += 7;
      }
    });
    th.emplace_back([&] {  // DONTNEED (EINVAL while locked) on the anonymous half
      uint64_t i = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const SysResult r = as->Madvise(kBase + (i % 60) * P, 4 * P, MADV_DONTNEED);
        EXPECT_TRUE(r.ok() || r.error == EINVAL) << r.error;
        i += 3;
      }
    });
    th.emplace_back([&] {  // truncate the file down and up
      uint64_t i = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        EXPECT_EQ(files.Truncate(fid.value, (i & 1) ? kLen : kLen / 2), 0);
        i++;
      }
    });
    for (int k = 0; k < 8; k++) {
      const uint64_t a = kBase + ((round * 13 + k * 5) % 120) * P;
      const SysResult r = as->Mlock(a, 6 * P, (k & 1) ? MLOCK_ONFAULT : 0);
      // A populate that meets the truncated half of the file gets SIGBUS: ENOMEM.
      EXPECT_TRUE(r.ok() || r.error == ENOMEM) << r.error;
      EXPECT_TRUE(as->Munlock(a + 2 * P, 2 * P).ok());
    }
    stop = true;
    for (auto& t : th) t.join();
    ASSERT_TRUE(as->Munlockall().ok());
    ASSERT_EQ(as->Validate(), "") << "round " << round;
    ASSERT_EQ(as->Counters().locked_vm_pages, 0u);
  }
  ASSERT_TRUE(as->Munmap(kBase, 2 * kLen).ok());
  EXPECT_EQ(as->Validate(), "");
  EXPECT_EQ(files.Close(fid.value), 0);  // the last reference: its page cache goes too
  testing_util::ExpectAllFramesFreed(as, frames);
}

}  // namespace
}  // namespace vmspace
