// SPDX-License-Identifier: Apache-2.0
// Files in the engine: the FileTable (open rules, pread/pwrite through the page cache,
// fsync), file mappings (private COW, shared writes, EOF and SIGBUS, major faults,
// merges with offset continuity, maps lines), truncate through i_mmap, writeback and
// its errors, fault-around per profile. Expected values are what Linux 6.18 does (see
// tests/oracle for the same ops against the real kernel).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/address_space.h"
#include "engine/file.h"
#include "engine/stats.h"
#include "profiles.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t kBase = 0x200000000000ull;
constexpr uint64_t P = kPageSize;

/// A temporary data directory, removed at the end.
struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/vmspace-file-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string Host(const std::string& rel) const { return path + "/" + rel; }
  /// A host file whose page k holds bytes (k+1) & 0xff (the shared cases' content).
  void MakeFile(const std::string& rel, uint64_t size) const {
    std::string data(size, 0);
    for (uint64_t i = 0; i < size; i++) data[i] = static_cast<char>(((i / P) + 1) & 0xff);
    int fd = open(Host(rel).c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    close(fd);
  }
  /// pread of the host file itself (what is on "disk").
  int HostByte(const std::string& rel, uint64_t off) const {
    int fd = open(Host(rel).c_str(), O_RDONLY);
    uint8_t b = 0;
    const ssize_t n = pread(fd, &b, 1, static_cast<off_t>(off));
    close(fd);
    return n == 1 ? b : -1;
  }
  uint64_t HostSize(const std::string& rel) const {
    struct stat st;
    return stat(Host(rel).c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : ~0ull;
  }
  std::string path;
};

uint64_t Ev(Event e) { return ReadStats().event(e); }

class FileTableTest : public ::testing::Test {
 protected:
  FrameAllocator frames_;
  TempDir dir_;
  std::unique_ptr<FileTable> files_ = std::make_unique<FileTable>(frames_, dir_.path);

  uint64_t OpenOk(const std::string& p, OpenFlags f) {
    SysResult r = files_->Open(p, f);
    EXPECT_EQ(r.error, 0) << p;
    return r.value;
  }
};

TEST_F(FileTableTest, PathRules) {
  OpenFlags rw{.write = true, .create = true};
  EXPECT_EQ(files_->Open("", rw).error, EINVAL);
  EXPECT_EQ(files_->Open("/etc/passwd", {}).error, EINVAL);
  EXPECT_EQ(files_->Open("..", {}).error, EINVAL);
  EXPECT_EQ(files_->Open("a/../b", rw).error, EINVAL);
  EXPECT_EQ(files_->Open(std::string("a\0b", 3), rw).error, EINVAL);
  EXPECT_EQ(files_->Open(std::string(256, 'x'), rw).error, ENAMETOOLONG);
  EXPECT_EQ(files_->Open("missing", {}).error, ENOENT);
  EXPECT_EQ(files_->Open("t", {.write = false, .truncate = true}).error, EINVAL);
  // A symlink that leads out of the data directory, and one that stays inside.
  ASSERT_EQ(symlink("/etc/passwd", dir_.Host("out").c_str()), 0);
  EXPECT_EQ(files_->Open("out", {}).error, EACCES);
  dir_.MakeFile("real", P);
  // An absolute symlink is refused even when it names a file inside (RESOLVE_BENEATH).
  ASSERT_EQ(symlink(dir_.Host("real").c_str(), dir_.Host("abs").c_str()), 0);
  EXPECT_EQ(files_->Open("abs", {}).error, EACCES);
  ASSERT_EQ(symlink("real", dir_.Host("in").c_str()), 0);
  const uint64_t a = OpenOk("in", {});
  const uint64_t b = OpenOk("real", {});
  FileStat sa, sb;
  ASSERT_TRUE(files_->Stat(a, &sa).ok());
  ASSERT_TRUE(files_->Stat(b, &sb).ok());
  EXPECT_EQ(sa.inode, sb.inode);  // one inode, one page cache
  EXPECT_EQ(sa.open_handles, 2u);
  ASSERT_EQ(mkdir(dir_.Host("d").c_str(), 0755), 0);
  EXPECT_EQ(files_->Open("d", {}).error, EISDIR);
  EXPECT_EQ(files_->Open("real", {.write = true, .create = true, .exclusive = true}).error, EEXIST);
  FileTable none(frames_, "");
  EXPECT_EQ(none.Open("real", {}).error, EACCES);
  EXPECT_TRUE(none.CreateShmem("x", P).ok());
  EXPECT_EQ(files_->Close(12345), EBADF);
  EXPECT_EQ(files_->Close(a), 0);
  EXPECT_EQ(files_->Close(a), EBADF);
}

TEST_F(FileTableTest, ListPagesByIdAndTheHandleLimitIsEnfile) {
  dir_.MakeFile("f", P);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 5; i++) ids.push_back(OpenOk("f", {}));
  ids.push_back(files_->CreateShmem("m", P).value);
  FileStat st;
  ASSERT_TRUE(files_->Stat(ids[0], &st).ok());
  EXPECT_EQ(st.open_handles, 5u);  // the five handles of one inode; the memfd has its own
  ASSERT_TRUE(files_->Stat(ids[5], &st).ok());
  EXPECT_EQ(st.open_handles, 1u);
  // Pages of two: ids in order, `more` the last id of a page that is not the last.
  uint64_t more = 0;
  std::vector<uint64_t> seen;
  uint64_t after = 0;
  int pages = 0;
  do {
    std::vector<FileStat> page = files_->List(after, 2, &more);
    EXPECT_LE(page.size(), 2u);
    for (const FileStat& s : page) seen.push_back(s.file_id);
    after = more;
    pages++;
  } while (more != 0);
  EXPECT_EQ(seen, ids);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(files_->List(ids[1], 3).size(), 3u);
  EXPECT_EQ(files_->Close(ids[1]), 0);
  ASSERT_TRUE(files_->Stat(ids[0], &st).ok());
  EXPECT_EQ(st.open_handles, 4u);
  // The daemon-wide limit (fs.file-max): ENFILE for both kinds, until one is closed.
  EXPECT_EQ(files_->HandleCount(), 5u);
  files_->SetMaxHandles(5);
  EXPECT_EQ(files_->Open("f", {}).error, ENFILE);
  EXPECT_EQ(files_->CreateShmem("n", P).error, ENFILE);
  EXPECT_EQ(files_->Close(ids[2]), 0);
  EXPECT_TRUE(files_->Open("f", {}).ok());
  EXPECT_EQ(files_->HandleCount(), 5u);
  files_->SetMaxHandles(0);
  EXPECT_TRUE(files_->CreateShmem("n", P).ok());
}

