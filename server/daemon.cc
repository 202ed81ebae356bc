// SPDX-License-Identifier: Apache-2.0
#include "daemon.h"

#include <malloc.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include <absl/strings/str_cat.h>
#include <grpc/grpc.h>
// LeakSanitizer's interface, in an ASan or LSan build (gcc defines __SANITIZE_ADDRESS__,
// clang has __has_feature).
#if defined(__SANITIZE_ADDRESS__)
#define VMSPACE_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define VMSPACE_LSAN 1
#endif
#endif
#ifdef VMSPACE_LSAN
#include <sanitizer/lsan_interface.h>
#endif
#include <grpcpp/ext/proto_server_reflection_plugin.h>

#include "engine/address_space.h"
#include "engine/types.h"
#include "engine/writeback.h"
#include "metrics/rpc_stats.h"
#include "peers.h"
#include "rpc/log.h"
#include "vmspace_version.h"

// Last: glibc's <signal.h> defines si_addr as a macro, which breaks the generated
// FaultInfo::si_addr() accessor if it comes first.
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>


namespace vmspace::daemon {

namespace {

/// The soft RLIMIT_NOFILE in force (ReadConfig raised it to the hard limit).
unsigned long long NofileLimit() {
  struct rlimit rl;
  return getrlimit(RLIMIT_NOFILE, &rl) == 0 ? static_cast<unsigned long long>(rl.rlim_cur) : 0;
}

using vmspace::rpc::LogLevel;
using vmspace::rpc::Logf;

constexpr const char* kServiceName = "vmspace.v1.VmSpace";

/// Destroys the metrics exposer promptly. civetweb's master thread polls its listening
/// sockets with a 2 s timeout (SOCKET_TIMEOUT_QUANTUM) and looks at the stop flag only
/// between polls, so mg_stop waits up to 2 s; a connection to the listener wakes the
/// poll. Connects to `host:port` (a wildcard host as loopback) until the stop is done.
void StopExposer(std::unique_ptr<prometheus::Exposer>& exposer, std::string host, int port) {
  if (!exposer) return;
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "0.0.0.0" || host == "localhost") host = "127.0.0.1";
  if (host == "::") host = "::1";
  std::atomic<bool> stopped{false};
  std::thread waker([&] {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* ai = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &ai) != 0) return;
    while (!stopped.load()) {
      const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0) {
        connect(fd, ai->ai_addr, ai->ai_addrlen);
        close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    freeaddrinfo(ai);
  });
  exposer.reset();
  stopped.store(true);
  waker.join();
}

}  // namespace

sigset_t BlockStopSignals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);  // reload --token-file
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return stop_signals;
}

void ExitWithoutGrpcTeardown(int status) {
#ifdef VMSPACE_LSAN
  __lsan_do_leak_check();
#endif
  fflush(nullptr);
  _exit(status);
}

Daemon::Daemon(const DaemonConfig& cfg)
    : cfg_(cfg),
      frames_(cfg.max_frame_bytes, cfg.max_memory_bytes),
      registry_(frames_, cfg.max_spaces, cfg.shard, cfg.data_dir),
      service_(registry_, cfg.options, cfg.auth.get()),
      connections_(std::make_shared<ConnectionLimit>(cfg.max_connections)) {
  frames_.SetCacheBytes(cfg.frame_cache_bytes);
  registry_.files().SetMaxHandles(cfg.max_open_files);
}

bool Daemon::StartMetrics(std::string* err) {
  const std::string& metrics_listen = cfg_.metrics_listen;
  if (metrics_listen.empty() || metrics_listen == "off") return true;
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(metrics_listen, 2);
  } catch (const std::exception& e) {
    *err = "cannot serve metrics on " + metrics_listen + ": " + e.what() + " (port in use?)";
    return false;
  }
  collector_ = std::make_shared<vmspace::metrics::Collector>(
      &frames_,
      [this] {
        const vmspace::rpc::SpaceTotals t = registry_.Totals();
        return vmspace::metrics::SpaceGauges{t.spaces,
                                             t.vmas,
                                             t.resident_bytes,
                                             t.pagetable_bytes,
                                             t.page_cache_pages * vmspace::kPageSize,
                                             t.page_cache_dirty_pages * vmspace::kPageSize,
                                             t.locked_bytes,
                                             t.sealed_bytes,
                                             t.sealed_vmas};
      },
      vmspace::metrics::BuildInfo{VMSPACE_VERSION, VMSPACE_COMMIT, cfg_.shard});
  exposer_->RegisterCollectable(collector_, "/metrics");
  exposer_->RegisterCollectable(connections_, "/metrics");
  const std::vector<int> ports = exposer_->GetListeningPorts();
  if (!ports.empty()) metrics_port_ = ports[0];
  metrics_addr_ = HostOf(metrics_listen) + ":" +
                  (ports.empty() ? std::string("?") : std::to_string(ports[0]));
  return true;
}

