// SPDX-License-Identifier: Apache-2.0
// --max-connections: a cap on the client connections the gRPC server holds open at once
// (gRPC 1.51 has no such channel argument). Each connection holds a descriptor and some
// tens of KiB of transport buffers even when idle: 5,000 idle connections held 5,010
// descriptors and 101 MiB. The limit sees every accepted socket through gRPC's socket
// mutator (GRPC_ARG_SOCKET_MUTATOR, GRPC_FD_SERVER_CONNECTION_USAGE) before gRPC reads
// from it; a connection beyond the cap is shut down there (shutdown(2) SHUT_RDWR), so
// gRPC sees end-of-file at once and closes it, and the client's call fails UNAVAILABLE.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <unordered_map>

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>
#include <grpcpp/server_builder.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace vmspace::daemon {

class ConnectionLimit : public prometheus::Collectable {
 public:
  /// At most `max` connections at once (0 = no cap; they are still counted).
  explicit ConnectionLimit(uint64_t max);
  ~ConnectionLimit() override;
  ConnectionLimit(const ConnectionLimit&) = delete;
  ConnectionLimit& operator=(const ConnectionLimit&) = delete;

  /// A ServerBuilder option that installs this limit's socket mutator on the server;
  /// the limit must outlive the server.
  std::unique_ptr<grpc::ServerBuilderOption> Option();

  /// Called by gRPC for every accepted connection's descriptor: admits it, or shuts it
  /// down if `max` connections are open. Always true (false would stop gRPC's listener).
  bool Accept(int fd);
  /// Connections open now (descriptors admitted and still naming the same socket).
  uint64_t open() const;
  /// Connections shut down because the cap was reached, since start.
  uint64_t refused() const;

  /// vmspace_connections, vmspace_connections_limit, vmspace_connections_refused_total.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  // Forgets the descriptors that no longer name the socket they were admitted with
  // (closed by gRPC; perhaps reused since).
  void Prune() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t max_;

 public:
  struct Mutator;  // gRPC's socket mutator, pointing back here (connection_limit.cc)

 private:
  std::unique_ptr<Mutator> mutator_;
  mutable absl::Mutex mu_;
  mutable std::unordered_map<int, ino_t> open_ ABSL_GUARDED_BY(mu_);  // fd -> its socket's inode
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace vmspace::daemon
