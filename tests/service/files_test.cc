// SPDX-License-Identifier: Apache-2.0
// Files over gRPC against the real daemon: every file RPC and its errors (EBADF, EACCES,
// EINVAL for paths that leave --data-dir), MAP_SHARED file mappings seen by two spaces
// and by ReadFile, truncate -> SIGBUS, msync (unary and in a Batch), major faults, and
// the restart test: data written through a shared mapping survives SIGTERM and is read
// back by a new daemon on the same --data-dir.
#include "lib/client.h"  // first: vmspace.pb.h before <signal.h> (see daemon.h)

#include "daemon.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace vmspace::service_test {
namespace {

using client::Client;
using client::ClientOptions;
using client::Error;
using grpc::StatusCode;
namespace fs = std::filesystem;

constexpr uint64_t kPage = 4096;
constexpr int kRw = PROT_READ | PROT_WRITE;

/// A fresh directory (removed at the end).
class TempDir {
 public:
  TempDir() {
    char t[] = "/var/tmp/vmspace-files-test.XXXXXX";
    path_ = mkdtemp(t) ? t : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadHostFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

/// Checks a failed call's status code and errno name.
template <typename T>
::testing::AssertionResult Fails(const client::Result<T>& r, StatusCode code, const std::string& errno_name) {
  if (r.ok()) return ::testing::AssertionFailure() << "succeeded, want " << errno_name;
  const Error& e = r.error();
  if (e.code != code || e.errno_name != errno_name)
    return ::testing::AssertionFailure() << e.ToString() << ", want " << errno_name << " code " << code;
  return ::testing::AssertionSuccess();
}

v1::OpenFileRequest Open(const std::string& path, bool write = true, bool create = true) {
  v1::OpenFileRequest r;
  r.set_path(path);
  r.set_write(write);
  r.set_create(create);
  return r;
}

/// A daemon on a fresh --data-dir and a client of it.
class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    StartDaemon();
  }
  void StartDaemon() {
    d_ = std::make_unique<Daemon>();
    ASSERT_TRUE(d_->Start({"--data-dir=" + dir_.path(), "--max-io-bytes=65536"})) << d_->stderr_text();
    ClientOptions o;
    o.target = d_->grpc_addr();
    cl_ = std::make_unique<Client>(o);
  }
  uint64_t NewSpace() {
    auto r = cl_->CreateSpace();
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() ? r.value() : 0;
  }
  uint64_t OpenOk(const v1::OpenFileRequest& req) {
    auto r = cl_->OpenFile(req);
    EXPECT_TRUE(r.ok()) << req.path() << ": " << r.error().ToString();
    return r.ok() ? r.value() : 0;
  }
  uint64_t MmapOk(uint64_t space, uint64_t len, int prot, int flags, uint64_t file, uint64_t offset = 0) {
    auto r = cl_->Mmap(space, 0, len, prot, flags, offset, file);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() ? r.value() : 0;
  }
  std::string ReadMem(uint64_t space, uint64_t addr, uint64_t len) {
    auto r = cl_->ReadMemory(space, addr, len);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() ? r.value().data() : "";
  }
  void WriteMem(uint64_t space, uint64_t addr, const std::string& data) {
    auto r = cl_->WriteMemory(space, addr, data);
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    EXPECT_EQ(r.value().bytes_written(), data.size());
  }
  v1::FileInfo Stat(uint64_t file) {
    auto r = cl_->StatFile(file);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() ? r.value() : v1::FileInfo{};
  }

