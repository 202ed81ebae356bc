// SPDX-License-Identifier: Apache-2.0
// fork (AddressSpace::DupMmap): copy-on-write on both sides, what a child inherits
// (VM_DONTCOPY, VM_WIPEONFORK, VM_LOCKED), private file pages, truncate, the anonymous
// rmap, destruction in either order with exact frame accounting, ENOMEM at the frame
// limit, and a stress of forks beside faulting threads. Every test under every profile.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/address_space.h"
#include "engine/file.h"
#include "engine/stats.h"
#include "fork_access.h"
#include "profiles.h"
#include "rmap.h"
#include "test_util.h"

namespace vmspace {
namespace {

using testing_fork::PteAt;
using testing_util::ExpectAllFramesFreed;

constexpr uint64_t kBase = 0x200000000000ull;
constexpr uint64_t P = kPageSize;
constexpr int kRW = PROT_READ | PROT_WRITE;
constexpr int kAnon = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;

class ForkTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    opts_ = testing_profiles::ProfileOptions(GetParam());
    as_ = std::make_unique<AddressSpace>(frames_, opts_);
  }
  void TearDown() override {
    if (as_) {
      EXPECT_EQ(as_->Validate(), "");
    }
    if (child_) {
      EXPECT_EQ(child_->Validate(), "");
    }
    child_.reset();
    ExpectAllFramesFreed(as_, frames_);
    EXPECT_EQ(PageMetaCount(), 0u) << "frame metadata left behind";
  }
  static int Read(AddressSpace& as, uint64_t addr) {
    uint8_t b;
    return as.ReadMemory(addr, &b, 1).ok() ? b : -1;
  }
  static bool Write(AddressSpace& as, uint64_t addr, uint8_t v) { return as.WriteMemory(addr, &v, 1).ok(); }
  std::unique_ptr<AddressSpace> Fork(AddressSpace& as) {
    int err = -1;
    auto c = as.DupMmap(&err);
    EXPECT_EQ(err, 0);
    EXPECT_TRUE(c);
    return c;
  }
  /// Frames in use once every deferred free has run (Reclaim: the spaces' gathers,
  /// then rcu_barrier).
  int64_t InUse() {
    frames_.Reclaim();
    return frames_.in_use_frames();
  }

  SpaceOptions opts_;
  FrameAllocator frames_;
  std::unique_ptr<AddressSpace> as_;
  std::unique_ptr<AddressSpace> child_;
};

