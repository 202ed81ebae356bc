// SPDX-License-Identifier: Apache-2.0
// The running daemon: frame memory, the space registry, the service, the metrics
// exposer and the gRPC server, from start-up to the drain on SIGTERM/SIGINT (main.cc
// describes the daemon's behaviour; daemon_flags.h its configuration).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>
#include <prometheus/exposer.h>

#include "connection_limit.h"
#include "daemon_flags.h"
#include "engine/frame_allocator.h"
#include "metrics/collector.h"
#include "rpc/service.h"
#include "rpc/space_registry.h"

// Last: glibc's <signal.h> defines si_addr as a macro, which breaks the generated
// FaultInfo::si_addr() accessor if it comes first.
#include <signal.h>

namespace vmspace::daemon {

/// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (before any thread starts:
/// gRPC, civetweb and the RCU worker start threads, which inherit the mask) and ignores
/// SIGPIPE. Returns the blocked set, for Daemon::Serve's sigwait.
sigset_t BlockStopSignals();

/// Ends the process with `status` after Daemon::Shutdown, without the destructors: the
/// gRPC server's (~Server calls grpc_shutdown, whose Executor::ShutdownAll joins an
/// executor thread that may sit in epoll_wait until gRPC's next timer, seconds away,
/// since nothing kicks it: after a burst of calls SIGTERM then took 7-16 s at a 5 s
/// grace). Nothing is left to tear down: the server is drained, metrics closed, every
/// space destroyed and every file written back. Flushes stdio; under LeakSanitizer runs
/// its leak check first (what the exit handlers would have done).
[[noreturn]] void ExitWithoutGrpcTeardown(int status);

class Daemon {
 public:
  /// Makes the frame allocator, the registry and the service from `cfg`, which must
  /// outlive the daemon. Call after BlockStopSignals.
  explicit Daemon(const DaemonConfig& cfg);
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  /// Serves metrics (first: a busy metrics port fails before gRPC accepts anything),
  /// then gRPC, and prints the "listening" line and the configuration. False with *err
  /// if a port cannot be served.
  bool Start(std::string* err);

  /// Serves until SIGTERM/SIGINT (SIGHUP re-reads --token-file), then drains: health
  /// NOT_SERVING, new calls refused, in-flight calls given the grace period, the rest
  /// cancelled. Returns when the gRPC server has stopped.
  void Serve(const sigset_t& stop_signals);

  /// After Serve: closes metrics, destroys every space and writes every dirty file page
  /// back. False with *err if a write-back failed.
  bool Shutdown(std::string* err);

 private:
  // Starts the exposer on cfg_.metrics_listen; sets metrics_addr_ ("off" if disabled).
  bool StartMetrics(std::string* err);
  // Hands the frees spaces keep back to RCU every --deferred-flush-ms (and trims the
  // frame cache and the heap) until flush_stop_.
  void FlushLoop();
  // Takes the stop signals (reloading tokens on SIGHUP) and drains the server.
  void WaitAndDrain(const sigset_t& stop_signals);

  const DaemonConfig& cfg_;
  FrameAllocator frames_;
  rpc::SpaceRegistry registry_;
  rpc::VmSpaceService service_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<metrics::Collector> collector_;
  std::string metrics_addr_ = "off";
  int metrics_port_ = 0;
  // --max-connections, and its metrics; outlives server_.
  std::shared_ptr<ConnectionLimit> connections_;
  std::unique_ptr<grpc::Server> server_;
  grpc::HealthCheckServiceInterface* health_ = nullptr;
  absl::Mutex flush_mu_;
  bool flush_stop_ ABSL_GUARDED_BY(flush_mu_) = false;
  std::chrono::steady_clock::time_point stop_t0_;  // when the stop signal came
};

}  // namespace vmspace::daemon
