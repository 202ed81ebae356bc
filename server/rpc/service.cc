// SPDX-License-Identifier: Apache-2.0
#include "rpc/service.h"

#include <cerrno>
#include <memory>
#include <string>

#include "rpc/errors.h"

namespace vmspace::rpc {

VmSpaceService::VmSpaceService(SpaceRegistry& registry, const ServiceOptions& options,
                               const Authenticator* auth)
    : registry_(registry), auth_(auth), opts_(options) {}

std::shared_ptr<Space> VmSpaceService::FindOwn(const Caller& c, uint64_t id) const {
  std::shared_ptr<Space> sp = registry_.Find(id);
  return sp && sp->tenant == c.tenant ? sp : nullptr;
}

OpStatus VmSpaceService::CheckMemoryQuota(const Caller& c) const {
  if (opts_.tenant_max_memory_bytes == 0) return {};
  const TenantUsage u = registry_.Usage(c.tenant);
  if (u.memory_bytes < opts_.tenant_max_memory_bytes) return {};
  return ErrnoErrorDetail(ENOMEM, "tenant quota",
                          "tenant '" + c.tenant + "' uses " + std::to_string(u.memory_bytes) +
                              " bytes, --tenant-max-memory-bytes=" +
                              std::to_string(opts_.tenant_max_memory_bytes));
}

}  // namespace vmspace::rpc