TEST_F(FileTableTest, ReadWriteThroughThePageCacheAndFsync) {
  const uint64_t id = OpenOk("f", {.write = true, .create = true});
  const std::string msg = "hello, page cache";
  ASSERT_EQ(files_->Write(id, 5000, msg.data(), msg.size()).value, msg.size());
  FileStat st;
  ASSERT_TRUE(files_->Stat(id, &st).ok());
  EXPECT_EQ(st.size_bytes, 5000 + msg.size());
  EXPECT_EQ(st.cached_pages, 1u);  // only page 1 was written; page 0 is a hole
  EXPECT_EQ(st.dirty_pages, 1u);
  EXPECT_EQ(dir_.HostSize("f"), 0u);  // not written back yet
  char buf[64] = {};
  EXPECT_EQ(files_->Read(id, 4990, buf, sizeof buf).value, 10 + msg.size());  // stops at EOF
  EXPECT_EQ(std::string(buf + 10, msg.size()), msg);
  EXPECT_EQ(buf[0], 0);
  EXPECT_EQ(files_->Fsync(id), 0);
  ASSERT_TRUE(files_->Stat(id, &st).ok());
  EXPECT_EQ(st.dirty_pages, 0u);
  EXPECT_EQ(dir_.HostSize("f"), 5000 + msg.size());
  EXPECT_EQ(dir_.HostByte("f", 5000), 'h');
  // Totals count each File once, however many handles, and a memfd too.
  const uint64_t again = OpenOk("f", {});
  SysResult mfd = files_->CreateShmem("m", P);
  ASSERT_TRUE(mfd.ok());
  ASSERT_EQ(files_->Write(mfd.value, 0, "x", 1).value, 1u);
  PageCacheTotals t = files_->Totals();
  EXPECT_EQ(t.files, 2u);
  EXPECT_EQ(t.cached_pages, 2u);  // page 1 of f (page 0 is a hole never read), the memfd page
  EXPECT_EQ(t.dirty_pages, 0u);   // f was written back; shmem pages are not tracked
  EXPECT_EQ(files_->Close(again), 0);
  EXPECT_EQ(files_->Close(mfd.value), 0);
  EXPECT_EQ(files_->Totals().files, 1u);
  // A read-only handle cannot write or truncate.
  const uint64_t ro = OpenOk("f", {});
  EXPECT_EQ(files_->Write(ro, 0, "x", 1).error, EBADF);
  EXPECT_EQ(files_->Truncate(ro, 0), EINVAL);
  EXPECT_EQ(files_->Truncate(id, 1ull << 45), EFBIG);
  EXPECT_EQ(files_->Write(id, (1ull << 44) - 1, "xy", 2).error, EFBIG);
}

// A size the host filesystem refuses (here: beyond RLIMIT_FSIZE, which makes ftruncate(2)
// answer EFBIG on any filesystem, as ext4 does beyond its s_maxbytes of 2^44 - 4096)
// changes nothing: not i_size, not the host file.
TEST_F(FileTableTest, TruncateTheHostRefusesLeavesTheSizeAlone) {
  const uint64_t id = OpenOk("f", {.write = true, .create = true});
  ASSERT_EQ(files_->Truncate(id, 3 * P), 0);
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 16 * P;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const int err = files_->Truncate(id, 64 * P);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  EXPECT_EQ(err, EFBIG);
  FileStat st;
  ASSERT_TRUE(files_->Stat(id, &st).ok());
  EXPECT_EQ(st.size_bytes, 3 * P);
  EXPECT_EQ(dir_.HostSize("f"), 3 * P);
  char b;
  EXPECT_EQ(files_->Read(id, 3 * P, &b, 1).value, 0u);  // EOF where it was
}

// fsync(2) and a clean shutdown's sync reach the disk: each ends with fdatasync(2) of the
// host file (counted); a shmem file has no host file to sync.
TEST_F(FileTableTest, FsyncAndSyncAllSyncTheHostFile) {
  const uint64_t id = OpenOk("f", {.write = true, .create = true});
  SysResult mfd = files_->CreateShmem("m", P);
  ASSERT_TRUE(mfd.ok());
  ASSERT_EQ(files_->Write(id, 0, "x", 1).value, 1u);
  const StatsSnapshot s0 = ReadStats();
  EXPECT_EQ(files_->Fsync(id), 0);
  EXPECT_EQ(ReadStats().Minus(s0).event(Event::kHostFileSyncs), 1u);
  EXPECT_EQ(dir_.HostByte("f", 0), 'x');
  EXPECT_EQ(files_->Fsync(mfd.value), 0);
  EXPECT_EQ(ReadStats().Minus(s0).event(Event::kHostFileSyncs), 1u);
  EXPECT_EQ(files_->SyncAll(), 0);  // one host file open
  EXPECT_EQ(ReadStats().Minus(s0).event(Event::kHostFileSyncs), 2u);
}

TEST_F(FileTableTest, LastCloseWritesBackAndFramesAreReturned) {
  {
    const uint64_t id = OpenOk("g", {.write = true, .create = true});
    ASSERT_EQ(files_->Write(id, 0, "abc", 3).value, 3u);
    EXPECT_GT(frames_.in_use_frames(), 0);
    EXPECT_EQ(files_->Close(id), 0);  // the last reference: iput writes it back
  }
  RcuBarrier();
  EXPECT_EQ(frames_.in_use_frames(), 0);
  EXPECT_EQ(dir_.HostByte("g", 2), 'c');
  // And a table destroyed with dirty pages writes them too (shutdown).
  const uint64_t id = OpenOk("h", {.write = true, .create = true});
  ASSERT_EQ(files_->Write(id, 0, "xyz", 3).value, 3u);
  files_.reset();
  RcuBarrier();
  EXPECT_EQ(dir_.HostByte("h", 1), 'y');
  EXPECT_EQ(frames_.in_use_frames(), 0);
}

