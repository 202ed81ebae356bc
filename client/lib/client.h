// vmspace_client: a small typed C++ client over the generated vmspace.v1 stub.
//
// Every call carries a deadline (ClientOptions::timeout). A failed call returns an
// Error with the gRPC status code and, for syscall-like failures, the Linux errno read
// from the status details: a google.rpc.Status whose details hold a packed
// vmspace.v1.SyscallError (the message text is never parsed).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "vmspace/v1/vmspace.grpc.pb.h"

namespace vmspace::client {

namespace v1 = ::vmspace::v1;

/// A failed call: gRPC status plus the Linux errno when the server reported one.
struct Error {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  int err = 0;             // Linux errno number, 0 if the failure is not an errno
  std::string errno_name;  // "EINVAL", or "" if none
  std::string message;     // the status message as sent

  /// The errno name if there is one, else the gRPC code name ("NOT_FOUND").
  std::string Name() const;
  /// "EINVAL (22): EINVAL: len is 0" style one-line description.
  std::string ToString() const;
};

/// The value of a successful call or an Error.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT
  bool ok() const { return v_.index() == 0; }
  const T& value() const { return std::get<0>(v_); }
  T& value() { return std::get<0>(v_); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

/// Empty value for calls that return nothing.
struct Unit {};

/// Name of a gRPC status code, e.g. "INVALID_ARGUMENT" (absl::StatusCodeToString).
std::string StatusCodeName(grpc::StatusCode code);
/// Decodes a non-OK status into an Error: code and message as sent; errno and its name
/// from the first vmspace.v1.SyscallError packed in the google.rpc.Status details (the
/// name is vmspace::ErrnoName's if the details leave it out). No such details: err 0.
Error DecodeStatus(const grpc::Status& status);
/// The Error of a failed Batch op result (code != 0); nullopt if the op succeeded.
std::optional<Error> DecodeOpResult(const v1::OpResult& r);

/// How to reach the daemon.
struct ClientOptions {
  std::string target = "127.0.0.1:50051";  // gRPC target, e.g. "host:port" or "unix:/path"
  std::chrono::milliseconds timeout{10000};  // deadline of each unary call
  std::chrono::milliseconds stream_timeout{3600 * 1000};  // deadline of a Batch stream
  /// Use a connection of this channel's own (GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL), so
  /// several clients in one process do not share one TCP connection.
  bool own_connection = false;
};

/// Creates an insecure channel to `opts.target`.
std::shared_ptr<grpc::Channel> MakeChannel(const ClientOptions& opts);

/// One bidirectional Batch stream. Write() and Read() may be called from two different
/// threads (one writer, one reader), as gRPC's sync API allows.
class BatchStream {
 public:
  BatchStream(v1::VmSpace::Stub& stub, std::chrono::milliseconds timeout);
  ~BatchStream();
  BatchStream(const BatchStream&) = delete;
  BatchStream& operator=(const BatchStream&) = delete;

  /// Sends one BatchRequest; false if the stream is broken (then call Finish()).
  bool Write(const v1::BatchRequest& req);
  /// Receives the next BatchResponse; false at end of stream or on error.
  bool Read(v1::BatchResponse* resp);
  /// Half-closes the stream (no more writes).
  void WritesDone();
  /// Waits for the stream's final status (call after Read() returned false).
  grpc::Status Finish();
  /// Cancels the stream (unblocks a pending Read/Write).
  void Cancel() { ctx_.TryCancel(); }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::BatchRequest, v1::BatchResponse>> rw_;
  bool writes_done_ = false;
};

/// Typed, deadline-bounded calls to one vmspaced.
class Client {
 public:
  explicit Client(ClientOptions opts = {});
  /// Uses an existing channel (e.g. shared by several clients).
  Client(std::shared_ptr<grpc::Channel> channel, ClientOptions opts);

  /// Creates a space; returns its id.
  Result<uint64_t> CreateSpace(const v1::SpaceSettings& settings = {}, const std::string& label = "");
  Result<Unit> DestroySpace(uint64_t space_id);
  Result<std::vector<v1::SpaceInfo>> ListSpaces();
  /// mmap(2); returns the mapped address.
  Result<uint64_t> Mmap(uint64_t space_id, uint64_t addr, uint64_t len, int prot, int flags,
                        uint64_t offset = 0);
  Result<Unit> Munmap(uint64_t space_id, uint64_t addr, uint64_t len);
  Result<Unit> Mprotect(uint64_t space_id, uint64_t addr, uint64_t len, int prot);
  /// One simulated access; a SIGSEGV/SIGBUS outcome is a successful call.
  Result<v1::FaultInfo> Fault(uint64_t space_id, uint64_t addr, v1::AccessType access);
  Result<v1::AccessResponse> Access(uint64_t space_id, uint64_t addr, uint64_t len,
                                    uint64_t stride, v1::AccessType access);
  Result<v1::ReadMemoryResponse> ReadMemory(uint64_t space_id, uint64_t addr, uint64_t len);
  Result<v1::WriteMemoryResponse> WriteMemory(uint64_t space_id, uint64_t addr,
                                              const std::string& data);
  /// VMAs overlapping [start, end) (end 0 = no limit) and their maps text.
  Result<v1::GetMapsResponse> GetMaps(uint64_t space_id, uint64_t start = 0, uint64_t end = 0);
  /// madvise(2); the daemon accepts only MADV_DONTNEED (4).
  Result<Unit> Madvise(uint64_t space_id, uint64_t addr, uint64_t len, int advice);
  /// lock_stat figures of one locking profile's spaces ("linux-6.0".."linux-6.6",
  /// "custom"), or of all profiles summed ("").
  Result<v1::GetLockStatsResponse> GetLockStats(const std::string& locking_profile = "");
  Result<Unit> Ping();
  /// grpc.health.v1.Health/Check of `service` ("" = the server as a whole): the serving
  /// status's name, "SERVING" or "NOT_SERVING" (a draining daemon). An unknown service
  /// is an Error with code NOT_FOUND; an unreachable daemon UNAVAILABLE.
  Result<std::string> CheckHealth(const std::string& service = "vmspace.v1.VmSpace");
  /// Opens a Batch stream with the stream deadline.
  std::unique_ptr<BatchStream> OpenBatch();

  v1::VmSpace::Stub& stub() { return *stub_; }
  const ClientOptions& options() const { return opts_; }

 private:
  void Prepare(grpc::ClientContext* ctx) const;

  ClientOptions opts_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::VmSpace::Stub> stub_;
};

}  // namespace vmspace::client
