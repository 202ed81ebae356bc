// SPDX-License-Identifier: Apache-2.0
// The start-up check of --peers: before it listens, a daemon asks every peer daemon its
// shard (GetServerInfo) and refuses to start when a live one already serves its own, so
// two daemons never hand out space ids of one shard (the client would then refuse every
// call on that shard). A peer that cannot be reached is not running: it is logged and
// left out (a daemon's own address, not yet listening, is left out that way too).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vmspace::daemon {

/// The peers of --peers "A,B,C" or "shards:NAME:PORT" (every address NAME resolves to,
/// e.g. a Kubernetes headless Service, which has none until a pod is ready: then none,
/// logged), as gRPC targets. False with *err set for an empty entry or a malformed
/// "shards:" form.
bool ParsePeers(const std::string& list, std::vector<std::string>* peers, std::string* err);

/// How the check reaches the peers: as the CLI does, from the environment:
/// $VMSPACE_TOKEN (bearer token), $VMSPACE_TLS_CA (TLS, this CA file), $VMSPACE_TLS_CERT
/// and $VMSPACE_TLS_KEY (mutual TLS); `timeout_ms` per peer.
struct PeerAccess {
  std::string token;
  std::string tls_ca_pem, tls_cert_pem, tls_key_pem;
  int64_t timeout_ms = 2000;
};

/// PeerAccess from the environment; false with *err set if a file cannot be read.
bool PeerAccessFromEnv(PeerAccess* access, std::string* err);

/// GetServerInfo of each peer. Returns "" when none that answered serves `shard`;
/// else the error to exit with, naming the peer (or a peer that answered with an error
/// other than UNAVAILABLE / DEADLINE_EXCEEDED, e.g. UNAUTHENTICATED: its shard is
/// unknown). Peers that cannot be reached are logged at warn and left out.
std::string CheckPeers(const std::vector<std::string>& peers, uint32_t shard, const PeerAccess& access);

}  // namespace vmspace::daemon
