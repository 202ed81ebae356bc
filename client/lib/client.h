// SPDX-License-Identifier: Apache-2.0
// vmspace_client: a small typed C++ client over the generated vmspace.v1 stub.
//
// One Client may talk to several daemons (shards): ClientOptions::target "a,b,c" or
// "shards:NAME:PORT" (every address NAME resolves to, e.g. a Kubernetes headless
// Service). A space id names its daemon (its high bits are the daemon's --shard, see
// kSpaceIdShardShift), so each call on a space goes to the daemon that holds it; the
// client learns which target is which shard with GetServerInfo, once, and again for a
// shard it has not found yet. CreateSpace places the space by the policy of
// Client::CreateSpace. A daemon that is down fails only the calls on its own spaces
// (UNAVAILABLE), and the calls that need every daemon (ListSpaces, GetLockStats, Ping,
// CheckHealth). With one target there is no routing and no extra call.
//
// Every call carries a deadline (ClientOptions::timeout). A failed call returns an
// Error with the gRPC status code and, for syscall-like failures, the Linux errno read
// from the status details: a google.rpc.Status whose details hold a packed
// vmspace.v1.SyscallError (the message text is never parsed).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
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
  std::string target;      // the gRPC target of the daemon that failed ("" if none did)

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
/// name is glibc's strerrorname_np if the details leave it out). No such details: err 0.
Error DecodeStatus(const grpc::Status& status);
/// The Error of a failed Batch op result (code != 0); nullopt if the op succeeded.
std::optional<Error> DecodeOpResult(const v1::OpResult& r);

/// Space ids carry their daemon's shard in bits 40..52: shard = id >> 40 (as vmspaced's
/// kShardShift, server/rpc/space_registry.h).
inline constexpr unsigned kSpaceIdShardShift = 40;
/// The shard (daemon) a space id belongs to.
inline constexpr uint32_t ShardOfSpace(uint64_t id) { return static_cast<uint32_t>(id >> kSpaceIdShardShift); }

/// The daemons a target string names: "host:port" (or any gRPC target, "unix:/path")
/// is one; "a,b,c" is several; "shards:NAME:PORT" is every address NAME resolves to
/// (getaddrinfo, as gRPC targets "ipv4:..." / "ipv6:[...]:..."). Empty or unresolvable:
/// an Error (INVALID_ARGUMENT / UNAVAILABLE).
Result<std::vector<std::string>> ParseTargets(const std::string& target);

/// How to reach the daemon(s).
struct ClientOptions {
  /// gRPC target, e.g. "host:port" or "unix:/path"; several daemons: "a,b,c" or
  /// "shards:NAME:PORT" (ParseTargets).
  std::string target = "127.0.0.1:50051";
  std::chrono::milliseconds timeout{10000};  // deadline of each unary call
  std::chrono::milliseconds stream_timeout{3600 * 1000};  // deadline of a Batch stream
  /// Use a connection of this channel's own (GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL), so
  /// several clients in one process do not share one TCP connection.
  bool own_connection = false;
  /// Bearer token sent with every call as "authorization: Bearer <token>" (vmspaced
  /// --token-file); "" sends none. The CLI takes --token or $VMSPACE_TOKEN.
  std::string token;
  /// TLS: PEM root certificates that sign the daemon's certificate (non-empty: connect
  /// with TLS, gRPC's SslCredentials); with tls_cert_pem and tls_key_pem also a client
  /// certificate (mutual TLS: its subject CN is the tenant). Contents, not paths.
  std::string tls_ca_pem;
  std::string tls_cert_pem;
  std::string tls_key_pem;
};

/// Creates a channel to `opts.target`: TLS if opts.tls_ca_pem is set, else insecure; a
/// client interceptor adds the bearer token (if any) to every call on it.
std::shared_ptr<grpc::Channel> MakeChannel(const ClientOptions& opts);

class Client;

/// One bidirectional Batch stream to one daemon. Write() and Read() may be called from
/// two different threads (one writer, one reader), as gRPC's sync API allows. With
/// several daemons a stream is opened at its first Write(), on the daemon of the first
/// op's space; every op of the stream must be on that daemon's spaces (others fail
/// NOT_FOUND). A Read() before that first Write() waits for it.
class BatchStream {
 public:
  /// A stream on `stub`, open now.
  BatchStream(v1::VmSpace::Stub& stub, std::chrono::milliseconds timeout);
  /// A stream opened at the first Write() on `client`'s daemon of the first op's space.
  BatchStream(Client& client, std::chrono::milliseconds timeout);
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
  void Cancel();

