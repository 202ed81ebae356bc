// SPDX-License-Identifier: Apache-2.0
#include "lib/client.h"

#include <netdb.h>
#include <sys/socket.h>
#include <arpa/inet.h>

#include <absl/status/status.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/client_interceptor.h>
#include <grpcpp/support/error_details.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <thread>

#include "google/rpc/status.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace vmspace::client {

namespace {

/// The name of errno value `err` in glibc's table (strerrorname_np, glibc 2.32+:
/// "EINVAL"), or "errno<N>" for a number glibc does not name. The daemon names its errors
/// from the same table (vmspace::ErrnoName), so a name filled in here reads as its own.
std::string ErrnoName(int err) {
  const char* n = strerrorname_np(err);
  return n != nullptr ? n : "errno" + std::to_string(err);
}

}  // namespace

std::string StatusCodeName(grpc::StatusCode code) {
  // gRPC's codes are the canonical codes, which absl::StatusCode numbers the same way.
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? "UNKNOWN" : name;
}

std::string Error::Name() const {
  return errno_name.empty() ? StatusCodeName(code) : errno_name;
}

std::string Error::ToString() const {
  std::string s = Name();
  if (err != 0) s += " (" + std::to_string(err) + ")";
  // The daemon's messages already start with the errno name ("EBADF: mmap: ..."): say it once.
  std::string_view msg = message;
  const std::string prefix = Name() + ": ";
  if (msg.substr(0, prefix.size()) == prefix) msg.remove_prefix(prefix.size());
  if (!msg.empty()) s += ": " + std::string(msg);
  return s;
}

Error DecodeStatus(const grpc::Status& status) {
  Error e;
  e.code = status.error_code();
  e.message = status.error_message();
  google::rpc::Status details;
  if (status.error_details().empty() || !grpc::ExtractErrorDetails(status, &details).ok()) return e;
  for (const google::protobuf::Any& any : details.details()) {
    v1::SyscallError se;
    if (!any.UnpackTo(&se) || se.errno_() == 0) continue;
    e.err = se.errno_();
    e.errno_name = se.errno_name().empty() ? ErrnoName(se.errno_()) : se.errno_name();
    break;
  }
  return e;
}

std::optional<Error> DecodeOpResult(const v1::OpResult& r) {
  if (r.code() == 0 && r.errno_() == 0) return std::nullopt;
  Error e;
  e.code = static_cast<grpc::StatusCode>(r.code());
  e.err = r.errno_();
  e.errno_name = r.errno_name();
  e.message = r.message();
  if (e.err != 0 && e.errno_name.empty()) e.errno_name = ErrnoName(e.err);
  return e;
}

Result<std::vector<std::string>> ParseTargets(const std::string& target) {
  auto invalid = [&](const std::string& why) {
    Error e;
    e.code = grpc::StatusCode::INVALID_ARGUMENT;
    e.message = "target '" + target + "': " + why;
    return e;
  };
  std::vector<std::string> out;
  if (absl::string_view rest = target; absl::ConsumePrefix(&rest, "shards:")) {
    const size_t colon = rest.rfind(':');
    if (colon == absl::string_view::npos || colon == 0) return invalid("want shards:NAME:PORT");
    const std::string host(rest.substr(0, colon)), port(rest.substr(colon + 1));
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
      Error e;
      e.code = grpc::StatusCode::UNAVAILABLE;
      e.message = "cannot resolve " + host + ": " + gai_strerror(rc);
      return e;
    }
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      char ip[INET6_ADDRSTRLEN] = {};
      const bool v6 = a->ai_family == AF_INET6;
      const void* src = v6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr)
                           : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr);
      inet_ntop(a->ai_family, src, ip, sizeof ip);
      std::string t = v6 ? "ipv6:[" + std::string(ip) + "]:" + port : "ipv4:" + std::string(ip) + ":" + port;
      if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    }
    freeaddrinfo(res);
  } else {
    for (absl::string_view part : absl::StrSplit(target, ',')) {
      part = absl::StripAsciiWhitespace(part);
      if (part.empty()) return invalid("empty target in the list");
      out.emplace_back(part);
    }
  }
  if (out.empty()) return invalid("no daemon");
  return out;
}

namespace {

// Adds "authorization: Bearer <token>" to the initial metadata of every call (a call
// credential would need a secure channel; the daemon also takes tokens in plaintext
// on loopback).
class BearerToken final : public grpc::experimental::Interceptor {
 public:
  explicit BearerToken(const std::string& value) : value_(value) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA))
      m->GetSendInitialMetadata()->emplace("authorization", value_);
    m->Proceed();
  }

 private:
  const std::string& value_;  // the factory's, which lives as long as the channel
};

class BearerTokenFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(const std::string& token) : value_("Bearer " + token) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new BearerToken(value_);
  }

 private:
  const std::string value_;
};

std::shared_ptr<grpc::Channel> MakeChannelTo(const std::string& target, const ClientOptions& opts) {
  grpc::ChannelArguments args;
  if (opts.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Batch messages may be large (up to --max-batch ops, --max-io-bytes reads).
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!opts.tls_ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = opts.tls_ca_pem;
    ssl.pem_cert_chain = opts.tls_cert_pem;
    ssl.pem_private_key = opts.tls_key_pem;
    creds = grpc::SslCredentials(ssl);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (!opts.token.empty()) interceptors.push_back(std::make_unique<BearerTokenFactory>(opts.token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, creds, args,
                                                                 std::move(interceptors));
}

/// The space id of the first op of a batch that names one (0 if none): the field
/// "space_id" of whichever Op message is set, or PackedOps.space_id.
uint64_t FirstSpaceId(const v1::BatchRequest& req) {
  if (req.has_packed()) return req.packed().space_id();
  for (const v1::Op& op : req.ops()) {
    const google::protobuf::Reflection* refl = op.GetReflection();
    const google::protobuf::FieldDescriptor* set = refl->GetOneofFieldDescriptor(op, op.GetDescriptor()->oneof_decl(0));
    if (set == nullptr) continue;
    const google::protobuf::Message& m = refl->GetMessage(op, set);
    if (const auto* id = m.GetDescriptor()->FindFieldByName("space_id")) return m.GetReflection()->GetUInt64(m, id);
  }
  return 0;
}

uint64_t Fnv1a64(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

/// Ties of the least-spaces placement, shared by every Client of the process.
std::atomic<uint64_t> g_placement_round_robin{0};

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const ClientOptions& opts) { return MakeChannelTo(opts.target, opts); }

/// One daemon: its target, channel, stub and (once known) shard.
struct Client::Backend {
  std::string target;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::VmSpace::Stub> stub;
  int64_t shard = -1;  // from GetServerInfo; guarded by Client::mu_
};

BatchStream::BatchStream(v1::VmSpace::Stub& stub, std::chrono::milliseconds timeout) {
  ctx_.set_deadline(std::chrono::system_clock::now() + timeout);
  std::lock_guard lk(mu_);
  Open(stub);
}

BatchStream::BatchStream(Client& client, std::chrono::milliseconds timeout) : client_(&client) {
  ctx_.set_deadline(std::chrono::system_clock::now() + timeout);
}

BatchStream::~BatchStream() {
  if (rw_ && !writes_done_) ctx_.TryCancel();
}

void BatchStream::Open(v1::VmSpace::Stub& stub) {
  rw_ = stub.Batch(&ctx_);
  cv_.notify_all();
}

grpc::ClientReaderWriter<v1::BatchRequest, v1::BatchResponse>* BatchStream::Wait() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return rw_ != nullptr || closed_; });
  return rw_.get();
}

bool BatchStream::Write(const v1::BatchRequest& req) {
  {
    std::lock_guard lk(mu_);
    if (!rw_) {
      if (closed_ || client_ == nullptr) return false;
      Result<Client::Backend*> b = client_->Route(FirstSpaceId(req));
      if (!b.ok()) {
        failure_ = grpc::Status(b.error().code, b.error().message);
        closed_ = true;
        cv_.notify_all();
        return false;
      }
      Open(*b.value()->stub);
    }
  }
  return rw_->Write(req);
}

bool BatchStream::Read(v1::BatchResponse* resp) {
  auto* rw = Wait();
  return rw != nullptr && rw->Read(resp);
}

void BatchStream::WritesDone() {
  std::unique_lock lk(mu_);
  if (writes_done_) return;
  writes_done_ = true;
  if (!rw_) {
    closed_ = true;
    cv_.notify_all();
    return;
  }
  lk.unlock();
  rw_->WritesDone();
}

grpc::Status BatchStream::Finish() {
  std::unique_lock lk(mu_);
  writes_done_ = true;
  if (!rw_) {
    closed_ = true;
    cv_.notify_all();
    return failure_;
  }
  lk.unlock();
  return rw_->Finish();
}

void BatchStream::Cancel() {
  {
    std::lock_guard lk(mu_);
    if (!rw_) closed_ = true;
    cv_.notify_all();
  }
  ctx_.TryCancel();
}

