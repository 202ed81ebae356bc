// SPDX-License-Identifier: Apache-2.0
// madvise(2): every advice's checks and effects (mm/madvise.c, Linux 6.18), with the
// errno each gave on the reference kernel (6.18, KSM and THP built in, no
// CONFIG_MEMORY_FAILURE).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "engine/file.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = kPageSize;
constexpr uint64_t kBase = 0x200000000000ull;

class MadviseTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(as_->Validate(), "");
    as_.reset();
    files_.reset();
    RcuBarrier();
    EXPECT_EQ(frames_.in_use_frames(), 0) << "frames leaked (>0) or freed twice (<0)";
  }
  uint64_t Anon(uint64_t off, uint64_t len, int prot = PROT_READ | PROT_WRITE, int flags = MAP_PRIVATE) {
    SysResult r = as_->Mmap(kBase + off, len, prot, flags | MAP_ANONYMOUS | MAP_FIXED);
    EXPECT_EQ(r.error, 0);
    return r.value;
  }
  std::shared_ptr<OpenFile> HostFile(const std::string& name, uint64_t size, bool write = true) {
    const std::string path = dir_.path + "/" + name;
    int fd = open(path.c_str(), O_RDWR | O_CREAT, 0644);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
    close(fd);
    SysResult r = files_->Open(name, {.write = write});
    EXPECT_EQ(r.error, 0);
    ids_.push_back(r.value);
    return files_->Get(r.value);
  }
  int Read(uint64_t off) {
    uint8_t b;
    CopyResult r = as_->ReadMemory(kBase + off, &b, 1);
    return r.ok() ? b : -static_cast<int>(r.stop.outcome);
  }
  bool Write(uint64_t off, uint8_t v) { return as_->WriteMemory(kBase + off, &v, 1).ok(); }
  int Adv(uint64_t off, uint64_t len, int advice) { return as_->Madvise(kBase + off, len, advice).error; }
  std::string Flags(uint64_t off) {
    auto v = as_->Maps(kBase + off, kBase + off + 1);
    return v.empty() ? "-" : AddressSpace::VmFlagsString(v[0].flags);
  }

  FrameAllocator frames_;
  testing_util::ScratchDir dir_;
  std::unique_ptr<FileTable> files_ = std::make_unique<FileTable>(frames_, dir_.path);
  std::vector<uint64_t> ids_;
  std::unique_ptr<AddressSpace> as_ = std::make_unique<AddressSpace>(frames_);
};

TEST_F(MadviseTest, ArgumentChecksInTheKernelsOrder) {
  Anon(0, 3 * P);
  EXPECT_EQ(Adv(1, P, 99), EINVAL);          // advice first
  EXPECT_EQ(Adv(0, 0, 99), EINVAL);          // even with len 0
  EXPECT_EQ(Adv(0, P, MADV_HWPOISON), EINVAL);  // no CONFIG_MEMORY_FAILURE
  EXPECT_EQ(Adv(0, P, MADV_SOFT_OFFLINE), EINVAL);
  EXPECT_EQ(Adv(0, P, 5), EINVAL);
  EXPECT_EQ(Adv(1, P, MADV_DONTNEED), EINVAL);  // unaligned
  EXPECT_EQ(Adv(0, ~0ull, MADV_DONTNEED), EINVAL);  // rounds to 0
  EXPECT_EQ(as_->Madvise(0x7ffffffff000ull, 0xffff900000000000ull, MADV_DONTNEED).error, EINVAL);  // wraps
  EXPECT_EQ(as_->Madvise(0x1000, 0, MADV_DONTNEED).error, 0);  // len 0: nothing to do
  EXPECT_EQ(as_->Madvise(0x100000000000ull, P, MADV_DONTNEED).error, ENOMEM);
  EXPECT_EQ(as_->Madvise(0x800000000000ull, P, MADV_NORMAL).error, ENOMEM);
  EXPECT_EQ(Adv(0, P, MADV_COLLAPSE), EINVAL);  // no aligned 2 MiB in the VMA
}

