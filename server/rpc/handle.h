// SPDX-License-Identifier: Apache-2.0
// VmSpaceService::Handle and OnSpace, the frame of every handler (authentication,
// metrics, the per-peer limit, the tenant quota, the space lookup, the stop check);
// included by the rpc/*_calls.cc files and rpc/batch.cc.
#pragma once

#include "metrics/rpc_stats.h"
#include "rpc/call_limits.h"
#include "rpc/call_scope.h"
#include "rpc/errors.h"
#include "rpc/service.h"

namespace vmspace::rpc {

template <typename Fn>
grpc::Status VmSpaceService::Handle(metrics::RpcMethod m, grpc::ServerContext* ctx, Fn&& fn) {
  metrics::RpcScope scope(m);
  Caller caller{"", true};
  OpStatus s;
  if (auth_ != nullptr) s = auth_->Authenticate(*ctx, &caller);
  if (s.ok()) {
    // The file pages the call adds are charged to the caller's tenant.
    const std::shared_ptr<MemCgroup> memcg = TenantMemcg(caller);
    const ActiveMemcgScope charge_to(memcg.get());
    s = fn(caller);
  }
  scope.Finish(static_cast<int>(s.code));
  return ToGrpcStatus(s);
}

template <typename Fn>
grpc::Status VmSpaceService::OnSpace(metrics::RpcMethod m, grpc::ServerContext* ctx, uint64_t id,
                                     bool stoppable, bool allocates, Fn&& fn) {
  return Handle(m, ctx, [&](const Caller& c) -> OpStatus {
    PeerSlot peer(&peer_calls_, ctx, opts_.max_calls_per_peer);
    if (!peer.admitted()) return peer.refusal();
    TenantSlot share(&tenant_calls_, c.tenant, opts_.tenant_max_calls, "--tenant-max-calls");
    if (!share.admitted()) return share.refusal();
    if (allocates)
      if (OpStatus q = CheckMemoryQuota(c); !q.ok()) return q;
    std::shared_ptr<Space> sp = FindOwn(c, id);
    if (!sp) return SpaceNotFound(id);
    CallScope call(stoppable ? ctx : nullptr);
    return fn(*sp);
  });
}

}  // namespace vmspace::rpc