Client::Client(ClientOptions opts) : opts_(std::move(opts)) {
  Result<std::vector<std::string>> targets = ParseTargets(opts_.target);
  if (!targets.ok()) {
    setup_error_ = targets.error();
    targets = std::vector<std::string>{opts_.target};  // (never called: setup_error_ answers)
  }
  sharded_ = targets.value().size() > 1 || absl::StartsWith(opts_.target, "shards:");
  for (const std::string& t : targets.value()) {
    auto b = std::make_unique<Backend>();
    b->target = t;
    b->channel = MakeChannelTo(t, opts_);
    b->stub = v1::VmSpace::NewStub(b->channel);
    backends_.push_back(std::move(b));
  }
}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions opts) : opts_(std::move(opts)) {
  auto b = std::make_unique<Backend>();
  b->target = opts_.target;
  b->channel = std::move(channel);
  b->stub = v1::VmSpace::NewStub(b->channel);
  backends_.push_back(std::move(b));
}

Client::~Client() = default;

v1::VmSpace::Stub& Client::stub() { return *backends_.front()->stub; }

std::vector<std::string> Client::targets() const {
  std::vector<std::string> out;
  for (const auto& b : backends_) out.push_back(b->target);
  return out;
}

void Client::Prepare(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + opts_.timeout);
}

Error Client::Tagged(const Backend& b, Error e) const {
  e.target = b.target;
  if (sharded_) e.message = b.target + ": " + e.message;
  return e;
}

Result<v1::GetServerInfoResponse> Client::Info(Backend& b) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::GetServerInfoResponse resp;
  grpc::Status st = b.stub->GetServerInfo(&ctx, v1::GetServerInfoRequest{}, &resp);
  if (!st.ok()) return Tagged(b, DecodeStatus(st));
  std::lock_guard lk(mu_);
  b.shard = resp.shard();
  return resp;
}

void Client::DiscoverLocked() {
  for (auto& b : backends_) {
    if (b->shard >= 0) continue;
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::GetServerInfoResponse resp;
    if (b->stub->GetServerInfo(&ctx, v1::GetServerInfoRequest{}, &resp).ok()) b->shard = resp.shard();
  }
}

std::optional<Error> Client::CheckShards() {
  if (!sharded_) return std::nullopt;
  std::lock_guard lk(mu_);
  DiscoverLocked();
  std::map<int64_t, const Backend*> by_shard;
  for (const auto& b : backends_) {
    if (b->shard < 0) continue;
    auto [it, fresh] = by_shard.emplace(b->shard, b.get());
    if (fresh) continue;
    Error e;
    e.code = grpc::StatusCode::FAILED_PRECONDITION;
    e.message = it->second->target + " and " + b->target + " both serve shard " + std::to_string(b->shard) +
                ": give every daemon its own --shard";
    return e;
  }
  return std::nullopt;
}

bool Client::LeaveOut(const Backend& b, const grpc::Status& st, std::vector<Error>* unreachable) const {
  if (unreachable == nullptr) return false;
  if (st.error_code() != grpc::StatusCode::UNAVAILABLE && st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED)
    return false;
  unreachable->push_back(Tagged(b, DecodeStatus(st)));
  return true;
}

Result<Client::Backend*> Client::Route(uint64_t space_id) {
  if (setup_error_) return *setup_error_;
  if (!sharded_) return backends_.front().get();
  const int64_t shard = ShardOfSpace(space_id);
  std::lock_guard lk(mu_);
  for (int attempt = 0; attempt < 2; ++attempt) {
    Backend* found = nullptr;
    for (auto& b : backends_) {
      if (b->shard != shard) continue;
      if (found != nullptr) {
        Error e;
        e.code = grpc::StatusCode::FAILED_PRECONDITION;
        e.message = found->target + " and " + b->target + " both serve shard " + std::to_string(shard) +
                    ": give every daemon its own --shard";
        return e;
      }
      found = b.get();
    }
    if (found != nullptr) return found;
    if (attempt == 0) DiscoverLocked();
  }
  Error e;
  e.code = grpc::StatusCode::UNAVAILABLE;
  e.message = "space " + std::to_string(space_id) + ": no daemon of shard " + std::to_string(shard) +
              " answers (targets " + opts_.target + ")";
  return e;
}

// One unary call on the daemon of `space` (the request's space id).
#define VMSPACE_CALL(Method, space, req, resp)                         \
  Result<Backend*> route = Route(space);                              \
  if (!route.ok()) return route.error();                              \
  grpc::ClientContext ctx;                                            \
  Prepare(&ctx);                                                      \
  grpc::Status st = route.value()->stub->Method(&ctx, req, &resp);    \
  if (!st.ok()) return Tagged(*route.value(), DecodeStatus(st))