TEST_F(MadviseTest, PerVmaErrnosAsMeasured) {
  // private anonymous, read-write
  Anon(0, 4 * P);
  for (int a : {MADV_NORMAL, MADV_RANDOM, MADV_SEQUENTIAL, MADV_WILLNEED, MADV_DONTNEED, MADV_FREE, MADV_DONTFORK,
                MADV_DOFORK, MADV_MERGEABLE, MADV_UNMERGEABLE, MADV_HUGEPAGE, MADV_NOHUGEPAGE, MADV_DONTDUMP,
                MADV_DODUMP, MADV_WIPEONFORK, MADV_KEEPONFORK, MADV_COLD, MADV_PAGEOUT, MADV_POPULATE_READ,
                MADV_POPULATE_WRITE, MADV_DONTNEED_LOCKED, MADV_GUARD_INSTALL, MADV_GUARD_REMOVE})
    EXPECT_EQ(Adv(0, 4 * P, a), 0) << a;
  EXPECT_EQ(Adv(0, 4 * P, MADV_REMOVE), EINVAL);
  // shared anonymous (shmem)
  Anon(0x100000, 4 * P, PROT_READ | PROT_WRITE, MAP_SHARED);
  EXPECT_EQ(Adv(0x100000, 4 * P, MADV_FREE), EINVAL);
  EXPECT_EQ(Adv(0x100000, 4 * P, MADV_WIPEONFORK), EINVAL);
  EXPECT_EQ(Adv(0x100000, 4 * P, MADV_REMOVE), 0);
  // locked
  Anon(0x200000, 4 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_LOCKED);
  for (int a : {MADV_DONTNEED, MADV_FREE, MADV_REMOVE, MADV_COLD, MADV_PAGEOUT, MADV_GUARD_INSTALL})
    EXPECT_EQ(Adv(0x200000, 4 * P, a), EINVAL) << a;
  for (int a : {MADV_DONTNEED_LOCKED, MADV_GUARD_REMOVE, MADV_WILLNEED, MADV_POPULATE_WRITE})
    EXPECT_EQ(Adv(0x200000, 4 * P, a), 0) << a;
  // PROT_NONE / read-only populate
  Anon(0x300000, 2 * P, PROT_NONE);
  EXPECT_EQ(Adv(0x300000, 2 * P, MADV_POPULATE_READ), EINVAL);
  Anon(0x310000, 2 * P, PROT_READ);
  EXPECT_EQ(Adv(0x310000, 2 * P, MADV_POPULATE_WRITE), EINVAL);
  EXPECT_EQ(Adv(0x310000, 2 * P, MADV_POPULATE_READ), 0);
  // files: private EACCES for REMOVE, a shared mapping of a read-only handle too
  auto f = HostFile("f", 16 * P);
  ASSERT_EQ(as_->Mmap(kBase + 0x400000, 4 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, 0, f).error, 0);
  EXPECT_EQ(Adv(0x400000, 4 * P, MADV_REMOVE), EACCES);
  EXPECT_EQ(Adv(0x400000, 4 * P, MADV_FREE), EINVAL);
  EXPECT_EQ(Adv(0x400000, 4 * P, MADV_WIPEONFORK), EINVAL);
  auto ro = HostFile("g", 16 * P, false);
  ASSERT_EQ(as_->Mmap(kBase + 0x500000, 4 * P, PROT_READ, MAP_SHARED | MAP_FIXED, 0, ro).error, 0);
  EXPECT_EQ(Adv(0x500000, 4 * P, MADV_REMOVE), EACCES);
  EXPECT_EQ(Adv(0x500000, 4 * P, MADV_POPULATE_WRITE), EINVAL);
  // beyond EOF: SIGBUS -> EFAULT, the pages before it populated
  auto small = HostFile("small", P);
  ASSERT_EQ(as_->Mmap(kBase + 0x600000, 4 * P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, small).error, 0);
  EXPECT_EQ(Adv(0x600000, 4 * P, MADV_POPULATE_READ), EFAULT);
  EXPECT_EQ(as_->Maps(kBase + 0x600000, kBase + 0x600001)[0].rss_pages, 1u);
}

TEST_F(MadviseTest, HoleIsEnomemButTheAdviceApplies) {
  Anon(0, 3 * P);
  ASSERT_TRUE(Write(0, 7));
  ASSERT_TRUE(Write(2 * P, 8));
  ASSERT_EQ(as_->Munmap(kBase + P, P).error, 0);
  EXPECT_EQ(Adv(0, 3 * P, MADV_DONTNEED), ENOMEM);
  EXPECT_EQ(Read(0), 0);
  EXPECT_EQ(Read(2 * P), 0);
  EXPECT_EQ(Adv(0, 3 * P, MADV_RANDOM), ENOMEM);
  EXPECT_EQ(Flags(0), "rd wr mr mw me rr ac");
  EXPECT_EQ(Flags(2 * P), "rd wr mr mw me rr ac");
  EXPECT_EQ(Adv(0, 3 * P, MADV_REMOVE), EINVAL);  // a VMA error wins over the hole
  // populate stops at the hole: ENOMEM, the first page populated
  EXPECT_EQ(Adv(0, 3 * P, MADV_POPULATE_WRITE), ENOMEM);
  EXPECT_EQ(as_->Counters().anon_pages, 1u);
}