 private:
  void Open(v1::VmSpace::Stub& stub);  // with mu_ held
  /// The open stream, or null once it can no longer open (waits while it may).
  grpc::ClientReaderWriter<v1::BatchRequest, v1::BatchResponse>* Wait();

  grpc::ClientContext ctx_;
  Client* client_ = nullptr;  // routes the first Write (lazy streams only)
  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::BatchRequest, v1::BatchResponse>> rw_;  // set once
  bool closed_ = false;    // never to be opened (WritesDone, Cancel or a routing error)
  grpc::Status failure_;   // why a lazy stream could not open
  bool writes_done_ = false;
};

/// Typed, deadline-bounded calls to one vmspaced, or to several (see the file comment).
/// Thread-safe.
class Client {
 public:
  explicit Client(ClientOptions opts = {});
  /// Uses an existing channel (e.g. shared by several clients) to one daemon.
  Client(std::shared_ptr<grpc::Channel> channel, ClientOptions opts);
  ~Client();

  /// Creates a space; returns its id. With several daemons it goes to one chosen by
  /// this placement policy, from every daemon's GetServerInfo just before:
  ///  - `placement_key` given: the daemons that answer, ordered by shard, and the one at
  ///    FNV-1a-64(key) mod their number (the same key lands on the same daemon while the
  ///    same daemons answer);
  ///  - else the daemon with the fewest spaces, among those below --max-spaces; ties go
  ///    round-robin (a counter of this process), so concurrent creators spread.
  /// Daemons that do not answer are left out; none answering: UNAVAILABLE.
  Result<uint64_t> CreateSpace(const v1::SpaceSettings& settings = {}, const std::string& label = "",
                               const std::string& placement_key = "");
  /// fork(2) of a space (CloneSpace; as kernel/fork.c dup_mmap, Linux 6.18): returns the
  /// child's id. The child lives on the parent's daemon (the call goes there).
  /// `locking_profile` "" = the parent's; `label` "" = the parent's. NOT_FOUND unknown
  /// space; RESOURCE_EXHAUSTED EAGAIN at --max-spaces / --tenant-max-spaces, ENOMEM when
  /// the budget refuses; INVALID_ARGUMENT bad profile.
  Result<uint64_t> CloneSpace(uint64_t space_id, const std::string& locking_profile = "",
                              const std::string& label = "");
  /// execve(2) of a space (ExecSpace; as fs/binfmt_elf.c load_elf_binary, Linux 6.18,
  /// ASLR off): replaces its mappings with the initial layout of the program `path`
  /// (relative to the daemon's data directory; its PT_INTERP too, or
  /// `interpreter_path`). `argv` empty = {path}. Returns the new start_brk, VMA count
  /// and PT_INTERP. NOT_FOUND unknown space; INVALID_ARGUMENT ENOEXEC, ELIBBAD, E2BIG,
  /// EINVAL; ENOENT missing file; RESOURCE_EXHAUSTED ENOMEM.
  Result<v1::ExecSpaceResponse> ExecSpace(uint64_t space_id, const std::string& path,
                                          const std::vector<std::string>& argv = {},
                                          const std::vector<std::string>& envp = {},
                                          const std::string& interpreter_path = "");
  Result<Unit> DestroySpace(uint64_t space_id);
  /// Every space of every daemon, ordered by id. The calls on every daemon (ListSpaces,
  /// GetLockStats, Ping, CheckHealth, GetServerInfo), with several daemons, first check
  /// that no two answer for one shard (FAILED_PRECONDITION naming both). A daemon that
  /// fails fails the call, unless `unreachable` is given: then a daemon that cannot be
  /// reached (UNAVAILABLE, DEADLINE_EXCEEDED) is left out and its Error appended there,
  /// and the call fails (with the first such Error) only if no daemon answered.
  Result<std::vector<v1::SpaceInfo>> ListSpaces(std::vector<Error>* unreachable = nullptr);
  /// mmap(2); returns the mapped address. `file_id` (0 = none) with MAP_ANONYMOUS clear
  /// maps that open file at `offset` (the file must be on the space's daemon: EBADF).
  Result<uint64_t> Mmap(uint64_t space_id, uint64_t addr, uint64_t len, int prot, int flags,
                        uint64_t offset = 0, uint64_t file_id = 0);
  /// msync(2) of a range of a space (MS_ASYNC 1, MS_INVALIDATE 2, MS_SYNC 4).
  Result<Unit> Msync(uint64_t space_id, uint64_t addr, uint64_t len, int flags);

