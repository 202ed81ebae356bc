// SPDX-License-Identifier: Apache-2.0
// VmSpaceService: the gRPC service vmspace.v1.VmSpace on top of the engine.
//
// Each handler looks the space up in the SpaceRegistry, calls the engine directly on
// the gRPC handler thread, and translates the result: engine errnos become the status
// codes documented in vmspace.proto (errors.h); faults ending in SIGSEGV/SIGBUS are OK
// answers; FaultOutcome::kOom is RESOURCE_EXHAUSTED "ENOMEM: frame memory limit".
// Every handler records its RPC metrics in per-thread counters (metrics/rpc_stats.h).
//
// The handlers, by concern: space_calls.cc (CreateSpace, DestroySpace, ListSpaces,
// GetMaps), memory_calls.cc (Mmap ... WriteMemory, Madvise, Msync), file_calls.cc
// (OpenFile ... FsyncFile), batch.cc (the Batch stream), server_calls.cc (Ping,
// GetServerInfo, GetLockStats). Their common frame is handle.h (Handle, OnSpace);
// proto_convert.h translates messages, call_limits.h counts calls and streams.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "metrics/rpc_stats.h"
#include "rpc/auth.h"
#include "rpc/call_limits.h"
#include "rpc/interceptors.h"
#include "rpc/space_registry.h"
#include "vmspace/v1/vmspace.grpc.pb.h"

namespace vmspace::rpc {

/// Configuration of the service: input limits (daemon flags of the same names) and
/// defaults for new spaces.
struct ServiceOptions {
  /// Most bytes one ReadMemory/WriteMemory may move (--max-io-bytes); more is EINVAL.
  uint64_t max_io_bytes = 1ull << 20;
  /// Most ops in one BatchRequest (--max-batch); more ends the stream INVALID_ARGUMENT.
  uint64_t max_batch = 4096;
  /// Most touches (ceil(len / stride)) of one Access (--max-access-touches); more is
  /// EINVAL. Any walk also stops at its call's deadline or cancellation.
  uint64_t max_access_touches = 1ull << 30;
  /// Most Batch streams open at once (--max-streams); one more is refused with
  /// RESOURCE_EXHAUSTED (EAGAIN) at once.
  uint64_t max_streams = 64;
  /// Most space calls (all but Create/Destroy/ListSpaces, Ping, GetServerInfo,
  /// GetLockStats) and Batch streams in flight from one client host
  /// (--max-calls-per-peer): one more is RESOURCE_EXHAUSTED (EAGAIN).
  uint64_t max_calls_per_peer = 256;
  /// Highest max_map_count a space may have (--max-map-count-limit): the default of
  /// every space, and a CreateSpace asking for more is INVALID_ARGUMENT (EINVAL).
  uint64_t max_map_count_limit = kDefaultMaxMapCount;
  /// Largest message the server sends or receives (--max-message-bytes). Responses that
  /// would be larger are refused: RESOURCE_EXHAUSTED (ENOMEM) for GetMaps and ListSpaces,
  /// EINVAL for the read op of a batch whose response would grow past it.
  uint64_t max_message_bytes = 16ull << 20;
  /// Locking profile of spaces created without one (--locking-profile).
  LockingProfile default_profile;
  /// Fault-around window of spaces created without one (--fault-around-bytes), bytes.
  uint64_t fault_around_bytes = 65536;
  /// Most spaces one tenant may own at once (--tenant-max-spaces; 0 = no limit); one
  /// more CreateSpace is RESOURCE_EXHAUSTED (ENOMEM).
  uint64_t tenant_max_spaces = 0;
  /// Most memory a tenant may use, bytes (--tenant-max-memory-bytes; 0 = no limit):
  /// its spaces' anonymous pages and page tables plus the file pages charged to it
  /// (TenantUsage). Checked before each call, or Batch message with an op, that may
  /// fault pages in (Mmap, Fault, Access, ReadMemory, WriteMemory, Madvise): once at or
  /// beyond it, RESOURCE_EXHAUSTED (ENOMEM) (for a Batch the stream ends so). A call
  /// that starts below may end above it by what that call alone faults in. File pages
  /// (page cache, shmem) are also charged one by one as a call adds them, to the
  /// caller's tenant (TenantMemcg), and a page that would take those charges over the
  /// limit is refused: WriteFile ENOMEM, a fault VM_FAULT_OOM.
  uint64_t tenant_max_memory_bytes = 0;
  /// Most files (OpenFile and CreateShmemFile ids not yet closed) one tenant may have
  /// open (--tenant-max-open-files; 0 = no limit); one more is EMFILE, as open(2) at
  /// RLIMIT_NOFILE. The daemon-wide limit is the FileTable's (--max-open-files: ENFILE).
  uint64_t tenant_max_open_files = 0;
  /// One tenant's share of --max-streams (--tenant-max-streams; 0 = no share): one more
  /// Batch stream of the tenant is RESOURCE_EXHAUSTED (EAGAIN).
  uint64_t tenant_max_streams = 0;
  /// Most space calls (as --max-calls-per-peer counts them) of one tenant in flight
  /// (--tenant-max-calls; 0 = no limit): one more is RESOURCE_EXHAUSTED (EAGAIN).
  uint64_t tenant_max_calls = 0;
  /// Version reported by GetServerInfo.
  std::string version = "unknown";
};

/// ListFiles' page: handles looked at when page_size is 0, and the most one call looks at.
inline constexpr size_t kListFilesPageDefault = 1000;
inline constexpr size_t kListFilesPageMax = 10000;

/// Whether `bytes` is a valid fault-around window: a power of two in [4096, 2 MiB].
inline bool ValidFaultAroundBytes(uint64_t bytes) {
  return bytes >= 4096 && bytes <= (2u << 20) && (bytes & (bytes - 1)) == 0;
}

class VmSpaceService final : public v1::VmSpace::Service {
 public:
  /// `registry` (and `auth`, if given) must outlive the service. `auth` null: every call
  /// is tenant "" with the admin role (no authentication).
  ///
  /// Tenants: every handler authenticates its call first (Authenticator::Authenticate:
  /// UNAUTHENTICATED on failure). A space or file belongs to the tenant that created or
  /// opened it; for any other tenant it does not exist: a space id answers NOT_FOUND
  /// "space <id> not found" and a file id EBADF, exactly as an unknown id (unary calls
  /// and Batch ops alike). ListSpaces and ListFiles list the caller's own; the admin
  /// role lists all and may DestroySpace any space.
  VmSpaceService(SpaceRegistry& registry, const ServiceOptions& options,
                 const Authenticator* auth = nullptr);