/// Mapping tests, under every locking profile.
class FileMapTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(LockingProfile::Parse(GetParam(), &opts_.profile, &err_)) << err_;
    as_ = std::make_unique<AddressSpace>(frames_, opts_);
  }
  void TearDown() override {
    if (as_) {
      EXPECT_EQ(as_->Validate(), "");
    }
    as_.reset();
    files_.reset();
    RcuBarrier();
    EXPECT_EQ(frames_.in_use_frames(), 0) << "frames leaked (>0) or freed twice (<0)";
  }
  std::shared_ptr<OpenFile> OpenFileOf(const std::string& rel, uint64_t size, bool write = true) {
    dir_.MakeFile(rel, size);
    SysResult r = files_->Open(rel, {.write = write});
    EXPECT_EQ(r.error, 0);
    return files_->Get(r.value);
  }
  SysResult Map(uint64_t off, uint64_t len, int prot, int flags, const std::shared_ptr<OpenFile>& f,
                uint64_t foff) {
    return as_->Mmap(kBase + off, len, prot, flags | MAP_FIXED, foff, f);
  }
  int ReadByte(uint64_t off) {
    uint8_t b;
    CopyResult r = as_->ReadMemory(kBase + off, &b, 1);
    return r.ok() ? b : -1;
  }
  FaultResult WriteByte(uint64_t off, uint8_t v) {
    CopyResult r = as_->WriteMemory(kBase + off, &v, 1);
    return r.stop;
  }
  int FileByte(uint64_t id, uint64_t off) {
    uint8_t b;
    return files_->Read(id, off, &b, 1).value == 1 ? b : -1;
  }
  uint64_t IdOf(const std::shared_ptr<OpenFile>& f) {
    for (const FileStat& s : files_->List())
      if (files_->Get(s.file_id) == f) return s.file_id;
    return 0;
  }

  std::string err_;
  SpaceOptions opts_;
  FrameAllocator frames_;
  TempDir dir_;
  std::unique_ptr<FileTable> files_ = std::make_unique<FileTable>(frames_, dir_.path);
  std::unique_ptr<AddressSpace> as_;
};

TEST_P(FileMapTest, MmapErrnosInTheKernelsOrder) {
  auto rw = OpenFileOf("f", 3 * P);
  auto ro = OpenFileOf("r", 3 * P, /*write=*/false);
  EXPECT_EQ(as_->Mmap(0, P, PROT_READ, MAP_SHARED, 0, nullptr).error, EBADF);
  EXPECT_EQ(as_->Mmap(0, P, PROT_READ, MAP_SHARED, 100, rw).error, EINVAL);  // offset first
  EXPECT_EQ(as_->Mmap(0, 0, PROT_READ, MAP_SHARED, 0, rw).error, EINVAL);
  EXPECT_EQ(as_->Mmap(0, P, PROT_READ | PROT_WRITE, MAP_SHARED, 0, ro).error, EACCES);
  EXPECT_EQ(as_->Mmap(0, P, PROT_READ, MAP_SHARED | MAP_GROWSDOWN, 0, rw).error, EINVAL);
  EXPECT_EQ(as_->Mmap(0, P, PROT_READ, MAP_PRIVATE | MAP_GROWSDOWN, 0, rw).error, EINVAL);
  EXPECT_EQ(as_->Mmap(0, P, PROT_READ, MAP_SHARED | MAP_HUGETLB, 0, rw).error, EINVAL);
  EXPECT_EQ(as_->Mmap(0, P, PROT_READ, MAP_SHARED_VALIDATE | MAP_SYNC, 0, rw).error, EOPNOTSUPP);
  EXPECT_EQ(as_->Mmap(0, P, PROT_READ, MAP_SHARED, 0x7ffffffffffff000ull, rw).error, EOVERFLOW);
  EXPECT_EQ(as_->Mmap(0, P, PROT_READ, MAP_SHARED, 0xfffffffffffff000ull, rw).error, EOVERFLOW);
  EXPECT_TRUE(as_->Mmap(0, P, PROT_READ, MAP_SHARED, 0x7fffffffffffe000ull, rw).ok());  // fits exactly
  // PROT_WRITE on a private mapping of a read-only file is fine (COW); a read-only
  // shared one cannot become writable.
  EXPECT_TRUE(Map(0, P, PROT_READ | PROT_WRITE, MAP_PRIVATE, ro, 0).ok());
  ASSERT_TRUE(Map(2 * P, P, PROT_READ, MAP_SHARED, ro, 0).ok());
  EXPECT_EQ(as_->Mprotect(kBase + 2 * P, P, PROT_READ | PROT_WRITE).error, EACCES);
  const std::vector<VmaInfo> maps = as_->Maps(kBase, kBase + 3 * P);
  ASSERT_EQ(maps.size(), 2u);
  EXPECT_EQ(AddressSpace::VmFlagsString(maps[1].flags), "rd mr me ms");  // no sh, no mw
}