TEST_F(MadviseTest, FlagAdvicesSplitAndMerge) {
  Anon(0, 4 * P);
  EXPECT_EQ(Adv(P, P, MADV_SEQUENTIAL), 0);
  EXPECT_EQ(as_->Counters().map_count, 3u);
  EXPECT_EQ(Flags(P), "rd wr mr mw me sr ac");
  EXPECT_EQ(Adv(P, 2 * P, MADV_RANDOM), 0);  // sr replaced by rr on [P, 3P)
  EXPECT_EQ(Flags(P), "rd wr mr mw me rr ac");
  EXPECT_EQ(Flags(2 * P), "rd wr mr mw me rr ac");
  EXPECT_EQ(as_->Counters().map_count, 3u);
  EXPECT_EQ(Adv(0, 4 * P, MADV_NORMAL), 0);  // all merge back
  EXPECT_EQ(as_->Counters().map_count, 1u);
  EXPECT_EQ(Adv(0, 4 * P, MADV_DONTFORK), 0);
  EXPECT_EQ(Adv(0, 4 * P, MADV_WIPEONFORK), 0);
  EXPECT_EQ(Adv(0, 4 * P, MADV_DONTDUMP), 0);
  EXPECT_EQ(Adv(0, 4 * P, MADV_HUGEPAGE), 0);
  EXPECT_EQ(Adv(0, 4 * P, MADV_MERGEABLE), 0);
  EXPECT_EQ(Flags(0), "rd wr mr mw me dc ac wf dd hg mg");
  EXPECT_EQ(Adv(0, 4 * P, MADV_NOHUGEPAGE), 0);
  EXPECT_EQ(Adv(0, 4 * P, MADV_UNMERGEABLE), 0);
  EXPECT_EQ(Adv(0, 4 * P, MADV_DOFORK), 0);
  EXPECT_EQ(Adv(0, 4 * P, MADV_KEEPONFORK), 0);
  EXPECT_EQ(Adv(0, 4 * P, MADV_DODUMP), 0);
  EXPECT_EQ(Flags(0), "rd wr mr mw me ac nh");
  // shared memory is never KSM-mergeable: the advice is ignored
  Anon(0x100000, P, PROT_READ | PROT_WRITE, MAP_SHARED);
  EXPECT_EQ(Adv(0x100000, P, MADV_MERGEABLE), 0);
  EXPECT_EQ(Flags(0x100000), "rd wr sh mr mw me ms");
}

TEST_F(MadviseTest, SplitAtMaxMapCountIsEagain) {
  SpaceOptions o;
  o.max_map_count = 1;
  as_ = std::make_unique<AddressSpace>(frames_, o);
  Anon(0, 4 * P);
  EXPECT_EQ(Adv(P, P, MADV_RANDOM), EAGAIN);
  EXPECT_EQ(Adv(0, 4 * P, MADV_RANDOM), 0);  // the whole VMA: no split
}

TEST_F(MadviseTest, FreeKeepsDataUntilReclaimUnlessWritten) {
  Anon(0, 3 * P);
  for (uint64_t i = 0; i < 3; i++) ASSERT_TRUE(Write(i * P, static_cast<uint8_t>(10 + i)));
  EXPECT_EQ(Adv(0, 3 * P, MADV_FREE), 0);
  EXPECT_EQ(Read(0), 10);  // before pressure: still there, still mapped
  EXPECT_EQ(as_->Counters().anon_pages, 3u);
  ASSERT_TRUE(Write(P, 42));  // written again: kept
  EXPECT_EQ(as_->ReclaimLazyFree(), 2u);
  EXPECT_EQ(as_->Counters().anon_pages, 1u);
  EXPECT_EQ(Read(0), 0);  // dropped: zeros
  EXPECT_EQ(Read(P), 42);
  EXPECT_EQ(Read(2 * P), 0);
  EXPECT_EQ(as_->ReclaimLazyFree(), 0u);
}

