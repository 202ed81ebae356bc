// SPDX-License-Identifier: Apache-2.0
// vmspaced's command line: the flags (spelt with dashes or underscores), --help, and
// the daemon's configuration read and checked from them.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rpc/auth.h"
#include "rpc/service.h"

namespace vmspace::daemon {

/// Everything the flags configure, checked (ReadConfig).
struct DaemonConfig {
  vmspace::rpc::ServiceOptions options;
  std::string lock_stats;  // "on" | "off"
  uint64_t max_calls_per_connection = 0;
  int64_t max_threads = 0;
  int64_t flush_ms = 0;  // --deferred-flush-ms
  uint64_t max_spaces = 0;
  uint32_t shard = 0;
  std::string data_dir;
  int64_t grace_ms = 0;  // --shutdown-grace-ms
  std::string tls_cert, tls_key, tls_client_ca;
  grpc::SslServerCredentialsOptions ssl;  // with tls_cert: the PEM pair (and client CA)
  std::unique_ptr<vmspace::rpc::Authenticator> auth;  // token file read once
  size_t n_tokens = 0;
  std::string listen;
  std::string metrics_listen;
  uint64_t max_frame_bytes = 0, max_memory_bytes = 0, frame_cache_bytes = 0;
  bool reflection = true;
  uint64_t max_open_files = 0;         // --max-open-files, resolved (never 0)
  int64_t max_connection_idle_ms = 0;  // --max-connection-idle-ms (0 = never)
  uint64_t max_connections = 0;        // --max-connections (0 = no cap)
  std::vector<std::string> peers;      // --peers, as gRPC targets (peers.h)
  uint64_t max_transport_bytes = 0;    // --max-transport-bytes, resolved (never 0)
};

/// --help / -h: the usage message and the daemon's flags (spelt with dashes), with
/// their defaults, on stdout; --version / -V: "vmspaced VERSION" (git describe of the
/// source at configure time, else the project version). True if either was asked for.
/// (Abseil's own --help lists only flags of a file named like the program, none here,
/// and exits 1; its --version prints the build mode.)
bool HandleHelp(int argc, char** argv);

/// Parses the command line into the flags, the documented dashed spelling
/// (--max-spaces) included; exits as Abseil does on an unknown flag.
void ParseFlags(int argc, char** argv);

/// Reads the flags into *cfg, checking each, and applies the process-wide settings
/// (log level, lock stats, dirty limits) as it goes; reads the TLS files and the token
/// file. False with *err the message to fail with on the first bad flag.
bool ReadConfig(DaemonConfig* cfg, std::string* err);

/// "host:port" -> "host" (keeps [v6] brackets); "" if there is no colon.
std::string HostOf(const std::string& addr);

}  // namespace vmspace::daemon
