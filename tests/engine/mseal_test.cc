// SPDX-License-Identifier: Apache-2.0
// mseal(2) (mm/mseal.c, Linux 6.18): argument checks, VM_SEALED ("sl") with splits and
// merges, and the EPERM of munmap (all or nothing: a split at the start stays),
// mprotect (the VMAs before the sealed one keep their change), MAP_FIXED and the
// discarding madvise on read-only anonymous memory; mlock of sealed memory works.
// Values measured on a 6.18 kernel (tests/oracle case 96).
#include <sys/mman.h>

#include <gtest/gtest.h>

#include "engine/address_space.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t kBase = 0x200000000000ull;
constexpr uint64_t P = kPageSize;

TEST(Mseal, ArgumentsAndFlags) {
  FrameAllocator frames;
  auto as = std::make_unique<AddressSpace>(frames);
  ASSERT_TRUE(as->Mmap(kBase, 4 * P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  EXPECT_EQ(as->Mseal(kBase, P, 1).error, EINVAL);
  EXPECT_EQ(as->Mseal(kBase + 1, P).error, EINVAL);
  EXPECT_EQ(as->Mseal(kBase, ~0ull).error, EINVAL);  // rounds up to 0
  EXPECT_EQ(as->Mseal(0xfffffffffffff000ull, 2 * P).error, EINVAL);
  EXPECT_EQ(as->Mseal(kBase - P, 2 * P).error, ENOMEM);  // a hole: nothing sealed
  EXPECT_EQ(as->Mseal(kBase + 3 * P, 2 * P).error, ENOMEM);
  EXPECT_EQ(as->Counters().sealed_pages, 0u);
  EXPECT_TRUE(as->Mseal(kBase, 0).ok());
  ASSERT_TRUE(as->Mseal(kBase + P, P).ok());
  auto v = as->Maps(kBase, kBase + 4 * P);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(AddressSpace::VmFlagsString(v[1].flags), "rd mr mw me sl");
  EXPECT_EQ(v[1].flags & VM_SEALED, uint64_t{VM_SEALED});
  ASSERT_TRUE(as->Mseal(kBase + P, P).ok());  // again: nothing changes
  ASSERT_TRUE(as->Mseal(kBase + 2 * P, P).ok());  // merges with the sealed neighbour
  v = as->Maps(kBase, kBase + 4 * P);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[1].end, kBase + 3 * P);
  EXPECT_EQ(as->Counters().sealed_pages, 2u);
  EXPECT_EQ(as->Validate(), "");
  testing_util::ExpectAllFramesFreed(as, frames);
}

TEST(Mseal, BlockedOperations) {
  FrameAllocator frames;
  SpaceOptions o;
  o.cap_ipc_lock = true;
  auto as = std::make_unique<AddressSpace>(frames, o);
  ASSERT_TRUE(as->Mmap(kBase, 2 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  ASSERT_TRUE(as->Mmap(kBase + 2 * P, 2 * P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  ASSERT_TRUE(as->Mseal(kBase + 2 * P, 2 * P).ok());
  // munmap of [unsealed middle, sealed end): EPERM, nothing unmapped, the first VMA
  // split at the start of the range.
  EXPECT_EQ(as->Munmap(kBase + P, 3 * P).error, EPERM);
  auto v = as->Maps(kBase, kBase + 4 * P);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].end, kBase + P);
  EXPECT_EQ(v[1].start, kBase + P);
  EXPECT_EQ(v[1].end, kBase + 2 * P);
  EXPECT_EQ(as->Munmap(kBase + 3 * P, P).error, EPERM);
  // mprotect across: the unsealed part changes, the sealed one answers EPERM (even for
  // the protection it has).
  EXPECT_EQ(as->Mprotect(kBase, 4 * P, PROT_READ).error, EPERM);
  v = as->Maps(kBase, kBase + 4 * P);
  EXPECT_FALSE(v[0].flags & VM_WRITE);
  EXPECT_EQ(as->Mprotect(kBase + 2 * P, P, PROT_READ).error, EPERM);
  // MAP_FIXED over it.
  EXPECT_EQ(as->Mmap(kBase + 2 * P, P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).error, EPERM);
  // Discarding a read-only anonymous sealed page: EPERM; other advice is fine (only
  // MADV_DONTNEED exists here).
  EXPECT_EQ(as->Madvise(kBase + 2 * P, P, MADV_DONTNEED).error, EPERM);
  // mlock splits a sealed VMA and the parts stay sealed.
  ASSERT_TRUE(as->Mlock(kBase + 3 * P, P).ok());
  v = as->Maps(kBase + 3 * P, kBase + 4 * P);
  EXPECT_EQ(AddressSpace::VmFlagsString(v[0].flags), "rd mr mw me lo sl");
  EXPECT_EQ(as->Counters().sealed_pages, 2u);
  // A writable sealed anonymous VMA may be discarded (the process could zero it anyway).
  ASSERT_TRUE(as->Mmap(kBase + 8 * P, P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  ASSERT_TRUE(as->Mseal(kBase + 8 * P, P).ok());
  EXPECT_TRUE(as->Madvise(kBase + 8 * P, P, MADV_DONTNEED).ok());
  // A shared anonymous mapping is not "anonymous" to madvise: allowed.
  ASSERT_TRUE(as->Mmap(kBase + 10 * P, P, PROT_READ, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED).ok());
  ASSERT_TRUE(as->Mseal(kBase + 10 * P, P).ok());
  EXPECT_TRUE(as->Madvise(kBase + 10 * P, P, MADV_DONTNEED).ok());
  EXPECT_EQ(as->Validate(), "");
  testing_util::ExpectAllFramesFreed(as, frames);
}

}  // namespace
}  // namespace vmspace
