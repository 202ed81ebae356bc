// SPDX-License-Identifier: Apache-2.0
#include "peers.h"

#include <netdb.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <grpcpp/grpcpp.h>

#include "rpc/log.h"
#include "vmspace/v1/vmspace.grpc.pb.h"

namespace vmspace::daemon {

namespace {

/// Every address of `name` as "ipv4:A:PORT" / "ipv6:[A]:PORT"; empty if none.
std::vector<std::string> Resolve(const std::string& name, const std::string& port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  std::vector<std::string> out;
  if (getaddrinfo(name.c_str(), port.c_str(), &hints, &ai) != 0) return out;
  for (addrinfo* p = ai; p != nullptr; p = p->ai_next) {
    char host[NI_MAXHOST];
    if (getnameinfo(p->ai_addr, p->ai_addrlen, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) continue;
    const std::string t = p->ai_family == AF_INET6 ? "ipv6:[" + std::string(host) + "]:" + port
                                                   : "ipv4:" + std::string(host) + ":" + port;
    bool seen = false;
    for (const std::string& x : out) seen = seen || x == t;
    if (!seen) out.push_back(t);
  }
  freeaddrinfo(ai);
  return out;
}

bool ReadPem(const char* env, std::string* out, std::string* err) {
  const char* path = std::getenv(env);
  if (path == nullptr || *path == '\0') return true;
  std::ifstream in(path);
  if (!in) {
    *err = std::string("$") + env + ": cannot read " + path;
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

}  // namespace

bool ParsePeers(const std::string& list, std::vector<std::string>* peers, std::string* err) {
  peers->clear();
  if (list.empty()) return true;
  if (list.rfind("shards:", 0) == 0) {
    const std::string rest = list.substr(7);
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) {
      *err = "want shards:NAME:PORT, got '" + list + "'";
      return false;
    }
    *peers = Resolve(rest.substr(0, colon), rest.substr(colon + 1));
    // A headless Service has no address until a pod is ready: the first daemon has no
    // peer yet.
    if (peers->empty()) {
      const std::string line = "--peers: '" + rest.substr(0, colon) + "' has no address yet: no peer to check";
      rpc::LogLine(rpc::LogLevel::kWarn, line, line);
    }
    return true;
  }
  std::stringstream ss(list);
  for (std::string p; std::getline(ss, p, ',');) {
    if (p.empty()) {
      *err = "an empty address in '" + list + "'";
      return false;
    }
    peers->push_back(p);
  }
  return true;
}

bool PeerAccessFromEnv(PeerAccess* access, std::string* err) {
  const char* token = std::getenv("VMSPACE_TOKEN");
  access->token = token != nullptr ? token : "";
  return ReadPem("VMSPACE_TLS_CA", &access->tls_ca_pem, err) &&
         ReadPem("VMSPACE_TLS_CERT", &access->tls_cert_pem, err) && ReadPem("VMSPACE_TLS_KEY", &access->tls_key_pem, err);
}

std::string CheckPeers(const std::vector<std::string>& peers, uint32_t shard, const PeerAccess& access) {
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!access.tls_ca_pem.empty()) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = access.tls_ca_pem;
    o.pem_cert_chain = access.tls_cert_pem;
    o.pem_private_key = access.tls_key_pem;
    creds = grpc::SslCredentials(o);
  }
  for (const std::string& peer : peers) {
    auto stub = v1::VmSpace::NewStub(grpc::CreateChannel(peer, creds));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(access.timeout_ms));
    if (!access.token.empty()) ctx.AddMetadata("authorization", "Bearer " + access.token);
    v1::GetServerInfoResponse info;
    const grpc::Status st = stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info);
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE || st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      const std::string line = "--peers: " + peer + " does not answer (" + st.error_message() +
                               "): left out of the shard check";
      rpc::LogLine(rpc::LogLevel::kWarn, line, line);
      continue;
    }
    if (!st.ok()) {
      return "--peers: " + peer + " answered GetServerInfo with code " + std::to_string(st.error_code()) + " (" +
             st.error_message() +
             "): its shard is unknown; give the check a token or TLS files the peers accept ($VMSPACE_TOKEN, "
             "$VMSPACE_TLS_CA, $VMSPACE_TLS_CERT, $VMSPACE_TLS_KEY)";
    }
    if (info.shard() == shard) {
      return "--peers: shard " + std::to_string(shard) + " is already served by the daemon at " + peer + " (vmspaced " +
             info.version() + ", " + std::to_string(info.spaces()) +
             " spaces): two daemons of one shard would hand out the same space ids; start this one with another "
             "--shard, or stop that one first";
    }
    const std::string line = "--peers: " + peer + " serves shard " + std::to_string(info.shard());
    rpc::LogLine(rpc::LogLevel::kInfo, line, line);
  }
  return "";
}

}  // namespace vmspace::daemon