  TempDir dir_;
  std::unique_ptr<Daemon> d_;
  std::unique_ptr<Client> cl_;
};

// Paths must stay under --data-dir: absolute paths and ".." are EINVAL, a symlink that
// leads out is EACCES; then the open(2) errors.
TEST_F(FilesTest, OpenPathsAndFlags) {
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", ".."}) {
    auto r = cl_->OpenFile(Open(bad));
    EXPECT_TRUE(Fails(r, StatusCode::INVALID_ARGUMENT, "EINVAL")) << "'" << bad << "'";
  }
  auto abs = cl_->OpenFile(Open("/etc/passwd", false, false));
  ASSERT_FALSE(abs.ok());
  EXPECT_NE(abs.error().message.find("--data-dir"), std::string::npos) << abs.error().message;
  TempDir outside;
  fs::create_symlink(outside.path(), dir_.path() + "/out");
  EXPECT_TRUE(Fails(cl_->OpenFile(Open("out/f")), StatusCode::PERMISSION_DENIED, "EACCES"));
  EXPECT_FALSE(fs::exists(outside.path() + "/f"));
  EXPECT_TRUE(Fails(cl_->OpenFile(Open("missing", true, false)), StatusCode::NOT_FOUND, "ENOENT"));
  const uint64_t f = OpenOk(Open("a.bin"));
  EXPECT_TRUE(fs::exists(dir_.path() + "/a.bin"));
  v1::OpenFileRequest excl = Open("a.bin");
  excl.set_exclusive(true);
  EXPECT_TRUE(Fails(cl_->OpenFile(excl), StatusCode::ALREADY_EXISTS, "EEXIST"));
  v1::OpenFileRequest trunc_ro = Open("a.bin", false, false);
  trunc_ro.set_truncate(true);
  EXPECT_TRUE(Fails(cl_->OpenFile(trunc_ro), StatusCode::INVALID_ARGUMENT, "EINVAL"));
  fs::create_directory(dir_.path() + "/sub");
  EXPECT_TRUE(Fails(cl_->OpenFile(Open("sub", false, false)), StatusCode::INVALID_ARGUMENT, "EISDIR"));
  // A second open of the same file is a second id of one inode.
  const uint64_t g = OpenOk(Open("a.bin", false, false));
  EXPECT_NE(f, g);
  EXPECT_EQ(Stat(f).inode(), Stat(g).inode());
  EXPECT_EQ(Stat(g).open_handles(), 2u);
  EXPECT_FALSE(Stat(g).writable());
}

// Every call on an id that is not open is EBADF: never opened, closed, or of another
// daemon's shard.
TEST_F(FilesTest, UnknownIdsAreEbadf) {
  const uint64_t f = OpenOk(Open("c.bin"));
  ASSERT_TRUE(cl_->CloseFile(f).ok());
  const uint64_t space = NewSpace();
  for (uint64_t id : {uint64_t{12345}, f, (uint64_t{1} << 40) | f}) {
    SCOPED_TRACE(id);
    EXPECT_TRUE(Fails(cl_->CloseFile(id), StatusCode::INVALID_ARGUMENT, "EBADF"));
    EXPECT_TRUE(Fails(cl_->TruncateFile(id, 0), StatusCode::INVALID_ARGUMENT, "EBADF"));
    EXPECT_TRUE(Fails(cl_->StatFile(id), StatusCode::INVALID_ARGUMENT, "EBADF"));
    EXPECT_TRUE(Fails(cl_->ReadFile(id, 0, 1), StatusCode::INVALID_ARGUMENT, "EBADF"));
    EXPECT_TRUE(Fails(cl_->WriteFile(id, 0, "x"), StatusCode::INVALID_ARGUMENT, "EBADF"));
    EXPECT_TRUE(Fails(cl_->FsyncFile(id), StatusCode::INVALID_ARGUMENT, "EBADF"));
    EXPECT_TRUE(Fails(cl_->Mmap(space, 0, kPage, kRw, MAP_SHARED, 0, id), StatusCode::INVALID_ARGUMENT, "EBADF"));
  }
  // The status carries the standard details, as every errno error.
  v1::StatFileRequest req;
  req.set_file_id(12345);
  v1::StatFileResponse resp;
  auto stub = d_->NewStub();
  EXPECT_TRUE(HasErrno(stub->StatFile(Ctx().get(), req, &resp), StatusCode::INVALID_ARGUMENT, "EBADF", EBADF));
  // MAP_ANONYMOUS ignores the file id, as the kernel ignores fd.
  EXPECT_TRUE(cl_->Mmap(space, 0, kPage, kRw, MAP_PRIVATE | MAP_ANONYMOUS, 0, 12345).ok());
}