// The lazyfree state is the folio's (clean and lazyfree), not the PTE's: mprotect
// rewriting the PTEs keeps it, so reclaim still drops the page (written before, not
// since); a store after mprotect makes it dirty again.
TEST_F(MadviseTest, FreeSurvivesMprotect) {
  Anon(0, 3 * P);
  for (uint64_t i = 0; i < 3; i++) ASSERT_TRUE(Write(i * P, static_cast<uint8_t>(10 + i)));
  EXPECT_EQ(Adv(0, 3 * P, MADV_FREE), 0);
  ASSERT_EQ(as_->Mprotect(kBase, 3 * P, PROT_READ).error, 0);
  ASSERT_EQ(as_->Mprotect(kBase + 2 * P, P, PROT_READ | PROT_WRITE).error, 0);
  ASSERT_TRUE(Write(2 * P, 42));  // written after mprotect: kept
  EXPECT_EQ(Read(0), 10);         // reads do not dirty it
  EXPECT_EQ(as_->ReclaimLazyFree(), 2u);
  EXPECT_EQ(Read(0), 0);
  EXPECT_EQ(Read(P), 0);
  EXPECT_EQ(Read(2 * P), 42);
}

TEST_F(MadviseTest, GuardRegions) {
  Anon(0, 3 * P);
  ASSERT_TRUE(Write(P, 5));
  EXPECT_EQ(Adv(P, P, MADV_GUARD_INSTALL), 0);
  EXPECT_EQ(as_->Counters().anon_pages, 0u);  // the page was zapped
  FaultResult r = as_->Fault(kBase + P, AccessType::kRead);
  EXPECT_EQ(r.outcome, FaultOutcome::kSigsegv);
  EXPECT_EQ(r.sig_code, kSegvMaperr);
  EXPECT_EQ(Adv(0, 3 * P, MADV_DONTNEED), 0);
  EXPECT_EQ(as_->Fault(kBase + P, AccessType::kWrite).outcome, FaultOutcome::kSigsegv);
  EXPECT_EQ(as_->Mprotect(kBase, 3 * P, PROT_READ).error, 0);
  EXPECT_EQ(as_->Fault(kBase + P, AccessType::kRead).outcome, FaultOutcome::kSigsegv);
  EXPECT_EQ(as_->Fault(kBase + P, AccessType::kWrite).sig_code, kSegvAccerr);  // access_error first
  EXPECT_EQ(Adv(0, 3 * P, MADV_POPULATE_READ), EFAULT);
  EXPECT_EQ(Adv(0, 3 * P, MADV_GUARD_REMOVE), 0);
  EXPECT_EQ(Read(P), 0);
  // munmap drops the markers: a new mapping there faults normally
  EXPECT_EQ(Adv(P, P, MADV_GUARD_INSTALL), 0);
  ASSERT_EQ(as_->Munmap(kBase, 3 * P).error, 0);
  Anon(0, 3 * P);
  EXPECT_EQ(Read(P), 0);
  // file-backed VMAs take guards too; the page stays cached
  auto f = HostFile("f", 4 * P);
  ASSERT_EQ(as_->Mmap(kBase + 0x100000, 4 * P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, f).error, 0);
  ASSERT_TRUE(Write(0x100000, 3));
  EXPECT_EQ(Adv(0x100000, P, MADV_GUARD_INSTALL), 0);
  EXPECT_EQ(as_->Fault(kBase + 0x100000, AccessType::kRead).outcome, FaultOutcome::kSigsegv);
  std::vector<uint8_t> v;
  EXPECT_EQ(as_->Mincore(kBase + 0x100000, P, &v).error, 0);
  EXPECT_EQ(v, std::vector<uint8_t>{1});
  // fault-around does not map over a marker
  EXPECT_EQ(Read(0x101000), 0);
  EXPECT_EQ(as_->Fault(kBase + 0x100000, AccessType::kRead).outcome, FaultOutcome::kSigsegv);
  // locked VMAs refuse an install, not a removal
  Anon(0x200000, P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_LOCKED);
  EXPECT_EQ(Adv(0x200000, P, MADV_GUARD_INSTALL), EINVAL);
  EXPECT_EQ(Adv(0x200000, P, MADV_GUARD_REMOVE), 0);
}

