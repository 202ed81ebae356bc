// SPDX-License-Identifier: Apache-2.0
#include "rpc/errors.h"

#include <cerrno>
#include <cstring>

#include <grpcpp/support/error_details.h>

#include "engine/types.h"
#include "google/rpc/status.pb.h"
#include "vmspace/v1/vmspace.pb.h"

namespace vmspace::rpc {

grpc::StatusCode ErrnoToStatusCode(int err) {
  switch (err) {
    case 0: return grpc::StatusCode::OK;
    case EINVAL:
    case EBADF:
    case EFAULT: return grpc::StatusCode::INVALID_ARGUMENT;  // mremap: the range is not one mapping
    case ENOEXEC:
    case ELIBBAD:
    case E2BIG: return grpc::StatusCode::INVALID_ARGUMENT;  // execve: not a program, argv too long
    case ENOTDIR:
    case EISDIR:
    case ENAMETOOLONG:
    case ELOOP: return grpc::StatusCode::INVALID_ARGUMENT;  // a path that cannot name a file
    case ENOENT: return grpc::StatusCode::NOT_FOUND;         // OpenFile, ExecSpace: no such file
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EAGAIN: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case EEXIST: return grpc::StatusCode::ALREADY_EXISTS;
    case EPERM:
    case EACCES: return grpc::StatusCode::PERMISSION_DENIED;
    case EOVERFLOW: return grpc::StatusCode::OUT_OF_RANGE;
    case ENODEV:
    case EOPNOTSUPP: return grpc::StatusCode::UNIMPLEMENTED;
    case EBUSY: return grpc::StatusCode::FAILED_PRECONDITION;  // F_SEAL_WRITE, MS_INVALIDATE
    default: return grpc::StatusCode::UNKNOWN;
  }
}

OpStatus ErrnoErrorDetail(int err, std::string_view what, std::string_view detail) {
  OpStatus s;
  s.code = ErrnoToStatusCode(err);
  s.err = err;
  if (detail.size() > kMaxErrorDetailBytes) detail = detail.substr(0, kMaxErrorDetailBytes);
  s.message.reserve(20 + what.size() + detail.size());
  s.message += ErrnoName(err);
  s.message += ": ";
  s.message += what;
  s.message += ": ";
  s.message += detail;
  if (detail.size() == kMaxErrorDetailBytes) s.message += "...";
  return s;
}

OpStatus ErrnoError(int err, std::string_view what) {
  const char* text = strerrordesc_np(err);
  return ErrnoErrorDetail(err, what, text ? text : "unknown error");
}

OpStatus SpaceNotFound(uint64_t id) {
  OpStatus s;
  s.code = grpc::StatusCode::NOT_FOUND;
  s.message = "space " + std::to_string(id) + " not found";
  return s;
}

OpStatus FrameLimitError(std::string_view what) {
  OpStatus s;
  s.code = grpc::StatusCode::RESOURCE_EXHAUSTED;
  s.err = ENOMEM;
  s.message = "ENOMEM: frame memory limit or memory budget (";
  s.message += what;
  s.message += "; --max-frame-bytes, --max-memory-bytes)";
  return s;
}

OpStatus Cancelled() {
  OpStatus s;
  s.code = grpc::StatusCode::CANCELLED;
  s.message = "cancelled";
  return s;
}

grpc::Status ToGrpcStatus(const OpStatus& s) {
  if (s.ok()) return grpc::Status::OK;
  if (s.err == 0) return grpc::Status(s.code, s.message);
  google::rpc::Status st;
  st.set_code(static_cast<int>(s.code));
  st.set_message(s.message);
  v1::SyscallError se;
  se.set_errno_(s.err);
  se.set_errno_name(ErrnoName(s.err));
  st.add_details()->PackFrom(se);
  grpc::Status out;
  grpc::SetErrorDetails(st, &out);  // code, message and the serialized google.rpc.Status
  return out;
}

}  // namespace vmspace::rpc