TEST_P(FileMapTest, PrivateCopyOnWriteFollowsTheFileUntilWritten) {
  // Shared case 15.
  auto f = OpenFileOf("fileA", 3 * P);
  const uint64_t id = IdOf(f);
  ASSERT_TRUE(Map(0, 3 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE, f, 0).ok());
  ASSERT_TRUE(Map(4 * P, 3 * P, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0).ok());
  std::vector<VmaInfo> m = as_->Maps(kBase, kBase + 8 * P);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(AddressSpace::VmFlagsString(m[0].flags), "rd wr mr mw me ac");
  EXPECT_EQ(AddressSpace::VmFlagsString(m[1].flags), "rd wr sh mr mw me ms");
  EXPECT_EQ(m[0].name, dir_.Host("fileA"));
  struct stat st;
  ASSERT_EQ(stat(dir_.Host("fileA").c_str(), &st), 0);
  EXPECT_EQ(m[0].inode, st.st_ino);
  EXPECT_EQ(ReadByte(0), 0x01);
  EXPECT_FALSE(WriteByte(4 * P, 0x51).failed());
  EXPECT_EQ(ReadByte(0), 0x51);  // the private page still shows the page cache
  EXPECT_FALSE(WriteByte(P, 0x61).failed());  // COW of page 1
  EXPECT_EQ(FileByte(id, P), 0x02);
  EXPECT_EQ(ReadByte(5 * P), 0x02);
  EXPECT_FALSE(WriteByte(5 * P, 0x52).failed());
  EXPECT_EQ(ReadByte(P), 0x61);
  EXPECT_EQ(FileByte(id, P), 0x52);
  ASSERT_EQ(files_->Write(id, 2 * P, "\x71", 1).value, 1u);
  EXPECT_EQ(ReadByte(2 * P), 0x71);
  EXPECT_EQ(ReadByte(6 * P), 0x71);
  ASSERT_TRUE(as_->Mprotect(kBase, 3 * P, PROT_READ).ok());
  EXPECT_EQ(ReadByte(P), 0x61);  // mprotect keeps the copy
  ASSERT_EQ(files_->Write(id, P, "\x72", 1).value, 1u);
  EXPECT_EQ(ReadByte(P), 0x61);
  EXPECT_EQ(ReadByte(0), 0x51);
  const SpaceCounters c = as_->Counters();
  EXPECT_EQ(c.anon_pages, 1u);  // the one COW copy
  EXPECT_EQ(as_->Validate(), "");
}

TEST_P(FileMapTest, SigbusBeyondEofAndTruncateShrinkGrow) {
  // Shared case 19.
  auto f = OpenFileOf("fileA", 3 * P);
  const uint64_t id = IdOf(f);
  ASSERT_TRUE(Map(0, 3 * P, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0).ok());
  ASSERT_TRUE(Map(8 * P, 3 * P, PROT_READ, MAP_PRIVATE, f, 0).ok());
  std::vector<uint8_t> fill(3 * P, 0x21);
  ASSERT_TRUE(as_->WriteMemory(kBase, fill.data(), fill.size()).ok());
  EXPECT_EQ(ReadByte(8 * P + 0x10), 0x21);
  EXPECT_EQ(ReadByte(9 * P), 0x21);
  ASSERT_EQ(files_->Truncate(id, 0x10), 0);
  EXPECT_EQ(ReadByte(0xf), 0x21);
  EXPECT_EQ(ReadByte(0x10), 0x00);  // the EOF page's tail is zeroed
  EXPECT_EQ(ReadByte(0xfff), 0x00);
  FaultResult r = as_->Fault(kBase + P, AccessType::kRead);
  EXPECT_EQ(r.outcome, FaultOutcome::kSigbus);
  EXPECT_EQ(r.sig_code, kBusAdrerr);
  EXPECT_EQ(r.sig_addr, kBase + P);
  EXPECT_EQ(WriteByte(2 * P, 0x22).outcome, FaultOutcome::kSigbus);
  EXPECT_EQ(ReadByte(8 * P + 0x10), 0x00);
  EXPECT_EQ(as_->Fault(kBase + 9 * P, AccessType::kRead).outcome, FaultOutcome::kSigbus);
  uint8_t b;
  EXPECT_EQ(files_->Read(id, 0x10, &b, 1).value, 0u);
  EXPECT_EQ(as_->Validate(), "");
  ASSERT_EQ(files_->Truncate(id, 3 * P), 0);
  EXPECT_EQ(ReadByte(P), 0x00);  // the data beyond the old EOF is gone
  EXPECT_EQ(ReadByte(0x10), 0x00);
  EXPECT_FALSE(WriteByte(2 * P, 0x23).failed());
  EXPECT_EQ(FileByte(id, 2 * P), 0x23);
  EXPECT_EQ(ReadByte(10 * P), 0x23);
  ASSERT_TRUE(as_->Munmap(kBase, 3 * P).ok());
  ASSERT_EQ(files_->Truncate(id, 0x10), 0);
  FileStat st;
  ASSERT_TRUE(files_->Stat(id, &st).ok());
  EXPECT_EQ(st.size_bytes, 0x10u);
  EXPECT_EQ(st.mapped_vmas, 1u);
  EXPECT_EQ(dir_.HostSize("fileA"), 0x10u);
}

TEST_P(FileMapTest, MappingLongerThanTheFile) {
  auto f = OpenFileOf("short", 100);
  ASSERT_TRUE(Map(0, 4 * P, PROT_READ, MAP_SHARED, f, 0).ok());
  EXPECT_EQ(ReadByte(200), 0);  // inside the EOF page: zero tail, no signal
  EXPECT_EQ(ReadByte(99), 1);
  FaultResult r = as_->Fault(kBase + P + 7, AccessType::kRead);
  EXPECT_EQ(r.outcome, FaultOutcome::kSigbus);
  EXPECT_EQ(r.sig_addr, kBase + P + 7);
}