  // Files: each daemon has one table of open files shared by its spaces. File ids carry
  // their daemon's shard like space ids, so calls on a file go to its daemon; OpenFile
  // and CreateShmemFile go to the daemon of `near_space` (0: shard 0's daemon).
  /// open(2) of req.path() under the daemon's --data-dir; returns the file id.
  Result<uint64_t> OpenFile(const v1::OpenFileRequest& req, uint64_t near_space = 0);
  /// memfd_create(2) + ftruncate(2) of `size` bytes; returns the file id.
  /// `allow_sealing`: MFD_ALLOW_SEALING (else the file starts with F_SEAL_SEAL).
  Result<uint64_t> CreateShmemFile(const std::string& name, uint64_t size, uint64_t near_space = 0,
                                   bool allow_sealing = false);
  /// fcntl(F_ADD_SEALS) / fcntl(F_GET_SEALS) of a shmem file (F_SEAL_* bits).
  Result<Unit> AddFileSeals(uint64_t file_id, uint32_t seals);
  Result<uint32_t> GetFileSeals(uint64_t file_id);
  /// open("/proc/self/fd/N") with access mode `access`: a new file id of the same file.
  Result<uint64_t> ReopenFile(uint64_t file_id, v1::FileAccessMode access);
  /// mlock2(2) (flags 0 or MLOCK_ONFAULT 1), munlock(2), mlockall(2) (MCL_CURRENT 1,
  /// MCL_FUTURE 2, MCL_ONFAULT 4), munlockall(2), mseal(2) (flags 0) on a space.
  Result<Unit> Mlock(uint64_t space_id, uint64_t addr, uint64_t len, int flags = 0);
  Result<Unit> Munlock(uint64_t space_id, uint64_t addr, uint64_t len);
  Result<Unit> Mlockall(uint64_t space_id, int flags);
  Result<Unit> Munlockall(uint64_t space_id);
  Result<Unit> Mseal(uint64_t space_id, uint64_t addr, uint64_t len, uint64_t flags = 0);
  Result<Unit> CloseFile(uint64_t file_id);
  /// ftruncate(2) to `size` bytes.
  Result<Unit> TruncateFile(uint64_t file_id, uint64_t size);
  Result<v1::FileInfo> StatFile(uint64_t file_id);
  /// The open files of every daemon, ordered by id.
  Result<std::vector<v1::FileInfo>> ListFiles();
  /// pread(2): up to `len` bytes at `offset` (fewer at EOF).
  Result<std::string> ReadFile(uint64_t file_id, uint64_t offset, uint64_t len);
  /// pwrite(2); returns the bytes written.
  Result<uint64_t> WriteFile(uint64_t file_id, uint64_t offset, const std::string& data);
  Result<Unit> FsyncFile(uint64_t file_id);
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
  /// madvise(2): `advice` an MADV_* number (every advice of Linux 6.18; ParseMadvise
  /// reads their names); an unknown one is EINVAL.
  Result<Unit> Madvise(uint64_t space_id, uint64_t addr, uint64_t len, int advice);
  /// brk(2); returns the break after the call (the old one if the change was refused:
  /// brk has no errno).
  Result<uint64_t> Brk(uint64_t space_id, uint64_t brk);
  /// mremap(2); returns the mapping's address after the call. `flags`: MREMAP_MAYMOVE 1,
  /// MREMAP_FIXED 2, MREMAP_DONTUNMAP 4; `new_addr` with FIXED or DONTUNMAP.
  Result<uint64_t> Mremap(uint64_t space_id, uint64_t old_addr, uint64_t old_len, uint64_t new_len,
                          uint64_t flags, uint64_t new_addr = 0);
  /// mincore(2): one byte per page of [addr, addr + len), bit 0 = resident. EINVAL
  /// (addr unaligned, more pages than the daemon's --max-io-bytes), ENOMEM (a hole).
  Result<std::string> Mincore(uint64_t space_id, uint64_t addr, uint64_t len);
  /// lock_stat figures of one locking profile's spaces ("linux-6.0".."linux-6.15",
  /// "custom"), or of all profiles summed (""). Several daemons: summed over them (max
  /// fields: the largest), `text` one table per daemon.
  Result<v1::GetLockStatsResponse> GetLockStats(const std::string& locking_profile = "",
                                                std::vector<Error>* unreachable = nullptr);
  /// TraceLocks: the lock timeline of `space_id` (on its daemon) or, with `all`, of every
  /// space of the caller on every daemon (traced at once), for `seconds`; one answer per
  /// daemon asked, in target order. `max_events` 0: the daemon's cap. The call's
  /// deadline is `seconds` plus the client's timeout.
  Result<std::vector<v1::TraceLocksResponse>> TraceLocks(uint64_t space_id, bool all, double seconds,
                                                         uint64_t max_events = 0);
  /// Ends the traces of TraceLocks that are on, on every daemon (their calls return now).
  /// FAILED_PRECONDITION if a daemon has none of the caller's on.
  Result<Unit> StopTraceLocks();
  /// Ping of every daemon.
  Result<Unit> Ping(std::vector<Error>* unreachable = nullptr);
  /// grpc.health.v1.Health/Check of `service` ("" = the server as a whole): the serving
  /// status's name, "SERVING" or "NOT_SERVING" (a draining daemon); with several
  /// daemons the first that is not SERVING. An unknown service is an Error with code
  /// NOT_FOUND; an unreachable daemon UNAVAILABLE (its target named in the message).
  Result<std::string> CheckHealth(const std::string& service = "vmspace.v1.VmSpace",
                                  std::vector<Error>* unreachable = nullptr);
  /// GetServerInfo of every daemon, in target order.
  Result<std::vector<v1::GetServerInfoResponse>> GetServerInfo(std::vector<Error>* unreachable = nullptr);
  /// Opens a Batch stream with the stream deadline: on the one daemon, or (several) on
  /// the daemon of the first op's space at the first Write.
  std::unique_ptr<BatchStream> OpenBatch();
  /// Opens a Batch stream on the daemon of `space_id`.
  std::unique_ptr<BatchStream> OpenBatch(uint64_t space_id);