TEST_P(ForkTest, CopyOnWriteOnBothSides) {
  ASSERT_TRUE(as_->Mmap(kBase, 4 * P, kRW, kAnon).ok());
  for (int i = 0; i < 4; i++) ASSERT_TRUE(Write(*as_, kBase + i * P, static_cast<uint8_t>('A' + i)));
  EXPECT_EQ(InUse(), 4);
  child_ = Fork(*as_);
  ASSERT_TRUE(child_);
  // Shared, not copied: no frame allocated, both sides' PTEs read-only.
  EXPECT_EQ(InUse(), 4);
  EXPECT_EQ(PageMetaCount(), 4u);
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(Read(*child_, kBase + i * P), 'A' + i);
    EXPECT_FALSE(PteAt(*as_, kBase + i * P) & kPteWrite);
    EXPECT_FALSE(PteAt(*child_, kBase + i * P) & kPteWrite);
    EXPECT_EQ(PteFrame(PteAt(*as_, kBase + i * P)), PteFrame(PteAt(*child_, kBase + i * P)));
    EXPECT_EQ(PageMapcount(PteFrame(PteAt(*as_, kBase + i * P))), 2);
  }
  EXPECT_EQ(child_->Counters().anon_pages, 4u);
  EXPECT_EQ(child_->Counters().map_count, 1u);
  EXPECT_EQ(child_->Counters().total_vm_pages, 4u);
  EXPECT_EQ(as_->Validate(), "");
  EXPECT_EQ(child_->Validate(), "");

  // The parent writes page 0: copied (wp_page_copy); the child keeps 'A'.
  const StatsSnapshot s0 = ReadStats();
  ASSERT_TRUE(Write(*as_, kBase, 'P'));
  EXPECT_EQ(ReadStats().Minus(s0).events[static_cast<size_t>(Event::kFaultWpCopy)], 1u);
  EXPECT_EQ(Read(*as_, kBase), 'P');
  EXPECT_EQ(Read(*child_, kBase), 'A');
  EXPECT_EQ(InUse(), 5);
  // The child writes page 0: it is the frame's only mapping now: reused, not copied.
  const StatsSnapshot s1 = ReadStats();
  ASSERT_TRUE(Write(*child_, kBase, 'C'));
  const StatsSnapshot d1 = ReadStats().Minus(s1);
  EXPECT_EQ(d1.events[static_cast<size_t>(Event::kFaultWpCopy)], 0u);
  EXPECT_EQ(d1.events[static_cast<size_t>(Event::kFaultWpReuse)], 1u);
  EXPECT_EQ(InUse(), 5);
  EXPECT_EQ(Read(*as_, kBase), 'P');
  EXPECT_EQ(Read(*child_, kBase), 'C');
  // The child writes page 1: copied; the parent keeps 'B'.
  ASSERT_TRUE(Write(*child_, kBase + P, 'D'));
  EXPECT_EQ(Read(*as_, kBase + P), 'B');
  EXPECT_EQ(Read(*child_, kBase + P), 'D');
  EXPECT_EQ(InUse(), 6);
  EXPECT_EQ(as_->Validate(), "");
  EXPECT_EQ(child_->Validate(), "");
  // New pages after the fork are private to each side.
  ASSERT_TRUE(as_->Mmap(kBase + 8 * P, P, kRW, kAnon).ok());
  ASSERT_TRUE(Write(*as_, kBase + 8 * P, 'N'));
  EXPECT_EQ(Read(*child_, kBase + 8 * P), -1);  // SIGSEGV: the child has no such VMA
}

TEST_P(ForkTest, DontcopyWipeonforkAndLockedAreHonoured) {
  ASSERT_TRUE(as_->Mmap(kBase, 2 * P, kRW, kAnon).ok());               // VM_DONTCOPY
  ASSERT_TRUE(as_->Mmap(kBase + 4 * P, 2 * P, kRW, kAnon).ok());       // VM_WIPEONFORK
  ASSERT_TRUE(as_->Mmap(kBase + 8 * P, 2 * P, PROT_READ, kAnon).ok()); // VM_LOCKED
  ASSERT_TRUE(as_->Mmap(kBase + 12 * P, 2 * P, kRW, kAnon).ok());      // plain
  for (uint64_t off : {0ul, 4 * P, 12 * P}) ASSERT_TRUE(Write(*as_, kBase + off, 0x5a));
  ASSERT_TRUE(as_->Madvise(kBase, 2 * P, MADV_DONTFORK).ok());
  ASSERT_TRUE(as_->Madvise(kBase + 4 * P, 2 * P, MADV_WIPEONFORK).ok());
  ASSERT_TRUE(as_->Mlock(kBase + 8 * P, 2 * P, MLOCK_ONFAULT).ok());
  child_ = Fork(*as_);
  ASSERT_TRUE(child_);
  std::vector<VmaInfo> maps = child_->Maps();
  ASSERT_EQ(maps.size(), 3u);
  EXPECT_EQ(maps[0].start, kBase + 4 * P);
  EXPECT_TRUE(maps[0].flags & VM_WIPEONFORK);
  EXPECT_EQ(maps[0].anon_vma_id, 0u);  // wiped: no anon_vma, no pages
  EXPECT_EQ(maps[0].rss_pages, 0u);
  EXPECT_EQ(maps[1].start, kBase + 8 * P);
  EXPECT_FALSE(maps[1].flags & (VM_LOCKED | VM_LOCKONFAULT));
  EXPECT_EQ(maps[2].start, kBase + 12 * P);
  EXPECT_EQ(maps[2].rss_pages, 1u);
  EXPECT_NE(maps[2].anon_vma_id, 0u);
  EXPECT_TRUE(as_->Maps()[2].flags & VM_LOCKED);  // the parent keeps its flags
  EXPECT_EQ(Read(*child_, kBase), -1);             // not copied
  EXPECT_EQ(Read(*child_, kBase + 4 * P), 0);      // wiped: zero
  EXPECT_EQ(Read(*as_, kBase + 4 * P), 0x5a);
  EXPECT_EQ(Read(*child_, kBase + 12 * P), 0x5a);
  const SpaceCounters c = child_->Counters();
  EXPECT_EQ(c.map_count, 3u);
  EXPECT_EQ(c.total_vm_pages, 6u);
  EXPECT_EQ(c.anon_pages, 1u);
}