TEST_P(FileMapTest, SharedCoherenceWithPreadPwrite) {
  // Shared case 21.
  auto f = OpenFileOf("fileA", 3 * P);
  const uint64_t id = IdOf(f);
  ASSERT_TRUE(Map(0, 3 * P, PROT_READ, MAP_SHARED, f, 0).ok());
  ASSERT_TRUE(Map(8 * P, 2 * P, PROT_READ | PROT_WRITE, MAP_SHARED, f, P).ok());
  ASSERT_TRUE(Map(16 * P, 3 * P, PROT_READ, MAP_PRIVATE, f, 0).ok());
  EXPECT_EQ(ReadByte(0), 0x01);
  ASSERT_EQ(files_->Write(id, 0, "\x2a", 1).value, 1u);
  EXPECT_EQ(ReadByte(0), 0x2a);
  EXPECT_EQ(ReadByte(16 * P), 0x2a);
  EXPECT_FALSE(WriteByte(8 * P, 0x3b).failed());
  EXPECT_EQ(FileByte(id, P), 0x3b);
  EXPECT_EQ(ReadByte(P), 0x3b);
  EXPECT_EQ(ReadByte(17 * P), 0x3b);
  FaultResult r = WriteByte(0, 0x5d);
  EXPECT_EQ(r.outcome, FaultOutcome::kSigsegv);
  EXPECT_EQ(r.sig_code, kSegvAccerr);
  ASSERT_TRUE(as_->Munmap(kBase + 8 * P, 2 * P).ok());
  EXPECT_EQ(FileByte(id, P), 0x3b);  // munmap keeps the dirty page in the cache
  FileStat st;
  ASSERT_TRUE(files_->Stat(id, &st).ok());
  EXPECT_EQ(st.dirty_pages, 2u);  // page 0 (pwrite) and page 1 (the store)
  EXPECT_EQ(dir_.HostByte("fileA", P), 0x02);
  EXPECT_EQ(files_->Fsync(id), 0);
  EXPECT_EQ(dir_.HostByte("fileA", P), 0x3b);
}

TEST_P(FileMapTest, MadviseDontneedDropsPrivateCopies) {
  // Shared case 23.
  auto f = OpenFileOf("fileA", 4 * P);
  const uint64_t id = IdOf(f);
  ASSERT_TRUE(Map(0, 5 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE, f, 0).ok());
  ASSERT_TRUE(Map(8 * P, 2 * P, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0).ok());
  std::vector<uint8_t> fill(4 * P, 0x71);
  ASSERT_TRUE(as_->WriteMemory(kBase, fill.data(), fill.size()).ok());
  EXPECT_EQ(FileByte(id, P), 0x02);
  ASSERT_TRUE(as_->Madvise(kBase + P, P, MADV_DONTNEED).ok());
  EXPECT_EQ(ReadByte(P), 0x02);
  EXPECT_EQ(ReadByte(0), 0x71);
  ASSERT_EQ(files_->Write(id, P, "\x62", 1).value, 1u);
  EXPECT_EQ(ReadByte(P), 0x62);
  ASSERT_EQ(files_->Write(id, 2 * P, "\x63", 1).value, 1u);
  EXPECT_EQ(ReadByte(2 * P), 0x71);
  EXPECT_FALSE(WriteByte(8 * P, 0x81).failed());
  ASSERT_TRUE(as_->Madvise(kBase + 8 * P, 2 * P, MADV_DONTNEED).ok());
  EXPECT_EQ(ReadByte(8 * P), 0x81);
  ASSERT_TRUE(as_->Madvise(kBase + 4 * P, P, MADV_DONTNEED).ok());
  EXPECT_EQ(as_->Fault(kBase + 4 * P, AccessType::kRead).outcome, FaultOutcome::kSigbus);
  ASSERT_TRUE(as_->Madvise(kBase, 4 * P, MADV_DONTNEED).ok());
  EXPECT_EQ(ReadByte(0), 0x81);
  EXPECT_EQ(ReadByte(2 * P), 0x63);
  EXPECT_EQ(as_->Counters().anon_pages, 0u);
}

TEST_P(FileMapTest, MergeNeedsTheSameFileAndContinuousOffsets) {
  auto f = OpenFileOf("m", 8 * P);
  auto g = OpenFileOf("n", 8 * P);
  ASSERT_TRUE(Map(0, P, PROT_READ, MAP_PRIVATE, f, 0).ok());
  ASSERT_TRUE(Map(P, P, PROT_READ, MAP_PRIVATE, f, P).ok());      // continues: merges
  ASSERT_TRUE(Map(2 * P, P, PROT_READ, MAP_PRIVATE, f, 5 * P).ok());  // a jump: no merge
  ASSERT_TRUE(Map(3 * P, P, PROT_READ, MAP_PRIVATE, g, 6 * P).ok());  // another file
  std::vector<VmaInfo> m = as_->Maps(kBase, kBase + 4 * P);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].end, kBase + 2 * P);
  EXPECT_EQ(m[1].offset, 5 * P);
  EXPECT_EQ(m[2].offset, 6 * P);
  // A split by mprotect keeps the offsets; restoring merges back.
  ASSERT_TRUE(Map(8 * P, 4 * P, PROT_READ, MAP_SHARED, f, P).ok());
  ASSERT_TRUE(as_->Mprotect(kBase + 9 * P, P, PROT_NONE).ok());
  m = as_->Maps(kBase + 8 * P, kBase + 12 * P);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1].offset, 2 * P);
  EXPECT_EQ(m[2].offset, 3 * P);
  EXPECT_EQ(as_->Validate(), "");
  ASSERT_TRUE(as_->Mprotect(kBase + 9 * P, P, PROT_READ).ok());
  EXPECT_EQ(as_->Maps(kBase + 8 * P, kBase + 12 * P).size(), 1u);
  FileStat st;
  ASSERT_TRUE(files_->Stat(IdOf(f), &st).ok());
  EXPECT_EQ(st.mapped_vmas, 3u);
  EXPECT_EQ(AddressSpace::FormatMapsLine(as_->Maps(kBase + 8 * P, kBase + 9 * P)[0]).substr(0, 40),
            "200000008000-20000000c000 r--s 00001000 ");
}