TEST_F(MadviseTest, RemovePunchesShmemAndHostFiles) {
  SysResult m = files_->CreateShmem("m", 4 * P);
  ASSERT_EQ(m.error, 0);
  ids_.push_back(m.value);
  auto mf = files_->Get(m.value);
  ASSERT_EQ(as_->Mmap(kBase, 4 * P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, mf).error, 0);
  ASSERT_TRUE(Write(0, 9));
  ASSERT_TRUE(Write(P, 10));
  EXPECT_EQ(Adv(0, P, MADV_REMOVE), 0);
  EXPECT_EQ(Read(0), 0);
  EXPECT_EQ(Read(P), 10);
  auto f = HostFile("f", 4 * P);
  ASSERT_EQ(as_->Mmap(kBase + 0x100000, 4 * P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, f).error, 0);
  ASSERT_TRUE(Write(0x100000, 9));
  EXPECT_EQ(Adv(0x100000, 4 * P, MADV_REMOVE), 0);
  EXPECT_EQ(Read(0x100000), 0);
  uint8_t b = 1;
  EXPECT_EQ(files_->Read(ids_.back(), 0, &b, 1).value, 1u);
  EXPECT_EQ(b, 0);
  struct stat st {};
  ASSERT_EQ(stat((dir_.path + "/f").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 4 * P);  // KEEP_SIZE
}

TEST_F(MadviseTest, WillneedReadsAndPageoutDrops) {
  auto f = HostFile("f", 32 * P);
  ASSERT_EQ(as_->Mmap(kBase, 32 * P, PROT_READ, MAP_SHARED | MAP_FIXED, 0, f).error, 0);
  std::vector<uint8_t> v;
  EXPECT_EQ(Adv(4 * P, 2 * P, MADV_WILLNEED), 0);
  ASSERT_EQ(as_->Mincore(kBase, 8 * P, &v).error, 0);
  EXPECT_EQ(v, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(Read(4 * P), 0);  // maps the cached pages around it
  EXPECT_GT(as_->Counters().file_pages, 0u);
  EXPECT_EQ(Adv(0, 32 * P, MADV_PAGEOUT), 0);
  EXPECT_EQ(as_->Counters().file_pages, 0u);
  ASSERT_EQ(as_->Mincore(kBase, 8 * P, &v).error, 0);
  EXPECT_EQ(v, (std::vector<uint8_t>(8, 0)));
  EXPECT_EQ(Adv(0, P, MADV_COLD), 0);
  // anonymous pages stay (no swap)
  Anon(0x100000, P);
  ASSERT_TRUE(Write(0x100000, 1));
  EXPECT_EQ(Adv(0x100000, P, MADV_PAGEOUT), 0);
  EXPECT_EQ(Read(0x100000), 1);
}

// madvise_cold_or_pageout_pte_range() leaves a folio mapped by anyone else alone
// (folio_mapcount != folio_nr_pages: "do not interfere with other mappings"): a page
// of a shared file mapping that a second space also maps stays mapped here and cached;
// a page only this space maps is unmapped and, clean, dropped.
TEST_F(MadviseTest, PageoutSkipsPagesOtherSpacesMap) {
  auto f = HostFile("shared", 4 * P);
  AddressSpace other(frames_);
  ASSERT_EQ(as_->Mmap(kBase, 4 * P, PROT_READ, MAP_SHARED | MAP_FIXED, 0, f).error, 0);
  ASSERT_EQ(other.Mmap(kBase, P, PROT_READ, MAP_SHARED | MAP_FIXED, 0, f).error, 0);
  for (uint64_t i = 0; i < 2; i++) ASSERT_EQ(Read(i * P), 0);
  ASSERT_TRUE(other.Fault(kBase, AccessType::kRead).outcome != FaultOutcome::kSigsegv);
  ASSERT_EQ(as_->Maps(kBase, kBase + 1)[0].rss_pages, 4u);  // fault-around mapped all 4
  EXPECT_EQ(Adv(0, 4 * P, MADV_PAGEOUT), 0);
  EXPECT_EQ(as_->Maps(kBase, kBase + 1)[0].rss_pages, 1u);  // page 0: the other space maps it
  EXPECT_EQ(as_->Counters().file_pages, 1u);
  std::vector<uint8_t> v;
  ASSERT_EQ(as_->Mincore(kBase, 4 * P, &v).error, 0);
  EXPECT_EQ(v, (std::vector<uint8_t>{1, 0, 0, 0}));
  EXPECT_EQ(other.Munmap(kBase, P).error, 0);
  EXPECT_EQ(Adv(0, 4 * P, MADV_PAGEOUT), 0);  // now this space's own
  EXPECT_EQ(as_->Counters().file_pages, 0u);
  EXPECT_EQ(other.Validate(), "");
}

}  // namespace
}  // namespace vmspace