// pwrite/pread through the page cache, fstat figures, fsync to the host file, ListFiles,
// access modes and --max-io-bytes.
TEST_F(FilesTest, ReadWriteStatFsync) {
  const uint64_t f = OpenOk(Open("rw.bin"));
  auto w = cl_->WriteFile(f, kPage, "hello");
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  EXPECT_EQ(w.value(), 5u);
  v1::FileInfo st = Stat(f);
  EXPECT_EQ(st.file_id(), f);
  EXPECT_EQ(st.path(), "rw.bin");
  EXPECT_FALSE(st.shmem());
  EXPECT_EQ(st.size(), kPage + 5);
  EXPECT_EQ(st.cached_pages(), 1u);  // the hole before it was never read
  EXPECT_EQ(st.dirty_pages(), 1u);
  EXPECT_TRUE(st.writable());
  struct stat host {};
  ASSERT_EQ(::stat((dir_.path() + "/rw.bin").c_str(), &host), 0);
  EXPECT_EQ(st.inode(), host.st_ino);
  ASSERT_TRUE(cl_->FsyncFile(f).ok());
  EXPECT_EQ(Stat(f).dirty_pages(), 0u);
  EXPECT_EQ(ReadHostFile(dir_.path() + "/rw.bin"), std::string(kPage, '\0') + "hello");
  auto r = cl_->ReadFile(f, kPage - 2, 100);  // stops at EOF
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), std::string("\0\0hello", 7));
  EXPECT_EQ(cl_->ReadFile(f, 1 << 20, 10).value(), "");  // beyond EOF: 0 bytes
  auto ls = cl_->ListFiles();
  ASSERT_TRUE(ls.ok());
  ASSERT_EQ(ls.value().size(), 1u);
  EXPECT_EQ(ls.value()[0].file_id(), f);
  EXPECT_EQ(ls.value()[0].size(), kPage + 5);
  // Read-only: pwrite is EBADF, a shared writable mapping EACCES, a private one fine.
  const uint64_t ro = OpenOk(Open("rw.bin", false, false));
  EXPECT_TRUE(Fails(cl_->WriteFile(ro, 0, "x"), StatusCode::INVALID_ARGUMENT, "EBADF"));
  EXPECT_TRUE(Fails(cl_->TruncateFile(ro, 0), StatusCode::INVALID_ARGUMENT, "EINVAL"));
  const uint64_t space = NewSpace();
  EXPECT_TRUE(Fails(cl_->Mmap(space, 0, kPage, kRw, MAP_SHARED, 0, ro), StatusCode::PERMISSION_DENIED, "EACCES"));
  EXPECT_TRUE(cl_->Mmap(space, 0, kPage, kRw, MAP_PRIVATE, 0, ro).ok());
  EXPECT_TRUE(Fails(cl_->Mmap(space, 0, kPage, kRw, MAP_SHARED, 1, f), StatusCode::INVALID_ARGUMENT, "EINVAL"));
  // The same limit as ReadMemory/WriteMemory.
  EXPECT_TRUE(Fails(cl_->ReadFile(f, 0, 65537), StatusCode::INVALID_ARGUMENT, "EINVAL"));
  EXPECT_TRUE(Fails(cl_->WriteFile(f, 0, std::string(65537, 'x')), StatusCode::INVALID_ARGUMENT, "EINVAL"));
  EXPECT_TRUE(cl_->ReadFile(f, 0, 65536).ok());
}

// Two spaces map one file MAP_SHARED: a write in one is seen by the other and by
// ReadFile, and a pwrite by both; a MAP_PRIVATE mapping copies on write.
TEST_F(FilesTest, SharedMappingAcrossSpaces) {
  const uint64_t f = OpenOk(Open("shared.bin"));
  ASSERT_TRUE(cl_->TruncateFile(f, 2 * kPage).ok());
  const uint64_t a = NewSpace(), b = NewSpace(), p = NewSpace();
  const uint64_t in_a = MmapOk(a, 2 * kPage, kRw, MAP_SHARED, f);
  const uint64_t in_b = MmapOk(b, 2 * kPage, kRw, MAP_SHARED, f);
  const uint64_t in_p = MmapOk(p, 2 * kPage, kRw, MAP_PRIVATE, f);
  WriteMem(a, in_a + kPage + 10, "from space a");
  EXPECT_EQ(ReadMem(b, in_b + kPage + 10, 12), "from space a");
  EXPECT_EQ(ReadMem(p, in_p + kPage + 10, 12), "from space a");  // not written yet: the page cache's
  EXPECT_EQ(cl_->ReadFile(f, kPage + 10, 12).value(), "from space a");
  ASSERT_TRUE(cl_->WriteFile(f, 0, "pwrite").ok());
  EXPECT_EQ(ReadMem(a, in_a, 6), "pwrite");
  EXPECT_EQ(ReadMem(b, in_b, 6), "pwrite");
  WriteMem(p, in_p, "privat");  // copy-on-write: the file keeps its bytes
  EXPECT_EQ(cl_->ReadFile(f, 0, 6).value(), "pwrite");
  EXPECT_EQ(ReadMem(a, in_a, 6), "pwrite");
  const v1::FileInfo st = Stat(f);
  EXPECT_EQ(st.mapped_vmas(), 3u);
  EXPECT_EQ(st.cached_pages(), 2u);
  // The maps line names the file, its offset, device and inode.
  auto maps = cl_->GetMaps(a);
  ASSERT_TRUE(maps.ok());
  ASSERT_EQ(maps.value().vmas_size(), 1);
  const v1::Vma& v = maps.value().vmas(0);
  EXPECT_EQ(v.perms(), "rw-s");
  EXPECT_EQ(v.inode(), st.inode());
  EXPECT_EQ(v.dev(), st.dev());
  EXPECT_NE(v.name().find("shared.bin"), std::string::npos) << v.name();
  // The mapping outlives the close of its id.
  ASSERT_TRUE(cl_->CloseFile(f).ok());
  WriteMem(b, in_b, "after close");
  EXPECT_EQ(ReadMem(a, in_a, 11), "after close");
}

