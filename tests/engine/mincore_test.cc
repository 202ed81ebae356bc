// SPDX-License-Identifier: Apache-2.0
// mincore(2) (mm/mincore.c, Linux 6.18), with the answers of the reference kernel.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/file.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = kPageSize;
constexpr uint64_t kBase = 0x200000000000ull;

class MincoreTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(as_->Validate(), "");
    as_.reset();
    files_.reset();
    RcuBarrier();
    EXPECT_EQ(frames_.in_use_frames(), 0);
  }
  std::vector<uint8_t> Vec(uint64_t off, uint64_t len, int want = 0) {
    std::vector<uint8_t> v;
    EXPECT_EQ(as_->Mincore(kBase + off, len, &v).error, want);
    return v;
  }
  FrameAllocator frames_;
  testing_util::ScratchDir dir_;
  std::unique_ptr<FileTable> files_ = std::make_unique<FileTable>(frames_, dir_.path);
  std::unique_ptr<AddressSpace> as_ = std::make_unique<AddressSpace>(frames_);
};

TEST_F(MincoreTest, ErrnosAndLengths) {
  ASSERT_EQ(as_->Mmap(kBase, 3 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).error, 0);
  std::vector<uint8_t> v;
  EXPECT_EQ(as_->Mincore(kBase + 1, 1, &v).error, EINVAL);
  EXPECT_EQ(as_->Mincore(kBase, 0, &v).error, 0);
  EXPECT_TRUE(v.empty());
  EXPECT_EQ(as_->Mincore(0x100000000000ull, 0, &v).error, 0);  // len 0: no lookup
  EXPECT_EQ(as_->Mincore(0x100000000000ull, 1, &v).error, ENOMEM);
  EXPECT_EQ(as_->Mincore(0x7ffffffff000ull, 0x2000, &v).error, ENOMEM);  // beyond TASK_SIZE
  EXPECT_EQ(as_->Mincore(kBase, ~0ull, &v).error, ENOMEM);
  EXPECT_EQ(Vec(0, 1).size(), 1u);  // rounds up to a page
  EXPECT_EQ(Vec(0, 3 * P), (std::vector<uint8_t>{0, 0, 0}));
  ASSERT_EQ(as_->Munmap(kBase + P, P).error, 0);
  EXPECT_EQ(Vec(0, 3 * P, ENOMEM), (std::vector<uint8_t>{0}));  // the part before the hole
}

TEST_F(MincoreTest, AnonZeroPageAndGuards) {
  ASSERT_EQ(as_->Mmap(kBase, 3 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).error, 0);
  ASSERT_EQ(as_->Fault(kBase, AccessType::kRead).outcome, FaultOutcome::kMinor);  // the zero page
  ASSERT_EQ(as_->Fault(kBase + P, AccessType::kWrite).outcome, FaultOutcome::kMinor);
  EXPECT_EQ(Vec(0, 3 * P), (std::vector<uint8_t>{1, 1, 0}));
  ASSERT_EQ(as_->Madvise(kBase + P, P, MADV_GUARD_INSTALL).error, 0);
  EXPECT_EQ(Vec(0, 3 * P), (std::vector<uint8_t>{1, 0, 0}));
}

TEST_F(MincoreTest, FilePagesCachedButNotMapped) {
  const std::string path = dir_.path + "/f";
  int fd = open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_EQ(ftruncate(fd, 8 * P), 0);
  close(fd);
  SysResult r = files_->Open("f", {.write = true});
  ASSERT_EQ(r.error, 0);
  auto f = files_->Get(r.value);
  ASSERT_EQ(as_->Mmap(kBase, 4 * P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, f).error, 0);
  ASSERT_EQ(as_->Mmap(kBase + 0x100000, 4 * P, PROT_READ, MAP_PRIVATE | MAP_FIXED, 4 * P, f).error, 0);
  EXPECT_EQ(Vec(0x100000, 4 * P), (std::vector<uint8_t>{0, 0, 0, 0}));
  uint8_t b = 1;
  ASSERT_EQ(files_->Write(r.value, 5 * P, &b, 1).value, 1u);  // cached through the handle
  EXPECT_EQ(Vec(0x100000, 4 * P), (std::vector<uint8_t>{0, 1, 0, 0}));
  EXPECT_EQ(as_->Counters().file_pages, 0u);
  ASSERT_EQ(as_->Fault(kBase, AccessType::kWrite).outcome, FaultOutcome::kMajor);
  EXPECT_EQ(Vec(0, 4 * P)[0], 1);
}

}  // namespace
}  // namespace vmspace