TEST_P(ForkTest, DontneedAndMunmapOfASharedPageLeaveItToTheOther) {
  ASSERT_TRUE(as_->Mmap(kBase, 2 * P, kRW, kAnon).ok());
  ASSERT_TRUE(Write(*as_, kBase, 0x11));
  ASSERT_TRUE(Write(*as_, kBase + P, 0x22));
  child_ = Fork(*as_);
  ASSERT_TRUE(child_);
  ASSERT_TRUE(as_->Madvise(kBase, P, MADV_DONTNEED).ok());
  EXPECT_EQ(Read(*as_, kBase), 0);  // zero-fill again
  EXPECT_EQ(Read(*child_, kBase), 0x11);
  EXPECT_EQ(InUse(), 2);
  ASSERT_TRUE(child_->Munmap(kBase + P, P).ok());
  EXPECT_EQ(Read(*as_, kBase + P), 0x22);
  EXPECT_EQ(InUse(), 2);
  // Each frame is back to a single mapping: the next write reuses it.
  ASSERT_TRUE(Write(*child_, kBase, 0x33));
  ASSERT_TRUE(Write(*as_, kBase + P, 0x44));
  EXPECT_EQ(InUse(), 2);
  EXPECT_EQ(Read(*child_, kBase), 0x33);
  EXPECT_EQ(Read(*as_, kBase + P), 0x44);
}

// MADV_FREE and fork. A page marked before the fork is marked in both PTEs; reclaim in
// one space drops only that space's mapping, the frame stays for the other and goes with
// the last. A page fork shares is not marked (madvise_free_pte_range skips a folio
// mapped more than once), so reclaim keeps it.
TEST_P(ForkTest, LazyFreeReclaimOfAPageForkSharesDropsOnlyThatMapping) {
  ASSERT_TRUE(as_->Mmap(kBase, 2 * P, kRW, kAnon).ok());
  ASSERT_TRUE(Write(*as_, kBase, 0x11));
  ASSERT_TRUE(Write(*as_, kBase + P, 0x22));
  ASSERT_TRUE(as_->Madvise(kBase, P, MADV_FREE).ok());
  child_ = Fork(*as_);
  ASSERT_TRUE(child_);
  ASSERT_TRUE(as_->Madvise(kBase + P, P, MADV_FREE).ok());
  EXPECT_EQ(InUse(), 2);
  EXPECT_EQ(child_->ReclaimLazyFree(), 1u);  // the child's mapping of page 0
  EXPECT_EQ(InUse(), 2) << "a frame the parent still maps was freed";
  EXPECT_EQ(Read(*as_, kBase), 0x11);
  EXPECT_EQ(Read(*child_, kBase), 0);  // the child's copy was discarded: zero-fill
  EXPECT_EQ(as_->ReclaimLazyFree(), 1u);  // page 0's last mapping; page 1 was not marked
  EXPECT_EQ(InUse(), 1);
  EXPECT_EQ(Read(*as_, kBase), 0);
  EXPECT_EQ(Read(*as_, kBase + P), 0x22);
  EXPECT_EQ(Read(*child_, kBase + P), 0x22);
  EXPECT_EQ(as_->Validate(), "");
  EXPECT_EQ(child_->Validate(), "");
}

