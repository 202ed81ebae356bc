// Frame accounting check shared by the engine tests: after a space is destroyed and
// every deferred free has run (RCU barrier), the allocator must hold no frame for it.
// A leak shows as a positive count, a double free as a negative one.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "engine/address_space.h"

namespace vmspace::testing_accounting {

/// Destroys `as`, waits for deferred frees and expects `frames` to be empty.
inline void ExpectAllFramesFreed(std::unique_ptr<AddressSpace>& as, FrameAllocator& frames) {
  as.reset();
  RcuBarrier();
  EXPECT_EQ(frames.in_use_frames(), 0) << "frames leaked (>0) or freed twice (<0)";
}

}  // namespace vmspace::testing_accounting
