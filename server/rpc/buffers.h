// SPDX-License-Identifier: Apache-2.0
// Buffers: the request and response data a call holds, charged to the memory budget.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/frame_allocator.h"
#include "rpc/call_buffers.h"
#include "rpc/errors.h"

namespace vmspace::rpc {

/// The buffers of one call or stream (request and response data the service holds),
/// charged to the memory budget as kBuffers while the call runs. Inside a budgeted
/// unary call (CallCharge::Current) they are that call's charge, which lasts until the
/// response is sent; elsewhere (a Batch stream) their own, given back when destroyed.
class Buffers {
 public:
  explicit Buffers(FrameAllocator& f)
      : frames_(f),
        own_(&f.budget(), MemKind::kBuffers),
        charge_(CallCharge::Current() ? CallCharge::Current()->charge() : own_) {}
  /// Makes the charge `bytes` (`force`: even beyond the budget, for bytes already
  /// received that only free). If the budget refuses, waits for the frees already
  /// queued (FrameAllocator::Reclaim) and tries once more; then RESOURCE_EXHAUSTED
  /// (ENOMEM) naming `what`. Caller holds no engine lock.
  OpStatus Resize(std::string_view what, uint64_t bytes, bool force = false) {
    if (charge_.Resize(bytes, force)) return {};
    frames_.Reclaim();
    if (charge_.Resize(bytes)) return {};
    const MemoryBudget& b = frames_.budget();
    return ErrnoErrorDetail(ENOMEM, what,
                            "buffers of " + std::to_string(bytes - charge_.bytes()) +
                                " bytes exceed the memory budget (" + std::to_string(b.usage()) +
                                " of --max-memory-bytes=" + std::to_string(b.limit_bytes()) +
                                " in use); try again later");
  }
  uint64_t bytes() const { return charge_.bytes(); }

 private:
  FrameAllocator& frames_;
  ScopedCharge own_;
  ScopedCharge& charge_;  // own_ or the call's
};

}  // namespace vmspace::rpc