TEST_P(ForkTest, DestroyParentFirstOrChildFirst) {
  for (bool parent_first : {true, false}) {
    SCOPED_TRACE(parent_first ? "parent first" : "child first");
    auto parent = std::make_unique<AddressSpace>(frames_, opts_);
    ASSERT_TRUE(parent->Mmap(kBase, 16 * P, kRW, kAnon).ok());
    for (int i = 0; i < 16; i++) ASSERT_TRUE(Write(*parent, kBase + i * P, static_cast<uint8_t>(i + 1)));
    auto child = Fork(*parent);
    ASSERT_TRUE(child);
    ASSERT_TRUE(Write(*child, kBase, 0x77));  // one copy
    EXPECT_EQ(InUse(), 17);
    std::unique_ptr<AddressSpace>& first = parent_first ? parent : child;
    std::unique_ptr<AddressSpace>& second = parent_first ? child : parent;
    first.reset();
    // The survivor keeps every page: 16 frames (its own copy of page 0, or the original).
    EXPECT_EQ(InUse(), 16);
    EXPECT_EQ(Read(*second, kBase), parent_first ? 0x77 : 1);
    for (int i = 1; i < 16; i++) EXPECT_EQ(Read(*second, kBase + i * P), i + 1);
    EXPECT_EQ(second->Validate(), "");
    EXPECT_EQ(second->Counters().anon_pages, 16u);
    second.reset();
    EXPECT_EQ(InUse(), 0);
    EXPECT_EQ(PageMetaCount(), 0u);
  }
}

TEST_P(ForkTest, GrandchildrenShareTheTreeAndTheRmapFindsEveryMapping) {
  ASSERT_TRUE(as_->Mmap(kBase, 4 * P, kRW, kAnon).ok());
  ASSERT_TRUE(Write(*as_, kBase, 0x10));
  child_ = Fork(*as_);
  ASSERT_TRUE(child_);
  ASSERT_TRUE(Write(*child_, kBase + P, 0x20));  // a page of the child's own anon_vma
  auto grandchild = Fork(*child_);
  ASSERT_TRUE(grandchild);
  EXPECT_EQ(Read(*grandchild, kBase), 0x10);
  EXPECT_EQ(Read(*grandchild, kBase + P), 0x20);
  // Page 0 is mapped by all three; the walk from its anon_vma finds the three VMAs.
  void* f = PteFrame(PteAt(*as_, kBase));
  EXPECT_EQ(PageMapcount(f), 3);
  PageMeta* meta = PageMetaOf(f);
  ASSERT_NE(meta, nullptr);
  std::vector<MmStruct*> found;
  RmapWalkAnon(meta->anon_vma, meta->index, [&](Vma* v, uint64_t a) {
    EXPECT_EQ(a, kBase);
    found.push_back(v->vm_mm);
  });
  EXPECT_EQ(found.size(), 3u);
  // Page 1 belongs to the child's anon_vma: the parent is not chained to it.
  void* g = PteFrame(PteAt(*child_, kBase + P));
  PageMeta* gm = PageMetaOf(g);
  ASSERT_NE(gm, nullptr);
  found.clear();
  RmapWalkAnon(gm->anon_vma, gm->index, [&](Vma* v, uint64_t) { found.push_back(v->vm_mm); });
  EXPECT_EQ(found.size(), 2u);
  for (MmStruct* m : found) EXPECT_NE(m, &AddressSpaceTestAccess::Mm(*as_));
  EXPECT_EQ(grandchild->Validate(), "");
  // The middle generation goes first: its anon_vma stays for the grandchild's pages.
  child_.reset();
  EXPECT_EQ(Read(*grandchild, kBase + P), 0x20);
  ASSERT_TRUE(Write(*grandchild, kBase + P, 0x21));  // the last mapping: reused
  EXPECT_EQ(grandchild->Validate(), "");
  EXPECT_EQ(as_->Validate(), "");
  grandchild.reset();
}