TEST_P(FileMapTest, MajorFaultOnMissMinorOnHitAndFaultAround) {
  files_->SetReadAheadBytes(32 * P);  // before the open: the File keeps its window
  auto f = OpenFileOf("big", 64 * P);
  const uint64_t id = IdOf(f);
  ASSERT_TRUE(Map(0, 64 * P, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0).ok());
  const uint64_t maj0 = Ev(Event::kPgmajfault), fa0 = Ev(Event::kFaultAroundPages);
  // Nothing cached: the first fault (at page 20) reads the read-around window
  // [20 - 16, 20 + 16) in and, redone, maps the 16-page fault-around block [16, 32).
  AccessResult a = as_->Access(kBase + 20 * P, 1, 1, AccessType::kRead);
  EXPECT_EQ(a.faults, 1u);
  EXPECT_EQ(a.major_faults, 1u);
  EXPECT_EQ(Ev(Event::kPgmajfault) - maj0, 1u);
  EXPECT_EQ(Ev(Event::kFaultAroundPages) - fa0, 16u);
  FileStat st;
  ASSERT_TRUE(files_->Stat(id, &st).ok());
  EXPECT_EQ(st.cached_pages, 32u);
  // Pages 4..15 are cached: one minor fault maps [0, 16) except what is not cached.
  a = as_->Access(kBase + 4 * P, 1, 1, AccessType::kRead);
  EXPECT_EQ(a.major_faults, 0u);
  EXPECT_EQ(as_->Counters().file_pages, 28u);  // 16 + pages 4..15
  // Page 0 is not cached: a major fault again, reading [0, 16) (what is missing).
  a = as_->Access(kBase, 1, 1, AccessType::kRead);
  EXPECT_EQ(a.major_faults, 1u);
  // The whole file cached, the PTEs dropped: 64 pages take 4 minor faults.
  std::vector<uint8_t> buf(64 * P);
  ASSERT_EQ(files_->Read(id, 0, buf.data(), buf.size()).value, buf.size());
  ASSERT_TRUE(as_->Madvise(kBase, 64 * P, MADV_DONTNEED).ok());
  const uint64_t fa1 = Ev(Event::kFaultAroundPages);
  a = as_->Access(kBase, 64 * P, P, AccessType::kRead);
  EXPECT_EQ(a.faults, 4u);
  EXPECT_EQ(a.major_faults, 0u);
  EXPECT_EQ(Ev(Event::kFaultAroundPages) - fa1, 64u);
  EXPECT_EQ(as_->Counters().file_pages, 64u);
  // Writes to the shared mapping fault once per page (read-only PTEs: dirty tracking).
  a = as_->Access(kBase, 64 * P, P, AccessType::kWrite);
  EXPECT_EQ(a.faults, 64u);
  ASSERT_TRUE(files_->Stat(id, &st).ok());
  EXPECT_EQ(st.dirty_pages, 64u);
  EXPECT_EQ(as_->Validate(), "");
}

TEST_P(FileMapTest, FaultAroundWindowIsClampedToTheVma) {
  // A mapping starting 3 pages into a 16-page block: a fault on its page 5 maps its
  // pages 0..15 (the window starts at the VMA), so the next fault is at page 16.
  auto f = OpenFileOf("w", 64 * P);
  std::vector<uint8_t> buf(64 * P);
  ASSERT_EQ(files_->Read(IdOf(f), 0, buf.data(), buf.size()).value, buf.size());
  ASSERT_TRUE(Map(3 * P, 40 * P, PROT_READ, MAP_PRIVATE, f, 0).ok());
  ASSERT_FALSE(as_->Fault(kBase + 8 * P, AccessType::kRead).failed());
  EXPECT_EQ(as_->Counters().file_pages, 16u);
  EXPECT_EQ(as_->Fault(kBase + 18 * P, AccessType::kRead).outcome, FaultOutcome::kNone);
  EXPECT_EQ(as_->Fault(kBase + 19 * P, AccessType::kRead).outcome, FaultOutcome::kMinor);
}

TEST_P(FileMapTest, FileFaultLockPathPerProfile) {
  auto f = OpenFileOf("p", 4 * P);
  ASSERT_TRUE(Map(0, 4 * P, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0).ok());
  const uint64_t retry0 = Ev(Event::kVmaLockRetryFile), pgfault0 = Ev(Event::kPgfault);
  FaultResult r = as_->Fault(kBase, AccessType::kRead);
  ASSERT_EQ(r.outcome, FaultOutcome::kMajor);
  EXPECT_EQ(Ev(Event::kPgfault) - pgfault0, 1u);  // a retried attempt is not counted
  const LockingProfile& p = opts_.profile;
  // A read miss needs ->fault: under the VMA lock from 6.7 (kAll); 6.4 (kAnon) and 6.6
  // (kAround: only fault-around runs under it) answer VM_FAULT_RETRY.
  const bool retries = p.vma_lock == VmaLockMode::kAnon || p.vma_lock == VmaLockMode::kAround;
  EXPECT_EQ(r.vma_lock_retry, retries);
  EXPECT_EQ(Ev(Event::kVmaLockRetryFile) - retry0, retries ? 1u : 0u);
  EXPECT_EQ(r.path, p.vma_lock == VmaLockMode::kAll ? LockPath::kVmaLock : LockPath::kMmapLock);
  // A read fault that fault-around serves from the page cache: under the VMA lock from
  // 6.6 on ("mm: run the fault-around code under the VMA lock").
  const bool around = p.vma_lock == VmaLockMode::kAround || p.vma_lock == VmaLockMode::kAll;
  ASSERT_EQ(as_->Madvise(kBase + P, P, MADV_DONTNEED).error, 0);
  r = as_->Fault(kBase + P, AccessType::kRead);
  EXPECT_EQ(r.outcome, FaultOutcome::kMinor);
  EXPECT_EQ(r.path, around ? LockPath::kVmaLock : LockPath::kMmapLock);
  EXPECT_EQ(r.vma_lock_retry, p.vma_lock == VmaLockMode::kAnon);
  // A shared write (write-notify on the page mapped read-only): under the VMA lock from
  // 6.7 ("mm: handle shared faults under the VMA lock"); 6.6 retries it.
  const uint64_t retry1 = Ev(Event::kVmaLockRetryFile);
  r = as_->Fault(kBase + P, AccessType::kWrite);
  EXPECT_EQ(r.outcome, FaultOutcome::kMinor);
  EXPECT_EQ(r.path, p.vma_lock == VmaLockMode::kAll ? LockPath::kVmaLock : LockPath::kMmapLock);
  EXPECT_EQ(Ev(Event::kVmaLockRetryFile) - retry1, retries ? 1u : 0u);
  // A private write needs an anon_vma: the first one is redone under mmap_lock (6.6),
  // the next one, with the anon_vma there, runs under the VMA lock.
  ASSERT_TRUE(Map(8 * P, 2 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE, f, 0).ok());
  const uint64_t anon0 = Ev(Event::kVmaLockRetryAnonVma);
  r = as_->Fault(kBase + 8 * P, AccessType::kWrite);
  EXPECT_EQ(r.path, LockPath::kMmapLock);
  EXPECT_EQ(r.vma_lock_retry, p.vma_lock != VmaLockMode::kOff);
  EXPECT_EQ(Ev(Event::kVmaLockRetryAnonVma) - anon0, p.vma_lock == VmaLockMode::kAll ? 1u : 0u);  // 6.6: a plain RETRY
  r = as_->Fault(kBase + 9 * P, AccessType::kWrite);
  EXPECT_EQ(r.outcome, FaultOutcome::kMinor);
  EXPECT_EQ(r.path, p.vma_lock == VmaLockMode::kAll ? LockPath::kVmaLock : LockPath::kMmapLock);
  EXPECT_EQ(as_->Counters().anon_pages, 2u);
}

