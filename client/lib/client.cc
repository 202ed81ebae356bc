#include "lib/client.h"

#include <absl/status/status.h>
#include <grpcpp/support/error_details.h>

#include "engine/types.h"
#include "google/rpc/status.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace vmspace::client {

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
  if (!message.empty()) s += ": " + message;
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

std::shared_ptr<grpc::Channel> MakeChannel(const ClientOptions& opts) {
  grpc::ChannelArguments args;
  if (opts.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Batch messages may be large (up to --max-batch ops, --max-io-bytes reads).
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  return grpc::CreateCustomChannel(opts.target, grpc::InsecureChannelCredentials(), args);
}

BatchStream::BatchStream(v1::VmSpace::Stub& stub, std::chrono::milliseconds timeout) {
  ctx_.set_deadline(std::chrono::system_clock::now() + timeout);
  rw_ = stub.Batch(&ctx_);
}

BatchStream::~BatchStream() {
  if (rw_ && !writes_done_) ctx_.TryCancel();
}

bool BatchStream::Write(const v1::BatchRequest& req) { return rw_->Write(req); }
bool BatchStream::Read(v1::BatchResponse* resp) { return rw_->Read(resp); }
void BatchStream::WritesDone() {
  if (!writes_done_) {
    writes_done_ = true;
    rw_->WritesDone();
  }
}
grpc::Status BatchStream::Finish() {
  writes_done_ = true;
  return rw_->Finish();
}

Client::Client(ClientOptions opts)
    : Client(MakeChannel(opts), opts) {}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions opts)
    : opts_(std::move(opts)), channel_(std::move(channel)),
      stub_(v1::VmSpace::NewStub(channel_)) {}

void Client::Prepare(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + opts_.timeout);
}

#define VMSPACE_CALL(Method, req, resp)        \
  grpc::ClientContext ctx;                     \
  Prepare(&ctx);                               \
  grpc::Status st = stub_->Method(&ctx, req, &resp); \
  if (!st.ok()) return DecodeStatus(st)

Result<uint64_t> Client::CreateSpace(const v1::SpaceSettings& settings, const std::string& label) {
  v1::CreateSpaceRequest req;
  *req.mutable_settings() = settings;
  req.set_label(label);
  v1::CreateSpaceResponse resp;
  VMSPACE_CALL(CreateSpace, req, resp);
  return resp.space_id();
}

Result<Unit> Client::DestroySpace(uint64_t space_id) {
  v1::DestroySpaceRequest req;
  req.set_space_id(space_id);
  v1::DestroySpaceResponse resp;
  VMSPACE_CALL(DestroySpace, req, resp);
  return Unit{};
}

Result<std::vector<v1::SpaceInfo>> Client::ListSpaces() {
  v1::ListSpacesRequest req;
  v1::ListSpacesResponse resp;
  VMSPACE_CALL(ListSpaces, req, resp);
  return std::vector<v1::SpaceInfo>(resp.spaces().begin(), resp.spaces().end());
}

Result<uint64_t> Client::Mmap(uint64_t space_id, uint64_t addr, uint64_t len, int prot, int flags,
                              uint64_t offset) {
  v1::MmapRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  req.set_prot(prot);
  req.set_flags(flags);
  req.set_offset(offset);
  v1::MmapResponse resp;
  VMSPACE_CALL(Mmap, req, resp);
  return resp.addr();
}

Result<Unit> Client::Munmap(uint64_t space_id, uint64_t addr, uint64_t len) {
  v1::MunmapRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  v1::MunmapResponse resp;
  VMSPACE_CALL(Munmap, req, resp);
  return Unit{};
}

Result<Unit> Client::Mprotect(uint64_t space_id, uint64_t addr, uint64_t len, int prot) {
  v1::MprotectRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  req.set_prot(prot);
  v1::MprotectResponse resp;
  VMSPACE_CALL(Mprotect, req, resp);
  return Unit{};
}

Result<v1::FaultInfo> Client::Fault(uint64_t space_id, uint64_t addr, v1::AccessType access) {
  v1::FaultRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_access(access);
  v1::FaultResponse resp;
  VMSPACE_CALL(Fault, req, resp);
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
  VMSPACE_CALL(Access, req, resp);
  return resp;
}

Result<v1::ReadMemoryResponse> Client::ReadMemory(uint64_t space_id, uint64_t addr, uint64_t len) {
  v1::ReadMemoryRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  v1::ReadMemoryResponse resp;
  VMSPACE_CALL(ReadMemory, req, resp);
  return resp;
}

Result<v1::WriteMemoryResponse> Client::WriteMemory(uint64_t space_id, uint64_t addr,
                                                    const std::string& data) {
  v1::WriteMemoryRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_data(data);
  v1::WriteMemoryResponse resp;
  VMSPACE_CALL(WriteMemory, req, resp);
  return resp;
}

Result<v1::GetMapsResponse> Client::GetMaps(uint64_t space_id, uint64_t start, uint64_t end) {
  v1::GetMapsRequest req;
  req.set_space_id(space_id);
  req.set_start(start);
  req.set_end(end);
  v1::GetMapsResponse resp;
  VMSPACE_CALL(GetMaps, req, resp);
  return resp;
}

Result<Unit> Client::Madvise(uint64_t space_id, uint64_t addr, uint64_t len, int advice) {
  v1::MadviseRequest req;
  req.set_space_id(space_id);
  req.set_addr(addr);
  req.set_len(len);
  req.set_advice(advice);
  v1::MadviseResponse resp;
  VMSPACE_CALL(Madvise, req, resp);
  return Unit{};
}

Result<v1::GetLockStatsResponse> Client::GetLockStats(const std::string& locking_profile) {
  v1::GetLockStatsRequest req;
  req.set_locking_profile(locking_profile);
  v1::GetLockStatsResponse resp;
  VMSPACE_CALL(GetLockStats, req, resp);
  return resp;
}

Result<Unit> Client::Ping() {
  v1::PingRequest req;
  v1::PingResponse resp;
  VMSPACE_CALL(Ping, req, resp);
  return Unit{};
}

Result<std::string> Client::CheckHealth(const std::string& service) {
  namespace health = ::grpc::health::v1;
  health::HealthCheckRequest req;
  req.set_service(service);
  health::HealthCheckResponse resp;
  auto health_stub = health::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  Prepare(&ctx);
  grpc::Status st = health_stub->Check(&ctx, req, &resp);
  if (!st.ok()) return DecodeStatus(st);
  return health::HealthCheckResponse::ServingStatus_Name(resp.status());
}

#undef VMSPACE_CALL

std::unique_ptr<BatchStream> Client::OpenBatch() {
  return std::make_unique<BatchStream>(*stub_, opts_.stream_timeout);
}

}  // namespace vmspace::client
