// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the engine tests.
//  * Frame accounting: after a space is destroyed and every deferred free has run (RCU
//    barrier), the allocator must hold no frame for it. A leak shows as a positive
//    count, a double free as a negative one.
//  * Stress sizes: VMSPACE_STRESS_ITERS=N scales every stress loop by N/3000 (3000 is
//    the default), for long runs by hand.
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <memory>
#include <thread>

#include "engine/address_space.h"

namespace vmspace::testing_util {

/// `dflt` scaled by $VMSPACE_STRESS_ITERS / 3000.
inline int Iterations(int dflt) {
  const char* e = getenv("VMSPACE_STRESS_ITERS");
  return e ? static_cast<int>(static_cast<long long>(dflt) * atoi(e) / 3000) : dflt;
}

/// Destroys `as`, waits for deferred frees and expects `frames` to be empty.
inline void ExpectAllFramesFreed(std::unique_ptr<AddressSpace>& as, FrameAllocator& frames) {
  as.reset();
  RcuBarrier();
  EXPECT_EQ(frames.in_use_frames(), 0) << "frames leaked (>0) or freed twice (<0)";
  // The memory budget's kinds a space alone charges are back to exactly 0 as well.
  for (MemKind k : {MemKind::kFrames, MemKind::kPageTables, MemKind::kVmas, MemKind::kIndexNodes})
    EXPECT_EQ(frames.budget().usage(k), 0) << MemKindName(k) << " still charged";
}

/// A temporary directory (a FileTable's data directory), removed with its contents.
struct ScratchDir {
  ScratchDir() {
    char tmpl[] = "/tmp/vmspace-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  std::string path;
};

/// Waits (yielding) until pred() holds; false after a minute (a hang).
template <typename P>
bool WaitUntil(P pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace vmspace::testing_util
