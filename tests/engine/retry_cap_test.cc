// SPDX-License-Identifier: Apache-2.0
// The fault retry cap: an access whose page is zapped after every fault is
// re-executed kMaxFaultRetries (65536) times, then ends kInterrupted without a signal
// (the service answers ABORTED; proto/vmspace/v1/vmspace.proto, StopError). The zap
// runs in g_fault_retry_test_hook, where a racing MADV_DONTNEED could land.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <atomic>
#include <memory>

#include "engine/address_space.h"
#include "engine/frame_allocator.h"
#include "mm.h"
#include "memory.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = kPageSize;

AddressSpace* g_space = nullptr;
std::atomic<int> g_zaps{0};

void ZapAfterFault(MmStruct*, uint64_t addr) {
  g_zaps++;
  ASSERT_TRUE(g_space->Madvise(addr & ~(P - 1), P, MADV_DONTNEED).ok());
}

TEST(RetryCap, AnAccessUndoneAfterEveryFaultEndsInterruptedAfter65536Faults) {
  FrameAllocator frames;
  auto as = std::make_unique<AddressSpace>(frames);
  const uint64_t a = as->Mmap(0, 4 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).value;
  g_space = as.get();
  g_zaps = 0;  // (--gtest_repeat runs this test again in the same process)
  g_fault_retry_test_hook.store(&ZapAfterFault);
  const AccessResult r = as->Access(a, 1, 1, AccessType::kWrite);
  EXPECT_EQ(r.stop.outcome, FaultOutcome::kInterrupted);
  EXPECT_EQ(r.accesses, 0u);
  EXPECT_EQ(r.faults, static_cast<uint64_t>(kMaxFaultRetries));
  EXPECT_EQ(g_zaps.load(), kMaxFaultRetries);
  g_zaps = 0;
  const FaultResult f = as->Fault(a + P, AccessType::kRead);
  EXPECT_EQ(f.outcome, FaultOutcome::kInterrupted);
  EXPECT_EQ(f.faults, static_cast<uint64_t>(kMaxFaultRetries));
  EXPECT_EQ(g_zaps.load(), kMaxFaultRetries);
  g_fault_retry_test_hook.store(nullptr);
  // Without the zaps the same access takes one fault and is done.
  const AccessResult ok = as->Access(a, 1, 1, AccessType::kWrite);
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.faults, 1u);
  EXPECT_EQ(ok.accesses, 1u);
  testing_util::ExpectAllFramesFreed(as, frames);
}

}  // namespace
}  // namespace vmspace
