// SPDX-License-Identifier: Apache-2.0
// The calls about the daemon itself: GetLockStats, Ping, GetServerInfo.
#include <string>

#include "engine/stats.h"
#include "rpc/handle.h"

namespace vmspace::rpc {

using metrics::RpcMethod;
using metrics::RpcScope;

grpc::Status VmSpaceService::GetLockStats(grpc::ServerContext* ctx,
                                          const v1::GetLockStatsRequest* req,
                                          v1::GetLockStatsResponse* resp) {
  return Handle(RpcMethod::kGetLockStats, ctx, [&](const Caller& c) -> OpStatus {
    // The statistics are the daemon's, every tenant's work summed: only the admin's.
    if (!c.admin)
      return ErrnoErrorDetail(EPERM, "GetLockStats",
                              "lock statistics cover every tenant's spaces; they need the admin role");
    OpStatus s;
    int slot = -1;
    const std::string& name = req->locking_profile();
    if (name == "none") {
      slot = kStatSlotNone;
    } else if (name == "custom") {
      LockingProfile custom;
      custom.name = "custom";
      slot = custom.stats_slot();
    } else if (!name.empty()) {
      LockingProfile p;
      std::string err;
      if (LockingProfile::Parse(name, &p, &err))
        slot = p.stats_slot();
      else
        s = ErrnoErrorDetail(EINVAL, "GetLockStats", "locking_profile: " + err);
    }
    if (s.ok()) {
      const StatsSnapshot snap = ReadStats(slot);
      for (size_t c = 0; c < static_cast<size_t>(LockClass::kCount); c++) {
        for (size_t m = 0; m < static_cast<size_t>(LockMode::kCount); m++) {
          const auto cls = static_cast<LockClass>(c);
          const auto mode = static_cast<LockMode>(m);
          if (mode == LockMode::kRead && !LockClassShared(cls)) continue;  // never taken for read
          const LockStatCell& cell = snap.lock(cls, mode);
          v1::LockStat* l = resp->add_locks();
          l->set_lock(LockClassName(cls));
          l->set_mode(LockModeName(mode));
          l->set_acquisitions(cell.acquisitions);
          l->set_contentions(cell.contentions);
          l->set_wait_seconds_total(static_cast<double>(cell.wait_ns_total) * 1e-9);
          l->set_wait_seconds_max(static_cast<double>(cell.wait_ns_max) * 1e-9);
          l->set_hold_seconds_total(static_cast<double>(cell.hold_ns_total) * 1e-9);
          l->set_hold_seconds_max(static_cast<double>(cell.hold_ns_max) * 1e-9);
          l->mutable_wait_buckets()->Add(cell.wait_hist.begin(), cell.wait_hist.end());
          l->mutable_hold_buckets()->Add(cell.hold_hist.begin(), cell.hold_hist.end());
        }
      }
      resp->mutable_bucket_upper_seconds()->Add(kDurationBuckets.begin(), kDurationBuckets.end());
      auto* events = resp->mutable_events();
      for (size_t e = 0; e < static_cast<size_t>(Event::kCount); e++)
        (*events)[EventName(static_cast<Event>(e))] = snap.events[e];
      resp->set_text(FormatLockStat(snap));
      resp->set_lock_stats_enabled(LockStatsEnabled());
    }
    return s;
  });
}

grpc::Status VmSpaceService::Ping(grpc::ServerContext* ctx, const v1::PingRequest*,
                                  v1::PingResponse*) {
  return Handle(RpcMethod::kPing, ctx, [](const Caller&) { return OpStatus{}; });
}

grpc::Status VmSpaceService::GetServerInfo(grpc::ServerContext* ctx, const v1::GetServerInfoRequest*,
                                           v1::GetServerInfoResponse* resp) {
  return Handle(RpcMethod::kGetServerInfo, ctx, [&](const Caller& c) {
    resp->set_shard(registry_.shard());
    resp->set_max_spaces(registry_.max_spaces());
    resp->set_version(opts_.version);
    const MemoryBudget& b = registry_.frames().budget();
    resp->set_memory_limit_bytes(b.limit_bytes());
    if (const MemCgroup* cg = ActiveMemcg()) resp->set_tenant_page_cache_bytes(cg->usage());
    if (!c.admin) {
      // Another tenant's activity is not the caller's to see: its own spaces, no
      // daemon-wide memory figures.
      resp->set_spaces(registry_.Usage(c.tenant).spaces);
      return OpStatus{};
    }
    resp->set_spaces(registry_.size());
    for (int k = 0; k < kMemKinds; k++) {
      v1::MemoryUsage* u = resp->add_memory();
      u->set_kind(MemKindName(static_cast<MemKind>(k)));
      u->set_bytes(b.usage(static_cast<MemKind>(k)));
    }
    return OpStatus{};
  });
}

}  // namespace vmspace::rpc