  grpc::Status CreateSpace(grpc::ServerContext* ctx, const v1::CreateSpaceRequest* req,
                           v1::CreateSpaceResponse* resp) override;
  /// fork(2) of the caller's space (SpaceRegistry::Fork, AddressSpace::DupMmap; as
  /// kernel/fork.c dup_mmap, Linux 6.18): the child belongs to the caller's tenant and
  /// counts against --tenant-max-spaces. NOT_FOUND unknown or another tenant's space;
  /// RESOURCE_EXHAUSTED EAGAIN at --max-spaces or --tenant-max-spaces, ENOMEM when the
  /// budget refuses; INVALID_ARGUMENT EINVAL bad locking_profile or label.
  grpc::Status CloneSpace(grpc::ServerContext* ctx, const v1::CloneSpaceRequest* req,
                          v1::CloneSpaceResponse* resp) override;
  grpc::Status ExecSpace(grpc::ServerContext* ctx, const v1::ExecSpaceRequest* req,
                         v1::ExecSpaceResponse* resp) override;
  grpc::Status DestroySpace(grpc::ServerContext* ctx, const v1::DestroySpaceRequest* req,
                            v1::DestroySpaceResponse* resp) override;
  grpc::Status ListSpaces(grpc::ServerContext* ctx, const v1::ListSpacesRequest* req,
                          v1::ListSpacesResponse* resp) override;
  grpc::Status Mmap(grpc::ServerContext* ctx, const v1::MmapRequest* req,
                    v1::MmapResponse* resp) override;
  grpc::Status Munmap(grpc::ServerContext* ctx, const v1::MunmapRequest* req,
                      v1::MunmapResponse* resp) override;
  grpc::Status Mprotect(grpc::ServerContext* ctx, const v1::MprotectRequest* req,
                        v1::MprotectResponse* resp) override;
  grpc::Status Fault(grpc::ServerContext* ctx, const v1::FaultRequest* req,
                     v1::FaultResponse* resp) override;
  grpc::Status Access(grpc::ServerContext* ctx, const v1::AccessRequest* req,
                      v1::AccessResponse* resp) override;
  grpc::Status ReadMemory(grpc::ServerContext* ctx, const v1::ReadMemoryRequest* req,
                          v1::ReadMemoryResponse* resp) override;
  grpc::Status WriteMemory(grpc::ServerContext* ctx, const v1::WriteMemoryRequest* req,
                           v1::WriteMemoryResponse* resp) override;
  grpc::Status GetMaps(grpc::ServerContext* ctx, const v1::GetMapsRequest* req,
                       v1::GetMapsResponse* resp) override;
  /// Answers each BatchRequest with one BatchResponse (same tag, one OpResult per op,
  /// in order) before reading the next. Checks ctx->IsCancelled() between messages and
  /// every few hundred ops, and the engine polls the call's deadline and cancellation
  /// inside long ops (which then end the stream DEADLINE_EXCEEDED or CANCELLED). Beyond
  /// max_streams open streams a new one ends at once RESOURCE_EXHAUSTED (EAGAIN). A message with more than max_batch ops ends the stream with
  /// INVALID_ARGUMENT (EINVAL); responses already sent stay valid. A message of
  /// PackedOps runs the same ops the same way and is answered with PackedResults; one
  /// whose words do not decode, or that also has `ops`, ends the stream INVALID_ARGUMENT.
  grpc::Status Batch(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::BatchResponse, v1::BatchRequest>* stream) override;
  grpc::Status Madvise(grpc::ServerContext* ctx, const v1::MadviseRequest* req,
                       v1::MadviseResponse* resp) override;
  grpc::Status Brk(grpc::ServerContext* ctx, const v1::BrkRequest* req, v1::BrkResponse* resp) override;
  grpc::Status Mremap(grpc::ServerContext* ctx, const v1::MremapRequest* req,
                      v1::MremapResponse* resp) override;
  /// Lock statistics summed over all profiles ("") or for one locking profile (a name
  /// or "custom"); an unknown profile is EINVAL. Reads the engine's per-thread stats.
  grpc::Status GetLockStats(grpc::ServerContext* ctx, const v1::GetLockStatsRequest* req,
                            v1::GetLockStatsResponse* resp) override;
  /// The lock timeline (engine/lock_trace.h) of the caller's spaces for req->seconds
  /// (rpc/trace_locks_call.cc).
  grpc::Status TraceLocks(grpc::ServerContext* ctx, const v1::TraceLocksRequest* req,
                          v1::TraceLocksResponse* resp) override;
  grpc::Status Ping(grpc::ServerContext* ctx, const v1::PingRequest* req,
                    v1::PingResponse* resp) override;
  /// The registry's shard, live spaces and limit, and the version.
  grpc::Status GetServerInfo(grpc::ServerContext* ctx, const v1::GetServerInfoRequest* req,
                             v1::GetServerInfoResponse* resp) override;

