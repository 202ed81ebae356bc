// SPDX-License-Identifier: Apache-2.0
// Seed 002 against the kernel: writing each page of a MAP_SHARED memfd mapping once
// takes one fault per page on this kernel (it has VM_FAULT_COMPLETED, Linux 5.19+:
// getrusage min_flt counts 1 per page), which is what the engine counts (vmstat pgfault
// and min_flt) with shared_fault_completion=completed; retry counts pgfault twice.
// The same for a host file on disk (an ext4 file here), with msync/fsync results and
// the file's bytes after them compared with the kernel's.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "../engine/test_util.h"
#include "engine/address_space.h"
#include "engine/file.h"
#include "engine/stats.h"

namespace vmspace {
namespace {

constexpr uint64_t kPages = 256;

uint64_t KernelMinFltPerRun() {
  const int fd = memfd_create("vmspace-oracle-shmem-dirty", 0);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, kPages * kPageSize), 0);
  void* p = mmap(nullptr, kPages * kPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  EXPECT_NE(p, MAP_FAILED);
  struct rusage u0, u1;
  getrusage(RUSAGE_THREAD, &u0);
  auto* c = static_cast<volatile char*>(p);
  for (uint64_t i = 0; i < kPages; i++) c[i * kPageSize] = 1;
  getrusage(RUSAGE_THREAD, &u1);
  munmap(p, kPages * kPageSize);
  return static_cast<uint64_t>(u1.ru_minflt - u0.ru_minflt);
}

TEST(OracleSharedWrite, PgfaultPerPageIsCompleted) {
  const uint64_t kernel = KernelMinFltPerRun();
  for (SharedFaultCompletion c : {SharedFaultCompletion::kCompleted, SharedFaultCompletion::kRetry}) {
    SCOPED_TRACE(SharedFaultCompletionName(c));
    FrameAllocator frames;
    SpaceOptions o;
    o.shared_fault_completion = c;
    AddressSpace as(frames, o);
    SysResult m = as.Mmap(0, kPages * kPageSize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS);
    ASSERT_TRUE(m.ok());
    const uint64_t pf0 = ReadStats().event(Event::kPgfault);
    AccessResult a = as.Access(m.value, kPages * kPageSize, kPageSize, AccessType::kWrite);
    ASSERT_TRUE(a.ok());
    const uint64_t pgfault = ReadStats().event(Event::kPgfault) - pf0;
    EXPECT_EQ(a.faults, kernel);  // min_flt: one per page either way
    EXPECT_EQ(pgfault, (c == SharedFaultCompletion::kCompleted ? 1 : 2) * kernel);
  }
  EXPECT_EQ(kernel, kPages);
}

/// The 8 bytes written at offset 8 of page i.
uint64_t Tag(uint64_t i) { return 0x5eed000000000000ull | i; }

std::string ReadWhole(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  std::string out(kPages * kPageSize + 1, '\0');
  const ssize_t n = pread(fd, out.data(), out.size(), 0);
  close(fd);
  out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  return out;
}

struct FileRun {
  uint64_t faults = 0;  // kernel: min_flt + maj_flt; engine: vmstat pgfault
  int msync = -1, fsync = -1;
  std::string bytes;  // the file after fsync
};

FileRun KernelSharedFileWrite(const std::string& path) {
  FileRun r;
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, kPages * kPageSize), 0);
  void* p = mmap(nullptr, kPages * kPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  EXPECT_NE(p, MAP_FAILED);
  struct rusage u0, u1;
  getrusage(RUSAGE_THREAD, &u0);
  for (uint64_t i = 0; i < kPages; i++)
    *reinterpret_cast<volatile uint64_t*>(static_cast<char*>(p) + i * kPageSize + 8) = Tag(i);
  getrusage(RUSAGE_THREAD, &u1);
  r.faults = static_cast<uint64_t>(u1.ru_minflt - u0.ru_minflt + u1.ru_majflt - u0.ru_majflt);
  r.msync = msync(p, kPages * kPageSize, MS_SYNC) == 0 ? 0 : errno;
  r.fsync = fsync(fd) == 0 ? 0 : errno;
  munmap(p, kPages * kPageSize);
  close(fd);
  r.bytes = ReadWhole(path);
  return r;
}

FileRun EngineSharedFileWrite(const std::string& dir, const std::string& name, SharedFaultCompletion c) {
  FileRun r;
  FrameAllocator frames;
  FileTable files(frames, dir);
  SysResult id = files.Open(name, OpenFlags{.write = true, .create = true});
  EXPECT_TRUE(id.ok());
  EXPECT_EQ(files.Truncate(id.value, kPages * kPageSize), 0);
  {
    SpaceOptions o;
    o.shared_fault_completion = c;
    AddressSpace as(frames, o);
    SysResult m = as.Mmap(0, kPages * kPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, 0, files.Get(id.value));
    EXPECT_TRUE(m.ok());
    const uint64_t pf0 = ReadStats().event(Event::kPgfault);
    for (uint64_t i = 0; i < kPages; i++) {
      const uint64_t tag = Tag(i);
      EXPECT_TRUE(as.WriteMemory(m.value + i * kPageSize + 8, &tag, sizeof tag).ok());
    }
    r.faults = ReadStats().event(Event::kPgfault) - pf0;
    r.msync = as.Msync(m.value, kPages * kPageSize, MS_SYNC).error;
    r.fsync = files.Fsync(id.value);
  }
  files.Close(id.value);
  r.bytes = ReadWhole(dir + "/" + name);
  return r;
}

// A host file written through MAP_SHARED, one store per page: this kernel takes one
// fault per page (do_shared_fault ending VM_FAULT_COMPLETED), as the engine's
// completed (retry: two pgfaults per page); msync(MS_SYNC) and fsync succeed and the
// file holds exactly what the kernel's file holds.
TEST(OracleSharedWrite, HostFilePgfaultMsyncAndData) {
  testing_util::ScratchDir dir;
  const FileRun kernel = KernelSharedFileWrite(dir.path + "/kernel.bin");
  EXPECT_EQ(kernel.faults, kPages);
  EXPECT_EQ(kernel.msync, 0);
  EXPECT_EQ(kernel.fsync, 0);
  ASSERT_EQ(kernel.bytes.size(), kPages * kPageSize);
  uint64_t tag = 0;
  memcpy(&tag, kernel.bytes.data() + 5 * kPageSize + 8, sizeof tag);
  EXPECT_EQ(tag, Tag(5));
  for (SharedFaultCompletion c : {SharedFaultCompletion::kCompleted, SharedFaultCompletion::kRetry}) {
    SCOPED_TRACE(SharedFaultCompletionName(c));
    const FileRun engine = EngineSharedFileWrite(dir.path, std::string("engine-") + SharedFaultCompletionName(c), c);
    EXPECT_EQ(engine.faults, (c == SharedFaultCompletion::kCompleted ? 1 : 2) * kernel.faults);
    EXPECT_EQ(engine.msync, kernel.msync);
    EXPECT_EQ(engine.fsync, kernel.fsync);
    EXPECT_TRUE(engine.bytes == kernel.bytes) << "the engine's file differs from the kernel's";
  }
}

}  // namespace
}  // namespace vmspace
