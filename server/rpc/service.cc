// SPDX-License-Identifier: Apache-2.0
#include "rpc/service.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <google/protobuf/descriptor.h>

#include "rpc/call_buffers.h"
#include "rpc/errors.h"

namespace vmspace::rpc {

VmSpaceService::VmSpaceService(SpaceRegistry& registry, const ServiceOptions& options,
                               const Authenticator* auth)
    : registry_(registry), auth_(auth), opts_(options) {
  BudgetUnaryCalls();
}

template <class Req, class Resp>
void VmSpaceService::Budgeted(const char* method,
                              grpc::Status (VmSpaceService::*fn)(grpc::ServerContext*, const Req*, Resp*),
                              uint64_t max_request, const char* limit) {
  // The generated service numbers its methods in the order of the .proto.
  const google::protobuf::MethodDescriptor* m =
      Req::descriptor()->file()->FindServiceByName("VmSpace")->FindMethodByName(method);
  ++budgeted_methods_;
  MarkMethodStreamed(m->index(), new BudgetedUnaryHandler<Req, Resp>(
                                     method,
                                     [this, fn](grpc::ServerContext* ctx, const Req* req, Resp* resp) {
                                       return (this->*fn)(ctx, req, resp);
                                     },
                                     &registry_.frames(), max_request, limit));
}

void VmSpaceService::BudgetUnaryCalls() {
  // Requests without data are small: a path, a label, a locking profile.
  constexpr uint64_t kSmall = kMaxSmallRequestBytes;
  constexpr const char* kSmallRule = "requests without data";
  // A data request: the data and at most kRequestFieldsBytes of other fields.
  const uint64_t data = opts_.max_io_bytes + kRequestFieldsBytes;
  using S = VmSpaceService;
  Budgeted("CreateSpace", &S::CreateSpace, kSmall, kSmallRule);
  Budgeted("DestroySpace", &S::DestroySpace, kSmall, kSmallRule);
  Budgeted("ListSpaces", &S::ListSpaces, kSmall, kSmallRule);
  Budgeted("CloneSpace", &S::CloneSpace, kSmall, kSmallRule);
  // execve's argv + envp limit (a quarter of the 8 MiB stack rlimit) and the paths.
  Budgeted("ExecSpace", &S::ExecSpace, (uint64_t{2} << 20) + kRequestFieldsBytes, "argv and envp within execve's 2 MiB");
  Budgeted("Mmap", &S::Mmap, kSmall, kSmallRule);
  Budgeted("Munmap", &S::Munmap, kSmall, kSmallRule);
  Budgeted("Mprotect", &S::Mprotect, kSmall, kSmallRule);
  Budgeted("Fault", &S::Fault, kSmall, kSmallRule);
  Budgeted("Access", &S::Access, kSmall, kSmallRule);
  Budgeted("ReadMemory", &S::ReadMemory, kSmall, kSmallRule);
  Budgeted("WriteMemory", &S::WriteMemory, data, "--max-io-bytes of data");
  Budgeted("GetMaps", &S::GetMaps, kSmall, kSmallRule);
  Budgeted("Madvise", &S::Madvise, kSmall, kSmallRule);
  Budgeted("Brk", &S::Brk, kSmall, kSmallRule);
  Budgeted("Mremap", &S::Mremap, kSmall, kSmallRule);
  Budgeted("Mincore", &S::Mincore, kSmall, kSmallRule);
  Budgeted("GetLockStats", &S::GetLockStats, kSmall, kSmallRule);
  Budgeted("Ping", &S::Ping, kSmall, kSmallRule);
  Budgeted("GetServerInfo", &S::GetServerInfo, kSmall, kSmallRule);
  Budgeted("OpenFile", &S::OpenFile, kSmall, kSmallRule);
  Budgeted("CreateShmemFile", &S::CreateShmemFile, kSmall, kSmallRule);
  Budgeted("CloseFile", &S::CloseFile, kSmall, kSmallRule);
  Budgeted("TruncateFile", &S::TruncateFile, kSmall, kSmallRule);
  Budgeted("StatFile", &S::StatFile, kSmall, kSmallRule);
  Budgeted("ListFiles", &S::ListFiles, kSmall, kSmallRule);
  Budgeted("ReadFile", &S::ReadFile, kSmall, kSmallRule);
  Budgeted("WriteFile", &S::WriteFile, data, "--max-io-bytes of data");
  Budgeted("FsyncFile", &S::FsyncFile, kSmall, kSmallRule);
  Budgeted("Msync", &S::Msync, kSmall, kSmallRule);
  Budgeted("Mlock", &S::Mlock, kSmall, kSmallRule);
  Budgeted("Munlock", &S::Munlock, kSmall, kSmallRule);
  Budgeted("Mlockall", &S::Mlockall, kSmall, kSmallRule);
  Budgeted("Munlockall", &S::Munlockall, kSmall, kSmallRule);
  Budgeted("Mseal", &S::Mseal, kSmall, kSmallRule);
  Budgeted("AddFileSeals", &S::AddFileSeals, kSmall, kSmallRule);
  Budgeted("GetFileSeals", &S::GetFileSeals, kSmall, kSmallRule);
  Budgeted("ReopenFile", &S::ReopenFile, kSmall, kSmallRule);
  Budgeted("TraceLocks", &S::TraceLocks, kSmall, kSmallRule);
  // A unary method left out here would parse any request gRPC admits, outside the
  // budget: refuse to start (every test that starts a daemon sees it).
  const google::protobuf::ServiceDescriptor* svc =
      v1::CreateSpaceRequest::descriptor()->file()->FindServiceByName("VmSpace");
  int unary = 0;
  for (int i = 0; i < svc->method_count(); ++i)
    if (!svc->method(i)->client_streaming() && !svc->method(i)->server_streaming()) ++unary;
  if (unary != budgeted_methods_) {
    std::fprintf(stderr, "vmspaced: %d unary methods but %d budgeted (server/rpc/service.cc BudgetUnaryCalls)\n",
                 unary, budgeted_methods_);
    std::abort();
  }
}

std::shared_ptr<Space> VmSpaceService::FindOwn(const Caller& c, uint64_t id) const {
  std::shared_ptr<Space> sp = registry_.Find(id);
  return sp && sp->tenant == c.tenant ? sp : nullptr;
}

std::shared_ptr<MemCgroup> VmSpaceService::TenantMemcg(const Caller& c) const {
  if (auth_ == nullptr) return nullptr;
  return registry_.TenantMemcg(c.tenant, opts_.tenant_max_memory_bytes);
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