  /// The first daemon's stub.
  v1::VmSpace::Stub& stub();
  const ClientOptions& options() const { return opts_; }
  /// The daemons' gRPC targets (ParseTargets of options().target).
  std::vector<std::string> targets() const;

 private:
  struct Backend;
  friend class BatchStream;
  void Prepare(grpc::ClientContext* ctx) const;
  /// The daemon holding `space_id` (any daemon when there is one), or an Error.
  Result<Backend*> Route(uint64_t space_id);
  /// Several daemons: an Error (FAILED_PRECONDITION) naming two targets that answer for
  /// the same shard, after asking the daemons of unknown shard for theirs; else nullopt.
  std::optional<Error> CheckShards();
  /// Whether a failed call on every daemon leaves the daemon out (into `unreachable`,
  /// tagged) rather than failing: `unreachable` given and `st` UNAVAILABLE or
  /// DEADLINE_EXCEEDED.
  bool LeaveOut(const Backend& b, const grpc::Status& st, std::vector<Error>* unreachable) const;
  /// GetServerInfo of backend `b`; learns its shard.
  Result<v1::GetServerInfoResponse> Info(Backend& b);
  /// Asks the daemons of unknown shard for theirs (with mu_ held).
  void DiscoverLocked();
  /// `e` with the backend's target in Error::target and (several daemons only) in front
  /// of its message.
  Error Tagged(const Backend& b, Error e) const;
  /// `call(stub, ctx, &items)` on every daemon, the items gathered and ordered by
  /// `id(item)`; the first failure is the result (see LeaveOut for `unreachable`).
  template <typename Item, typename Call, typename Id>
  Result<std::vector<Item>> GatherAll(Call call, Id id, std::vector<Error>* unreachable = nullptr);

  ClientOptions opts_;
  std::optional<Error> setup_error_;  // a bad target: every call returns it
  std::vector<std::unique_ptr<Backend>> backends_;
  bool sharded_ = false;  // several targets (or "shards:"): route by space id
  mutable std::mutex mu_;  // guards the backends' shard numbers
};

}  // namespace vmspace::client