TEST_P(ForkTest, SplitAndMergeKeepTheChains) {
  ASSERT_TRUE(as_->Mmap(kBase, 8 * P, kRW, kAnon).ok());
  for (int i = 0; i < 8; i++) ASSERT_TRUE(Write(*as_, kBase + i * P, static_cast<uint8_t>(i)));
  child_ = Fork(*as_);
  ASSERT_TRUE(child_);
  // Split the child's VMA three ways and merge it back; munmap a middle part.
  ASSERT_TRUE(child_->Mprotect(kBase + 2 * P, 2 * P, PROT_READ).ok());
  EXPECT_EQ(child_->Counters().map_count, 3u);
  EXPECT_EQ(child_->Validate(), "");
  ASSERT_TRUE(child_->Mprotect(kBase + 2 * P, 2 * P, kRW).ok());
  EXPECT_EQ(child_->Counters().map_count, 1u);
  // Write access came back with the VMA, but the frames stay copy-on-write.
  EXPECT_FALSE(PteAt(*child_, kBase + 2 * P) & kPteWrite);
  ASSERT_TRUE(Write(*child_, kBase + 2 * P, 0x99));
  EXPECT_EQ(Read(*as_, kBase + 2 * P), 2);
  ASSERT_TRUE(child_->Munmap(kBase + 5 * P, P).ok());
  EXPECT_EQ(child_->Validate(), "");
  EXPECT_EQ(as_->Validate(), "");
  for (int i : {0, 1, 3, 4, 6, 7}) EXPECT_EQ(Read(*child_, kBase + i * P), i);
}

// is_mergeable_anon_vma (mm/vma.c vma_had_uncowed_parents): a child's VMA still chained
// to its parent's anon_vma takes no new neighbour, where the parent's VMA does; a
// neighbour with the same anon_vma still merges.
TEST_P(ForkTest, AForkedVmaWithItsParentsAnonVmaTakesNoNewNeighbour) {
  ASSERT_TRUE(as_->Mmap(kBase, 4 * P, kRW, kAnon).ok());
  ASSERT_TRUE(Write(*as_, kBase, 1));
  child_ = Fork(*as_);
  ASSERT_TRUE(child_);
  ASSERT_TRUE(child_->Mmap(kBase + 4 * P, 4 * P, kRW, kAnon).ok());
  EXPECT_EQ(child_->Counters().map_count, 2u);
  ASSERT_TRUE(as_->Mmap(kBase + 4 * P, 4 * P, kRW, kAnon).ok());
  EXPECT_EQ(as_->Counters().map_count, 1u);
  // The child's own VMA, split and made alike again, merges (one anon_vma).
  ASSERT_TRUE(child_->Mprotect(kBase + P, P, PROT_READ).ok());
  EXPECT_EQ(child_->Counters().map_count, 4u);
  ASSERT_TRUE(child_->Mprotect(kBase + P, P, kRW).ok());
  EXPECT_EQ(child_->Counters().map_count, 2u);
}