// Shrinking a mapped file unmaps the pages beyond its end from every space: an access
// there is SIGBUS (BUS_ADRERR) as an OK answer; below the end the data stays.
TEST_F(FilesTest, TruncateGivesSigbus) {
  const uint64_t f = cl_->CreateShmemFile("trunc", 2 * kPage).value();
  const uint64_t a = NewSpace(), b = NewSpace();
  const uint64_t in_a = MmapOk(a, 2 * kPage, kRw, MAP_SHARED, f);
  const uint64_t in_b = MmapOk(b, 2 * kPage, kRw, MAP_PRIVATE, f);
  WriteMem(a, in_a, "low");
  WriteMem(a, in_a + kPage, "high");
  ASSERT_EQ(ReadMem(b, in_b + kPage, 4), "high");
  WriteMem(b, in_b + kPage, "cow!");  // a private COW page beyond the new end: dropped too
  ASSERT_TRUE(cl_->TruncateFile(f, kPage).ok());
  EXPECT_EQ(Stat(f).size(), kPage);
  for (auto [space, addr] : {std::pair{a, in_a}, std::pair{b, in_b}}) {
    auto fault = cl_->Fault(space, addr + kPage, v1::ACCESS_READ);
    ASSERT_TRUE(fault.ok()) << fault.error().ToString();
    EXPECT_EQ(fault.value().outcome(), v1::FAULT_OUTCOME_SIGBUS);
    EXPECT_EQ(fault.value().si_code(), v1::BUS_ADRERR);
    EXPECT_EQ(fault.value().si_addr(), addr + kPage);
  }
  EXPECT_EQ(ReadMem(a, in_a, 3), "low");
  auto copy = cl_->ReadMemory(a, in_a + kPage - 2, 8);  // stops at the end of the file
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(copy.value().data().size(), 2u);
  EXPECT_EQ(copy.value().stop().outcome(), v1::FAULT_OUTCOME_SIGBUS);
}

// msync: unary and as a Batch op; its errors.
TEST_F(FilesTest, Msync) {
  const uint64_t f = OpenOk(Open("msync.bin"));
  ASSERT_TRUE(cl_->TruncateFile(f, 2 * kPage).ok());
  const uint64_t space = NewSpace();
  const uint64_t addr = MmapOk(space, 2 * kPage, kRw, MAP_SHARED, f);
  WriteMem(space, addr, "synced");
  EXPECT_EQ(Stat(f).dirty_pages(), 1u);
  ASSERT_TRUE(cl_->Msync(space, addr, 2 * kPage, MS_SYNC).ok());
  EXPECT_EQ(Stat(f).dirty_pages(), 0u);
  EXPECT_EQ(ReadHostFile(dir_.path() + "/msync.bin").substr(0, 6), "synced");
  EXPECT_TRUE(Fails(cl_->Msync(space, addr + 1, kPage, MS_SYNC), StatusCode::INVALID_ARGUMENT, "EINVAL"));
  EXPECT_TRUE(Fails(cl_->Msync(space, addr, kPage, MS_SYNC | MS_ASYNC), StatusCode::INVALID_ARGUMENT, "EINVAL"));
  EXPECT_TRUE(Fails(cl_->Msync(space, addr, 4 * kPage, MS_SYNC), StatusCode::RESOURCE_EXHAUSTED, "ENOMEM"));
  EXPECT_FALSE(cl_->Msync(space + 1000, addr, kPage, MS_SYNC).ok());  // unknown space: NOT_FOUND
  // In a Batch: the write and the msync in one message, in order.
  WriteMem(space, addr + kPage, "batched");
  auto stream = cl_->OpenBatch(space);
  v1::BatchRequest req;
  v1::MsyncRequest* m = req.add_ops()->mutable_msync();
  m->set_space_id(space);
  m->set_addr(addr);
  m->set_len(2 * kPage);
  m->set_flags(MS_SYNC);
  v1::MsyncRequest* bad = req.add_ops()->mutable_msync();
  *bad = *m;
  bad->set_addr(addr + 1);
  ASSERT_TRUE(stream->Write(req));
  stream->WritesDone();
  v1::BatchResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  ASSERT_EQ(resp.results_size(), 2);
  EXPECT_EQ(resp.results(0).code(), 0);
  EXPECT_TRUE(resp.results(0).has_msync());
  EXPECT_EQ(resp.results(1).errno_name(), "EINVAL");
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(ReadHostFile(dir_.path() + "/msync.bin").substr(kPage, 7), "batched");
}

