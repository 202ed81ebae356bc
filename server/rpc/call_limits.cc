// SPDX-License-Identifier: Apache-2.0
#include "rpc/call_limits.h"

#include <functional>

namespace vmspace::rpc {

bool PeerCalls::Enter(const std::string& peer, uint64_t max, std::string* host) {
  const size_t colon = peer.rfind(':');  // "ipv4:1.2.3.4:port", "ipv6:[::1]:port"
  *host = colon == std::string::npos || colon < peer.find(':') + 1 ? peer : peer.substr(0, colon);
  Shard& sh = ShardOf(*host);
  absl::MutexLock l(&sh.mu);
  uint64_t& n = sh.n[*host];
  if (n >= max) {
    if (n == 0) sh.n.erase(*host);
    return false;
  }
  n++;
  return true;
}

bool PeerCalls::EnterKey(const std::string& key, uint64_t max) {
  Shard& sh = ShardOf(key);
  absl::MutexLock l(&sh.mu);
  auto it = sh.n.find(key);
  if (it != sh.n.end() && it->second >= max) return false;
  if (max == 0) return false;
  sh.n[key]++;
  return true;
}

void PeerCalls::Leave(const std::string& host) {
  Shard& sh = ShardOf(host);
  absl::MutexLock l(&sh.mu);
  auto it = sh.n.find(host);
  if (it != sh.n.end() && --it->second == 0) sh.n.erase(it);
}

PeerCalls::Shard& PeerCalls::ShardOf(const std::string& host) {
  return shards_[std::hash<std::string>()(host) % shards_.size()];
}

}  // namespace vmspace::rpc
