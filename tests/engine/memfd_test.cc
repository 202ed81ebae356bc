// SPDX-License-Identifier: Apache-2.0
// memfd seals (mm/memfd.c, the shmem seal checks; Linux 6.18) and descriptors with their
// own access mode: MFD_ALLOW_SEALING, F_ADD_SEALS / F_GET_SEALS errors, each seal's
// EPERM / EBUSY / EACCES, FileTable::Reopen, O_WRONLY and mmap's EACCES, st_nlink.
// Values measured on a 6.18 kernel (tests/oracle cases 97-9f).
#include <fcntl.h>
#include <sys/mman.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "engine/address_space.h"
#include "engine/file.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t kBase = 0x200000000000ull;
constexpr uint64_t P = kPageSize;

TEST(Memfd, SealRules) {
  FrameAllocator frames;
  FileTable files(frames, "");
  auto plain = files.CreateShmem("plain", P);
  auto s = files.CreateShmem("s", 3 * P, MFD_ALLOW_SEALING);
  ASSERT_TRUE(plain.ok() && s.ok());
  EXPECT_EQ(files.CreateShmem("bad", P, 0x40).error, EINVAL);
  EXPECT_EQ(files.CreateShmem("bad", P, MFD_EXEC | MFD_NOEXEC_SEAL).error, EINVAL);
  EXPECT_EQ(files.GetSeals(plain.value).value, uint64_t{F_SEAL_SEAL});
  EXPECT_EQ(files.AddSeals(plain.value, F_SEAL_WRITE), EPERM);
  EXPECT_EQ(files.GetSeals(s.value).value, 0u);
  EXPECT_EQ(files.AddSeals(s.value, 0x40), EINVAL);
  EXPECT_EQ(files.AddSeals(12345, F_SEAL_WRITE), EBADF);
  FileStat st;
  ASSERT_TRUE(files.Stat(s.value, &st).ok());
  EXPECT_EQ(st.nlink, 0u);  // a memfd is unlinked
  // F_SEAL_WRITE with a writable shared mapping: EBUSY; after munmap it works.
  auto as = std::make_unique<AddressSpace>(frames);
  ASSERT_TRUE(as->Mmap(kBase, P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, files.Get(s.value)).ok());
  EXPECT_EQ(files.AddSeals(s.value, F_SEAL_WRITE), EBUSY);
  // A private writable mapping does not count.
  ASSERT_TRUE(as->Munmap(kBase, P).ok());
  ASSERT_TRUE(as->Mmap(kBase, P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, 0, files.Get(s.value)).ok());
  // A read-only reopen may read the seals but not add any.
  auto ro = files.Reopen(s.value, O_RDONLY);
  ASSERT_TRUE(ro.ok());
  EXPECT_EQ(files.AddSeals(ro.value, F_SEAL_GROW), EPERM);
  ASSERT_EQ(files.AddSeals(s.value, F_SEAL_WRITE), 0);
  EXPECT_EQ(files.GetSeals(ro.value).value, uint64_t{F_SEAL_WRITE});
  char b[8] = "abcdefg";
  EXPECT_EQ(files.Write(s.value, 0, b, 1).error, EPERM);
  EXPECT_EQ(as->Mmap(kBase + 2 * P, P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, files.Get(s.value)).error,
            EPERM);
  // A shared read-only mapping is fine but cannot become writable.
  ASSERT_TRUE(as->Mmap(kBase + 2 * P, P, PROT_READ, MAP_SHARED | MAP_FIXED, 0, files.Get(s.value)).ok());
  EXPECT_EQ(AddressSpace::VmFlagsString(as->Maps(kBase + 2 * P, kBase + 3 * P)[0].flags), "rd sh mr me ms");
  EXPECT_EQ(as->Mprotect(kBase + 2 * P, P, PROT_READ | PROT_WRITE).error, EACCES);
  // The private writable mapping still writes (COW).
  EXPECT_TRUE(as->Fault(kBase, AccessType::kWrite).outcome != FaultOutcome::kSigsegv);
  // F_SEAL_SEAL ends the additions.
  ASSERT_EQ(files.AddSeals(s.value, F_SEAL_SEAL), 0);
  EXPECT_EQ(files.AddSeals(s.value, F_SEAL_GROW), EPERM);
  // Shrink/grow seals.
  auto g = files.CreateShmem("g", P, MFD_ALLOW_SEALING);
  ASSERT_EQ(files.AddSeals(g.value, F_SEAL_GROW), 0);
  EXPECT_EQ(files.Write(g.value, P - 4, b, 8).value, 4u);  // up to EOF's page chunk
  EXPECT_EQ(files.Write(g.value, P, b, 2).error, EPERM);
  EXPECT_EQ(files.Truncate(g.value, 2 * P), EPERM);
  EXPECT_EQ(files.Truncate(g.value, P / 2), 0);
  ASSERT_EQ(files.AddSeals(g.value, F_SEAL_SHRINK), 0);
  EXPECT_EQ(files.Truncate(g.value, 0), EPERM);
  EXPECT_EQ(files.Truncate(g.value, P / 2), 0);  // the same size is no change
  // F_SEAL_FUTURE_WRITE: existing writable mappings stay, new ones are refused.
  auto fw = files.CreateShmem("fw", 2 * P, MFD_ALLOW_SEALING);
  ASSERT_TRUE(as->Mmap(kBase + 4 * P, P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, files.Get(fw.value)).ok());
  ASSERT_EQ(files.AddSeals(fw.value, F_SEAL_FUTURE_WRITE), 0);
  EXPECT_EQ(as->Fault(kBase + 4 * P, AccessType::kWrite).outcome, FaultOutcome::kMinor);
  EXPECT_EQ(files.Write(fw.value, 0, b, 1).error, EPERM);
  EXPECT_EQ(as->Mmap(kBase + 6 * P, P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, files.Get(fw.value)).error,
            EPERM);
  // F_SEAL_EXEC on an executable memfd implies the write seals, EBUSY included.
  auto ex = files.CreateShmem("ex", P, MFD_ALLOW_SEALING);
  ASSERT_TRUE(as->Mmap(kBase + 8 * P, P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, files.Get(ex.value)).ok());
  EXPECT_EQ(files.AddSeals(ex.value, F_SEAL_EXEC), EBUSY);
  EXPECT_EQ(files.GetSeals(ex.value).value, 0u);
  ASSERT_TRUE(as->Munmap(kBase + 8 * P, P).ok());
  ASSERT_EQ(files.AddSeals(ex.value, F_SEAL_EXEC), 0);
  EXPECT_EQ(files.GetSeals(ex.value).value, 0x3eu);
  auto nx = files.CreateShmem("nx", P, MFD_NOEXEC_SEAL);
  EXPECT_EQ(files.GetSeals(nx.value).value, uint64_t{F_SEAL_EXEC});
  ASSERT_EQ(files.AddSeals(nx.value, F_SEAL_EXEC | F_SEAL_SHRINK), 0);
  EXPECT_EQ(files.GetSeals(nx.value).value, uint64_t{F_SEAL_EXEC | F_SEAL_SHRINK});
  EXPECT_EQ(as->Validate(), "");
  as.reset();
}