// Settings: fault_around_bytes must be a power of two in [4096, 2 MiB].
TEST_F(FilesTest, FaultAroundSetting) {
  for (uint64_t bad : {uint64_t{0}, uint64_t{1000}, uint64_t{12288}, uint64_t{4} << 20}) {
    v1::SpaceSettings s;
    s.set_fault_around_bytes(bad);
    EXPECT_TRUE(Fails(cl_->CreateSpace(s), StatusCode::INVALID_ARGUMENT, "EINVAL")) << bad;
  }
  v1::SpaceSettings s;
  s.set_fault_around_bytes(4096);
  EXPECT_TRUE(cl_->CreateSpace(s).ok());
}

// Settings: shared_fault_completion is "", retry or completed.
TEST_F(FilesTest, SharedFaultCompletionSetting) {
  v1::SpaceSettings s;
  s.set_shared_fault_completion("sometimes");
  EXPECT_TRUE(Fails(cl_->CreateSpace(s), StatusCode::INVALID_ARGUMENT, "EINVAL"));
  for (const char* ok : {"", "retry", "completed"}) {
    s.set_shared_fault_completion(ok);
    EXPECT_TRUE(cl_->CreateSpace(s).ok()) << ok;
  }
}

// Settings: i_mmap_scope is "", wide or narrow.
TEST_F(FilesTest, IMmapScopeSetting) {
  v1::SpaceSettings s;
  s.set_i_mmap_scope("medium");
  EXPECT_TRUE(Fails(cl_->CreateSpace(s), StatusCode::INVALID_ARGUMENT, "EINVAL"));
  for (const char* ok : {"", "wide", "narrow"}) {
    s.set_i_mmap_scope(ok);
    EXPECT_TRUE(cl_->CreateSpace(s).ok()) << ok;
  }
}

// Nothing lost: data written through a shared mapping (never msync'ed) survives SIGTERM;
// a new daemon on the same --data-dir reads it back with ReadFile and through a fresh
// mapping, whose first access is a major fault (a page-cache miss reads the host file).
TEST_F(FilesTest, RestartKeepsSharedWrites) {
  {
    const uint64_t f = OpenOk(Open("persist.bin"));
    ASSERT_TRUE(cl_->TruncateFile(f, 3 * kPage).ok());
    const uint64_t space = NewSpace();
    const uint64_t addr = MmapOk(space, 3 * kPage, kRw, MAP_SHARED, f);
    WriteMem(space, addr + kPage, "survives SIGTERM");
    ASSERT_TRUE(cl_->WriteFile(f, 2 * kPage, "and pwrite").ok());
  }
  cl_.reset();
  ASSERT_EQ(d_->Stop(SIGTERM), 0) << d_->stderr_at_exit();
  const std::string host = ReadHostFile(dir_.path() + "/persist.bin");
  ASSERT_EQ(host.size(), 3 * kPage);
  EXPECT_EQ(host.substr(kPage, 16), "survives SIGTERM");
  EXPECT_EQ(host.substr(2 * kPage, 10), "and pwrite");

  StartDaemon();
  const uint64_t f = OpenOk(Open("persist.bin", false, false));
  EXPECT_EQ(Stat(f).size(), 3 * kPage);
  EXPECT_EQ(Stat(f).cached_pages(), 0u);
  const uint64_t space = NewSpace();
  const uint64_t addr = MmapOk(space, 3 * kPage, PROT_READ, MAP_SHARED, f);
  auto first = cl_->Fault(space, addr + kPage, v1::ACCESS_READ);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first.value().outcome(), v1::FAULT_OUTCOME_MAJOR);
  EXPECT_EQ(ReadMem(space, addr + kPage, 16), "survives SIGTERM");
  EXPECT_EQ(cl_->ReadFile(f, kPage, 16).value(), "survives SIGTERM");
  EXPECT_EQ(cl_->ReadFile(f, 2 * kPage, 10).value(), "and pwrite");
  // Page 2 came in with page 1 (read-around): no major fault for it.
  auto again = cl_->Access(space, addr + 2 * kPage, 1, 1, v1::ACCESS_READ);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value().major_faults(), 0u);
  // Page 0 (a hole) was read with page 1 (read-around) and mapped by that fault's
  // fault-around: no fault.
  auto hole = cl_->Access(space, addr, 1, 1, v1::ACCESS_READ);
  ASSERT_TRUE(hole.ok());
  EXPECT_EQ(hole.value().faults(), 0u);
  EXPECT_EQ(hole.value().major_faults(), 0u);
  EXPECT_EQ(ReadMem(space, addr, 4), std::string(4, '\0'));
}

