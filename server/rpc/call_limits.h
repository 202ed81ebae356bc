// SPDX-License-Identifier: Apache-2.0
// The service's counted limits: calls in flight per client host (--max-calls-per-peer)
// and open Batch streams (--max-streams), each held by a slot object that gives back
// exactly what it took.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>
#include <grpcpp/server_context.h>

#include "engine/per_thread.h"
#include "rpc/errors.h"

namespace vmspace::rpc {

/// Calls in flight per client host: the host part of ServerContext::peer()
/// ("ipv4:127.0.0.1:5000" -> "ipv4:127.0.0.1"), so many connections from one host
/// share one count. Thread-safe (16 mutex-guarded shards).
class PeerCalls {
 public:
  /// Counts one more call from `peer`'s host into *host; false (nothing counted) if
  /// `max` are already in flight.
  bool Enter(const std::string& peer, uint64_t max, std::string* host);
  /// Ends a call counted by Enter.
  void Leave(const std::string& host);
  /// Counts one more under `key` itself (a tenant); false (nothing counted) if `max`
  /// are already in. Ended by Leave(key).
  bool EnterKey(const std::string& key, uint64_t max);

 private:
  struct alignas(kDestructiveInterferenceBytes) Shard {
    absl::Mutex mu;
    std::unordered_map<std::string, uint64_t> n ABSL_GUARDED_BY(mu);  // no zero entries
  };
  Shard& ShardOf(const std::string& host);
  std::array<Shard, 16> shards_;
};

// One call's place in PeerCalls (--max-calls-per-peer) for its lifetime; without
// calls or ctx, an uncounted call. Leaves exactly what it entered (a host of any
// spelling, "" included).
class PeerSlot {
 public:
  PeerSlot(PeerCalls* calls, grpc::ServerContext* ctx, uint64_t max) : calls_(calls) {
    const bool counted = calls != nullptr && ctx != nullptr;
    entered_ = counted && calls->Enter(ctx->peer(), max, &host_);
    admitted_ = !counted || entered_;
    if (!admitted_)
      refusal_ = ErrnoErrorDetail(EAGAIN, "call", "--max-calls-per-peer=" + std::to_string(max) +
                                                      " calls from " + host_ + " are in flight; try again later");
  }
  ~PeerSlot() {
    if (entered_) calls_->Leave(host_);
  }
  PeerSlot(const PeerSlot&) = delete;
  PeerSlot& operator=(const PeerSlot&) = delete;
  bool admitted() const { return admitted_; }
  const OpStatus& refusal() const { return refusal_; }

 private:
  PeerCalls* const calls_;
  std::string host_;
  bool entered_ = false;  // counted in calls_ under host_
  bool admitted_ = false;
  OpStatus refusal_;
};

// One call's or stream's place in its tenant's share (a PeerCalls keyed by tenant)
// for its lifetime; `max` 0: uncounted (no per-tenant limit). Leaves exactly what it
// entered.
class TenantSlot {
 public:
  TenantSlot(PeerCalls* counts, const std::string& tenant, uint64_t max, const char* flag)
      : counts_(counts), tenant_(tenant) {
    entered_ = max != 0 && counts->EnterKey(tenant, max);
    admitted_ = max == 0 || entered_;
    if (!admitted_)
      refusal_ = ErrnoErrorDetail(EAGAIN, "call", std::string(flag) + "=" + std::to_string(max) +
                                                      " of tenant '" + tenant + "' are in flight; try again later");
  }
  ~TenantSlot() {
    if (entered_) counts_->Leave(tenant_);
  }
  TenantSlot(const TenantSlot&) = delete;
  TenantSlot& operator=(const TenantSlot&) = delete;
  bool admitted() const { return admitted_; }
  const OpStatus& refusal() const { return refusal_; }

 private:
  PeerCalls* const counts_;
  const std::string tenant_;
  bool entered_ = false;
  bool admitted_ = false;
  OpStatus refusal_;
};

// One Batch stream in the count of open streams (--max-streams) for its lifetime:
// counted when constructed, uncounted when destroyed, whether admitted or not. Build
// it only for a stream that is to be counted (after authentication).
class StreamSlot {
 public:
  StreamSlot(std::atomic<uint64_t>& open, uint64_t max)
      : open_(open), admitted_(open.fetch_add(1, std::memory_order_relaxed) < max) {}
  ~StreamSlot() { open_.fetch_sub(1, std::memory_order_relaxed); }
  StreamSlot(const StreamSlot&) = delete;
  StreamSlot& operator=(const StreamSlot&) = delete;
  /// Whether fewer than `max` streams were open before this one.
  bool admitted() const { return admitted_; }

 private:
  std::atomic<uint64_t>& open_;
  const bool admitted_;
};

}  // namespace vmspace::rpc
