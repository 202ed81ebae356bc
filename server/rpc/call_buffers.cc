// SPDX-License-Identifier: Apache-2.0
#include "rpc/call_buffers.h"

namespace vmspace::rpc {

thread_local CallCharge* CallCharge::current_ = nullptr;

OpStatus AdmitRequest(CallCharge& cc, std::string_view method, uint64_t bytes, uint64_t max,
                      std::string_view limit) {
  if (bytes > max)
    return ErrnoErrorDetail(EINVAL, method,
                            "a request of " + std::to_string(bytes) + " bytes, more than the largest " +
                                std::string(method) + " request (" + std::to_string(max) + " bytes: " +
                                std::string(limit) + ")");
  if (cc.charge().Resize(2 * bytes)) return {};
  cc.frames().Reclaim();
  if (cc.charge().Resize(2 * bytes)) return {};
  const MemoryBudget& b = cc.frames().budget();
  return ErrnoErrorDetail(ENOMEM, method,
                          "buffers of " + std::to_string(2 * bytes) + " bytes (a request of " +
                              std::to_string(bytes) + " bytes and its parsed copy) exceed the memory budget (" +
                              std::to_string(b.usage()) +
                              " of --max-memory-bytes=" + std::to_string(b.limit_bytes()) +
                              " in use); try again later");
}

}  // namespace vmspace::rpc