/// Private file pages after fork: the parent's private copy is shared copy-on-write, a
/// page-cache page stays the file's; a shared mapping stays shared.
class ForkFileTest : public ForkTest {
 protected:
  void SetUp() override {
    ForkTest::SetUp();
    char tmpl[] = "/tmp/vmspace-fork-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    files_ = std::make_unique<FileTable>(frames_, dir_);
  }
  void TearDown() override {
    if (as_) {
      EXPECT_EQ(as_->Validate(), "");
    }
    if (child_) {
      EXPECT_EQ(child_->Validate(), "");
    }
    child_.reset();
    as_.reset();
    f_.reset();
    files_.reset();  // the page cache's frames
    RcuBarrier();
    EXPECT_EQ(frames_.in_use_frames(), 0) << "frames leaked (>0) or freed twice (<0)";
    EXPECT_EQ(PageMetaCount(), 0u);
    std::filesystem::remove_all(dir_);
  }
  std::shared_ptr<OpenFile> Open(const std::string& rel, uint64_t pages) {
    std::string data(pages * P, 0);
    for (uint64_t i = 0; i < data.size(); i++) data[i] = static_cast<char>('a' + i / P);
    int fd = open((dir_ + "/" + rel).c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    EXPECT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    close(fd);
    SysResult r = files_->Open(rel, {.write = true});
    EXPECT_EQ(r.error, 0);
    id_ = r.value;
    return files_->Get(r.value);
  }
  std::string dir_;
  std::unique_ptr<FileTable> files_;
  std::shared_ptr<OpenFile> f_;
  uint64_t id_ = 0;
};

TEST_P(ForkFileTest, PrivateFileCopyOnWriteAfterFork) {
  f_ = Open("f", 2);
  ASSERT_TRUE(as_->Mmap(kBase, 2 * P, kRW, MAP_PRIVATE | MAP_FIXED, 0, f_).ok());
  ASSERT_TRUE(as_->Mmap(kBase + 4 * P, 2 * P, kRW, MAP_SHARED | MAP_FIXED, 0, f_).ok());
  ASSERT_TRUE(Write(*as_, kBase, 'X'));       // a private copy
  EXPECT_EQ(Read(*as_, kBase + P), 'b');      // a page-cache page, mapped read-only
  child_ = Fork(*as_);
  ASSERT_TRUE(child_);
  EXPECT_EQ(Read(*child_, kBase), 'X');
  EXPECT_EQ(Read(*child_, kBase + P), 'b');
  ASSERT_TRUE(Write(*child_, kBase, 'Y'));    // the shared private copy: copied
  ASSERT_TRUE(Write(*child_, kBase + P, 'Z'));  // the file page: copied (file untouched)
  EXPECT_EQ(Read(*as_, kBase), 'X');
  EXPECT_EQ(Read(*as_, kBase + P), 'b');
  uint8_t b = 0;
  ASSERT_EQ(files_->Read(id_, P, &b, 1).value, 1u);
  EXPECT_EQ(b, 'b');
  // The shared mapping: one page cache for both.
  ASSERT_TRUE(Write(*child_, kBase + 4 * P, 'S'));
  EXPECT_EQ(Read(*as_, kBase + 4 * P), 'S');
  FileStat st;
  ASSERT_TRUE(files_->Stat(id_, &st).ok());
  EXPECT_EQ(st.mapped_vmas, 4u);  // both spaces' two VMAs are in i_mmap
  EXPECT_EQ(as_->Validate(), "");
  EXPECT_EQ(child_->Validate(), "");
}

TEST_P(ForkFileTest, TruncateOfAFileBothMapPrivately) {
  f_ = Open("t", 3);
  ASSERT_TRUE(as_->Mmap(kBase, 3 * P, kRW, MAP_PRIVATE | MAP_FIXED, 0, f_).ok());
  ASSERT_TRUE(Write(*as_, kBase + 2 * P, 'Q'));  // a private copy beyond the future EOF
  EXPECT_EQ(Read(*as_, kBase), 'a');
  child_ = Fork(*as_);
  ASSERT_TRUE(child_);
  EXPECT_EQ(Read(*child_, kBase + 2 * P), 'Q');
  ASSERT_EQ(files_->Truncate(id_, P), 0);
  // unmap_mapping_range(even_cows): the private copies beyond EOF go from both.
  for (AddressSpace* s : {as_.get(), child_.get()}) {
    EXPECT_EQ(s->Fault(kBase + 2 * P, AccessType::kRead).outcome, FaultOutcome::kSigbus);
    EXPECT_EQ(Read(*s, kBase), 'a');
    EXPECT_EQ(s->Validate(), "");
  }
  EXPECT_EQ(PageMetaCount(), 0u);
}

TEST_P(ForkTest, EnomemAtTheFrameLimitLeavesNothing) {
  // Measure what the parent needs, then give a second allocator room for the parent and
  // a few more pages: the child's page tables do not fit.
  constexpr int kTables = 200;
  auto build = [&](FrameAllocator& fa) {
    auto s = std::make_unique<AddressSpace>(fa, opts_);
    for (int i = 0; i < kTables; i++) {  // one page in each of kTables PTE tables
      const uint64_t a = kBase + static_cast<uint64_t>(i) * PageTable::kPmdSpan;
      EXPECT_TRUE(s->Mmap(a, P, kRW, kAnon).ok());
      EXPECT_TRUE(Write(*s, a, 1));
    }
    return s;
  };
  uint64_t need;
  {
    FrameAllocator probe;
    auto s = build(probe);
    need = probe.in_use_bytes() + probe.table_bytes();
  }
  FrameAllocator limited(need + 64 * P);
  auto parent = build(limited);
  RcuBarrier();
  const int64_t frames_before = limited.in_use_frames();
  const uint64_t tables_before = limited.table_bytes();
  int err = 0;
  auto child = parent->DupMmap(&err);
  EXPECT_EQ(child, nullptr);
  EXPECT_EQ(err, ENOMEM);
  RcuBarrier();
  EXPECT_EQ(limited.in_use_frames(), frames_before);
  EXPECT_EQ(limited.table_bytes(), tables_before);
  EXPECT_EQ(parent->Validate(), "");
  // Frames the failed fork shared keep their metadata (the parent still maps them), each
  // with the parent's mapping alone.
  EXPECT_LE(PageMetaCount(), static_cast<uint64_t>(kTables));
  EXPECT_GT(PageMetaCount(), 0u);
  for (int i = 0; i < kTables; i++) {
    const uint64_t a = kBase + static_cast<uint64_t>(i) * PageTable::kPmdSpan;
    const uint64_t pte = PteAt(*parent, a);
    if (pte & kPteSharedAnon) {
      EXPECT_EQ(PageMapcount(PteFrame(pte)), 1);
    }
  }
  // The parent's pages are its own again: a write reuses them.
  for (int i = 0; i < kTables; i++) {
    const uint64_t a = kBase + static_cast<uint64_t>(i) * PageTable::kPmdSpan;
    ASSERT_TRUE(Write(*parent, a, 2));
    EXPECT_EQ(Read(*parent, a), 2);
  }
  RcuBarrier();
  EXPECT_EQ(limited.in_use_frames(), frames_before);
  // With most of it unmapped the fork fits.
  ASSERT_TRUE(parent->Munmap(kBase + 10 * PageTable::kPmdSpan, (kTables - 10) * PageTable::kPmdSpan).ok());
  child = parent->DupMmap(&err);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(Read(*child, kBase), 2);
  EXPECT_EQ(child->Validate(), "");
  child.reset();
  ExpectAllFramesFreed(parent, limited);
}

// dup_mmap's security_vm_enough_memory_mm for each VM_ACCOUNT VMA: a private writable
// VMA that merging made larger than the overcommit limit (each mmap alone fitted) makes
// fork fail with ENOMEM after the VMAs before it were copied; nothing of the child is
// left. A MAP_NORESERVE VMA as large is not accounted and forks.
TEST_P(ForkTest, EnomemForAnAccountedVmaLargerThanTheOvercommitLimit) {
  constexpr uint64_t kLimitPages = 64;
  SpaceOptions o = opts_;
  o.overcommit_limit_bytes = kLimitPages * P;
  auto parent = std::make_unique<AddressSpace>(frames_, o);
  const uint64_t small = kBase, big = kBase + (1ull << 20);
  ASSERT_TRUE(parent->Mmap(small, 4 * P, kRW, kAnon).ok());
  for (int i = 0; i < 4; i++) ASSERT_TRUE(Write(*parent, small + i * P, 1));
  ASSERT_TRUE(parent->Mmap(big, 48 * P, kRW, kAnon).ok());
  ASSERT_TRUE(parent->Mmap(big + 48 * P, 48 * P, kRW, kAnon).ok());
  EXPECT_FALSE(parent->Mmap(big + (1ull << 20), 96 * P, kRW, kAnon).ok()) << "one request of 96 pages";
  ASSERT_TRUE(Write(*parent, big, 1));
  const std::vector<VmaInfo> maps = parent->Maps();
  ASSERT_EQ(maps.size(), 2u);
  EXPECT_EQ(maps[1].end - maps[1].start, 96 * P) << "the two mappings merged";
  EXPECT_TRUE(maps[0].flags & VM_ACCOUNT);
  EXPECT_TRUE(maps[1].flags & VM_ACCOUNT);
  const int64_t frames_before = InUse();
  const uint64_t budget_before = frames_.budget().usage();
  int err = 0;
  auto child = parent->DupMmap(&err);
  EXPECT_EQ(child, nullptr);
  EXPECT_EQ(err, ENOMEM);
  EXPECT_EQ(InUse(), frames_before);
  EXPECT_EQ(frames_.budget().usage(), budget_before);
  EXPECT_EQ(parent->Validate(), "");
  EXPECT_EQ(parent->Maps().size(), 2u);
  // The small VMA was copied before the fork failed: its pages are the parent's alone
  // again, a write reuses each (no new frame).
  for (int i = 0; i < 4; i++) {
    const uint64_t pte = PteAt(*parent, small + i * P);
    ASSERT_TRUE(pte & kPtePresent);
    if (pte & kPteSharedAnon) {
      EXPECT_EQ(PageMapcount(PteFrame(pte)), 1);
    }
    ASSERT_TRUE(Write(*parent, small + i * P, 2));
  }
  EXPECT_EQ(InUse(), frames_before);
  // At the limit it fits; a larger MAP_NORESERVE VMA is not accounted and forks too.
  ASSERT_TRUE(parent->Munmap(big + kLimitPages * P, (96 - kLimitPages) * P).ok());
  ASSERT_TRUE(parent->Mmap(big + (1ull << 30), 96 * P, kRW, kAnon | MAP_NORESERVE).ok());
  ASSERT_TRUE(Write(*parent, big + (1ull << 30), 3));
  child = parent->DupMmap(&err);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(err, 0);
  EXPECT_EQ(child->Maps().size(), 3u);
  EXPECT_EQ(Read(*child, small), 2);
  EXPECT_EQ(Read(*child, big), 1);
  EXPECT_EQ(Read(*child, big + (1ull << 30)), 3);
  EXPECT_EQ(child->Validate(), "");
  child.reset();
  parent.reset();
}

/// Threads fault in the parent while it forks repeatedly; each child is written and
/// destroyed on its own thread while the next fork runs. Every round validates every
/// space; at the end every frame is back.
TEST_P(ForkTest, StressForkBesideFaultsAndChildren) {
  const int rounds = testing_util::Iterations(3000) / 60 + 5;
  constexpr uint64_t kPages = 64;
  ASSERT_TRUE(as_->Mmap(kBase, kPages * P, kRW, kAnon).ok());
  ASSERT_TRUE(as_->Mmap(kBase + 2 * kPages * P, kPages * P, kRW, kAnon).ok());
  std::atomic<bool> stop{false};
  std::vector<std::thread> faulters;
  for (int t = 0; t < 2; t++) {
    faulters.emplace_back([&, t] {
      std::mt19937 rng(t);
      while (!stop.load(std::memory_order_relaxed)) {
        const uint64_t a = kBase + (rng() % 2) * 2 * kPages * P + (rng() % kPages) * P;
        const uint8_t v = static_cast<uint8_t>(rng());
        if (rng() % 8 == 0) {
          as_->Madvise(a, P, MADV_DONTNEED);
        } else {
          EXPECT_TRUE(Write(*as_, a, v));
        }
      }
    });
  }
  std::thread child_thread;
  for (int r = 0; r < rounds; r++) {
    std::unique_ptr<AddressSpace> c = Fork(*as_);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->Validate(), "") << "round " << r;
    if (child_thread.joinable()) child_thread.join();
    child_thread = std::thread([c = std::move(c), r]() mutable {
      std::mt19937 rng(r);
      for (int i = 0; i < 32; i++) {
        const uint64_t a = kBase + (rng() % 2) * 2 * kPages * P + (rng() % kPages) * P;
        uint8_t v = static_cast<uint8_t>(i), back = 0;
        EXPECT_TRUE(c->WriteMemory(a, &v, 1).ok());
        EXPECT_TRUE(c->ReadMemory(a, &back, 1).ok());
        EXPECT_EQ(back, v);
      }
      EXPECT_EQ(c->Validate(), "");
      c.reset();
    });
    EXPECT_EQ(as_->Validate(), "") << "round " << r;
  }
  if (child_thread.joinable()) child_thread.join();
  stop = true;
  for (auto& t : faulters) t.join();
  EXPECT_EQ(as_->Validate(), "");
  // Exact accounting: the parent's resident pages are all that is left.
  const int64_t live = static_cast<int64_t>(as_->Counters().anon_pages);
  EXPECT_EQ(InUse(), live);
}

INSTANTIATE_TEST_SUITE_P(Profiles, ForkTest, testing_profiles::AllProfiles(), testing_profiles::ProfileName());
INSTANTIATE_TEST_SUITE_P(Profiles, ForkFileTest, testing_profiles::AllProfiles(), testing_profiles::ProfileName());

}  // namespace
}  // namespace vmspace