  // Files: the registry's FileTable (engine/file.h), errors as its syscalls'. File ids
  // carry the shard (SpaceRegistry::PublicFileId); one of another daemon is EBADF.
  // ReadFile/WriteFile move at most max_io_bytes (more is EINVAL), like ReadMemory.
  grpc::Status OpenFile(grpc::ServerContext* ctx, const v1::OpenFileRequest* req,
                        v1::OpenFileResponse* resp) override;
  grpc::Status CreateShmemFile(grpc::ServerContext* ctx, const v1::CreateShmemFileRequest* req,
                               v1::CreateShmemFileResponse* resp) override;
  grpc::Status CloseFile(grpc::ServerContext* ctx, const v1::CloseFileRequest* req,
                         v1::CloseFileResponse* resp) override;
  grpc::Status TruncateFile(grpc::ServerContext* ctx, const v1::TruncateFileRequest* req,
                            v1::TruncateFileResponse* resp) override;
  grpc::Status StatFile(grpc::ServerContext* ctx, const v1::StatFileRequest* req,
                        v1::StatFileResponse* resp) override;
  grpc::Status ListFiles(grpc::ServerContext* ctx, const v1::ListFilesRequest* req,
                         v1::ListFilesResponse* resp) override;
  grpc::Status ReadFile(grpc::ServerContext* ctx, const v1::ReadFileRequest* req,
                        v1::ReadFileResponse* resp) override;
  grpc::Status WriteFile(grpc::ServerContext* ctx, const v1::WriteFileRequest* req,
                         v1::WriteFileResponse* resp) override;
  grpc::Status FsyncFile(grpc::ServerContext* ctx, const v1::FsyncFileRequest* req,
                         v1::FsyncFileResponse* resp) override;
  /// mincore(2) on one space (DoMincore: the vector capped at max_io_bytes pages); also
  /// a Batch op.
  grpc::Status Mincore(grpc::ServerContext* ctx, const v1::MincoreRequest* req,
                       v1::MincoreResponse* resp) override;
  /// msync(2) on one space (AddressSpace::Msync); also a Batch op.
  grpc::Status Msync(grpc::ServerContext* ctx, const v1::MsyncRequest* req,
                     v1::MsyncResponse* resp) override;
  /// mlock2(2), munlock(2), mlockall(2), munlockall(2), mseal(2) on one space
  /// (AddressSpace::Mlock & co., engine mlock.cc / mseal.cc); also Batch ops.
  grpc::Status Mlock(grpc::ServerContext* ctx, const v1::MlockRequest* req,
                     v1::MlockResponse* resp) override;
  grpc::Status Munlock(grpc::ServerContext* ctx, const v1::MunlockRequest* req,
                       v1::MunlockResponse* resp) override;
  grpc::Status Mlockall(grpc::ServerContext* ctx, const v1::MlockallRequest* req,
                        v1::MlockallResponse* resp) override;
  grpc::Status Munlockall(grpc::ServerContext* ctx, const v1::MunlockallRequest* req,
                          v1::MunlockallResponse* resp) override;
  grpc::Status Mseal(grpc::ServerContext* ctx, const v1::MsealRequest* req,
                     v1::MsealResponse* resp) override;
  /// fcntl(F_ADD_SEALS) / fcntl(F_GET_SEALS) of a file (FileTable::AddSeals, GetSeals)
  /// and open("/proc/self/fd/N") with another access mode (FileTable::Reopen).
  grpc::Status AddFileSeals(grpc::ServerContext* ctx, const v1::AddFileSealsRequest* req,
                            v1::AddFileSealsResponse* resp) override;
  grpc::Status GetFileSeals(grpc::ServerContext* ctx, const v1::GetFileSealsRequest* req,
                            v1::GetFileSealsResponse* resp) override;
  grpc::Status ReopenFile(grpc::ServerContext* ctx, const v1::ReopenFileRequest* req,
                          v1::ReopenFileResponse* resp) override;