Result<uint64_t> Client::CreateSpace(const v1::SpaceSettings& settings, const std::string& label,
                                     const std::string& placement_key) {
  v1::CreateSpaceRequest req;
  *req.mutable_settings() = settings;
  req.set_label(label);
  v1::CreateSpaceResponse resp;
  if (setup_error_) return *setup_error_;
  Backend* target = backends_.front().get();
  if (sharded_) {
    // Placement (see client.h): every daemon's count, then the key's hash or the least.
    struct Candidate {
      Backend* b;
      v1::GetServerInfoResponse info;
    };
    std::vector<Candidate> up;
    std::optional<Error> first_error;
    for (auto& b : backends_) {
      Result<v1::GetServerInfoResponse> info = Info(*b);
      if (info.ok()) up.push_back({b.get(), info.value()});
      else if (!first_error) first_error = info.error();
    }
    if (up.empty()) {
      Error e = *first_error;
      e.message = "CreateSpace: no daemon answers (" + e.message + ")";
      return e;
    }
    if (!placement_key.empty()) {
      std::sort(up.begin(), up.end(), [](const Candidate& x, const Candidate& y) { return x.info.shard() < y.info.shard(); });
      target = up[Fnv1a64(placement_key) % up.size()].b;
    } else {
      std::vector<Candidate> room;
      for (const Candidate& c : up)
        if (c.info.spaces() < c.info.max_spaces()) room.push_back(c);
      if (room.empty()) room = up;  // all full: the daemon says RESOURCE_EXHAUSTED
      uint64_t least = room.front().info.spaces();
      for (const Candidate& c : room) least = std::min<uint64_t>(least, c.info.spaces());
      std::vector<Backend*> ties;
      for (const Candidate& c : room)
        if (c.info.spaces() == least) ties.push_back(c.b);
      target = ties[g_placement_round_robin.fetch_add(1, std::memory_order_relaxed) % ties.size()];
    }
  }
  grpc::ClientContext ctx;
  Prepare(&ctx);
  grpc::Status st = target->stub->CreateSpace(&ctx, req, &resp);
  if (!st.ok()) return Tagged(*target, DecodeStatus(st));
  return resp.space_id();
}

Result<uint64_t> Client::CloneSpace(uint64_t space_id, const std::string& locking_profile,
                                    const std::string& label) {
  v1::CloneSpaceRequest req;
  req.set_space_id(space_id);
  req.set_locking_profile(locking_profile);
  req.set_label(label);
  v1::CloneSpaceResponse resp;
  VMSPACE_CALL(CloneSpace, space_id, req, resp);
  return resp.space_id();
}

Result<v1::ExecSpaceResponse> Client::ExecSpace(uint64_t space_id, const std::string& path,
                                                const std::vector<std::string>& argv,
                                                const std::vector<std::string>& envp,
                                                const std::string& interpreter_path) {
  v1::ExecSpaceRequest req;
  req.set_space_id(space_id);
  req.set_path(path);
  req.set_interpreter_path(interpreter_path);
  for (const std::string& a : argv) req.add_argv(a);
  for (const std::string& e : envp) req.add_envp(e);
  v1::ExecSpaceResponse resp;
  VMSPACE_CALL(ExecSpace, space_id, req, resp);
  return resp;
}

Result<Unit> Client::DestroySpace(uint64_t space_id) {
  v1::DestroySpaceRequest req;
  req.set_space_id(space_id);
  v1::DestroySpaceResponse resp;
  VMSPACE_CALL(DestroySpace, space_id, req, resp);
  return Unit{};
}

template <typename Item, typename Call, typename Id>
Result<std::vector<Item>> Client::GatherAll(Call call, Id id, std::vector<Error>* unreachable) {
  if (setup_error_) return *setup_error_;
  if (std::optional<Error> e = CheckShards()) return *e;
  std::vector<Item> out;
  size_t answered = 0;
  for (auto& b : backends_) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    grpc::Status st = call(*b->stub, &ctx, &out);
    if (!st.ok() && LeaveOut(*b, st, unreachable)) continue;
    if (!st.ok()) return Tagged(*b, DecodeStatus(st));
    ++answered;
  }
  if (answered == 0 && unreachable != nullptr && !unreachable->empty()) return unreachable->front();
  std::sort(out.begin(), out.end(), [&](const Item& x, const Item& y) { return id(x) < id(y); });
  return out;
}

