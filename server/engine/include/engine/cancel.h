// SPDX-License-Identifier: Apache-2.0
// CancelScope: lets a caller stop the engine's long calls early, the engine's
// fatal_signal_pending() (Linux checks it in the page-fault retry path, in
// __get_user_pages and in the populate loops).
//
// A caller installs a check for the engine calls its thread makes (the gRPC service:
// "the call was cancelled or its deadline passed"); the loops over a client-chosen
// range (Access, ReadMemory/WriteMemory, MAP_POPULATE) and the fault re-execution loop
// poll it once per page table (2 MiB of addresses) and per retry, and stop with
// FaultOutcome::kInterrupted. The check runs with no engine lock held.
#pragma once

#include <functional>

namespace vmspace {

class CancelScope {
 public:
  /// Installs `stop` (must outlive the scope) for this thread until the scope ends;
  /// scopes nest (the inner one wins).
  explicit CancelScope(const std::function<bool()>& stop) : prev_(tls_stop_) { tls_stop_ = &stop; }
  ~CancelScope() { tls_stop_ = prev_; }
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

  /// Whether the calling thread's current call should stop (false without a scope).
  static bool StopRequested() { return tls_stop_ != nullptr && (*tls_stop_)(); }

 private:
  const std::function<bool()>* const prev_;
  inline static thread_local const std::function<bool()>* tls_stop_ = nullptr;
};

}  // namespace vmspace