bool Daemon::Start(std::string* err) {
  // --peers: no live daemon may serve this shard already (before this one listens).
  if (!cfg_.peers.empty()) {
    PeerAccess access;
    if (!PeerAccessFromEnv(&access, err)) return false;
    *err = CheckPeers(cfg_.peers, cfg_.shard, access);
    if (!err->empty()) return false;
  }
  // (Credentials initialise gRPC, which starts threads: only after the signal mask.)
  const std::shared_ptr<grpc::ServerCredentials> creds =
      cfg_.tls_cert.empty() ? grpc::InsecureServerCredentials() : grpc::SslServerCredentials(cfg_.ssl);
  // Metrics first: a busy metrics port then fails before gRPC accepts anything.
  if (!StartMetrics(err)) return false;

  grpc::EnableDefaultHealthCheckService(true);
  if (cfg_.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  builder.AddListeningPort(cfg_.listen, creds, &grpc_port);
  // gRPC sets SO_REUSEPORT by default: a second daemon would silently share the port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(cfg_.max_calls_per_connection));
  if (cfg_.max_connection_idle_ms > 0)
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, static_cast<int>(cfg_.max_connection_idle_ms));
  builder.SetOption(connections_->Option());
  builder.experimental().SetInterceptorCreators(vmspace::rpc::ServiceInterceptors());
  grpc::ResourceQuota quota("vmspaced");
  quota.SetMaxThreads(static_cast<int>(cfg_.max_threads));
  // Bytes read from connections and not yet taken by a call: gRPC's own buffers, outside
  // the memory budget (a call charges its messages once it takes them: call_buffers.h).
  quota.Resize(static_cast<size_t>(cfg_.max_transport_bytes));
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(static_cast<int>(cfg_.options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(cfg_.options.max_message_bytes));
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  if (!server_ || grpc_port == 0) {
    *err = "cannot listen on " + cfg_.listen + " (address in use or invalid)";
    return false;
  }
  health_ = server_->GetHealthCheckService();
  if (health_) health_->SetServingStatus(kServiceName, true);

  const vmspace::rpc::ServiceOptions& options = cfg_.options;
  const std::string& tls_client_ca = cfg_.tls_client_ca;
  const vmspace::rpc::Authenticator& auth = *cfg_.auth;
  // The one line tests and scripts parse; printed whatever the log level.
  fprintf(stderr, "vmspaced: listening grpc=%s:%d metrics=%s\n", HostOf(cfg_.listen).c_str(),
          grpc_port, metrics_addr_.c_str());
  fflush(stderr);
  Logf(LogLevel::kInfo,
       "version %s, shard=%u, max-spaces=%llu max-frame-bytes=%llu max-memory-bytes=%llu max-io-bytes=%llu "
       "max-batch=%llu "
       "max-message-bytes=%llu lock-stats=%s locking-profile=%s data-dir=%s",
       VMSPACE_VERSION, cfg_.shard, static_cast<unsigned long long>(cfg_.max_spaces),
       static_cast<unsigned long long>(frames_.limit_bytes()),
       static_cast<unsigned long long>(frames_.budget().limit_bytes()),
       static_cast<unsigned long long>(options.max_io_bytes),
       static_cast<unsigned long long>(options.max_batch),
       static_cast<unsigned long long>(options.max_message_bytes), cfg_.lock_stats.c_str(),
       options.default_profile.Describe().c_str(), cfg_.data_dir.empty() ? "(none)" : cfg_.data_dir.c_str());
  Logf(LogLevel::kInfo, "max-open-files=%llu (RLIMIT_NOFILE %llu) max-connections=%llu "
       "max-connection-idle-ms=%lld max-transport-bytes=%llu",
       static_cast<unsigned long long>(cfg_.max_open_files), static_cast<unsigned long long>(NofileLimit()),
       static_cast<unsigned long long>(cfg_.max_connections), static_cast<long long>(cfg_.max_connection_idle_ms),
       static_cast<unsigned long long>(cfg_.max_transport_bytes));
  Logf(LogLevel::kInfo, "auth: %s, tls=%s, tenant-max-spaces=%llu tenant-max-memory-bytes=%llu "
       "tenant-max-open-files=%llu",
       auth.token_file().empty() ? (tls_client_ca.empty() ? "none (open)" : "mTLS client CN")
                                 : absl::StrCat(cfg_.n_tokens, " tokens from ", auth.token_file(),
                                                tls_client_ca.empty() ? "" : " or mTLS client CN")
                                       .c_str(),
       cfg_.tls_cert.empty() ? "off" : (tls_client_ca.empty() ? "on" : "mutual"),
       static_cast<unsigned long long>(options.tenant_max_spaces),
       static_cast<unsigned long long>(options.tenant_max_memory_bytes),
       static_cast<unsigned long long>(options.tenant_max_open_files));
  return true;
}

void Daemon::FlushLoop() {
  absl::MutexLock l(&flush_mu_);
  auto trimmed = std::chrono::steady_clock::now();
  bool had_spaces = false;
  while (!flush_mu_.AwaitWithTimeout(absl::Condition(&flush_stop_), absl::Milliseconds(cfg_.flush_ms))) {
    flush_mu_.Unlock();
    frames_.FlushDeferredFrees();
    frames_.TrimCache();
    // And every 5 s, the heap's free memory (glibc keeps what the threads of a burst
    // of calls freed in their arenas); at once when the last space has gone, whose
    // VMAs, tables and page caches were freed in the arenas of the threads that ran it.
    const bool has_spaces = registry_.size() > 0;
    if (std::chrono::steady_clock::now() - trimmed > std::chrono::seconds(5) || (had_spaces && !has_spaces)) {
      malloc_trim(0);
      trimmed = std::chrono::steady_clock::now();
    }
    had_spaces = has_spaces;
    flush_mu_.Lock();
  }
}

void Daemon::WaitAndDrain(const sigset_t& stop_signals) {
  vmspace::rpc::Authenticator& auth = *cfg_.auth;
  int sig = 0;
  for (;;) {
    sigwait(&stop_signals, &sig);
    if (sig != SIGHUP) break;
    std::string err;
    size_t n = 0;
    // Keyed by the whole line: only the same outcome repeated within kLogInterval is
    // suppressed, so each different result of a reload is seen.
    std::string line;
    if (auth.token_file().empty())
      line = "SIGHUP: no --token-file to reload";
    else if (auth.Reload(&err, &n))
      line = absl::StrCat("SIGHUP: ", n, " tokens reloaded from ", auth.token_file());
    else
      line = "SIGHUP: " + err + "; keeping the previous tokens";
    vmspace::rpc::LogLine(err.empty() ? LogLevel::kInfo : LogLevel::kError, line, line);
  }
  stop_t0_ = std::chrono::steady_clock::now();
  Logf(LogLevel::kInfo, "%s: draining (grace %lld ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
       static_cast<long long>(cfg_.grace_ms));
  if (health_) health_->Shutdown();  // every service reports NOT_SERVING from now on
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(cfg_.grace_ms);
  std::atomic<bool> shut{false};
  std::thread shutdown([&] {
    server_->Shutdown(deadline);  // refuses new calls, waits for calls and connections
    shut.store(true);
  });
  // Shutdown() also waits for every client connection to close, so one idle client
  // would hold the daemon for the whole grace period. Once no vmspace RPC has been in
  // flight for two polls in a row, cut the remaining connections instead.
  int idle_polls = 0;
  while (!shut.load() && std::chrono::system_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    idle_polls = vmspace::metrics::RpcsInFlight() == 0 ? idle_polls + 1 : 0;
    if (idle_polls >= 2 && !shut.load()) {
      grpc_server_cancel_all_calls(server_->c_server());
      break;
    }
  }
  shutdown.join();
}

void Daemon::Serve(const sigset_t& stop_signals) {
  // Frees a space keeps back for batching (its mmu_gather) are handed to RCU every
  // --deferred-flush-ms, so memory an idle space freed is uncharged; then free frames
  // beyond --frame-cache-bytes (those of idle threads' lists too) go back to the host.
  std::thread flusher([this] { FlushLoop(); });
  std::thread stopper([&] { WaitAndDrain(stop_signals); });
  server_->Wait();
  stopper.join();
  {
    absl::MutexLock l(&flush_mu_);
    flush_stop_ = true;
  }
  flusher.join();
}

bool Daemon::Shutdown(std::string* err) {
  const auto drained = std::chrono::steady_clock::now();
  StopExposer(exposer_, HostOf(cfg_.metrics_listen), metrics_port_);
  auto ms = [](auto d) {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };
  Logf(LogLevel::kInfo, "stopped: gRPC drained in %lld ms, metrics closed in %lld ms (%llu spaces)",
       ms(drained - stop_t0_), ms(std::chrono::steady_clock::now() - drained),
       static_cast<unsigned long long>(registry_.size()));
  // Nothing lost: destroying the spaces unmaps their file mappings, then every dirty
  // page of every file goes back to its host file.
  const auto synced_t0 = std::chrono::steady_clock::now();
  registry_.DestroyAll();
  vmspace::StopWriteback();  // no writeback pass runs while the files are synced and dropped
  if (const int e = registry_.files().SyncAll(); e != 0) {
    *err = std::string("shutdown: writing dirty file pages back failed: ") + vmspace::ErrnoName(e) +
           " (some data in --data-dir is lost)";
    return false;
  }
  Logf(LogLevel::kInfo, "files synced in %lld ms", ms(std::chrono::steady_clock::now() - synced_t0));
  return true;
}

}  // namespace vmspace::daemon