Result<std::vector<v1::SpaceInfo>> Client::ListSpaces(std::vector<Error>* unreachable) {
  return GatherAll<v1::SpaceInfo>(
      [](v1::VmSpace::Stub& stub, grpc::ClientContext* ctx, std::vector<v1::SpaceInfo>* out) {
        v1::ListSpacesResponse resp;
        grpc::Status st = stub.ListSpaces(ctx, v1::ListSpacesRequest{}, &resp);
        out->insert(out->end(), resp.spaces().begin(), resp.spaces().end());
        return st;
      },
      [](const v1::SpaceInfo& s) { return s.space_id(); }, unreachable);
}

Result<uint64_t> Client::Mmap(uint64_t space_id, uint64_t addr, uint64_t len, int prot, int flags,
                              uint64_t offset, uint64_t file_id) {
  v1::MmapRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  req.set_prot(prot);
  req.set_flags(flags);
  req.set_offset(offset);
  req.set_file_id(file_id);
  v1::MmapResponse resp;
  VMSPACE_CALL(Mmap, space_id, req, resp);
  return resp.addr();
}

Result<Unit> Client::Munmap(uint64_t space_id, uint64_t addr, uint64_t len) {
  v1::MunmapRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  v1::MunmapResponse resp;
  VMSPACE_CALL(Munmap, space_id, req, resp);
  return Unit{};
}

Result<Unit> Client::Mprotect(uint64_t space_id, uint64_t addr, uint64_t len, int prot) {
  v1::MprotectRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  req.set_prot(prot);
  v1::MprotectResponse resp;
  VMSPACE_CALL(Mprotect, space_id, req, resp);
  return Unit{};
}

Result<v1::FaultInfo> Client::Fault(uint64_t space_id, uint64_t addr, v1::AccessType access) {
  v1::FaultRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_access(access);
  v1::FaultResponse resp;
  VMSPACE_CALL(Fault, space_id, req, resp);
  return resp.fault();
}

Result<v1::AccessResponse> Client::Access(uint64_t space_id, uint64_t addr, uint64_t len,
                                          uint64_t stride, v1::AccessType access) {
  v1::AccessRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  req.set_stride(stride);
  req.set_access(access);
  v1::AccessResponse resp;
  VMSPACE_CALL(Access, space_id, req, resp);
  return resp;
}

Result<v1::ReadMemoryResponse> Client::ReadMemory(uint64_t space_id, uint64_t addr, uint64_t len) {
  v1::ReadMemoryRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  v1::ReadMemoryResponse resp;
  VMSPACE_CALL(ReadMemory, space_id, req, resp);
  return resp;
}

Result<v1::WriteMemoryResponse> Client::WriteMemory(uint64_t space_id, uint64_t addr,
                                                    const std::string& data) {
  v1::WriteMemoryRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_data(data);
  v1::WriteMemoryResponse resp;
  VMSPACE_CALL(WriteMemory, space_id, req, resp);
  return resp;
}

Result<v1::GetMapsResponse> Client::GetMaps(uint64_t space_id, uint64_t start, uint64_t end) {
  v1::GetMapsRequest req;
  req.set_space_id(space_id);
  req.set_start(start);
  req.set_end(end);
  v1::GetMapsResponse resp;
  VMSPACE_CALL(GetMaps, space_id, req, resp);
  return resp;
}

Result<Unit> Client::Madvise(uint64_t space_id, uint64_t addr, uint64_t len, int advice) {
  v1::MadviseRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  req.set_advice(advice);
  v1::MadviseResponse resp;
  VMSPACE_CALL(Madvise, space_id, req, resp);
  return Unit{};
}

Result<uint64_t> Client::Brk(uint64_t space_id, uint64_t brk) {
  v1::BrkRequest req;
  req.set_space_id(space_id);
  req.set_brk(brk);
  v1::BrkResponse resp;
  VMSPACE_CALL(Brk, space_id, req, resp);
  return resp.brk();
}

Result<uint64_t> Client::Mremap(uint64_t space_id, uint64_t old_addr, uint64_t old_len, uint64_t new_len,
                                uint64_t flags, uint64_t new_addr) {
  v1::MremapRequest req;
  req.set_space_id(space_id);
  req.set_old_addr(old_addr);
  req.set_old_len(old_len);
  req.set_new_len(new_len);
  req.set_flags(flags);
  req.set_new_addr(new_addr);
  v1::MremapResponse resp;
  VMSPACE_CALL(Mremap, space_id, req, resp);
  return resp.addr();
}

Result<std::string> Client::Mincore(uint64_t space_id, uint64_t addr, uint64_t len) {
  v1::MincoreRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  v1::MincoreResponse resp;
  VMSPACE_CALL(Mincore, space_id, req, resp);
  return std::move(*resp.mutable_vec());
}