 private:
  // Authenticates the call, then runs fn(caller) (an OpStatus) recording RPC `m`'s metrics.
  template <typename Fn>
  grpc::Status Handle(metrics::RpcMethod m, grpc::ServerContext* ctx, Fn&& fn);
  // Handle() on space `id` of the caller: fn(space), else NOT_FOUND. `stoppable`: the
  // engine work stops when the call should (deadline, cancellation); `allocates`: the
  // tenant memory quota is checked first.
  template <typename Fn>
  grpc::Status OnSpace(metrics::RpcMethod m, grpc::ServerContext* ctx, uint64_t id,
                       bool stoppable, bool allocates, Fn&& fn);
  // Replaces the generated handler of every unary method by a BudgetedUnaryHandler
  // (call_buffers.h): requests refused before parsing beyond their method's largest
  // size or the memory budget, messages charged until the response is sent.
  void BudgetUnaryCalls();
  template <class Req, class Resp>
  void Budgeted(const char* method,
                grpc::Status (VmSpaceService::*fn)(grpc::ServerContext*, const Req*, Resp*),
                uint64_t max_request, const char* limit);
  int budgeted_methods_ = 0;  // Budgeted() calls: BudgetUnaryCalls checks it covers every unary method
  // RESOURCE_EXHAUSTED if the caller's tenant is at --tenant-max-memory-bytes.
  OpStatus CheckMemoryQuota(const Caller& c) const;
  // The cgroup the caller's calls charge file pages to (SpaceRegistry::TenantMemcg,
  // limited by --tenant-max-memory-bytes); null without authentication.
  std::shared_ptr<MemCgroup> TenantMemcg(const Caller& c) const;
  // The caller's space `id`, or null (unknown, or another tenant's).
  std::shared_ptr<Space> FindOwn(const Caller& c, uint64_t id) const;

  SpaceRegistry& registry_;
  const Authenticator* const auth_;
  const ServiceOptions opts_;
  std::atomic<uint64_t> streams_{0};  // Batch handlers running
  PeerCalls peer_calls_;
  PeerCalls tenant_streams_;  // Batch streams per tenant (--tenant-max-streams)
  PeerCalls tenant_calls_;    // space calls per tenant (--tenant-max-calls)
};

}  // namespace vmspace::rpc