TEST_P(FileMapTest, MsyncWritesBackSharedDirtyPages) {
  auto f = OpenFileOf("s", 2 * P);
  ASSERT_TRUE(Map(0, 2 * P, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0).ok());
  EXPECT_FALSE(WriteByte(P + 1, 0x99).failed());
  EXPECT_EQ(dir_.HostByte("s", P + 1), 0x02);
  EXPECT_EQ(as_->Msync(kBase, 2 * P, MS_ASYNC).error, 0);
  EXPECT_EQ(as_->Msync(kBase + 1, P, MS_SYNC).error, EINVAL);
  EXPECT_EQ(as_->Msync(kBase, P, MS_SYNC | MS_ASYNC).error, EINVAL);
  EXPECT_EQ(as_->Msync(kBase, P, 8).error, EINVAL);
  EXPECT_EQ(as_->Msync(kBase, 2 * P, MS_SYNC).error, 0);
  EXPECT_EQ(dir_.HostByte("s", P + 1), 0x99);
  // After writeback the PTE is write-protected: the next store dirties the page again.
  EXPECT_EQ(as_->Fault(kBase + P + 2, AccessType::kWrite).outcome, FaultOutcome::kMinor);
  EXPECT_FALSE(WriteByte(P + 2, 0x98).failed());
  FileStat st;
  ASSERT_TRUE(files_->Stat(IdOf(f), &st).ok());
  EXPECT_EQ(st.dirty_pages, 1u);
  EXPECT_EQ(as_->Msync(kBase, 4 * P, MS_SYNC).error, ENOMEM);  // a hole after the mapping
  EXPECT_EQ(dir_.HostByte("s", P + 2), 0x98);
}

TEST_P(FileMapTest, SharedAnonymousIsAnUnnamedShmemFile) {
  ASSERT_TRUE(as_->Mmap(kBase, 2 * P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED).ok());
  std::vector<VmaInfo> m = as_->Maps(kBase, kBase + 2 * P);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].name, "/dev/zero (deleted)");
  EXPECT_TRUE(m[0].shmem);
  EXPECT_EQ(m[0].dev_minor, 1u);
  EXPECT_EQ(ReadByte(P), 0);
  EXPECT_FALSE(WriteByte(P, 7).failed());
  EXPECT_EQ(as_->Counters().shmem_pages, 1u);
  SysResult mfd = files_->CreateShmem("mfdA", P);
  ASSERT_TRUE(mfd.ok());
  ASSERT_TRUE(Map(4 * P, P, PROT_READ | PROT_WRITE, MAP_SHARED, files_->Get(mfd.value), 0).ok());
  EXPECT_EQ(as_->Maps(kBase + 4 * P, kBase + 5 * P)[0].name, "/memfd:mfdA (deleted)");
  EXPECT_FALSE(WriteByte(4 * P, 0x44).failed());
  EXPECT_EQ(FileByte(mfd.value, 0), 0x44);
  EXPECT_EQ(as_->Fault(kBase + 4 * P, AccessType::kWrite).outcome, FaultOutcome::kNone);  // writable at once
}

TEST_P(FileMapTest, TruncateReachesEverySpace) {
  auto f = OpenFileOf("t", 8 * P);
  const uint64_t id = IdOf(f);
  AddressSpace other(frames_, opts_);
  ASSERT_TRUE(Map(0, 8 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE, f, 0).ok());
  ASSERT_TRUE(other.Mmap(kBase, 8 * P, PROT_READ, MAP_SHARED | MAP_FIXED, 0, f).ok());
  std::vector<uint8_t> fill(8 * P, 0x5a);
  ASSERT_TRUE(as_->WriteMemory(kBase, fill.data(), fill.size()).ok());  // 8 COW copies
  ASSERT_TRUE(other.Access(kBase, 8 * P, P, AccessType::kRead).ok());
  EXPECT_EQ(as_->Counters().anon_pages, 8u);
  ASSERT_EQ(files_->Truncate(id, 2 * P), 0);
  EXPECT_EQ(as_->Counters().anon_pages, 2u);  // COW copies beyond EOF are gone (even_cows)
  EXPECT_EQ(other.Counters().file_pages, 2u);
  EXPECT_EQ(as_->Fault(kBase + 5 * P, AccessType::kRead).outcome, FaultOutcome::kSigbus);
  EXPECT_EQ(other.Fault(kBase + 2 * P, AccessType::kRead).outcome, FaultOutcome::kSigbus);
  EXPECT_EQ(ReadByte(P), 0x5a);  // the copies below EOF stay
  EXPECT_EQ(as_->Validate(), "");
  EXPECT_EQ(other.Validate(), "");
}

/// A tmpfs of two pages mounted over a temporary directory (root only).
struct TinyFs {
  TinyFs() {
    if (mount("tmpfs", dir.path.c_str(), "tmpfs", 0, "size=8k") == 0) mounted = true;
  }
  ~TinyFs() {
    if (mounted) umount2(dir.path.c_str(), MNT_DETACH);
  }
  TempDir dir;
  bool mounted = false;
};

