// Seed 002 against the kernel: writing each page of a MAP_SHARED memfd mapping once
// takes one fault per page on this kernel (it has VM_FAULT_COMPLETED, Linux 5.19+:
// getrusage min_flt counts 1 per page), which is what the engine counts (vmstat pgfault
// and min_flt) with shared_fault_completion=completed; retry counts pgfault twice.
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "engine/address_space.h"
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

}  // namespace
}  // namespace vmspace