Result<std::vector<v1::TraceLocksResponse>> Client::TraceLocks(uint64_t space_id, bool all, double seconds,
                                                               uint64_t max_events) {
  if (setup_error_) return *setup_error_;
  v1::TraceLocksRequest req;
  req.set_space_id(space_id);
  req.set_all(all);
  req.set_seconds(seconds);
  req.set_max_events(max_events);
  std::vector<Backend*> on;
  if (all) {
    if (std::optional<Error> e = CheckShards()) return *e;
    for (auto& b : backends_) on.push_back(b.get());
  } else {
    Result<Backend*> route = Route(space_id);
    if (!route.ok()) return route.error();
    on.push_back(route.value());
  }
  // The daemons trace at the same time: one call per daemon, each on its own thread.
  std::vector<v1::TraceLocksResponse> out(on.size());
  std::vector<grpc::Status> st(on.size());
  std::vector<std::thread> threads;
  const auto wait = std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::duration<double>(seconds));
  for (size_t i = 0; i < on.size(); i++)
    threads.emplace_back([&, i] {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + wait + opts_.timeout);
      st[i] = on[i]->stub->TraceLocks(&ctx, req, &out[i]);
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < on.size(); i++)
    if (!st[i].ok()) return Tagged(*on[i], DecodeStatus(st[i]));
  return out;
}

Result<Unit> Client::StopTraceLocks() {
  if (setup_error_) return *setup_error_;
  v1::TraceLocksRequest req;
  req.set_stop(true);
  for (auto& b : backends_) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::TraceLocksResponse r;
    grpc::Status st = b->stub->TraceLocks(&ctx, req, &r);
    if (!st.ok()) return Tagged(*b, DecodeStatus(st));
  }
  return Unit{};
}

Result<v1::GetLockStatsResponse> Client::GetLockStats(const std::string& locking_profile,
                                                      std::vector<Error>* unreachable) {
  if (setup_error_) return *setup_error_;
  if (std::optional<Error> e = CheckShards()) return *e;
  size_t answered = 0;
  v1::GetLockStatsRequest req;
  req.set_locking_profile(locking_profile);
  v1::GetLockStatsResponse sum;
  std::map<std::pair<std::string, std::string>, v1::LockStat*> cells;
  sum.set_lock_stats_enabled(true);
  for (auto& b : backends_) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::GetLockStatsResponse r;
    grpc::Status st = b->stub->GetLockStats(&ctx, req, &r);
    if (!st.ok() && LeaveOut(*b, st, unreachable)) continue;
    if (!st.ok()) return Tagged(*b, DecodeStatus(st));
    if (!sharded_) return r;
    ++answered;
    for (const v1::LockStat& l : r.locks()) {
      v1::LockStat*& c = cells[{l.lock(), l.mode()}];
      if (c == nullptr) {
        c = sum.add_locks();
        c->set_lock(l.lock());
        c->set_mode(l.mode());
      }
      c->set_acquisitions(c->acquisitions() + l.acquisitions());
      c->set_contentions(c->contentions() + l.contentions());
      c->set_wait_seconds_total(c->wait_seconds_total() + l.wait_seconds_total());
      c->set_wait_seconds_max(std::max(c->wait_seconds_max(), l.wait_seconds_max()));
      c->set_hold_seconds_total(c->hold_seconds_total() + l.hold_seconds_total());
      c->set_hold_seconds_max(std::max(c->hold_seconds_max(), l.hold_seconds_max()));
    }
    for (const auto& [name, n] : r.events()) (*sum.mutable_events())[name] += n;
    sum.set_text(sum.text() + "== " + b->target + "\n" + r.text());
    sum.set_lock_stats_enabled(sum.lock_stats_enabled() && r.lock_stats_enabled());
  }
  if (answered == 0 && unreachable != nullptr && !unreachable->empty()) return unreachable->front();
  return sum;
}

Result<Unit> Client::Ping(std::vector<Error>* unreachable) {
  if (setup_error_) return *setup_error_;
  if (std::optional<Error> e = CheckShards()) return *e;
  size_t answered = 0;
  for (auto& b : backends_) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::PingResponse resp;
    grpc::Status st = b->stub->Ping(&ctx, v1::PingRequest{}, &resp);
    if (!st.ok() && LeaveOut(*b, st, unreachable)) continue;
    if (!st.ok()) return Tagged(*b, DecodeStatus(st));
    ++answered;
  }
  if (answered == 0 && unreachable != nullptr && !unreachable->empty()) return unreachable->front();
  return Unit{};
}

