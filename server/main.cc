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
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <absl/flags/flag.h>
#include <absl/flags/parse.h>
#include <absl/flags/reflection.h>
#include <absl/flags/usage.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/synchronization/mutex.h>
#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/exposer.h>

#include "engine/address_space.h"
#include "engine/frame_allocator.h"
#include "engine/stats.h"
#include "engine/types.h"
#include "engine/writeback.h"
#include "metrics/collector.h"
#include "metrics/rpc_stats.h"
#include "rpc/auth.h"
#include "rpc/log.h"
#include "rpc/service.h"
#include "rpc/space_registry.h"

// Last: glibc's <signal.h> defines si_addr as a macro, which breaks the generated
// FaultInfo::si_addr() accessor if it comes first.
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#ifndef VMSPACE_VERSION
#define VMSPACE_VERSION "unknown"
#endif

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "gRPC listen address host:port (port 0 picks a free port)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus /metrics listen address host:port; \"\" or \"off\" disables");
ABSL_FLAG(uint64_t, max_spaces, 1024, "Most address spaces alive at once");
ABSL_FLAG(uint64_t, max_frame_bytes, 4ull << 30,
          "Daemon-wide limit on page-frame memory in bytes (frames, page-cache pages and page "
          "tables; 0 = unlimited): a sub-limit inside --max-memory-bytes");
ABSL_FLAG(uint64_t, max_memory_bytes, 8ull << 30,
          "Daemon-wide memory budget in bytes over everything a client can make the daemon "
          "allocate: frames, page tables, VMAs, index nodes, page cache, call and stream "
          "buffers (0 = unlimited); beyond it mmap/faults get ENOMEM, buffers RESOURCE_EXHAUSTED");
ABSL_FLAG(uint64_t, frame_cache_bytes, 64ull << 20,
          "Free frames kept resident for reuse, bytes; frames freed beyond it are given back "
          "to the host (madvise MADV_DONTNEED), so RSS falls after a load");
ABSL_FLAG(uint64_t, max_io_bytes, 1ull << 20, "Most bytes per ReadMemory/WriteMemory");
ABSL_FLAG(uint64_t, max_batch, 4096, "Most ops per Batch message");
ABSL_FLAG(uint64_t, max_access_touches, 1ull << 30,
          "Most touches (len / stride) of one Access call or op; more is INVALID_ARGUMENT");
ABSL_FLAG(uint64_t, max_streams, 64,
          "Most Batch streams open at once; one more is RESOURCE_EXHAUSTED");
ABSL_FLAG(uint64_t, max_calls_per_connection, 100,
          "Most calls in flight on one client connection (HTTP/2 max concurrent streams; "
          "the client queues more)");
ABSL_FLAG(uint64_t, max_calls_per_peer, 256,
          "Most space calls and Batch streams in flight from one client host; one more is "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_threads, 1024,
          "Most threads gRPC may use for calls (one per call or open stream in flight); a "
          "call beyond it is RESOURCE_EXHAUSTED");
ABSL_FLAG(uint64_t, max_map_count_limit, 65530,
          "Highest max_map_count a space may ask for, and every space's default");
ABSL_FLAG(int64_t, deferred_flush_ms, 200,
          "How often frees a space keeps for batching are handed to RCU (an idle space's "
          "last batch is uncharged within this plus a grace period)");
ABSL_FLAG(uint64_t, max_message_bytes, 16ull << 20,
          "Largest gRPC message received or sent, bytes");
ABSL_FLAG(std::string, lock_stats, "on", "Lock wait/hold timing: on|off");
ABSL_FLAG(std::string, log_level, "info", "error|warn|info|debug");
ABSL_FLAG(int64_t, shutdown_grace_ms, 5000,
          "On SIGTERM/SIGINT, how long in-flight calls may run before being cancelled");
ABSL_FLAG(std::string, locking_profile, "linux-6.15",
          "Locking profile of spaces created without one: linux-6.0|linux-6.1|linux-6.4|"
          "linux-6.6|linux-6.7|linux-6.15, optionally with overrides such as \"linux-6.4,vma_lock=off\"");
