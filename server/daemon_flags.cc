// SPDX-License-Identifier: Apache-2.0
#include "daemon_flags.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <absl/flags/flag.h>
#include <absl/flags/parse.h>
#include <absl/flags/reflection.h>
#include <absl/flags/usage.h>
#include <absl/strings/match.h>

#include "engine/stats.h"
#include "peers.h"
#include "engine/types.h"
#include "engine/writeback.h"
#include "rpc/log.h"
#include "rpc/space_registry.h"
#include "vmspace_version.h"

#include <sys/resource.h>
#include <unistd.h>


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
ABSL_FLAG(uint64_t, max_transport_bytes, 0,
          "Most bytes gRPC may hold of messages received and not yet taken by a call (its "
          "resource quota): beyond it connections read less and calls are cancelled "
          "RESOURCE_EXHAUSTED. Outside --max-memory-bytes; at least --max-message-bytes "
          "(0 = 2 x --max-message-bytes)");
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
ABSL_FLAG(uint64_t, tenant_max_streams, 0,
          "Most Batch streams one tenant may have open, its share of --max-streams; one "
          "more is RESOURCE_EXHAUSTED (0 = no share)");
ABSL_FLAG(uint64_t, tenant_max_calls, 0,
          "Most space calls and Batch streams of one tenant in flight, its share of the "
          "daemon's threads; one more is RESOURCE_EXHAUSTED (0 = no limit)");
ABSL_FLAG(uint64_t, tenant_max_open_files, 0,
          "Most files (OpenFile/CreateShmemFile ids) one tenant may have open; one more is "
          "EMFILE (0 = no limit)");
ABSL_FLAG(uint64_t, max_open_files, 0,
          "Most files open in the daemon at once; one more is ENFILE (0 = the descriptor "
          "limit, raised to its hard limit at start-up, less 1024 kept for connections, at "
          "most 65536)");
ABSL_FLAG(int64_t, max_connection_idle_ms, 600000,
          "Close a client connection that has had no call for this long (the client "
          "reconnects on its next call; 0 = never)");
ABSL_FLAG(int64_t, max_connections, -1,
          "Most client connections open at once (each holds a descriptor and transport "
          "buffers, idle or not); one more is shut down on accept and its call fails "
          "UNAVAILABLE. At most the descriptors --max-open-files leaves, less 64 (-1 = "
          "those, at most 1000; 0 = no cap)");
ABSL_FLAG(uint64_t, tenant_max_memory_bytes, 0,
          "Most bytes one tenant may use: its spaces' anonymous pages and page tables, and the "
          "file (page-cache and shmem) pages its calls brought in (0 = no limit)");
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

ABSL_FLAG(std::string, peers, "",
          "The other daemons, A:PORT,B:PORT or shards:NAME:PORT (every address of NAME, e.g. the "
          "headless Service): at start-up each is asked its shard (GetServerInfo), and the daemon "
          "exits with an error if a live one already serves --shard; unreachable ones are left "
          "out. Token and TLS of the check: $VMSPACE_TOKEN, $VMSPACE_TLS_CA, $VMSPACE_TLS_CERT, "
          "$VMSPACE_TLS_KEY");

namespace vmspace::daemon {

namespace {

/// Raises the soft RLIMIT_NOFILE to the hard one (as systemd services and Go programs
/// do: the soft 1024 exists for select(2), which gRPC does not use); returns the soft
/// limit now in force.
uint64_t RaiseNofileLimit() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return rl.rlim_cur == RLIM_INFINITY ? (1u << 20) : rl.rlim_cur;
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

}  // namespace

// "host:port" -> "host" (keeps [v6] brackets); "" if there is no colon.
std::string HostOf(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  return colon == std::string::npos ? std::string() : addr.substr(0, colon);
}

bool HandleHelp(int argc, char** argv) {
  bool help = false;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--version" || a == "-V") {  // the build's version, not Abseil's build-mode line
      printf("vmspaced %s\n", VMSPACE_VERSION);
      return true;
    }
    if (a == "--help" || a == "-h" || a == "--helpfull") help = true;
  }
  if (!help) return false;
  printf("%s\n\nFlags:\n", absl::ProgramUsageMessage().data());
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags())
    if (absl::EndsWith(flag->Filename(), "server/daemon_flags.cc")) flags.push_back(flag);
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

void ParseFlags(int argc, char** argv) {
  std::vector<std::string> arg_store;
  std::vector<char*> args = DashesToUnderscores(argc, argv, arg_store);
  absl::ParseCommandLine(argc, args.data());
}

