// SPDX-License-Identifier: Apache-2.0
// Locking profiles: parsing and descriptions of the named profiles, and per era the
// structures the profile gives a space (docs/profiles.md "The six eras", LOCKING.md
// "Profiles"): the 6.1 maple tree without RCU mode, the 6.4-6.14 separately allocated
// vma_lock rw_semaphore with VMAs freed by call_rcu, the 6.15 vm_refcnt with VMAs reused
// from a typesafe-by-RCU cache while a lockless reader re-checks what it locked.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "engine/profile.h"
#include "engine/stats.h"
#include "mm.h"
#include "mmap_lock.h"
#include "vma.h"
#include "vma_lock.h"

namespace vmspace {
namespace {

constexpr uint64_t P = 4096;
constexpr uint64_t A = 0x10000000, B = 0x20000000;  // far apart: never merged
constexpr uint64_t RW = VM_READ | VM_WRITE | VM_MAYREAD | VM_MAYWRITE | VM_MAYEXEC;

LockingProfile Parsed(const std::string& spec) {
  LockingProfile p;
  std::string err;
  EXPECT_TRUE(LockingProfile::Parse(spec, &p, &err)) << spec << ": " << err;
  return p;
}

TEST(Profile, NamedProfilesAndTheirSwitches) {
  struct Case {
    const char* name;
    const char* switches;
  } cases[] = {
      {"linux-6.0", "index=rbtree vma_lock=off"},
      {"linux-6.1", "index=maple maple_rcu=off maple_prealloc=worst vma_lock=off"},
      {"linux-6.4", "index=maple maple_prealloc=worst vma_lock=anon vma_lock_form=rwsem"},
      {"linux-6.6", "index=maple vma_lock=around vma_lock_form=rwsem"},
      {"linux-6.7", "index=maple vma_lock=all vma_lock_form=rwsem"},
      {"linux-6.15", "index=maple vma_lock=all vma_lock_form=refcnt"},
  };
  ASSERT_EQ(std::size(cases), static_cast<size_t>(LockingProfile::kNamedCount));
  for (int i = 0; i < LockingProfile::kNamedCount; i++) {
    SCOPED_TRACE(cases[i].name);
    EXPECT_STREQ(LockingProfile::kNames[i], cases[i].name);
    LockingProfile p = Parsed(cases[i].name);
    EXPECT_EQ(p.name, cases[i].name);
    EXPECT_EQ(p.Switches(), cases[i].switches);
    EXPECT_EQ(p.stats_slot(), i);
    EXPECT_EQ(p.Describe().rfind(std::string(cases[i].name) + " (" + cases[i].switches + "): ", 0), 0u)
        << p.Describe();
  }
  EXPECT_EQ(Parsed("").name, "linux-6.15");  // the default
  EXPECT_LT(LockingProfile::kNamedCount, kStatSlots);  // "custom" has a slot too
}

TEST(Profile, DescriptionsNameTheCommitsTheyFollow) {
  EXPECT_NE(Parsed("linux-6.1").Describe().find("3dd4432549415"), std::string::npos);
  EXPECT_NE(Parsed("linux-6.4").Describe().find("mm: separate vma->lock from vm_area_struct"), std::string::npos);
  EXPECT_NE(Parsed("linux-6.4").Describe().find("call_rcu"), std::string::npos);
  EXPECT_NE(Parsed("linux-6.7").Describe().find("mm: handle shared faults under the VMA lock"), std::string::npos);
  EXPECT_NE(Parsed("linux-6.15").Describe().find("mm: make vma cache SLAB_TYPESAFE_BY_RCU"), std::string::npos);
  EXPECT_EQ(Parsed("linux-6.1,maple_rcu=on").Describe(), "custom (index=maple maple_prealloc=worst vma_lock=off)");
  EXPECT_NE(Parsed("linux-6.6").Describe().find("maple_tree: refine mas_preallocate() node calculations"),
            std::string::npos);
}

TEST(Profile, OverridesFindTheNamedProfileOrCustom) {
  EXPECT_EQ(Parsed("linux-6.7,vma_lock_form=refcnt").name, "linux-6.15");
  EXPECT_EQ(Parsed("linux-6.15,vma_lock_form=rwsem").name, "linux-6.7");
  EXPECT_EQ(Parsed("linux-6.7,vma_lock=around").name, "linux-6.6");  // 6.6 and 6.7 differ only there
  EXPECT_EQ(Parsed("linux-6.7,vma_lock=all").name, "linux-6.7");          // unchanged: kept
  EXPECT_EQ(Parsed("linux-6.4,vma_lock=all").name, "custom");  // 6.4 still preallocates the worst case
  EXPECT_EQ(Parsed("linux-6.4,vma_lock=all,maple_prealloc=store").name, "linux-6.7");
  EXPECT_EQ(Parsed("linux-6.4,vma_lock=around,maple_prealloc=store").name, "linux-6.6");
  EXPECT_EQ(Parsed("linux-6.4,vma_lock=off,maple_rcu=off").name, "linux-6.1");
  EXPECT_EQ(Parsed("linux-6.6,vma_lock=anon,maple_prealloc=worst").name, "linux-6.4");
  EXPECT_EQ(Parsed("linux-6.4,maple_prealloc=store").name, "custom");
  EXPECT_EQ(Parsed("linux-6.0,vma_lock_form=rwsem").name, "linux-6.0");  // no VMA lock: no form
  EXPECT_EQ(Parsed("linux-6.15,vma_lock=anon").name, "custom");
  EXPECT_EQ(Parsed("linux-6.15,vma_lock=anon").stats_slot(), LockingProfile::kNamedCount);
  LockingProfile p;
  std::string err;
  EXPECT_FALSE(LockingProfile::Parse("linux-6.1,vma_lock=anon", &p, &err));
  EXPECT_NE(err.find("maple_rcu=on"), std::string::npos) << err;
  EXPECT_FALSE(LockingProfile::Parse("linux-6.5", &p, &err));
  EXPECT_NE(err.find("linux-6.7, linux-6.15"), std::string::npos) << err;
  EXPECT_FALSE(LockingProfile::Parse("linux-6.15,vma_lock_form=mutex", &p, &err));
  EXPECT_NE(err.find("vma_lock_form=rwsem|refcnt"), std::string::npos) << err;
}

/// One space driven through the engine's internals (as vma_test), on this thread.
struct Era : ::testing::Test {
  FrameAllocator frames{1ull << 24};
  std::unique_ptr<MmStruct> mm;
  void Make(const std::string& profile) {
    RcuThread();
    SpaceOptions opts;
    opts.profile = Parsed(profile);
    mm = std::make_unique<MmStruct>(frames, opts);
  }
  void TearDown() override {
    mm.reset();
    RcuBarrier();  // the call_rcu frees of the rwsem form
  }
  /// A private anonymous one-page VMA at `at` with an anon_vma (eligible for the VMA
  /// lock in every era), in a write section of its own.
  Vma* Map(uint64_t at) {
    MmapWriteLock(*mm);
    Vma* v = VmaAllocLocked(*mm);
    v->vm_start = at;
    v->vm_end = at + P;
    v->vm_flags = RW;
    v->vm_pgoff = at >> kPageShift;
    AnonVma* a = new AnonVma{at};
    v->set_anon(a);
    PutAnonVma(a);
    VmaInsertLocked(*mm, v);
    MmapWriteUnlock(*mm);
    return v;
  }
  void Unmap(uint64_t at) {
    MmapWriteLock(*mm);
    ASSERT_EQ(DoVmiMunmapUnlock(*mm, at, at + P), 0);
  }
};

TEST_F(Era, Linux61MapleTreeIsNotReadableUnderRcu) {
  Make("linux-6.1");
  Vma* v = Map(A);
  RcuReadGuard g;
  EXPECT_EQ(VmaLookupRcu(*mm, A), nullptr);  // no RCU mode: only mmap_lock holders may walk it
  mm->mmap_lock.LockRead();
  EXPECT_EQ(FindVmaLocked(*mm, A), v);
  mm->mmap_lock.UnlockRead();
}

TEST_F(Era, Linux64FreesAVmaOnlyAfterAGracePeriodAndItsLockIsSeparate) {
  Make("linux-6.4");
  RcuReadGuard g;  // a lockless reader that found the VMA before the munmap
  Vma* v = Map(A);
  ASSERT_EQ(VmaLookupRcu(*mm, A), v);
  ASSERT_NE(v->vm_lock, nullptr);
  const char* lock = reinterpret_cast<const char*>(v->vm_lock);
  const char* vma = reinterpret_cast<const char*>(v);
  EXPECT_TRUE(lock + sizeof(VmaLock) <= vma || lock >= vma + sizeof(Vma)) << "vma_lock inside the VMA";
  Unmap(A);
  Vma* w = Map(B);
  EXPECT_NE(w, v);  // v waits for the grace period our reader holds up
  EXPECT_NE(w->vm_lock, v->vm_lock);
  EXPECT_TRUE(VmaIsDetached(*mm, v));
  EXPECT_EQ(v->vm_start, A);  // still the old VMA, intact
  // The reader locks the stale VMA (its rwsem is free, the section is over), sees it
  // detached: VMA_LOCK_MISS, look up again.
  EXPECT_EQ(LockFoundVmaRcu(*mm, v, A), VmaLockResult::kMiss);
}

TEST_F(Era, Linux64ReusesAVmaAndItsLockFromTheSpaceCacheAfterItsGracePeriod) {
  Make("linux-6.4");
  const int64_t one = static_cast<int64_t>(sizeof(Vma) + sizeof(VmaLock));
  Vma* v = Map(A);
  VmaLock* lock = v->vm_lock;
  EXPECT_EQ(frames.budget().usage(MemKind::kVmas), one);
  Unmap(A);
  EXPECT_EQ(v->anon(), nullptr);  // released at once (remove_vma), the memory waits
  EXPECT_EQ(mm->vma_cache.in_flight(), 1u);  // in the space's batch, not queued yet
  RcuBarrier();
  EXPECT_EQ(frames.budget().usage(MemKind::kVmas), one);  // no grace period asked for yet
  mm->FlushDeferredFrees(true);  // queues the batch, hands it to call_rcu (an idle space)
  RcuBarrier();                  // the callback ran: uncharged, marked free
  EXPECT_EQ(frames.budget().usage(MemKind::kVmas), 0);
  EXPECT_EQ(mm->vma_cache.in_flight(), 1u);  // until an allocation takes it back
  EXPECT_EQ(mm->vma_cache.free_count(), 0u);
  Vma* w = Map(B);
  EXPECT_EQ(w, v);  // kmem_cache_alloc after kmem_cache_free: the same object
  EXPECT_EQ(w->vm_lock, lock);
  EXPECT_EQ(w->vm_start, B);
  EXPECT_FALSE(VmaIsDetached(*mm, w));
  EXPECT_EQ(mm->vma_cache.in_flight(), 0u);
  EXPECT_EQ(frames.budget().usage(MemKind::kVmas), one);
}

TEST_F(Era, Linux64PollsItsBatchOfFreedVmasAfterTheNextRcuTick) {
  Make("linux-6.4");
  g_rcu_tick_test_value.store(100);  // the RCU tick stands still until the test moves it
  const uint64_t n = VmaCache::kRcuBatch + 3;
  const int64_t one = static_cast<int64_t>(sizeof(Vma) + sizeof(VmaLock));
  std::vector<Vma*> vmas;
  for (uint64_t i = 0; i < n; i++) vmas.push_back(Map(A + 2 * i * P));  // not adjacent: no merge
  for (uint64_t i = 0; i < n; i++) Unmap(A + 2 * i * P);
  auto in_first_batch = [&](Vma* v) {
    return std::find(vmas.begin(), vmas.begin() + VmaCache::kRcuBatch, v) != vmas.begin() + VmaCache::kRcuBatch;
  };
  // The first kRcuBatch were queued as one batch, 3 wait for more; the batch asks for
  // its grace period only once the tick has moved on, and nothing went to call_rcu.
  RcuBarrier();
  EXPECT_EQ(frames.budget().usage(MemKind::kVmas), static_cast<int64_t>(n) * one);
  EXPECT_EQ(mm->vma_cache.in_flight(), n);
  EXPECT_TRUE(mm->vma_cache.rcu_waiting());
  Vma* w = Map(B);
  EXPECT_FALSE(in_first_batch(w));  // a new VMA: the batch is not back
  EXPECT_EQ(mm->vma_cache.in_flight(), n);
  SynchronizeRcu();  // no grace period left pending by earlier work: the next one starts when asked
  g_rcu_tick_test_value.store(101);
  // The next allocation asks for the batch's grace period; no thread is in a read
  // section, so it has ended at once: the batch comes back whole, uncharged.
  Vma* x = Map(B + 2 * P);
  EXPECT_TRUE(in_first_batch(x));
  EXPECT_EQ(mm->vma_cache.free_count(), VmaCache::kRcuBatch - 1);
  EXPECT_EQ(mm->vma_cache.in_flight(), 3u);
  EXPECT_FALSE(mm->vma_cache.rcu_waiting());  // the 3 are not queued yet
  EXPECT_EQ(frames.budget().usage(MemKind::kVmas), (3 + 2) * one);  // the 3 waiting, w and x
  g_rcu_tick_test_value.store(0);
}

TEST_F(Era, Linux64BatchesPastTheTickShareOneGracePeriod) {
  Make("linux-6.4");
  g_rcu_tick_test_value.store(100);
  const uint64_t n = 3 * VmaCache::kRcuBatch;
  for (uint64_t i = 0; i < n; i++) Map(A + 2 * i * P);
  // Batches queued: three full ones at least (full gathers queue the batch being filled
  // too); the last may still be filling.
  for (uint64_t i = 0; i < n; i++) Unmap(A + 2 * i * P);
  EXPECT_EQ(mm->vma_cache.in_flight(), n);
  EXPECT_TRUE(mm->vma_cache.rcu_waiting());
  SynchronizeRcu();  // no grace period left pending by earlier work: the next one starts when asked
  g_rcu_tick_test_value.store(101);
  // One allocation asks one grace period for all of them and finds it ended (no
  // reader): all come back at once. Asking batch by batch, a backlog would drain one
  // batch per poll, no faster than munmaps fill them, and never shrink.
  Map(B);
  EXPECT_FALSE(mm->vma_cache.rcu_waiting());
  const uint64_t filling = mm->vma_cache.in_flight();  // the batch not yet queued
  EXPECT_LT(filling, VmaCache::kRcuBatch);
  EXPECT_EQ(mm->vma_cache.free_count(), n - filling - 1);
  const int64_t one = static_cast<int64_t>(sizeof(Vma) + sizeof(VmaLock));
  EXPECT_EQ(frames.budget().usage(MemKind::kVmas), static_cast<int64_t>(filling + 1) * one);
  g_rcu_tick_test_value.store(0);
}

TEST_F(Era, Linux64BatchWaitsForAReaderAfterTheTick) {
  Make("linux-6.4");
  g_rcu_tick_test_value.store(100);
  const int64_t one = static_cast<int64_t>(sizeof(Vma) + sizeof(VmaLock));
  std::vector<Vma*> vmas;
  for (uint64_t i = 0; i < VmaCache::kRcuBatch; i++) vmas.push_back(Map(A + 2 * i * P));
  std::atomic<bool> in_section{false}, leave{false};
  std::thread reader([&] {  // a lockless reader that may have found any of them
    RcuReadGuard g;
    in_section.store(true);
    while (!leave.load()) std::this_thread::yield();
  });
  while (!in_section.load()) std::this_thread::yield();
  for (uint64_t i = 0; i < VmaCache::kRcuBatch; i++) Unmap(A + 2 * i * P);  // one full batch
  g_rcu_tick_test_value.store(101);
  for (int i = 0; i < 4; i++) {  // each allocation polls; the reader holds the grace period up
    Vma* w = Map(B + 2 * static_cast<uint64_t>(i) * P);
    EXPECT_EQ(std::find(vmas.begin(), vmas.end(), w), vmas.end());
  }
  EXPECT_EQ(frames.budget().usage(MemKind::kVmas), static_cast<int64_t>(VmaCache::kRcuBatch + 4) * one);
  leave.store(true);
  reader.join();
  SynchronizeRcu();  // the grace period the batch waits for has ended, once the reader left
  Vma* x = Map(B + 8 * P);  // the batch comes back
  EXPECT_NE(std::find(vmas.begin(), vmas.end(), x), vmas.end());
  EXPECT_EQ(frames.budget().usage(MemKind::kVmas), 5 * one);
  g_rcu_tick_test_value.store(0);
}

TEST_F(Era, Linux64SpaceDestroyedBeforeTheGracePeriodLeavesTheVmaToItsCallback) {
  Make("linux-6.4");
  Map(A);
  {
    RcuReadGuard g;  // holds the grace period up
    Unmap(A);
    mm->FlushDeferredFrees(true);  // the batch is queued
    mm.reset();
    // The VMA is still charged: its callback (which deletes it) has not run.
    EXPECT_EQ(frames.budget().usage(MemKind::kVmas), static_cast<int64_t>(sizeof(Vma) + sizeof(VmaLock)));
  }
  RcuBarrier();  // (a leak or a double free shows in the sanitizer builds)
  EXPECT_EQ(frames.budget().usage(MemKind::kVmas), 0);
}

TEST_F(Era, Linux615ReusesAFreedVmaAtOnceAndTheReaderRechecksIt) {
  Make("linux-6.15");
  RcuReadGuard g;
  Vma* v = Map(A);
  ASSERT_EQ(VmaLookupRcu(*mm, A), v);
  EXPECT_EQ(v->vm_lock, nullptr);  // the lock is vm_refcnt, in the VMA
  Unmap(A);
  Vma* w = Map(B);
  EXPECT_EQ(w, v);  // the same memory, reused inside our reader's grace period
  EXPECT_EQ(v->vm_start, B);
  // The reader that found it at A takes its reference (it is attached again), then the
  // range re-check fails: VMA_LOCK_ABORT.
  EXPECT_EQ(LockFoundVmaRcu(*mm, v, A), VmaLockResult::kAbort);
  EXPECT_EQ(v->vm_refcnt.load(), 1u);  // the reader's reference was dropped
  // Found at B it is the right VMA and stays locked.
  EXPECT_EQ(LockFoundVmaRcu(*mm, v, B), VmaLockResult::kOk);
  EXPECT_EQ(v->vm_refcnt.load(), 2u);
  VmaEndRead(*mm, v);
}

TEST_F(Era, Linux615ReaderOfAFreedVmaFailsUntilItIsReused) {
  Make("linux-6.15");
  RcuReadGuard g;
  Vma* v = Map(A);
  Unmap(A);
  EXPECT_EQ(v->vm_refcnt.load(), 0u);  // detached, in the cache
  EXPECT_EQ(LockFoundVmaRcu(*mm, v, A), VmaLockResult::kMiss);
}

/// A writer's vma_start_write waits for a reader in each form: on the VMA's own
/// rw_semaphore (rwsem) or on vm_refcnt (refcnt).
class EraWriterWaits : public Era, public ::testing::WithParamInterface<const char*> {};

TEST_P(EraWriterWaits, ForTheReaderOfItsForm) {
  Make(GetParam());
  Vma* v = Map(A);
  {
    RcuReadGuard g;
    ASSERT_EQ(LockFoundVmaRcu(*mm, v, A), VmaLockResult::kOk);
  }
  std::atomic<bool> written{false};
  std::thread writer([&] {
    RcuThread();
    MmapWriteLock(*mm);
    VmaStartWriteLocked(*mm, v);
    written.store(true);
    MmapWriteUnlock(*mm);
  });
  // Wait (a hang is the failure) until the writer is visibly waiting for our reader.
  const bool rwsem = mm->vma_form == VmaForm::kRwsem;
  while (rwsem ? v->vm_lock->lock.waiters() == 0 : !(v->vm_refcnt.load() & Vma::kVmaLockOffset))
    std::this_thread::yield();
  EXPECT_FALSE(written.load());
  VmaEndRead(*mm, v);
  writer.join();
  EXPECT_TRUE(written.load());
}

INSTANTIATE_TEST_SUITE_P(Forms, EraWriterWaits, ::testing::Values("linux-6.7", "linux-6.15"),
                         [](const auto& info) { return std::string(info.param) == "linux-6.7" ? "rwsem" : "refcnt"; });

}  // namespace
}  // namespace vmspace
