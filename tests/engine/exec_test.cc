// SPDX-License-Identifier: Apache-2.0
// execve (AddressSpace::Exec): the layout of a dynamic PIE (/bin/true and its
// ld-linux-x86-64.so.2) and of a static binary compared with the maps the kernel built
// for the same files (tests/engine/exec/*.maps, recorded at the execve's syscall-exit
// ptrace stop with ASLR off); the headers come from tests/engine/exec/*.elfhead (each
// file's first 4 KiB, padded back to its size with zeros: the loader reads only the
// headers). Then brk, the special mappings' flags, fork of an exec'd space, the errors.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/address_space.h"
#include "engine/exec.h"
#include "engine/file.h"
#include "test_util.h"

namespace vmspace {
namespace {

using testing_util::ExpectAllFramesFreed;
using testing_util::ScratchDir;

const std::string kFixtures = VMSPACE_EXEC_FIXTURES;

/// Writes fixture `head` into `dir`/`path`, padded with zeros to `size` bytes.
void PlaceElf(const std::string& dir, const std::string& path, const std::string& head, uint64_t size) {
  const std::filesystem::path dst = std::filesystem::path(dir) / path;
  std::filesystem::create_directories(dst.parent_path());
  std::filesystem::copy_file(kFixtures + "/" + head, dst);
  std::filesystem::resize_file(dst, size);
}

/// "start-end perms offset name" of each line of a recorded maps fixture: comments
/// and [vsyscall] (a gate area outside the mm) left out, file names by their last
/// component.
std::vector<std::string> RecordedLayout(const std::string& fixture) {
  std::ifstream in(kFixtures + "/" + fixture);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    std::string range, perms, offset, dev, inode, name;
    f >> range >> perms >> offset >> dev >> inode >> name;
    if (name == "[vsyscall]") continue;
    out.push_back(range + " " + perms + " " + offset + " " + std::filesystem::path(name).filename().string());
  }
  return out;
}

std::vector<std::string> EngineLayout(AddressSpace& as) {
  std::vector<std::string> out;
  for (const VmaInfo& v : as.Maps()) {
    std::istringstream f(AddressSpace::FormatMapsLine(v));
    std::string range, perms, offset;
    f >> range >> perms >> offset;
    out.push_back(range + " " + perms + " " + offset + " " + std::filesystem::path(v.name).filename().string());
  }
  return out;
}

class ExecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PlaceElf(dir_.path, "usr/bin/true", "true.elfhead", 35664);
    PlaceElf(dir_.path, "lib64/ld-linux-x86-64.so.2", "ld-linux-x86-64.so.2.elfhead", 215000);
    PlaceElf(dir_.path, "static_true", "static_true.elfhead", 762296);
  }
  /// Exec of `path` with argv {argv0} and no environment, as the recordings ran.
  std::unique_ptr<AddressSpace> Exec(AddressSpace& old, const std::string& path, const std::string& argv0,
                                     int* err) {
    ExecImage img;
    *err = OpenExecImage(files_, path, "", &img);
    if (*err) return nullptr;
    img.filename = argv0;
    img.argv = {argv0};
    return old.Exec(img, err);
  }
  ScratchDir dir_;
  FrameAllocator frames_;
  FileTable files_{frames_, dir_.path};
};

TEST_F(ExecTest, DynamicPieMatchesTheKernel) {
  auto old = std::make_unique<AddressSpace>(frames_);
  ASSERT_TRUE(old->Mmap(0, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).ok());
  int err = 0;
  auto as = Exec(*old, "usr/bin/true", "/bin/true", &err);
  ASSERT_TRUE(as) << strerror(err);
  EXPECT_EQ(EngineLayout(*as), RecordedLayout("true.maps"));
  EXPECT_EQ(as->Brk(0), 0x55555555e000u);  // start_brk: the page after .bss
  EXPECT_EQ(old->Counters().map_count, 1u) << "Exec leaves the old space alone";
  EXPECT_EQ(as->Validate(), "");
  std::vector<VmaInfo> maps = as->Maps();
  for (const VmaInfo& v : maps) {
    if (v.name == "[vvar]" || v.name == "[vvar_vclock]") {
      EXPECT_EQ(AddressSpace::VmFlagsString(v.flags), "rd mr pf io de dd");
    }
    if (v.name == "[vdso]") {
      EXPECT_EQ(AddressSpace::VmFlagsString(v.flags), "rd ex mr mw me de");
    }
    if (v.name == "[stack]") {
      EXPECT_EQ(AddressSpace::VmFlagsString(v.flags), "rd wr mr mw me gd ac");
      EXPECT_EQ(v.rss_pages, 1u) << "the strings' page";
    }
  }
  // The strings are on the stack where execve copies them: filename, then argv[0].
  char buf[20] = {};
  ASSERT_EQ(as->ReadMemory(0x7ffffffff000 - 8 - 10, buf, 10).bytes, 10u);
  EXPECT_STREQ(buf, "/bin/true");
  old.reset();
  ExpectAllFramesFreed(as, frames_);
}