bool ReadConfig(DaemonConfig* cfg, std::string* err) {
  using vmspace::rpc::LogLevel;
  const auto fail = [err](std::string msg) {
    *err = std::move(msg);
    return false;
  };
  LogLevel level;
  if (!vmspace::rpc::ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level))
    return fail("--log-level must be error, warn, info or debug");
  vmspace::rpc::SetLogLevel(level);
  vmspace::rpc::RouteProtobufLogs();

  cfg->lock_stats = absl::GetFlag(FLAGS_lock_stats);
  if (cfg->lock_stats != "on" && cfg->lock_stats != "off") return fail("--lock-stats must be on or off");
  vmspace::SetLockStatsEnabled(cfg->lock_stats == "on");

  vmspace::rpc::ServiceOptions& options = cfg->options;
  options.max_io_bytes = absl::GetFlag(FLAGS_max_io_bytes);
  options.max_batch = absl::GetFlag(FLAGS_max_batch);
  options.max_access_touches = absl::GetFlag(FLAGS_max_access_touches);
  options.max_streams = absl::GetFlag(FLAGS_max_streams);
  options.max_calls_per_peer = absl::GetFlag(FLAGS_max_calls_per_peer);
  options.max_map_count_limit = absl::GetFlag(FLAGS_max_map_count_limit);
  cfg->max_calls_per_connection = absl::GetFlag(FLAGS_max_calls_per_connection);
  if (cfg->max_calls_per_connection < 1 || cfg->max_calls_per_connection > INT32_MAX)
    return fail("--max-calls-per-connection must be in [1, 2^31)");
  cfg->max_threads = absl::GetFlag(FLAGS_max_threads);
  // The engine takes at most kMaxEngineThreads threads at once; the daemon's own (main,
  // signals, flusher, writeback, metrics, the RCU worker) need far fewer than the slack.
  constexpr int64_t kMaxCallThreads = vmspace::kMaxEngineThreads - 256;
  if (cfg->max_threads < 4 || cfg->max_threads > kMaxCallThreads)
    return fail("--max-threads must be in [4, " + std::to_string(kMaxCallThreads) + "]: the engine serves at most " +
                std::to_string(vmspace::kMaxEngineThreads) + " threads at once");
  cfg->flush_ms = absl::GetFlag(FLAGS_deferred_flush_ms);
  if (cfg->flush_ms < 1) return fail("--deferred-flush-ms must be >= 1");
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (options.max_message_bytes < 4096 || options.max_message_bytes > INT32_MAX)
    return fail("--max-message-bytes must be in [4096, 2^31)");
  if (options.max_io_bytes > options.max_message_bytes - 4096)
    return fail("--max-io-bytes must be at least 4 KiB below --max-message-bytes");
  cfg->max_transport_bytes = absl::GetFlag(FLAGS_max_transport_bytes);
  if (cfg->max_transport_bytes == 0) cfg->max_transport_bytes = 2 * options.max_message_bytes;
  if (cfg->max_transport_bytes < options.max_message_bytes)
    return fail("--max-transport-bytes must be at least --max-message-bytes (one message must fit)");
  {
    std::string e;
    if (!vmspace::LockingProfile::Parse(absl::GetFlag(FLAGS_locking_profile),
                                        &options.default_profile, &e))
      return fail("--locking-profile: " + e);
  }
  cfg->max_spaces = absl::GetFlag(FLAGS_max_spaces);
  {
    std::string e;
    if (!ParseShard(absl::GetFlag(FLAGS_shard), &cfg->shard, &e)) return fail("--shard: " + e);
    if (!ParsePeers(absl::GetFlag(FLAGS_peers), &cfg->peers, &e)) return fail("--peers: " + e);
  }
  options.version = VMSPACE_VERSION;
  options.fault_around_bytes = absl::GetFlag(FLAGS_fault_around_bytes);
  if (!vmspace::rpc::ValidFaultAroundBytes(options.fault_around_bytes))
    return fail("--fault-around-bytes must be a power of two in [4096, 2097152]");
  if (absl::GetFlag(FLAGS_dirty_bytes) < vmspace::kPageSize) return fail("--dirty-bytes must be >= 4096");
  vmspace::SetDirtyLimits({.dirty_bytes = absl::GetFlag(FLAGS_dirty_bytes),
                           .dirty_background_bytes = absl::GetFlag(FLAGS_dirty_background_bytes)});
  cfg->data_dir = absl::GetFlag(FLAGS_data_dir);
  if (!cfg->data_dir.empty() && access(cfg->data_dir.c_str(), R_OK | W_OK | X_OK) != 0)
    return fail("--data-dir " + cfg->data_dir + ": not a writable directory");
  cfg->grace_ms = absl::GetFlag(FLAGS_shutdown_grace_ms);
  if (cfg->grace_ms < 0) return fail("--shutdown-grace-ms must be >= 0");
  options.tenant_max_spaces = absl::GetFlag(FLAGS_tenant_max_spaces);
  options.tenant_max_memory_bytes = absl::GetFlag(FLAGS_tenant_max_memory_bytes);
  options.tenant_max_open_files = absl::GetFlag(FLAGS_tenant_max_open_files);
  options.tenant_max_streams = absl::GetFlag(FLAGS_tenant_max_streams);
  options.tenant_max_calls = absl::GetFlag(FLAGS_tenant_max_calls);
  cfg->max_connection_idle_ms = absl::GetFlag(FLAGS_max_connection_idle_ms);
  if (cfg->max_connection_idle_ms < 0 || cfg->max_connection_idle_ms > INT32_MAX)
    return fail("--max-connection-idle-ms must be in [0, 2^31)");
  {
    // Every open host inode holds a descriptor, and so does every connection: raise the
    // soft RLIMIT_NOFILE to the hard one and keep kConnectionFds of it for connections.
    constexpr uint64_t kConnectionFds = 1024;
    const uint64_t nofile = RaiseNofileLimit();
    const uint64_t most = nofile > kConnectionFds + 64 ? nofile - kConnectionFds : nofile / 2;
    cfg->max_open_files = absl::GetFlag(FLAGS_max_open_files);
    if (cfg->max_open_files == 0) cfg->max_open_files = std::min<uint64_t>(most, 65536);
    else if (cfg->max_open_files > most)
      return fail("--max-open-files must be at most " + std::to_string(most) +
                  " (RLIMIT_NOFILE " + std::to_string(nofile) + " less " +
                  std::to_string(nofile - most) + " descriptors kept for connections)");
    // Connections take the descriptors files leave (less 64 for the daemon's own).
    const int64_t max_connections = absl::GetFlag(FLAGS_max_connections);
    const uint64_t spare = nofile > cfg->max_open_files + 64 ? nofile - cfg->max_open_files - 64 : 0;
    if (max_connections < -1) return fail("--max-connections must be >= -1");
    cfg->max_connections = max_connections == -1 ? std::min<uint64_t>(spare, 1000)
                                                 : static_cast<uint64_t>(max_connections);
    if (cfg->max_connections > spare)
      return fail("--max-connections must be at most " + std::to_string(spare) + " (RLIMIT_NOFILE " +
                  std::to_string(nofile) + " less --max-open-files " + std::to_string(cfg->max_open_files) +
                  " less 64)");
  }

  // Credentials: TLS (gRPC's SslServerCredentials), optionally mutual.
  cfg->tls_cert = absl::GetFlag(FLAGS_tls_cert);
  cfg->tls_key = absl::GetFlag(FLAGS_tls_key);
  cfg->tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  const std::string &tls_cert = cfg->tls_cert, &tls_key = cfg->tls_key,
                    &tls_client_ca = cfg->tls_client_ca;
  grpc::SslServerCredentialsOptions& ssl = cfg->ssl;
  if (tls_cert.empty() != tls_key.empty()) return fail("--tls-cert and --tls-key go together");
  if (!tls_client_ca.empty() && tls_cert.empty())
    return fail("--tls-client-ca needs --tls-cert and --tls-key");
  if (!tls_cert.empty()) {
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    if (!ReadFile(tls_cert, &pair.cert_chain)) return fail("--tls-cert " + tls_cert + ": cannot read");
    if (!ReadFile(tls_key, &pair.private_key)) return fail("--tls-key " + tls_key + ": cannot read");
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    if (!tls_client_ca.empty()) {
      if (!ReadFile(tls_client_ca, &ssl.pem_root_certs))
        return fail("--tls-client-ca " + tls_client_ca + ": cannot read");
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
  }
  cfg->auth = std::make_unique<vmspace::rpc::Authenticator>(absl::GetFlag(FLAGS_token_file),
                                                            !tls_client_ca.empty());
  {
    std::string e;
    if (!cfg->auth->Reload(&e, &cfg->n_tokens)) return fail("--token-file " + e);
  }
  cfg->listen = absl::GetFlag(FLAGS_listen);
  if (!cfg->auth->enabled() && !LoopbackListen(cfg->listen) &&
      !absl::GetFlag(FLAGS_insecure_listen_anywhere))
    return fail("--listen " + cfg->listen +
                " is not loopback and calls are not authenticated: give --token-file or "
                "--tls-client-ca, or --insecure-listen-anywhere to serve it open");
  cfg->metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  cfg->max_frame_bytes = absl::GetFlag(FLAGS_max_frame_bytes);
  cfg->max_memory_bytes = absl::GetFlag(FLAGS_max_memory_bytes);
  cfg->frame_cache_bytes = absl::GetFlag(FLAGS_frame_cache_bytes);
  cfg->reflection = absl::GetFlag(FLAGS_reflection);
  return true;
}

}  // namespace vmspace::daemon
