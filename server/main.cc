// SPDX-License-Identifier: Apache-2.0
// vmspaced: the vmspace daemon. Serves vmspace.v1.VmSpace (plus gRPC health and
// reflection) on --listen and Prometheus metrics on --metrics-listen.
//
// Start-up prints one line on stderr with the bound addresses, e.g.
//   vmspaced: listening grpc=127.0.0.1:50051 metrics=127.0.0.1:9464
// (metrics=off when disabled); with port 0 the chosen ports appear there. A port in use
// is a start-up error (exit status 1). SIGTERM/SIGINT drain: health turns NOT_SERVING,
// new calls are refused, in-flight calls (open Batch streams included) get up to
// --shutdown-grace-ms, then the rest are cancelled, idle connections are closed, every
// space is destroyed and every dirty file page is written back to --data-dir
// (FileTable::SyncAll), and the process exits 0 (1 if a write-back failed: EIO).
// SIGHUP re-reads --token-file (rpc/auth.h); a malformed file keeps the old tokens.
//
// Listen policy: with no authentication (neither --token-file nor --tls-client-ca) the
// daemon serves only a loopback --listen (127.0.0.0/8, [::1], localhost, unix:) and
// refuses any other unless --insecure-listen-anywhere is given.
//
// The steps are in daemon_flags.h (the flags and the configuration they make) and
// daemon.h (the server, the signals and the drain).
#include <string>

#include <malloc.h>

#include <absl/flags/usage.h>
#include <absl/synchronization/mutex.h>

#include "daemon.h"
#include "daemon_flags.h"
#include "rpc/log.h"

namespace {

int Fail(const std::string& msg) {
  vmspace::rpc::Logf(vmspace::rpc::LogLevel::kError, "%s", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  namespace daemon = vmspace::daemon;
  absl::SetProgramUsageMessage(
      "vmspaced: Linux-faithful virtual address spaces over gRPC.\n"
      "Flags may be spelt with dashes or underscores (--max-spaces = --max_spaces).");
  if (daemon::HandleHelp(argc, argv)) return 0;
  daemon::ParseFlags(argc, argv);
  // Buffers of 128 KiB and more (messages, their copies) come from mmap and go back to
  // the host when freed. glibc's default raises this threshold to the largest block
  // freed so far, after which such buffers stay in per-thread arenas: under a burst of
  // 1 MiB calls RSS then grew past the memory budget with memory no call held.
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  // Debian's Abseil checks Mutex lock order on every lock (gRPC uses absl::Mutex).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  daemon::DaemonConfig config;
  std::string err;
  if (!daemon::ReadConfig(&config, &err)) return Fail(err);
  // Before any thread starts; a dedicated thread of Serve takes them with sigwait.
  const sigset_t stop_signals = daemon::BlockStopSignals();
  daemon::Daemon d(config);
  if (!d.Start(&err)) return Fail(err);
  d.Serve(stop_signals);
  if (!d.Shutdown(&err)) return Fail(err);
  daemon::ExitWithoutGrpcTeardown(0);
}