Result<std::string> Client::CheckHealth(const std::string& service, std::vector<Error>* unreachable) {
  namespace health = ::grpc::health::v1;
  if (setup_error_) return *setup_error_;
  if (std::optional<Error> e = CheckShards()) return *e;
  size_t answered = 0;
  std::string status = "SERVING";
  health::HealthCheckRequest req;
  req.set_service(service);
  for (auto& b : backends_) {
    health::HealthCheckResponse resp;
    auto health_stub = health::Health::NewStub(b->channel);
    grpc::ClientContext ctx;
    Prepare(&ctx);
    grpc::Status st = health_stub->Check(&ctx, req, &resp);
    if (!st.ok() && LeaveOut(*b, st, unreachable)) continue;
    if (!st.ok()) return Tagged(*b, DecodeStatus(st));
    ++answered;
    if (resp.status() != health::HealthCheckResponse::SERVING && status == "SERVING")
      status = health::HealthCheckResponse::ServingStatus_Name(resp.status());
  }
  if (answered == 0 && unreachable != nullptr && !unreachable->empty()) return unreachable->front();
  return status;
}

Result<std::vector<v1::GetServerInfoResponse>> Client::GetServerInfo(std::vector<Error>* unreachable) {
  if (setup_error_) return *setup_error_;
  if (std::optional<Error> e = CheckShards()) return *e;
  std::vector<v1::GetServerInfoResponse> out;
  for (auto& b : backends_) {
    Result<v1::GetServerInfoResponse> r = Info(*b);
    if (!r.ok() && unreachable != nullptr &&
        (r.error().code == grpc::StatusCode::UNAVAILABLE || r.error().code == grpc::StatusCode::DEADLINE_EXCEEDED)) {
      unreachable->push_back(r.error());
      continue;
    }
    if (!r.ok()) return r.error();
    out.push_back(r.value());
  }
  if (out.empty() && unreachable != nullptr && !unreachable->empty()) return unreachable->front();
  return out;
}

Result<Unit> Client::Msync(uint64_t space_id, uint64_t addr, uint64_t len, int flags) {
  v1::MsyncRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  req.set_flags(flags);
  v1::MsyncResponse resp;
  VMSPACE_CALL(Msync, space_id, req, resp);
  return Unit{};
}

Result<uint64_t> Client::OpenFile(const v1::OpenFileRequest& req, uint64_t near_space) {
  v1::OpenFileResponse resp;
  VMSPACE_CALL(OpenFile, near_space, req, resp);
  return resp.file_id();
}

Result<uint64_t> Client::CreateShmemFile(const std::string& name, uint64_t size, uint64_t near_space,
                                         bool allow_sealing) {
  v1::CreateShmemFileRequest req;
  req.set_name(name);
  req.set_size(size);
  req.set_allow_sealing(allow_sealing);
  v1::CreateShmemFileResponse resp;
  VMSPACE_CALL(CreateShmemFile, near_space, req, resp);
  return resp.file_id();
}

Result<Unit> Client::AddFileSeals(uint64_t file_id, uint32_t seals) {
  v1::AddFileSealsRequest req;
  req.set_file_id(file_id);
  req.set_seals(seals);
  v1::AddFileSealsResponse resp;
  VMSPACE_CALL(AddFileSeals, file_id, req, resp);
  return Unit{};
}

Result<uint32_t> Client::GetFileSeals(uint64_t file_id) {
  v1::GetFileSealsRequest req;
  req.set_file_id(file_id);
  v1::GetFileSealsResponse resp;
  VMSPACE_CALL(GetFileSeals, file_id, req, resp);
  return resp.seals();
}

Result<uint64_t> Client::ReopenFile(uint64_t file_id, v1::FileAccessMode access) {
  v1::ReopenFileRequest req;
  req.set_file_id(file_id);
  req.set_access(access);
  v1::ReopenFileResponse resp;
  VMSPACE_CALL(ReopenFile, file_id, req, resp);
  return resp.file_id();
}

Result<Unit> Client::Mlock(uint64_t space_id, uint64_t addr, uint64_t len, int flags) {
  v1::MlockRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  req.set_flags(flags);
  v1::MlockResponse resp;
  VMSPACE_CALL(Mlock, space_id, req, resp);
  return Unit{};
}

Result<Unit> Client::Munlock(uint64_t space_id, uint64_t addr, uint64_t len) {
  v1::MunlockRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  v1::MunlockResponse resp;
  VMSPACE_CALL(Munlock, space_id, req, resp);
  return Unit{};
}