// Seals: a shmem file without allow_sealing starts with F_SEAL_SEAL (EPERM), unknown bits
// EINVAL, a host file has none (EINVAL), F_SEAL_WRITE is EBUSY while a writable shared
// mapping exists; access modes: an O_WRONLY file cannot be mapped (EACCES), a read-only
// reopen cannot add seals (EPERM) nor map shared writable (EACCES); st_nlink.
TEST_F(FilesTest, SealsAccessModesAndReopen) {
  auto plain = cl_->CreateShmemFile("plain", kPage);
  auto s = cl_->CreateShmemFile("s", 2 * kPage, 0, /*allow_sealing=*/true);
  ASSERT_TRUE(plain.ok() && s.ok());
  EXPECT_EQ(cl_->GetFileSeals(plain.value()).value(), 1u);  // F_SEAL_SEAL
  EXPECT_TRUE(Fails(cl_->AddFileSeals(plain.value(), 8), StatusCode::PERMISSION_DENIED, "EPERM"));
  EXPECT_TRUE(Fails(cl_->AddFileSeals(s.value(), 0x40), StatusCode::INVALID_ARGUMENT, "EINVAL"));
  const uint64_t host = OpenOk(Open("sealed.bin"));
  EXPECT_TRUE(Fails(cl_->GetFileSeals(host), StatusCode::INVALID_ARGUMENT, "EINVAL"));
  EXPECT_TRUE(Fails(cl_->AddFileSeals(host, 1), StatusCode::INVALID_ARGUMENT, "EINVAL"));
  EXPECT_EQ(Stat(host).st_nlink(), 1u);
  EXPECT_EQ(Stat(s.value()).st_nlink(), 0u);
  const uint64_t space = NewSpace();
  const uint64_t addr = MmapOk(space, kPage, kRw, MAP_SHARED, s.value());
  EXPECT_TRUE(Fails(cl_->AddFileSeals(s.value(), 8), StatusCode::FAILED_PRECONDITION, "EBUSY"));
  ASSERT_TRUE(cl_->Munmap(space, addr, kPage).ok());
  auto ro = cl_->ReopenFile(s.value(), v1::FILE_ACCESS_RDONLY);
  ASSERT_TRUE(ro.ok()) << ro.error().ToString();
  EXPECT_TRUE(Fails(cl_->AddFileSeals(ro.value(), 4), StatusCode::PERMISSION_DENIED, "EPERM"));
  EXPECT_TRUE(Fails(cl_->Mmap(space, 0, kPage, kRw, MAP_SHARED, 0, ro.value()), StatusCode::PERMISSION_DENIED,
                    "EACCES"));
  ASSERT_TRUE(cl_->AddFileSeals(s.value(), 8 | 4).ok());
  EXPECT_EQ(cl_->GetFileSeals(ro.value()).value(), 12u);
  EXPECT_TRUE(Fails(cl_->WriteFile(s.value(), 0, "x"), StatusCode::PERMISSION_DENIED, "EPERM"));
  EXPECT_TRUE(Fails(cl_->Mmap(space, 0, kPage, kRw, MAP_SHARED, 0, s.value()), StatusCode::PERMISSION_DENIED,
                    "EPERM"));
  EXPECT_TRUE(Fails(cl_->ReopenFile(s.value(), v1::FILE_ACCESS_MODE_UNSPECIFIED), StatusCode::INVALID_ARGUMENT,
                    "EINVAL"));
  v1::OpenFileRequest wo = Open("sealed.bin", false, false);
  wo.set_access(v1::FILE_ACCESS_WRONLY);
  const uint64_t w = OpenOk(wo);
  EXPECT_TRUE(Fails(cl_->Mmap(space, 0, kPage, PROT_READ, MAP_PRIVATE, 0, w), StatusCode::PERMISSION_DENIED,
                    "EACCES"));
  EXPECT_TRUE(Fails(cl_->ReadFile(w, 0, 1), StatusCode::INVALID_ARGUMENT, "EBADF"));
  EXPECT_EQ(cl_->WriteFile(w, 0, "w").value(), 1u);
}