TEST(Memfd, AccessModesAndReopen) {
  FrameAllocator frames;
  testing_util::ScratchDir dir;
  { std::ofstream(dir.path + "/f") << std::string(2 * P, 'x'); }
  FileTable files(frames, dir.path);
  auto wo = files.Open("f", {.access = O_WRONLY});
  auto rw = files.Open("f", {.write = true});
  ASSERT_TRUE(wo.ok() && rw.ok());
  EXPECT_EQ(files.Open("f", {.access = 3}).error, EINVAL);
  EXPECT_EQ(files.Open("f", {.access = O_RDONLY, .truncate = true}).error, EINVAL);
  auto as = std::make_unique<AddressSpace>(frames);
  // Not opened for read: every mapping is EACCES.
  EXPECT_EQ(as->Mmap(kBase, P, PROT_READ, MAP_PRIVATE | MAP_FIXED, 0, files.Get(wo.value)).error, EACCES);
  EXPECT_EQ(as->Mmap(kBase, P, PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, files.Get(wo.value)).error, EACCES);
  char c = 0;
  EXPECT_EQ(files.Read(wo.value, 0, &c, 1).error, EBADF);
  EXPECT_EQ(files.Write(wo.value, 0, "y", 1).value, 1u);
  EXPECT_EQ(files.GetSeals(rw.value).error, EINVAL);  // a host file has no seals
  EXPECT_EQ(files.AddSeals(rw.value, F_SEAL_SEAL), EINVAL);
  EXPECT_EQ(files.AddSeals(wo.value, F_SEAL_SEAL), EINVAL);
  FileStat st;
  ASSERT_TRUE(files.Stat(rw.value, &st).ok());
  EXPECT_EQ(st.nlink, 1u);
  // A read-only reopen shares the page cache; MAP_SHARED PROT_WRITE of it is EACCES.
  auto ro = files.Reopen(rw.value, O_RDONLY);
  ASSERT_TRUE(ro.ok());
  EXPECT_EQ(files.Reopen(rw.value, 7).error, EINVAL);
  EXPECT_EQ(files.Reopen(999, O_RDONLY).error, EBADF);
  EXPECT_EQ(as->Mmap(kBase, P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, files.Get(ro.value)).error, EACCES);
  ASSERT_TRUE(files.Read(ro.value, 0, &c, 1).ok());
  EXPECT_EQ(c, 'y');
  EXPECT_EQ(files.Truncate(ro.value, 0), EINVAL);
  ASSERT_TRUE(files.Stat(ro.value, &st).ok());
  EXPECT_EQ(st.open_handles, 3u);
  as.reset();
}

}  // namespace
}  // namespace vmspace