Result<Unit> Client::Mlockall(uint64_t space_id, int flags) {
  v1::MlockallRequest req;
  req.set_space_id(space_id);
  req.set_flags(flags);
  v1::MlockallResponse resp;
  VMSPACE_CALL(Mlockall, space_id, req, resp);
  return Unit{};
}

Result<Unit> Client::Munlockall(uint64_t space_id) {
  v1::MunlockallRequest req;
  req.set_space_id(space_id);
  v1::MunlockallResponse resp;
  VMSPACE_CALL(Munlockall, space_id, req, resp);
  return Unit{};
}

Result<Unit> Client::Mseal(uint64_t space_id, uint64_t addr, uint64_t len, uint64_t flags) {
  v1::MsealRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  req.set_flags(flags);
  v1::MsealResponse resp;
  VMSPACE_CALL(Mseal, space_id, req, resp);
  return Unit{};
}

Result<Unit> Client::CloseFile(uint64_t file_id) {
  v1::CloseFileRequest req;
  req.set_file_id(file_id);
  v1::CloseFileResponse resp;
  VMSPACE_CALL(CloseFile, file_id, req, resp);
  return Unit{};
}

Result<Unit> Client::TruncateFile(uint64_t file_id, uint64_t size) {
  v1::TruncateFileRequest req;
  req.set_file_id(file_id);
  req.set_size(size);
  v1::TruncateFileResponse resp;
  VMSPACE_CALL(TruncateFile, file_id, req, resp);
  return Unit{};
}

Result<v1::FileInfo> Client::StatFile(uint64_t file_id) {
  v1::StatFileRequest req;
  req.set_file_id(file_id);
  v1::StatFileResponse resp;
  VMSPACE_CALL(StatFile, file_id, req, resp);
  return resp.file();
}

Result<std::vector<v1::FileInfo>> Client::ListFiles() {
  return GatherAll<v1::FileInfo>(
      [this](v1::VmSpace::Stub& stub, grpc::ClientContext* ctx, std::vector<v1::FileInfo>* out) {
        // Every page: the first in `ctx`, each further one in a context of its own (a
        // ClientContext serves one call).
        v1::ListFilesRequest req;
        for (grpc::ClientContext* c = ctx;;) {
          v1::ListFilesResponse resp;
          grpc::ClientContext next;
          if (req.page_token() != 0) {
            Prepare(&next);
            c = &next;
          }
          grpc::Status st = stub.ListFiles(c, req, &resp);
          if (!st.ok()) return st;
          out->insert(out->end(), resp.files().begin(), resp.files().end());
          if (resp.next_page_token() == 0) return st;
          req.set_page_token(resp.next_page_token());
        }
      },
      [](const v1::FileInfo& f) { return f.file_id(); });
}

Result<std::string> Client::ReadFile(uint64_t file_id, uint64_t offset, uint64_t len) {
  v1::ReadFileRequest req;
  req.set_file_id(file_id);
  req.set_offset(offset);
  req.set_len(len);
  v1::ReadFileResponse resp;
  VMSPACE_CALL(ReadFile, file_id, req, resp);
  return std::move(*resp.mutable_data());
}

Result<uint64_t> Client::WriteFile(uint64_t file_id, uint64_t offset, const std::string& data) {
  v1::WriteFileRequest req;
  req.set_file_id(file_id);
  req.set_offset(offset);
  req.set_data(data);
  v1::WriteFileResponse resp;
  VMSPACE_CALL(WriteFile, file_id, req, resp);
  return resp.bytes_written();
}

Result<Unit> Client::FsyncFile(uint64_t file_id) {
  v1::FsyncFileRequest req;
  req.set_file_id(file_id);
  v1::FsyncFileResponse resp;
  VMSPACE_CALL(FsyncFile, file_id, req, resp);
  return Unit{};
}

#undef VMSPACE_CALL

std::unique_ptr<BatchStream> Client::OpenBatch() {
  if (!sharded_ && !setup_error_) return std::make_unique<BatchStream>(*backends_.front()->stub, opts_.stream_timeout);
  return std::make_unique<BatchStream>(*this, opts_.stream_timeout);  // routed at the first Write
}

std::unique_ptr<BatchStream> Client::OpenBatch(uint64_t space_id) {
  Result<Backend*> b = Route(space_id);
  if (!b.ok()) return std::make_unique<BatchStream>(*this, opts_.stream_timeout);  // fails at Write
  return std::make_unique<BatchStream>(*b.value()->stub, opts_.stream_timeout);
}

}  // namespace vmspace::client