TEST_F(ExecTest, StaticBinaryMatchesTheKernel) {
  AddressSpace old(frames_);
  int err = 0;
  auto as = Exec(old, "static_true", "/tmp/fx/static_true", &err);
  ASSERT_TRUE(as) << strerror(err);
  EXPECT_EQ(EngineLayout(*as), RecordedLayout("static_true.maps"));
  EXPECT_EQ(as->Brk(0), 0x4ac000u);
  // padzero wrote the end of .data's last file page: a private copy, present.
  std::vector<VmaInfo> maps = as->Maps(0x4a0000, 0x4a7000);
  ASSERT_EQ(maps.size(), 1u);
  EXPECT_EQ(maps[0].rss_pages, 1u);
  EXPECT_NE(maps[0].anon_vma_id, 0u);
  // brk grows from start_brk: the [heap] starts where the bss ends.
  EXPECT_EQ(as->Brk(0x4ac000 + 3 * kPageSize), 0x4ac000 + 3 * kPageSize);
  EXPECT_EQ(as->Validate(), "");
  ExpectAllFramesFreed(as, frames_);
}

TEST_F(ExecTest, ForkOfAnExecdSpaceKeepsTheNames) {
  AddressSpace old(frames_);
  int err = 0;
  auto as = Exec(old, "usr/bin/true", "/bin/true", &err);
  ASSERT_TRUE(as) << strerror(err);
  std::unique_ptr<AddressSpace> child = as->DupMmap(&err);
  ASSERT_TRUE(child);
  EXPECT_EQ(EngineLayout(*child), EngineLayout(*as));
  EXPECT_EQ(child->Validate(), "");
  // fork + exec + exit: the child's exec replaces its layout again.
  auto again = Exec(*child, "static_true", "/tmp/fx/static_true", &err);
  ASSERT_TRUE(again) << strerror(err);
  EXPECT_EQ(EngineLayout(*again), RecordedLayout("static_true.maps"));
  child.reset();
  again.reset();
  ExpectAllFramesFreed(as, frames_);
}

TEST_F(ExecTest, Errors) {
  AddressSpace old(frames_);
  ExecImage img;
  // Not an ELF file.
  {
    std::ofstream(dir_.path + "/script") << "#!/bin/sh\nexit 0\n";
    EXPECT_EQ(OpenExecImage(files_, "script", "", &img), ENOEXEC);
  }
  EXPECT_EQ(OpenExecImage(files_, "missing", "", &img), ENOENT);
  EXPECT_EQ(OpenExecImage(files_, "/usr/bin/true", "", &img), EINVAL);  // absolute: OpenFile's rule
  // The interpreter missing (ENOENT), or not an ELF file (ELIBBAD).
  EXPECT_EQ(OpenExecImage(files_, "usr/bin/true", "lib64/nothere", &img), ENOENT);
  EXPECT_EQ(OpenExecImage(files_, "usr/bin/true", "script", &img), ELIBBAD);
  // Strings beyond a quarter of the stack limit.
  ASSERT_EQ(OpenExecImage(files_, "static_true", "", &img), 0);
  img.argv.assign(3, std::string(1 << 20, 'x'));
  int err = 0;
  EXPECT_EQ(old.Exec(img, &err), nullptr);
  EXPECT_EQ(err, E2BIG);
  // Within the limit: the stack VMA covers the strings plus 128 KiB.
  img.argv.assign(1, std::string(1 << 20, 'x'));
  img.filename = "static_true";
  auto as = old.Exec(img, &err);
  ASSERT_TRUE(as) << strerror(err);
  const uint64_t p = kExecStackTop - 8 - (12 + (1 << 20) + 1);
  std::vector<VmaInfo> top = as->Maps(kExecStackTop - kPageSize, kExecStackTop);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].start, (p & ~(kPageSize - 1)) - kExecStackExpand);
  EXPECT_EQ(top[0].name, "[stack]");
  img = ExecImage{};  // the files' page caches go with their last reference
  ExpectAllFramesFreed(as, frames_);
}

}  // namespace
}  // namespace vmspace
