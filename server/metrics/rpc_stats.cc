// SPDX-License-Identifier: Apache-2.0
#include "metrics/rpc_stats.h"

#include <mutex>
#include <vector>

namespace vmspace::metrics {

const char* RpcMethodName(RpcMethod m) {
  switch (m) {
    case RpcMethod::kCreateSpace: return "CreateSpace";
    case RpcMethod::kDestroySpace: return "DestroySpace";
    case RpcMethod::kListSpaces: return "ListSpaces";
    case RpcMethod::kMmap: return "Mmap";
    case RpcMethod::kMunmap: return "Munmap";
    case RpcMethod::kMprotect: return "Mprotect";
    case RpcMethod::kFault: return "Fault";
    case RpcMethod::kAccess: return "Access";
    case RpcMethod::kReadMemory: return "ReadMemory";
    case RpcMethod::kWriteMemory: return "WriteMemory";
    case RpcMethod::kGetMaps: return "GetMaps";
    case RpcMethod::kBatch: return "Batch";
    case RpcMethod::kPing: return "Ping";
    case RpcMethod::kMadvise: return "Madvise";
    case RpcMethod::kGetLockStats: return "GetLockStats";
    case RpcMethod::kGetServerInfo: return "GetServerInfo";
    case RpcMethod::kOpenFile: return "OpenFile";
    case RpcMethod::kCreateShmemFile: return "CreateShmemFile";
    case RpcMethod::kCloseFile: return "CloseFile";
    case RpcMethod::kTruncateFile: return "TruncateFile";
    case RpcMethod::kStatFile: return "StatFile";
    case RpcMethod::kListFiles: return "ListFiles";
    case RpcMethod::kReadFile: return "ReadFile";
    case RpcMethod::kWriteFile: return "WriteFile";
    case RpcMethod::kFsyncFile: return "FsyncFile";
    case RpcMethod::kMsync: return "Msync";
    case RpcMethod::kBrk: return "Brk";
    case RpcMethod::kMremap: return "Mremap";
    case RpcMethod::kMlock: return "Mlock";
    case RpcMethod::kMunlock: return "Munlock";
    case RpcMethod::kMlockall: return "Mlockall";
    case RpcMethod::kMunlockall: return "Munlockall";
    case RpcMethod::kMseal: return "Mseal";
    case RpcMethod::kAddFileSeals: return "AddFileSeals";
    case RpcMethod::kGetFileSeals: return "GetFileSeals";
    case RpcMethod::kReopenFile: return "ReopenFile";
    case RpcMethod::kMincore: return "Mincore";
    case RpcMethod::kCloneSpace: return "CloneSpace";
    case RpcMethod::kExecSpace: return "ExecSpace";
    case RpcMethod::kTraceLocks: return "TraceLocks";
    case RpcMethod::kCount: break;
  }
  return "?";
}

const char* RpcMethodType(RpcMethod m) {
  return m == RpcMethod::kBatch ? "bidi_stream" : "unary";
}

const char* GrpcCodeName(int code) {
  static constexpr const char* kNames[kGrpcCodeCount] = {
      "OK",           "Canceled",          "Unknown",           "InvalidArgument",
      "DeadlineExceeded", "NotFound",      "AlreadyExists",     "PermissionDenied",
      "ResourceExhausted", "FailedPrecondition", "Aborted",     "OutOfRange",
      "Unimplemented", "Internal",         "Unavailable",       "DataLoss",
      "Unauthenticated"};
  if (code < 0 || code >= kGrpcCodeCount) return "Unknown";
  return kNames[code];
}

namespace rpc_stats_internal {

size_t LatencyBucket(uint64_t ns) {
  const double s = static_cast<double>(ns) * 1e-9;
  for (size_t i = 0; i < kRpcLatencyBuckets.size(); i++)
    if (s <= kRpcLatencyBuckets[i]) return i;
  return kRpcLatencyBuckets.size();
}

}  // namespace rpc_stats_internal

RpcSnapshot ReadRpcStats() {
  RpcSnapshot s;
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  PerThread<rpc_stats_internal::ThreadBlock>::ForEach([&](const rpc_stats_internal::ThreadBlock& blk) {
    const rpc_stats_internal::ThreadBlock* b = &blk;
    for (size_t m = 0; m < kRpcMethodCount; m++) {
      const auto& src = b->methods[m];
      auto& dst = s.methods[m];
      dst.started += ld(src.started);
      dst.msg_received += ld(src.msg_received);
      dst.msg_sent += ld(src.msg_sent);
      dst.latency_ns_total += ld(src.latency_ns_total);
      for (size_t c = 0; c < dst.handled.size(); c++) dst.handled[c] += ld(src.handled[c]);
      for (size_t k = 0; k < dst.latency_hist.size(); k++)
        dst.latency_hist[k] += ld(src.latency_hist[k]);
    }
  });
  return s;
}

uint64_t RpcsInFlight() {
  const RpcSnapshot s = ReadRpcStats();
  uint64_t started = 0, handled = 0;
  for (const auto& m : s.methods) {
    started += m.started;
    for (uint64_t h : m.handled) handled += h;
  }
  return started > handled ? started - handled : 0;
}

}  // namespace vmspace::metrics
