// SPDX-License-Identifier: Apache-2.0
// Call buffers: a unary call's request and response messages charged to the memory
// budget from before the request is parsed until the response has been sent.
//
// gRPC's sync server parses a unary request before the handler runs and keeps the
// response (and its serialized copy) until the client has received it, all outside
// any charge the handler could make. BudgetedUnaryHandler replaces the generated
// handler of a unary method: it receives the request as raw bytes, refuses one larger
// than the method's largest (INVALID_ARGUMENT, EINVAL) or one the budget cannot hold
// (RESOURCE_EXHAUSTED, ENOMEM) before parsing it, and holds the charge (MemKind::
// kBuffers) until the response is sent. Buffers made on the handler's thread meanwhile
// add to this charge (CallCharge::Current) instead of making their own.
#pragma once

#include <cerrno>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/method_handler.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/sync_stream.h>

#include "engine/frame_allocator.h"
#include "rpc/errors.h"

namespace vmspace::rpc {

/// Largest request of a unary method without data (every one but WriteMemory and
/// WriteFile): its strings (a path, a label, a locking profile) are far smaller.
inline constexpr uint64_t kMaxSmallRequestBytes = 64 << 10;
/// Bytes a data request (WriteMemory, WriteFile) may hold beside its data: ids, offset
/// and the fields' tags and lengths.
inline constexpr uint64_t kRequestFieldsBytes = 256;

/// The charge of the unary call running on this thread, from its raw request until
/// its response is sent. Installed by BudgetedUnaryHandler for the handler's
/// duration; thread-confined (the sync server runs a call on one thread).
class CallCharge {
 public:
  explicit CallCharge(FrameAllocator& f) : frames_(f), charge_(&f.budget(), MemKind::kBuffers) {
    prev_ = current_;
    current_ = this;
  }
  ~CallCharge() { current_ = prev_; }
  CallCharge(const CallCharge&) = delete;
  CallCharge& operator=(const CallCharge&) = delete;
  /// The charge of the call on this thread, or null outside a budgeted unary call.
  static CallCharge* Current() { return current_; }
  FrameAllocator& frames() { return frames_; }
  ScopedCharge& charge() { return charge_; }

 private:
  static thread_local CallCharge* current_;
  FrameAllocator& frames_;
  ScopedCharge charge_;
  CallCharge* prev_ = nullptr;
};

/// The answer to a request refused before it was parsed: larger than `max` bytes
/// (INVALID_ARGUMENT, EINVAL, naming `limit`, the flag it comes from) or beyond the
/// memory budget (RESOURCE_EXHAUSTED, ENOMEM). Charges the request's raw and parsed
/// copies (2 * bytes) to `cc` when admitted.
OpStatus AdmitRequest(CallCharge& cc, std::string_view method, uint64_t bytes, uint64_t max,
                      std::string_view limit);

/// The sync handler of one unary method with its messages charged to the budget (see
/// the file comment). Registered in place of the generated one with
/// grpc::Service::MarkMethodStreamed (the request is then read by the handler, not
/// before it). `fn` is the service's method; `max_request` the largest request in
/// bytes, `limit` the flag (or rule) that sets it.
template <class Req, class Resp>
class BudgetedUnaryHandler final : public grpc::internal::MethodHandler {
 public:
  using Fn = std::function<grpc::Status(grpc::ServerContext*, const Req*, Resp*)>;
  BudgetedUnaryHandler(std::string method, Fn fn, FrameAllocator* frames, uint64_t max_request,
                       std::string limit)
      : method_(std::move(method)),
        fn_(std::move(fn)),
        frames_(frames),
        max_request_(max_request),
        limit_(std::move(limit)) {}

  void RunHandler(const HandlerParameter& param) override {
    CallCharge cc(*frames_);
    Resp rsp;
    grpc::Status status = param.status;
    if (status.ok()) {
      Req req;
      status = ReadRequest(param, cc, &req);
      if (status.ok()) {
        status = grpc::internal::CatchingFunctionHandler([&] {
          return fn_(static_cast<grpc::ServerContext*>(param.server_context), &req, &rsp);
        });
      }
    }
    // The serialized response, alive beside `rsp` while it is sent.
    if (status.ok()) cc.charge().Resize(cc.charge().bytes() + rsp.ByteSizeLong(), /*force=*/true);
    grpc::internal::UnaryRunHandlerHelper(param, &rsp, status);
  }

 private:
  // Receives the request's bytes, admits them (size, budget), then parses them; an
  // unparsable request is gRPC's own answer (INTERNAL with no message).
  grpc::Status ReadRequest(const HandlerParameter& param, CallCharge& cc, Req* req) {
    grpc::ByteBuffer raw;
    grpc::internal::ServerReaderWriterBody<Resp, grpc::ByteBuffer> body(
        param.call, static_cast<grpc::ServerContext*>(param.server_context));
    if (!body.Read(&raw)) return grpc::Status(grpc::StatusCode::INTERNAL, "");
    const uint64_t bytes = raw.Length();
    if (OpStatus e = AdmitRequest(cc, method_, bytes, max_request_, limit_); !e.ok())
      return ToGrpcStatus(e);
    grpc::Status st = grpc::SerializationTraits<Req>::Deserialize(&raw, req);
    cc.charge().Resize(bytes, /*force=*/true);  // the raw copy is gone
    if (!st.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "");
    return st;
  }

  const std::string method_;
  const Fn fn_;
  FrameAllocator* const frames_;
  const uint64_t max_request_;
  const std::string limit_;
};

}  // namespace vmspace::rpc
