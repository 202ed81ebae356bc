// SPDX-License-Identifier: Apache-2.0
// CallScope: a handler's stop check (the call's deadline and cancellation, which the
// engine polls inside long walks: engine/cancel.h), and StopError, the status of a walk
// it stopped.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include <grpcpp/server_context.h>

#include "engine/cancel.h"
#include "engine/types.h"
#include "rpc/errors.h"

namespace vmspace::rpc {

// ---- the stop check of a call (engine/cancel.h) ----

/// Why the call should stop now: DEADLINE_EXCEEDED once its deadline has passed,
/// CANCELLED once the client (or the daemon, at the end of a shutdown grace period)
/// cancelled it, else OK.
inline grpc::StatusCode StopCode(grpc::ServerContext* ctx) {
  if (ctx == nullptr) return grpc::StatusCode::OK;
  if (std::chrono::system_clock::now() >= ctx->deadline()) return grpc::StatusCode::DEADLINE_EXCEEDED;
  if (ctx->IsCancelled()) return grpc::StatusCode::CANCELLED;
  return grpc::StatusCode::OK;
}

// How often a call's stop check asks gRPC whether the call was cancelled. With the
// sync API ServerContext::IsCancelled() plucks the call's completion queue (a pollset
// round with a futex syscall): polled on every Access op of a Batch stream it was ~5%
// of the daemon's time. The deadline is compared on every check (a clock read).
constexpr auto kCancelPollInterval = std::chrono::milliseconds(1);

/// For the lifetime of a handler: the engine calls of this thread stop when the call
/// should (CancelScope), and StopError() can tell why.
class CallScope {
 public:
  explicit CallScope(grpc::ServerContext* ctx)
      : prev_(tls_call_), ctx_(ctx),
        stop_([this] {
          return ctx_ != nullptr && (std::chrono::system_clock::now() >= ctx_->deadline() || CancelPolled());
        }),
        scope_(stop_) {
    tls_call_ = ctx;
  }
  ~CallScope() { tls_call_ = prev_; }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  /// The call the calling thread is handling (null outside a CallScope).
  static grpc::ServerContext* current() { return tls_call_; }

  /// Whether the call was cancelled, asking gRPC at most once per kCancelPollInterval
  /// (the first time at once); true from the first time it was. Handler thread only.
  bool CancelPolled() {
    if (cancelled_ || ctx_ == nullptr) return cancelled_;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_poll_) return false;
    next_poll_ = now + kCancelPollInterval;
    cancelled_ = ctx_->IsCancelled();
    return cancelled_;
  }

 private:
  grpc::ServerContext* const prev_;
  grpc::ServerContext* const ctx_;
  std::chrono::steady_clock::time_point next_poll_{};
  bool cancelled_ = false;
  const std::function<bool()> stop_;
  CancelScope scope_;
  inline static thread_local grpc::ServerContext* tls_call_ = nullptr;
};

/// The status of an engine walk that ended without doing its work and without a
/// signal: kOom is the frame limit; kInterrupted is the call's deadline or
/// cancellation, or ABORTED if the fault retry limit ended it (an access re-executed
/// kMaxFaultRetries times, each time undone by a racing zap). OK for other outcomes.
inline OpStatus StopError(const FaultResult& f, std::string_view what) {
  if (f.outcome == FaultOutcome::kOom) return FrameLimitError(what);
  if (f.outcome != FaultOutcome::kInterrupted) return {};
  OpStatus s;
  s.code = StopCode(CallScope::current());
  if (s.code == grpc::StatusCode::CANCELLED) return Cancelled();
  if (s.code == grpc::StatusCode::DEADLINE_EXCEEDED) {
    s.message = std::string(what) + ": deadline exceeded while the call ran";
    return s;
  }
  s.code = grpc::StatusCode::ABORTED;
  s.message = std::string(what) + ": an access was re-executed " + std::to_string(kMaxFaultRetries) +
              " times, each undone by a racing change of its page; try again";
  return s;
}

}  // namespace vmspace::rpc
