// SPDX-License-Identifier: Apache-2.0
// TraceLocks: the lock timeline of the caller's spaces (engine/lock_trace.h).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "engine/lock_trace.h"
#include "rpc/handle.h"

namespace vmspace::rpc {

using metrics::RpcMethod;

/// The most events one TraceLocks call returns (a client cannot make the daemon hold
/// more; the rings are bounded by kTraceRingEvents per thread anyway).
inline constexpr uint64_t kMaxTraceEvents = 200'000;
/// The longest trace one call may ask for, in seconds.
inline constexpr double kMaxTraceSeconds = 600;

namespace {
// The trace that is on: its caller's tenant and whether a stop request ended it.
std::mutex g_trace_mu;
bool g_trace_on = false;
std::string g_trace_tenant;
std::atomic<bool> g_trace_stop{false};
}  // namespace

grpc::Status VmSpaceService::TraceLocks(grpc::ServerContext* ctx, const v1::TraceLocksRequest* req,
                                        v1::TraceLocksResponse* resp) {
  return Handle(RpcMethod::kTraceLocks, ctx, [&](const Caller& c) -> OpStatus {
    if (req->stop()) {
      std::lock_guard<std::mutex> l(g_trace_mu);
      if (!g_trace_on || (!c.admin && c.tenant != g_trace_tenant))
        return OpStatus{grpc::StatusCode::FAILED_PRECONDITION, 0, "TraceLocks: no trace of yours is on"};
      g_trace_stop.store(true);
      return {};
    }
    if (!(req->seconds() > 0 && req->seconds() <= kMaxTraceSeconds))
      return ErrnoErrorDetail(EINVAL, "TraceLocks", "seconds must be in (0, 600]");
    if (!req->all() && !FindOwn(c, req->space_id())) return SpaceNotFound(req->space_id());
    const uint64_t cap = req->max_events() == 0 ? kMaxTraceEvents : std::min(req->max_events(), kMaxTraceEvents);
    {
      std::lock_guard<std::mutex> l(g_trace_mu);
      if (g_trace_on || !LockTraceStart())
        return OpStatus{grpc::StatusCode::RESOURCE_EXHAUSTED, 0, "TraceLocks: another trace is on"};
      g_trace_on = true;
      g_trace_tenant = c.tenant;
      g_trace_stop.store(false);
    }
    // The caller's spaces (all: an admin's are every event's; a tenant's are collected
    // while the trace runs, so spaces created and destroyed meanwhile count).
    const bool everything = req->all() && c.admin;
    std::unordered_set<uint64_t> own;
    if (!req->all()) own.insert(req->space_id());
    auto collect = [&] {
      if (!req->all() || everything) return;
      for (const std::shared_ptr<Space>& sp : registry_.List())
        if (sp->tenant == c.tenant) own.insert(sp->id);
    };
    const auto t0 = std::chrono::steady_clock::now();
    const auto until =
        t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(req->seconds()));
    for (;;) {
      collect();
      const auto now = std::chrono::steady_clock::now();
      if (now >= until || StopCode(ctx) != grpc::StatusCode::OK || g_trace_stop.load()) break;
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(std::chrono::milliseconds(20), until - now));
    }
    uint64_t dropped = 0;
    // All events first: the cap applies to the caller's after filtering.
    std::vector<TraceEvent> ev;
    {
      std::lock_guard<std::mutex> l(g_trace_mu);
      ev = LockTraceStop(SIZE_MAX, &dropped);
      g_trace_on = false;
    }
    collect();
    resp->set_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    uint64_t kept = 0;
    for (const TraceEvent& e : ev) {
      if (!everything && !own.count(e.space_id)) continue;
      if (kept == cap) {
        dropped++;
        continue;
      }
      kept++;
      v1::TraceLockEvent* x = resp->add_events();
      x->set_kind(TraceKindName(e.kind));
      x->set_tid(e.tid);
      x->set_begin_ns(e.begin_ns);
      x->set_dur_ns(e.dur_ns);
      x->set_space_id(e.space_id);
      if (e.kind == TraceKind::kLockWait || e.kind == TraceKind::kLockHold) x->set_lock(LockClassName(e.cls));
      if (e.kind != TraceKind::kOp) x->set_mode(LockModeName(e.mode));
      x->set_start(e.start);
      x->set_end(e.end);
      x->set_holder_tid(e.holder_tid);
      x->set_holder_readers(e.holder_readers);
      if (e.name) x->set_name(e.name);
    }
    // The answer must fit a message: the latest events go first.
    const size_t bytes = resp->ByteSizeLong();
    if (bytes > opts_.max_message_bytes && resp->events_size() > 0) {
      const int keep = static_cast<int>(static_cast<double>(resp->events_size()) *
                                        static_cast<double>(opts_.max_message_bytes) / static_cast<double>(bytes) * 0.9);
      dropped += resp->events_size() - keep;
      resp->mutable_events()->DeleteSubrange(keep, resp->events_size() - keep);
    }
    resp->set_dropped(dropped);
    return {};
  });
}

}  // namespace vmspace::rpc