ABSL_FLAG(std::string, data_dir, "",
          "Directory of the host files OpenFile opens (paths are relative to it and may not "
          "leave it); \"\" = none: OpenFile of a host file is EACCES, CreateShmemFile "
          "still works. Dirty pages are written back on fsync/msync/munmap and at shutdown");
ABSL_FLAG(uint64_t, fault_around_bytes, 65536,
          "Fault-around window of spaces created without one: a power of two in "
          "[4096, 2097152] (4096 = off)");
ABSL_FLAG(bool, reflection, true,
          "Serve gRPC server reflection (v1alpha; unauthenticated: it shows only the schema)");
ABSL_FLAG(std::string, token_file, "",
          "Bearer tokens, one \"TOKEN TENANT [admin]\" a line (# comments); every vmspace "
          "call then needs \"authorization: Bearer TOKEN\" (health and reflection stay open). "
          "Re-read on SIGHUP");
ABSL_FLAG(uint64_t, tenant_max_spaces, 0, "Most spaces one tenant may own (0 = no limit)");
ABSL_FLAG(uint64_t, tenant_max_memory_bytes, 0,
          "Most resident and page-table bytes one tenant's spaces may use (0 = no limit)");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate chain: serve TLS (with --tls-key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: require client certificates it signed (mutual TLS); the client "
          "certificate's subject CN is the tenant");
ABSL_FLAG(bool, insecure_listen_anywhere, false,
          "Allow a non-loopback --listen without authentication (anyone who reaches the "
          "port may use and destroy every space)");
ABSL_FLAG(uint64_t, dirty_bytes, vmspace::DirtyLimits{}.dirty_bytes,
          "vm.dirty_bytes: dirty host-file page-cache bytes (daemon-wide) above which a "
          "writer (MAP_SHARED write fault, WriteFile) waits for writeback");
ABSL_FLAG(uint64_t, dirty_background_bytes, vmspace::DirtyLimits{}.dirty_background_bytes,
          "vm.dirty_background_bytes: dirty bytes above which the writeback thread starts "
          "writing dirty pages to the host files (at least --dirty-bytes / 2 is used when "
          "it is not below --dirty-bytes)");
ABSL_FLAG(std::string, shard, "0",
          "This daemon's shard among several, 0..8191: the high bits of its space ids "
          "(id = shard << 40 | n). \"hostname\": the number ending the host name, as a "
          "StatefulSet pod's ordinal (vmspaced-2 -> 2)");

namespace {

using vmspace::rpc::LogLevel;
using vmspace::rpc::Logf;

constexpr const char* kServiceName = "vmspace.v1.VmSpace";

// "host:port" -> "host" (keeps [v6] brackets); "" if there is no colon.
std::string HostOf(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  return colon == std::string::npos ? std::string() : addr.substr(0, colon);
}

// Abseil flag names are identifiers (max_spaces); accept the documented dashed
// spelling (--max-spaces) by rewriting dashes in the name part of "--name[=value]".
std::vector<char*> DashesToUnderscores(int argc, char** argv, std::vector<std::string>& store) {
  store.assign(argv, argv + argc);
  std::vector<char*> out;
  for (size_t i = 0; i < store.size(); i++) {
    std::string& a = store[i];
    if (i > 0 && a.size() > 2 && a.compare(0, 2, "--") == 0) {
      const size_t end = std::min(a.find('='), a.size());
      for (size_t k = 2; k < end; k++)
        if (a[k] == '-') a[k] = '_';
    }
    out.push_back(a.data());
  }
  out.push_back(nullptr);
  return out;
}

/// --shard: a number, or "hostname" (the digits after the host name's last '-').
/// Returns false with *err set if the value is not one.
bool ParseShard(const std::string& v, uint32_t* shard, std::string* err) {
  std::string digits = v;
  if (v == "hostname") {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) {
      *err = "gethostname failed";
      return false;
    }
    const std::string h = host;
    const size_t dash = h.rfind('-');
    digits = dash == std::string::npos ? "" : h.substr(dash + 1);
    if (digits.empty()) {
      *err = "host name '" + h + "' does not end in -N";
      return false;
    }
  }
  uint64_t n = 0;
  if (digits.empty() || digits.size() > 5 ||
      digits.find_first_not_of("0123456789") != std::string::npos ||
      (n = std::stoull(digits)) > vmspace::rpc::kMaxShard) {
    *err = "'" + digits + "' is not a shard number 0..8191";
    return false;
  }
  *shard = static_cast<uint32_t>(n);
  return true;
}

