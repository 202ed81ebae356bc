// SPDX-License-Identifier: Apache-2.0
// Errors of the vmspace service: errno -> gRPC status mapping as documented at the top
// of proto/vmspace/v1/vmspace.proto.
//
// An OpStatus is the outcome of one operation, shared by the unary handlers (turned
// into a grpc::Status by ToGrpcStatus) and the Batch stream (copied into an OpResult).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <grpcpp/support/status.h>

namespace vmspace::rpc {

/// The status code for a Linux errno: EINVAL/EBADF -> INVALID_ARGUMENT,
/// ENOMEM/EAGAIN -> RESOURCE_EXHAUSTED, EEXIST -> ALREADY_EXISTS, EPERM/EACCES ->
/// PERMISSION_DENIED, EOVERFLOW -> OUT_OF_RANGE, ENODEV/EOPNOTSUPP -> UNIMPLEMENTED,
/// any other errno -> UNKNOWN; 0 -> OK.
grpc::StatusCode ErrnoToStatusCode(int err);

/// Outcome of one operation. `err` is the Linux errno (0 if the failure has none, such
/// as NOT_FOUND for an unknown space); `message` starts with the errno name if err != 0.
struct OpStatus {
  grpc::StatusCode code = grpc::StatusCode::OK;
  int err = 0;
  std::string message;
  bool ok() const { return code == grpc::StatusCode::OK; }
};

/// A failure with errno `err`: code from ErrnoToStatusCode, message
/// "<ERRNO>: <what>: <strerror text>" (e.g. "EINVAL: mmap: Invalid argument").
OpStatus ErrnoError(int err, std::string_view what);
/// Like ErrnoError but with an explicit detail in place of the strerror text,
/// e.g. ErrnoErrorDetail(EINVAL, "ReadMemory", "len 2097152 exceeds --max-io-bytes").
/// A detail longer than kMaxErrorDetailBytes (one that echoes a client's string) is cut
/// there and ends "...", so the status always fits in gRPC's metadata limit (8 KiB).
OpStatus ErrnoErrorDetail(int err, std::string_view what, std::string_view detail);
inline constexpr size_t kMaxErrorDetailBytes = 512;
/// NOT_FOUND "space <id> not found" (no errno).
OpStatus SpaceNotFound(uint64_t id);
/// RESOURCE_EXHAUSTED "ENOMEM: frame memory limit or memory budget (<what>; ...)"
/// (FaultOutcome::kOom: a frame or page table that --max-frame-bytes or
/// --max-memory-bytes refused).
OpStatus FrameLimitError(std::string_view what);
/// CANCELLED (client cancelled or deadline passed while the work ran).
OpStatus Cancelled();

/// The grpc::Status for an OpStatus. If err != 0 its details are the standard
/// google.rpc.Status {code, message, details: [Any(vmspace.v1.SyscallError {errno,
/// errno_name})]}, set with grpc::SetErrorDetails, so any gRPC client can decode them.
grpc::Status ToGrpcStatus(const OpStatus& s);

}  // namespace vmspace::rpc
