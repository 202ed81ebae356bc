// SPDX-License-Identifier: Apache-2.0
// Per-RPC counters and latency histograms of the vmspace gRPC service, in the
// go-grpc-prometheus style (grpc_server_started_total, grpc_server_handled_total,
// grpc_server_msg_{received,sent}_total, grpc_server_handling_seconds).
//
// The handlers record into the calling thread's own block with relaxed load + store
// (single writer, no shared read-modify-write, no lock), like the engine's stats.h.
// The metrics collector sums all blocks at scrape time (ReadRpcStats). Blocks of
// exited threads are kept and reused by new threads, so totals never go backwards.
#pragma once

#include "engine/per_thread.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace vmspace::metrics {

/// The methods of vmspace.v1.VmSpace (label grpc_method).
enum class RpcMethod : uint8_t {
  kCreateSpace,
  kDestroySpace,
  kListSpaces,
  kMmap,
  kMunmap,
  kMprotect,
  kFault,
  kAccess,
  kReadMemory,
  kWriteMemory,
  kGetMaps,
  kBatch,
  kPing,
  kMadvise,
  kGetLockStats,
  kGetServerInfo,
  kOpenFile,
  kCreateShmemFile,
  kCloseFile,
  kTruncateFile,
  kStatFile,
  kListFiles,
  kReadFile,
  kWriteFile,
  kFsyncFile,
  kMsync,
  kBrk,
  kMremap,
  kMlock,
  kMunlock,
  kMlockall,
  kMunlockall,
  kMseal,
  kAddFileSeals,
  kGetFileSeals,
  kReopenFile,
  kMincore,
  kCloneSpace,
  kExecSpace,
  kTraceLocks,
  kCount
};
inline constexpr size_t kRpcMethodCount = static_cast<size_t>(RpcMethod::kCount);

/// The fully qualified service name (label grpc_service).
inline constexpr const char* kRpcServiceName = "vmspace.v1.VmSpace";
/// Method name as in the .proto, e.g. "Mmap".
const char* RpcMethodName(RpcMethod m);
/// go-grpc-prometheus grpc_type: "unary" or "bidi_stream".
const char* RpcMethodType(RpcMethod m);

/// Number of canonical gRPC status codes (OK = 0 ... UNAUTHENTICATED = 16).
inline constexpr int kGrpcCodeCount = 17;
/// Go name of a status code as go-grpc-prometheus prints it ("OK", "NotFound", ...).
const char* GrpcCodeName(int code);

/// Upper bounds (seconds) of the grpc_server_handling_seconds buckets; +Inf is implied.
inline constexpr std::array<double, 16> kRpcLatencyBuckets = {
    25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3,
    10e-3, 25e-3, 50e-3,  100e-3, 250e-3, 1.0,   2.5,    10.0};

/// Sum over all threads of the per-method counters.
struct RpcSnapshot {
  struct Method {
    uint64_t started = 0;
    uint64_t msg_received = 0;
    uint64_t msg_sent = 0;
    std::array<uint64_t, kGrpcCodeCount> handled{};  // by status code
    std::array<uint64_t, kRpcLatencyBuckets.size() + 1> latency_hist{};  // not cumulative
    uint64_t latency_ns_total = 0;
  };
  std::array<Method, kRpcMethodCount> methods{};
  const Method& method(RpcMethod m) const { return methods[static_cast<size_t>(m)]; }
};

/// Sums every thread's block. Safe from any thread; takes a registration mutex (never
/// taken on the request path except once per new thread).
RpcSnapshot ReadRpcStats();

/// RPCs of this service whose handler has started and not yet finished (started minus
/// handled, summed over methods). Costs one ReadRpcStats(); for the shutdown drain.
uint64_t RpcsInFlight();

namespace rpc_stats_internal {
struct alignas(kDestructiveInterferenceBytes) ThreadBlock {
  struct Method {
    std::atomic<uint64_t> started{0}, msg_received{0}, msg_sent{0}, latency_ns_total{0};
    std::array<std::atomic<uint64_t>, kGrpcCodeCount> handled{};
    std::array<std::atomic<uint64_t>, kRpcLatencyBuckets.size() + 1> latency_hist{};
  };
  std::array<Method, kRpcMethodCount> methods{};
};
inline ThreadBlock::Method& Block(RpcMethod m) {
  return PerThread<ThreadBlock>::Get().methods[static_cast<size_t>(m)];
}
/// Single-writer increment: only the owning thread writes its block.
inline void Bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
size_t LatencyBucket(uint64_t ns);
}  // namespace rpc_stats_internal

/// Counts one message received on a stream (unary calls count theirs in RpcScope).
inline void CountMsgReceived(RpcMethod m) {
  rpc_stats_internal::Bump(rpc_stats_internal::Block(m).msg_received);
}
/// Counts one message sent on a stream.
inline void CountMsgSent(RpcMethod m) {
  rpc_stats_internal::Bump(rpc_stats_internal::Block(m).msg_sent);
}

/// Times one RPC: construct at the top of the handler (counts "started"), call
/// Finish(code) once with the final status code (counts "handled" and the latency).
/// For unary methods it also counts the request message and, if OK, the response.
class RpcScope {
 public:
  explicit RpcScope(RpcMethod m) : m_(m), t0_(std::chrono::steady_clock::now()) {
    auto& b = rpc_stats_internal::Block(m_);
    rpc_stats_internal::Bump(b.started);
    if (m_ != RpcMethod::kBatch) rpc_stats_internal::Bump(b.msg_received);
  }
  RpcScope(const RpcScope&) = delete;
  RpcScope& operator=(const RpcScope&) = delete;

  /// Records the outcome; `code` is a grpc::StatusCode value (0..16).
  void Finish(int code) {
    uint64_t ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::steady_clock::now() - t0_)
                                            .count());
    auto& b = rpc_stats_internal::Block(m_);
    if (code < 0 || code >= kGrpcCodeCount) code = 2;  // UNKNOWN
    rpc_stats_internal::Bump(b.handled[static_cast<size_t>(code)]);
    rpc_stats_internal::Bump(b.latency_hist[rpc_stats_internal::LatencyBucket(ns)]);
    rpc_stats_internal::Bump(b.latency_ns_total, ns);
    if (m_ != RpcMethod::kBatch && code == 0) rpc_stats_internal::Bump(b.msg_sent);
  }

 private:
  RpcMethod m_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace vmspace::metrics