/// Whether `listen` (a gRPC listen address) is reachable only from this host.
bool LoopbackListen(const std::string& listen) {
  if (absl::StartsWith(listen, "unix:") || absl::StartsWith(listen, "unix-abstract:")) return true;
  const std::string host = HostOf(listen);
  return host == "localhost" || host == "[::1]" || absl::StartsWith(host, "127.");
}

/// The whole of file `path` in *out; false if it cannot be read.
bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

int Fail(const std::string& msg) {
  Logf(LogLevel::kError, "%s", msg.c_str());
  return 1;
}

/// --help / -h: the usage message and this file's flags (spelt with dashes), with
/// their defaults, on stdout. (Abseil's own --help lists only flags of a file named
/// like the program, none here, and exits 1.)
bool HandleHelp(int argc, char** argv) {
  bool help = false;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h" || a == "--helpfull") help = true;
  }
  if (!help) return false;
  printf("%s\n\nFlags:\n", absl::ProgramUsageMessage().data());
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags())
    if (absl::EndsWith(flag->Filename(), "server/main.cc")) flags.push_back(flag);
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  for (const absl::CommandLineFlag* f : flags) {
    std::string name(f->Name());
    std::replace(name.begin(), name.end(), '_', '-');
    printf("  --%s (%s; default: %s)\n", name.c_str(), f->Help().c_str(),
           f->DefaultValue().c_str());
  }
  return true;
}

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

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "vmspaced: Linux-faithful virtual address spaces over gRPC.\n"
      "Flags may be spelt with dashes or underscores (--max-spaces = --max_spaces).");
  if (HandleHelp(argc, argv)) return 0;
  std::vector<std::string> arg_store;
  std::vector<char*> args = DashesToUnderscores(argc, argv, arg_store);
  absl::ParseCommandLine(argc, args.data());
  // Debian's Abseil checks Mutex lock order on every lock (gRPC uses absl::Mutex).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  LogLevel level;
  if (!vmspace::rpc::ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level))
    return Fail("--log-level must be error, warn, info or debug");
  vmspace::rpc::SetLogLevel(level);
  vmspace::rpc::RouteProtobufLogs();

  const std::string lock_stats = absl::GetFlag(FLAGS_lock_stats);
  if (lock_stats != "on" && lock_stats != "off") return Fail("--lock-stats must be on or off");
  vmspace::SetLockStatsEnabled(lock_stats == "on");

  vmspace::rpc::ServiceOptions options;
  options.max_io_bytes = absl::GetFlag(FLAGS_max_io_bytes);
  options.max_batch = absl::GetFlag(FLAGS_max_batch);
  options.max_access_touches = absl::GetFlag(FLAGS_max_access_touches);
  options.max_streams = absl::GetFlag(FLAGS_max_streams);
  options.max_calls_per_peer = absl::GetFlag(FLAGS_max_calls_per_peer);
  options.max_map_count_limit = absl::GetFlag(FLAGS_max_map_count_limit);
  const uint64_t max_calls_per_connection = absl::GetFlag(FLAGS_max_calls_per_connection);
  if (max_calls_per_connection < 1 || max_calls_per_connection > INT32_MAX)
    return Fail("--max-calls-per-connection must be in [1, 2^31)");
  const int64_t max_threads = absl::GetFlag(FLAGS_max_threads);
  // The engine takes at most kMaxEngineThreads threads at once; the daemon's own (main,
  // signals, flusher, writeback, metrics, the RCU worker) need far fewer than the slack.
  constexpr int64_t kMaxCallThreads = vmspace::kMaxEngineThreads - 256;
  if (max_threads < 4 || max_threads > kMaxCallThreads)
    return Fail("--max-threads must be in [4, " + std::to_string(kMaxCallThreads) + "]: the engine serves at most " +
                std::to_string(vmspace::kMaxEngineThreads) + " threads at once");
  const int64_t flush_ms = absl::GetFlag(FLAGS_deferred_flush_ms);
  if (flush_ms < 1) return Fail("--deferred-flush-ms must be >= 1");
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (options.max_message_bytes < 4096 || options.max_message_bytes > INT32_MAX)
    return Fail("--max-message-bytes must be in [4096, 2^31)");
  if (options.max_io_bytes > options.max_message_bytes - 4096)
    return Fail("--max-io-bytes must be at least 4 KiB below --max-message-bytes");
  {
    std::string err;
    if (!vmspace::LockingProfile::Parse(absl::GetFlag(FLAGS_locking_profile),
                                        &options.default_profile, &err))
      return Fail("--locking-profile: " + err);
  }
  const uint64_t max_spaces = absl::GetFlag(FLAGS_max_spaces);
  uint32_t shard = 0;
  {
    std::string err;
    if (!ParseShard(absl::GetFlag(FLAGS_shard), &shard, &err)) return Fail("--shard: " + err);
  }
  options.version = VMSPACE_VERSION;
  options.fault_around_bytes = absl::GetFlag(FLAGS_fault_around_bytes);
  if (!vmspace::rpc::ValidFaultAroundBytes(options.fault_around_bytes))
    return Fail("--fault-around-bytes must be a power of two in [4096, 2097152]");
  if (absl::GetFlag(FLAGS_dirty_bytes) < vmspace::kPageSize) return Fail("--dirty-bytes must be >= 4096");
  vmspace::SetDirtyLimits({.dirty_bytes = absl::GetFlag(FLAGS_dirty_bytes),
                           .dirty_background_bytes = absl::GetFlag(FLAGS_dirty_background_bytes)});
  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  if (!data_dir.empty() && access(data_dir.c_str(), R_OK | W_OK | X_OK) != 0)
    return Fail("--data-dir " + data_dir + ": not a writable directory");
  const int64_t grace_ms = absl::GetFlag(FLAGS_shutdown_grace_ms);
  if (grace_ms < 0) return Fail("--shutdown-grace-ms must be >= 0");
  options.tenant_max_spaces = absl::GetFlag(FLAGS_tenant_max_spaces);
  options.tenant_max_memory_bytes = absl::GetFlag(FLAGS_tenant_max_memory_bytes);

  // Credentials: TLS (gRPC's SslServerCredentials), optionally mutual.
  const std::string tls_cert = absl::GetFlag(FLAGS_tls_cert), tls_key = absl::GetFlag(FLAGS_tls_key),
                    tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  grpc::SslServerCredentialsOptions ssl;
  if (tls_cert.empty() != tls_key.empty()) return Fail("--tls-cert and --tls-key go together");
  if (!tls_client_ca.empty() && tls_cert.empty())
    return Fail("--tls-client-ca needs --tls-cert and --tls-key");
  if (!tls_cert.empty()) {
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    if (!ReadFile(tls_cert, &pair.cert_chain)) return Fail("--tls-cert " + tls_cert + ": cannot read");
    if (!ReadFile(tls_key, &pair.private_key)) return Fail("--tls-key " + tls_key + ": cannot read");
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    if (!tls_client_ca.empty()) {
      if (!ReadFile(tls_client_ca, &ssl.pem_root_certs))
        return Fail("--tls-client-ca " + tls_client_ca + ": cannot read");
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
  }
  vmspace::rpc::Authenticator auth(absl::GetFlag(FLAGS_token_file), !tls_client_ca.empty());
  size_t n_tokens = 0;
  {
    std::string err;
    if (!auth.Reload(&err, &n_tokens)) return Fail("--token-file " + err);
  }
  const std::string listen = absl::GetFlag(FLAGS_listen);
  if (!auth.enabled() && !LoopbackListen(listen) && !absl::GetFlag(FLAGS_insecure_listen_anywhere))
    return Fail("--listen " + listen +
                " is not loopback and calls are not authenticated: give --token-file or "
                "--tls-client-ca, or --insecure-listen-anywhere to serve it open");

  // Block the stop signals before any thread starts (gRPC, civetweb, the RCU worker all start
  // threads, which inherit the mask); a dedicated thread takes them with sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);  // reload --token-file
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // (Credentials initialise gRPC, which starts threads: only after the mask.)
  const std::shared_ptr<grpc::ServerCredentials> creds =
      tls_cert.empty() ? grpc::InsecureServerCredentials() : grpc::SslServerCredentials(ssl);

  vmspace::FrameAllocator frames(absl::GetFlag(FLAGS_max_frame_bytes), absl::GetFlag(FLAGS_max_memory_bytes));
  frames.SetCacheBytes(absl::GetFlag(FLAGS_frame_cache_bytes));
  vmspace::rpc::SpaceRegistry registry(frames, max_spaces, shard, data_dir);
  vmspace::rpc::VmSpaceService service(registry, options, &auth);

  // Metrics first: a busy metrics port then fails before gRPC accepts anything.
  std::string metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  std::unique_ptr<prometheus::Exposer> exposer;
  std::shared_ptr<vmspace::metrics::Collector> collector;
  std::string metrics_addr = "off";
  int metrics_port = 0;
  if (!metrics_listen.empty() && metrics_listen != "off") {
    try {
      exposer = std::make_unique<prometheus::Exposer>(metrics_listen, 2);
    } catch (const std::exception& e) {
      return Fail("cannot serve metrics on " + metrics_listen + ": " + e.what() +
                  " (port in use?)");
    }
    collector = std::make_shared<vmspace::metrics::Collector>(
        &frames,
        [&registry] {
          const vmspace::rpc::SpaceTotals t = registry.Totals();
          return vmspace::metrics::SpaceGauges{t.spaces,
                                               t.vmas,
                                               t.resident_bytes,
                                               t.pagetable_bytes,
                                               t.page_cache_pages * vmspace::kPageSize,
                                               t.page_cache_dirty_pages * vmspace::kPageSize};
        },
        VMSPACE_VERSION);
    exposer->RegisterCollectable(collector, "/metrics");
    const std::vector<int> ports = exposer->GetListeningPorts();
    if (!ports.empty()) metrics_port = ports[0];
    metrics_addr = HostOf(metrics_listen) + ":" +
                   (ports.empty() ? std::string("?") : std::to_string(ports[0]));
  }

  grpc::EnableDefaultHealthCheckService(true);
  if (absl::GetFlag(FLAGS_reflection)) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  builder.AddListeningPort(listen, creds, &grpc_port);
  // gRPC sets SO_REUSEPORT by default: a second daemon would silently share the port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(max_calls_per_connection));
  builder.experimental().SetInterceptorCreators(vmspace::rpc::ServiceInterceptors());
  grpc::ResourceQuota quota("vmspaced");
  quota.SetMaxThreads(static_cast<int>(max_threads));
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || grpc_port == 0)
    return Fail("cannot listen on " + listen + " (address in use or invalid)");
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health) health->SetServingStatus(kServiceName, true);

  // The one line tests and scripts parse; printed whatever the log level.
  fprintf(stderr, "vmspaced: listening grpc=%s:%d metrics=%s\n", HostOf(listen).c_str(),
          grpc_port, metrics_addr.c_str());
  fflush(stderr);
  Logf(LogLevel::kInfo,
       "version %s, shard=%u, max-spaces=%llu max-frame-bytes=%llu max-memory-bytes=%llu max-io-bytes=%llu "
       "max-batch=%llu "
       "max-message-bytes=%llu lock-stats=%s locking-profile=%s data-dir=%s",
       VMSPACE_VERSION, shard, static_cast<unsigned long long>(max_spaces),
       static_cast<unsigned long long>(frames.limit_bytes()),
       static_cast<unsigned long long>(frames.budget().limit_bytes()),
       static_cast<unsigned long long>(options.max_io_bytes),
       static_cast<unsigned long long>(options.max_batch),
       static_cast<unsigned long long>(options.max_message_bytes), lock_stats.c_str(),
       options.default_profile.Describe().c_str(), data_dir.empty() ? "(none)" : data_dir.c_str());
  Logf(LogLevel::kInfo, "auth: %s, tls=%s, tenant-max-spaces=%llu tenant-max-memory-bytes=%llu",
       auth.token_file().empty() ? (tls_client_ca.empty() ? "none (open)" : "mTLS client CN")
                                 : absl::StrCat(n_tokens, " tokens from ", auth.token_file(),
                                                tls_client_ca.empty() ? "" : " or mTLS client CN")
                                       .c_str(),
       tls_cert.empty() ? "off" : (tls_client_ca.empty() ? "on" : "mutual"),
       static_cast<unsigned long long>(options.tenant_max_spaces),
       static_cast<unsigned long long>(options.tenant_max_memory_bytes));

  // Frees a space keeps back for batching (its mmu_gather) are handed to RCU every
  // --deferred-flush-ms, so memory an idle space freed is uncharged; then free frames
  // beyond --frame-cache-bytes (those of idle threads' lists too) go back to the host.
  absl::Mutex flush_mu;
  bool flush_stop = false;
  std::thread flusher([&] {
    absl::MutexLock l(&flush_mu);
    auto trimmed = std::chrono::steady_clock::now();
    while (!flush_mu.AwaitWithTimeout(absl::Condition(&flush_stop), absl::Milliseconds(flush_ms))) {
      flush_mu.Unlock();
      frames.FlushDeferredFrees();
      frames.TrimCache();
      // And every 5 s, the heap's free memory (glibc keeps what the threads of a burst
      // of calls freed in their arenas).
      if (std::chrono::steady_clock::now() - trimmed > std::chrono::seconds(5)) {
        malloc_trim(0);
        trimmed = std::chrono::steady_clock::now();
      }
      flush_mu.Lock();
    }
  });

  std::chrono::steady_clock::time_point stop_t0;
  std::thread stopper([&] {
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
    stop_t0 = std::chrono::steady_clock::now();
    Logf(LogLevel::kInfo, "%s: draining (grace %lld ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
         static_cast<long long>(grace_ms));
    if (health) health->Shutdown();  // every service reports NOT_SERVING from now on
    const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms);
    std::atomic<bool> shut{false};
    std::thread shutdown([&] {
      server->Shutdown(deadline);  // refuses new calls, waits for calls and connections
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
        grpc_server_cancel_all_calls(server->c_server());
        break;
      }
    }
    shutdown.join();
  });
  server->Wait();
  stopper.join();
  {
    absl::MutexLock l(&flush_mu);
    flush_stop = true;
  }
  flusher.join();
  const auto drained = std::chrono::steady_clock::now();
  StopExposer(exposer, HostOf(metrics_listen), metrics_port);
  auto ms = [](auto d) {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };
  Logf(LogLevel::kInfo, "stopped: gRPC drained in %lld ms, metrics closed in %lld ms (%llu spaces)",
       ms(drained - stop_t0), ms(std::chrono::steady_clock::now() - drained),
       static_cast<unsigned long long>(registry.size()));
  // Nothing lost: destroying the spaces unmaps their file mappings, then every dirty
  // page of every file goes back to its host file.
  const auto synced_t0 = std::chrono::steady_clock::now();
  registry.DestroyAll();
  vmspace::StopWriteback();  // no writeback pass runs while the files are synced and dropped
  if (const int err = registry.files().SyncAll(); err != 0)
    return Fail(std::string("shutdown: writing dirty file pages back failed: ") +
                vmspace::ErrnoName(err) + " (some data in --data-dir is lost)");
  Logf(LogLevel::kInfo, "files synced in %lld ms", ms(std::chrono::steady_clock::now() - synced_t0));
  return 0;
}
