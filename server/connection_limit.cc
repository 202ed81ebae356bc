// SPDX-License-Identifier: Apache-2.0
#include "connection_limit.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <grpc/support/sync.h>
#include <grpcpp/support/channel_arguments.h>
#include <prometheus/client_metric.h>
#include <prometheus/metric_type.h>

// gRPC's socket mutator (src/core/lib/iomgr/socket_mutator.h of gRPC 1.51, not among its
// public headers; libgrpc exports the functions): what a mutator is and how it is made.
typedef enum {
  GRPC_FD_CLIENT_CONNECTION_USAGE,
  GRPC_FD_SERVER_LISTENER_USAGE,
  GRPC_FD_SERVER_CONNECTION_USAGE,
} grpc_fd_usage;
typedef struct {
  int fd;
  grpc_fd_usage usage;
} grpc_mutate_socket_info;
struct grpc_socket_mutator;
typedef struct {
  bool (*mutate_fd)(int fd, grpc_socket_mutator* mutator);
  int (*compare)(grpc_socket_mutator* a, grpc_socket_mutator* b);
  void (*destroy)(grpc_socket_mutator* mutator);
  bool (*mutate_fd_2)(const grpc_mutate_socket_info* info, grpc_socket_mutator* mutator);
} grpc_socket_mutator_vtable;
struct grpc_socket_mutator {
  const grpc_socket_mutator_vtable* vtable;
  gpr_refcount refcount;
};
void grpc_socket_mutator_init(grpc_socket_mutator* mutator, const grpc_socket_mutator_vtable* vtable);

namespace vmspace::daemon {

struct ConnectionLimit::Mutator {
  grpc_socket_mutator base;  // first: gRPC hands back a pointer to it
  ConnectionLimit* limit;
};

namespace {

ConnectionLimit* LimitOf(grpc_socket_mutator* m) { return reinterpret_cast<ConnectionLimit::Mutator*>(m)->limit; }

bool MutateFd2(const grpc_mutate_socket_info* info, grpc_socket_mutator* m) {
  if (info->usage != GRPC_FD_SERVER_CONNECTION_USAGE) return true;
  return LimitOf(m)->Accept(info->fd);
}
int Compare(grpc_socket_mutator* a, grpc_socket_mutator* b) { return a < b ? -1 : a > b ? 1 : 0; }
void Destroy(grpc_socket_mutator*) {}  // owned by the ConnectionLimit

const grpc_socket_mutator_vtable kVtable = {nullptr, Compare, Destroy, MutateFd2};

// The inode of the socket fd names, or 0 if fd is closed or not a socket.
ino_t SocketInode(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  return st.st_ino;
}

class Option : public grpc::ServerBuilderOption {
 public:
  explicit Option(grpc_socket_mutator* m) : m_(m) {}
  void UpdateArguments(grpc::ChannelArguments* args) override { args->SetSocketMutator(m_); }
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*) override {}

 private:
  grpc_socket_mutator* m_;
};

}  // namespace

ConnectionLimit::ConnectionLimit(uint64_t max) : max_(max), mutator_(std::make_unique<Mutator>()) {
  grpc_socket_mutator_init(&mutator_->base, &kVtable);
  mutator_->limit = this;
}

ConnectionLimit::~ConnectionLimit() = default;

std::unique_ptr<grpc::ServerBuilderOption> ConnectionLimit::Option() {
  // SetSocketMutator takes a reference; the channel args' copies are released with the
  // server, and Destroy frees nothing.
  return std::make_unique<daemon::Option>(&mutator_->base);
}

void ConnectionLimit::Prune() const {
  for (auto it = open_.begin(); it != open_.end();) {
    if (SocketInode(it->first) != it->second)
      it = open_.erase(it);
    else
      ++it;
  }
}

bool ConnectionLimit::Accept(int fd) {
  const ino_t ino = SocketInode(fd);
  absl::MutexLock l(&mu_);
  open_.erase(fd);  // a descriptor gRPC closed and accept reused
  if (max_ > 0 && open_.size() >= max_) Prune();
  if (max_ > 0 && open_.size() >= max_) {
    refused_++;
    shutdown(fd, SHUT_RDWR);
    return true;
  }
  open_.emplace(fd, ino);
  return true;
}

uint64_t ConnectionLimit::open() const {
  absl::MutexLock l(&mu_);
  Prune();
  return open_.size();
}

uint64_t ConnectionLimit::refused() const {
  absl::MutexLock l(&mu_);
  return refused_;
}

std::vector<prometheus::MetricFamily> ConnectionLimit::Collect() const {
  using prometheus::MetricType;
  const struct {
    const char* name;
    const char* help;
    MetricType type;
    uint64_t value;
  } rows[] = {
      {"vmspace_connections", "Client connections the gRPC server holds open.", MetricType::Gauge, open()},
      {"vmspace_connections_limit", "Most client connections open at once (--max-connections; 0 = no cap).",
       MetricType::Gauge, max_},
      {"vmspace_connections_refused_total", "Connections shut down on accept because --max-connections were open.",
       MetricType::Counter, refused()},
  };
  std::vector<prometheus::MetricFamily> out(std::size(rows));
  for (size_t i = 0; i < std::size(rows); i++) {
    out[i].name = rows[i].name;
    out[i].help = rows[i].help;
    out[i].type = rows[i].type;
    out[i].metric.resize(1);
    (rows[i].type == MetricType::Counter ? out[i].metric[0].counter.value : out[i].metric[0].gauge.value) =
        static_cast<double>(rows[i].value);
  }
  return out;
}

}  // namespace vmspace::daemon