TEST_P(FileMapTest, FailedWritebackKeepsPagesDirtyAndReportsEioOncePerFailure) {
  TinyFs fs;
  if (!fs.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << strerror(errno);
  {
    FileTable tiny(frames_, fs.dir.path);
    SysResult a = tiny.Open("f", {.write = true, .create = true});
    ASSERT_TRUE(a.ok());
    SysResult b = tiny.Open("f", {.write = true});  // a second handle, opened before the failure
    ASSERT_TRUE(b.ok());
    std::vector<uint8_t> data(4 * P, 0xab);
    ASSERT_EQ(tiny.Write(a.value, 0, data.data(), data.size()).value, data.size());  // in the cache only
    ASSERT_TRUE(Map(0, 4 * P, PROT_READ | PROT_WRITE, MAP_SHARED, tiny.Get(a.value), 0).ok());
    EXPECT_FALSE(WriteByte(3 * P, 0xcd).failed());
    EXPECT_EQ(tiny.Fsync(a.value), EIO);  // the filesystem holds two pages: ENOSPC on the rest
    FileStat st;
    ASSERT_TRUE(tiny.Stat(a.value, &st).ok());
    EXPECT_EQ(st.dirty_pages, 2u);  // nothing lost: what failed is still dirty
    EXPECT_EQ(ReadByte(3 * P), 0xcd);
    EXPECT_EQ(as_->Msync(kBase, 4 * P, MS_SYNC).error, EIO);  // a new failure
    EXPECT_EQ(tiny.Fsync(b.value), EIO);  // b's own writeback fails again (a third failure)
    ASSERT_EQ(tiny.Truncate(a.value, 2 * P), 0);  // make room: the dirty pages beyond go
    EXPECT_EQ(tiny.Fsync(b.value), 0);  // b has seen every failure
    EXPECT_EQ(tiny.Fsync(a.value), EIO);  // a has not seen the third: once...
    EXPECT_EQ(tiny.Fsync(a.value), 0);  // ...and not again
    ASSERT_TRUE(tiny.Stat(a.value, &st).ok());
    EXPECT_EQ(st.dirty_pages, 0u);
    EXPECT_EQ(fs.dir.HostByte("f", P), 0xab);
    EXPECT_EQ(as_->Fault(kBase + 3 * P, AccessType::kRead).outcome, FaultOutcome::kSigbus);
    ASSERT_TRUE(as_->Munmap(kBase, 4 * P).ok());
  }
}

TEST_P(FileMapTest, FaultsInManySpacesAgainstTruncateAndMunmap) {
  // Threads in three spaces fault a shared file (shared reads and writes, private COW)
  // while one thread truncates it (shrink, grow), another munmaps and remaps in one
  // space and a third writes it back; after each round every space validates and the
  // frames add up exactly.
  constexpr uint64_t kPages = 32;
  auto f = OpenFileOf("stress", kPages * P);
  const uint64_t id = IdOf(f);
  std::vector<std::unique_ptr<AddressSpace>> spaces;
  for (int s = 0; s < 3; s++) {
    spaces.push_back(std::make_unique<AddressSpace>(frames_, opts_));
    ASSERT_TRUE(spaces[s]->Mmap(kBase, kPages * P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, f).ok());
    ASSERT_TRUE(spaces[s]->Mmap(kBase + kPages * P, kPages * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED,
                                0, f).ok());
  }
  const int rounds = testing_util::Iterations(3000) / 300;
  for (int round = 0; round < rounds; round++) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++) {
      threads.emplace_back([&, t] {
        AddressSpace& as = *spaces[t % 3];
        uint64_t x = 0x9e3779b97f4a7c15ull * (t + 1 + round * 7);
        for (int i = 0; i < 400 && !stop.load(std::memory_order_relaxed); i++) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          const uint64_t page = x % (2 * kPages);
          const AccessType a = (x >> 32) & 1 ? AccessType::kWrite : AccessType::kRead;
          FaultResult r = as.Fault(kBase + page * P, a);
          // SIGBUS beyond EOF and SIGSEGV in a munmapped hole are expected outcomes.
          EXPECT_NE(r.outcome, FaultOutcome::kOom);
          if (a == AccessType::kWrite && !r.failed()) as.Access(kBase + page * P, 1, 1, AccessType::kWrite);
        }
      });
    }
    threads.emplace_back([&] {
      for (int i = 0; i < 20; i++) EXPECT_EQ(files_->Truncate(id, (i % 2 ? kPages : 1 + i % 7) * P), 0);
    });
    threads.emplace_back([&] {  // writeback (page_mkclean, a grace period) meanwhile
      for (int i = 0; i < 5; i++) {
        EXPECT_EQ(files_->Fsync(id), 0);
        EXPECT_NE(spaces[1]->Msync(kBase, kPages * P, MS_SYNC).error, EIO);
      }
    });
    threads.emplace_back([&] {
      for (int i = 0; i < 20; i++) {
        const uint64_t at = kBase + (i % kPages) * P;
        EXPECT_TRUE(spaces[2]->Munmap(at, 2 * P).ok());
        EXPECT_TRUE(spaces[2]->Mmap(at, 2 * P, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, (i % kPages) * P, f).ok());
      }
    });
    for (auto& th : threads) th.join();
    uint64_t anon = 0;
    for (auto& as : spaces) {
      ASSERT_EQ(as->Validate(), "") << "round " << round;
      anon += as->Counters().anon_pages;
    }
    RcuBarrier();
    FileStat st;
    ASSERT_TRUE(files_->Stat(id, &st).ok());
    EXPECT_EQ(static_cast<uint64_t>(frames_.in_use_frames()), st.cached_pages + anon) << "round " << round;
  }
  spaces.clear();
  RcuBarrier();
  FileStat st;
  ASSERT_TRUE(files_->Stat(id, &st).ok());
  EXPECT_EQ(static_cast<uint64_t>(frames_.in_use_frames()), st.cached_pages);
  EXPECT_EQ(st.mapped_vmas, 0u);
}

INSTANTIATE_TEST_SUITE_P(Profiles, FileMapTest, testing_profiles::AllProfiles(), testing_profiles::ProfileName());

}  // namespace
}  // namespace vmspace