// /metrics: page-cache gauges, pgmajfault, fault-around pages and retries by profile.
TEST(FilesMetrics, CountTheFileWork) {
  TempDir dir;
  {
    std::ofstream f(dir.path() + "/m.bin", std::ios::binary);
    f << std::string(16 * kPage, 'm');
  }
  Daemon d;
  ASSERT_TRUE(d.Start({"--data-dir=" + dir.path(), "--metrics-listen=127.0.0.1:0"})) << d.stderr_text();
  ClientOptions o;
  o.target = d.grpc_addr();
  Client cl(o);
  auto scrape = [&] {
    int status = 0;
    Samples s = ParseMetrics(HttpGet(d.metrics_port(), "/metrics", &status));
    EXPECT_EQ(status, 200);
    return s;
  };
  const std::string cache = SeriesKey("vmspace_page_cache_bytes");
  const std::string dirty = SeriesKey("vmspace_page_cache_dirty_bytes");
  const std::string majflt = SeriesKey("vmspace_pgmajfault_total");
  auto around = [](const std::string& p) { return SeriesKey("vmspace_fault_around_pages_total", {{"profile", p}}); };
  auto retry = [](const std::string& p) {
    return SeriesKey("vmspace_fault_retries_total", {{"profile", p}, {"reason", "file"}});
  };
  Samples s0 = scrape();
  EXPECT_EQ(Get(s0, cache), 0);
  EXPECT_EQ(Get(s0, majflt), 0);
  // A profile's series appear once a space of it has taken a lock: none yet.
  EXPECT_EQ(Count(s0, around("linux-6.15")), 0);
  EXPECT_EQ(Count(s0, retry("linux-6.4")), 0);
  EXPECT_EQ(Count(s0, SeriesKey("vmspace_lock_acquisitions_total",
                              {{"lock", "i_mmap_rwsem"}, {"mode", "write"}, {"profile", "linux-6.15"}})),
            0);

  const uint64_t f = cl.OpenFile(Open("m.bin", true, false)).value();
  v1::SpaceSettings v64;
  v64.set_locking_profile("linux-6.4");
  const uint64_t sp66 = cl.CreateSpace().value(), sp64 = cl.CreateSpace(v64).value();
  constexpr uint64_t kAt = 0x10000000;  // 64 KiB aligned: the whole window is in the VMA
  for (uint64_t sp : {sp66, sp64})
    ASSERT_TRUE(cl.Mmap(sp, kAt, 16 * kPage, PROT_READ, MAP_SHARED | MAP_FIXED, 0, f).ok());
  // A miss reads the host file: one major fault.
  auto first = cl.Fault(sp66, kAt, v1::ACCESS_READ);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first.value().outcome(), v1::FAULT_OUTCOME_MAJOR);
  Samples s1 = scrape();
  EXPECT_EQ(Get(s1, majflt), 1);
  // The miss read the whole 16-page file (read-around, 128 KiB), and the retried
  // fault's fault-around mapped the 64 KiB window: all 16 pages.
  EXPECT_EQ(Get(s1, around("linux-6.15")), 16);
  // The rest of the file into the page cache, then a read fault in each profile maps the
  // whole 64 KiB window; under linux-6.4 only after a retry under mmap_lock.
  ASSERT_EQ(cl.ReadFile(f, 0, 16 * kPage).value().size(), 16 * kPage);
  EXPECT_EQ(Get(scrape(), cache), 16 * kPage);
  const Samples s2 = scrape();
  ASSERT_TRUE(cl.Fault(sp66, kAt + 5 * kPage, v1::ACCESS_READ).ok());
  auto f64 = cl.Fault(sp64, kAt + 5 * kPage, v1::ACCESS_READ);
  ASSERT_TRUE(f64.ok());
  EXPECT_EQ(f64.value().outcome(), v1::FAULT_OUTCOME_MINOR);
  EXPECT_EQ(f64.value().lock_path(), v1::LOCK_PATH_MMAP_LOCK);
  const Samples s3 = scrape();
  EXPECT_EQ(Get(s3, majflt), 1);
  EXPECT_EQ(Count(s3, around("linux-6.15")) - Count(s2, around("linux-6.15")), 0);  // mapped by the first fault
  EXPECT_EQ(Count(s3, around("linux-6.4")) - Count(s2, around("linux-6.4")), 16);
  EXPECT_EQ(Count(s3, retry("linux-6.4")) - Count(s2, retry("linux-6.4")), 1);
  EXPECT_EQ(Get(s3, retry("linux-6.15")), 0);
  EXPECT_GE(Get(s3, SeriesKey("vmspace_lock_acquisitions_total",
                              {{"lock", "i_mmap_rwsem"}, {"mode", "write"}, {"profile", "linux-6.15"}})),
            1);
  // The window is a per-space setting: 4096 turns fault-around off (one page per fault).
  v1::SpaceSettings off;
  off.set_fault_around_bytes(4096);
  const uint64_t sp_off = cl.CreateSpace(off).value();
  ASSERT_TRUE(cl.Mmap(sp_off, kAt, 16 * kPage, PROT_READ, MAP_SHARED | MAP_FIXED, 0, f).ok());
  ASSERT_TRUE(cl.Fault(sp_off, kAt + 5 * kPage, v1::ACCESS_READ).ok());
  EXPECT_EQ(Get(scrape(), around("linux-6.15")), Get(s3, around("linux-6.15")));
  std::map<uint64_t, uint64_t> rss;
  const std::vector<v1::SpaceInfo> infos = cl.ListSpaces().value();  // a named copy: GCC 12
  for (const v1::SpaceInfo& info : infos) rss[info.space_id()] = info.rss_bytes();  // warns on the temporary
  EXPECT_EQ(rss[sp_off], kPage);
  EXPECT_EQ(rss[sp66], 16 * kPage);
  // A pwrite dirties a page until fsync: the file joins the writeback list (wb_list_lock)
  // and fsync takes the page's i_pages lock to start and to end its writeback.
  // Calls outside a space count in the first profile's statistics, so sum them all.
  auto sum = [](const Samples& s, const std::string& lock) {
    double n = 0;
    const std::string prefix = "vmspace_lock_acquisitions_total{lock=\"" + lock + "\",mode=\"write\"";
    for (const auto& [k, v] : s)
      if (k.rfind(prefix, 0) == 0) n += v;
    return n;
  };
  const Samples s4 = scrape();
  ASSERT_TRUE(cl.WriteFile(f, 0, "d").ok());
  const Samples s5 = scrape();
  EXPECT_EQ(Get(s5, dirty), kPage);
  EXPECT_EQ(sum(s5, "wb_list_lock") - sum(s4, "wb_list_lock"), 1);
  ASSERT_TRUE(cl.FsyncFile(f).ok());
  const Samples s6 = scrape();
  EXPECT_EQ(Get(s6, dirty), 0);
  EXPECT_EQ(Get(s6, SeriesKey("vmspace_page_cache_writeback_bytes")), 0);
  EXPECT_EQ(sum(s6, "i_pages_lock") - sum(s5, "i_pages_lock"), 2);
  EXPECT_EQ(d.Stop(), 0);
}

// Without --data-dir host files are off (EACCES, saying so); shmem files still work.
TEST(FilesNoDataDir, HostFilesRefused) {
  Daemon d;
  ASSERT_TRUE(d.Start({})) << d.stderr_text();
  ClientOptions o;
  o.target = d.grpc_addr();
  Client cl(o);
  auto r = cl.OpenFile(Open("a.bin"));
  ASSERT_TRUE(Fails(r, StatusCode::PERMISSION_DENIED, "EACCES"));
  EXPECT_NE(r.error().message.find("--data-dir"), std::string::npos) << r.error().message;
  auto shm = cl.CreateShmemFile("mem", kPage);
  ASSERT_TRUE(shm.ok()) << shm.error().ToString();
  EXPECT_TRUE(cl.StatFile(shm.value()).value().shmem());
  EXPECT_EQ(cl.StatFile(shm.value()).value().size(), kPage);
  EXPECT_TRUE(Fails(cl.CreateShmemFile(std::string(250, 'n'), kPage), StatusCode::INVALID_ARGUMENT, "EINVAL"));
  EXPECT_EQ(d.Stop(), 0);
}

}  // namespace
}  // namespace vmspace::service_test
