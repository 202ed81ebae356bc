#include "rpc/service.h"

#include <absl/strings/str_format.h>
#include <absl/strings/str_split.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arena_message.h"
#include "engine/cancel.h"
#include "engine/stats.h"
#include "engine/types.h"
#include "metrics/rpc_stats.h"
#include "rpc/errors.h"
#include "rpc/log.h"

namespace vmspace::rpc {

namespace {

using metrics::RpcMethod;
using metrics::RpcScope;

constexpr size_t kMaxLabelBytes = 64;
// Ops of a batch between two cancellation checks (CallScope::CancelPolled).
constexpr int kCancelCheckOps = 256;
// The fewest bytes one VMA adds to a GetMaps answer (its Vma message and maps line):
// an answer for more VMAs than max_message_bytes / this is refused before it is built.
constexpr uint64_t kMinGetMapsBytesPerVma = 96;

/// The buffers of one call or stream (request and response data the service holds),
/// charged to the memory budget as kBuffers while the call runs.
class Buffers {
 public:
  explicit Buffers(FrameAllocator& f) : frames_(f), charge_(&f.budget(), MemKind::kBuffers) {}
  /// Makes the charge `bytes` (`force`: even beyond the budget, for bytes already
  /// received that only free). If the budget refuses, waits for the frees already
  /// queued (FrameAllocator::Reclaim) and tries once more; then RESOURCE_EXHAUSTED
  /// (ENOMEM) naming `what`. Caller holds no engine lock.
  OpStatus Resize(std::string_view what, uint64_t bytes, bool force = false) {
    if (charge_.Resize(bytes, force)) return {};
    frames_.Reclaim();
    if (charge_.Resize(bytes)) return {};
    const MemoryBudget& b = frames_.budget();
    return ErrnoErrorDetail(ENOMEM, what,
                            "buffers of " + std::to_string(bytes - charge_.bytes()) +
                                " bytes exceed the memory budget (" + std::to_string(b.usage()) +
                                " of --max-memory-bytes=" + std::to_string(b.limit_bytes()) +
                                " in use); try again later");
  }
  uint64_t bytes() const { return charge_.bytes(); }

 private:
  FrameAllocator& frames_;
  ScopedCharge charge_;
};

// ---- the stop check of a call (engine/cancel.h) ----

/// Why the call should stop now: DEADLINE_EXCEEDED once its deadline has passed,
/// CANCELLED once the client (or the daemon, at the end of a shutdown grace period)
/// cancelled it, else OK.
grpc::StatusCode StopCode(grpc::ServerContext* ctx) {
  if (ctx == nullptr) return grpc::StatusCode::OK;
  if (std::chrono::system_clock::now() >= ctx->deadline()) return grpc::StatusCode::DEADLINE_EXCEEDED;
  if (ctx->IsCancelled()) return grpc::StatusCode::CANCELLED;
  return grpc::StatusCode::OK;
}

// How often a call's stop check asks gRPC whether the call was cancelled. With the
// sync API ServerContext::IsCancelled() plucks the call's completion queue (a pollset
// round with a futex syscall): polled on every Access op of a Batch stream it was ~5%
// of the daemon's time. The deadline is compared on every check (a clock read).
constexpr auto kCancelPollInterval = std::chrono::milliseconds(1);

/// For the lifetime of a handler: the engine calls of this thread stop when the call
/// should (CancelScope), and StopError() can tell why.
class CallScope {
 public:
  explicit CallScope(grpc::ServerContext* ctx)
      : prev_(tls_call_), ctx_(ctx),
        stop_([this] {
          return ctx_ != nullptr && (std::chrono::system_clock::now() >= ctx_->deadline() || CancelPolled());
        }),
        scope_(stop_) {
    tls_call_ = ctx;
  }
  ~CallScope() { tls_call_ = prev_; }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  /// The call the calling thread is handling (null outside a CallScope).
  static grpc::ServerContext* current() { return tls_call_; }

  /// Whether the call was cancelled, asking gRPC at most once per kCancelPollInterval
  /// (the first time at once); true from the first time it was. Handler thread only.
  bool CancelPolled() {
    if (cancelled_ || ctx_ == nullptr) return cancelled_;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_poll_) return false;
    next_poll_ = now + kCancelPollInterval;
    cancelled_ = ctx_->IsCancelled();
    return cancelled_;
  }

 private:
  grpc::ServerContext* const prev_;
  grpc::ServerContext* const ctx_;
  std::chrono::steady_clock::time_point next_poll_{};
  bool cancelled_ = false;
  const std::function<bool()> stop_;
  CancelScope scope_;
  inline static thread_local grpc::ServerContext* tls_call_ = nullptr;
};

/// The status of an engine walk that ended without doing its work and without a
/// signal: kOom is the frame limit; kInterrupted is the call's deadline or
/// cancellation, or ABORTED if the fault retry limit ended it (an access re-executed
/// kMaxFaultRetries times, each time undone by a racing zap). OK for other outcomes.
OpStatus StopError(const FaultResult& f, std::string_view what) {
  if (f.outcome == FaultOutcome::kOom) return FrameLimitError(what);
  if (f.outcome != FaultOutcome::kInterrupted) return {};
  OpStatus s;
  s.code = StopCode(CallScope::current());
  if (s.code == grpc::StatusCode::CANCELLED) return Cancelled();
  if (s.code == grpc::StatusCode::DEADLINE_EXCEEDED) {
    s.message = std::string(what) + ": deadline exceeded while the call ran";
    return s;
  }
  s.code = grpc::StatusCode::ABORTED;
  s.message = std::string(what) + ": an access was re-executed " + std::to_string(kMaxFaultRetries) +
              " times, each undone by a racing change of its page; try again";
  return s;
}

// ---- proto <-> engine conversions ----

bool ToAccessType(int v, AccessType* out) {
  switch (v) {
    case v1::ACCESS_READ: *out = AccessType::kRead; return true;
    case v1::ACCESS_WRITE: *out = AccessType::kWrite; return true;
    case v1::ACCESS_EXEC: *out = AccessType::kExec; return true;
    default: return false;
  }
}

v1::FaultOutcome ToProto(FaultOutcome o) {
  switch (o) {
    case FaultOutcome::kNone: return v1::FAULT_OUTCOME_NONE;
    case FaultOutcome::kMinor: return v1::FAULT_OUTCOME_MINOR;
    case FaultOutcome::kMajor: return v1::FAULT_OUTCOME_MAJOR;
    case FaultOutcome::kSigsegv: return v1::FAULT_OUTCOME_SIGSEGV;
    case FaultOutcome::kSigbus: return v1::FAULT_OUTCOME_SIGBUS;
    case FaultOutcome::kOom:  // never reported as a FaultInfo
    case FaultOutcome::kInterrupted: break;
  }
  return v1::FAULT_OUTCOME_NONE;
}

v1::SiCode ToProtoSiCode(const FaultResult& f) {
  if (f.outcome == FaultOutcome::kSigsegv) {
    if (f.sig_code == kSegvMaperr) return v1::SEGV_MAPERR;
    if (f.sig_code == kSegvAccerr) return v1::SEGV_ACCERR;
  } else if (f.outcome == FaultOutcome::kSigbus) {
    if (f.sig_code == kBusAdrerr) return v1::BUS_ADRERR;
  }
  return v1::SI_CODE_NONE;
}

v1::LockPath ToProto(LockPath p) {
  switch (p) {
    case LockPath::kNone: return v1::LOCK_PATH_NONE;
    case LockPath::kVmaLock: return v1::LOCK_PATH_VMA_LOCK;
    case LockPath::kMmapLock: return v1::LOCK_PATH_MMAP_LOCK;
  }
  return v1::LOCK_PATH_NONE;
}

void FillFault(const FaultResult& f, v1::FaultInfo* out) {
  out->set_outcome(ToProto(f.outcome));
  if (f.signal()) {
    out->set_si_code(ToProtoSiCode(f));
    out->set_si_addr(f.sig_addr);
  }
  out->set_lock_path(ToProto(f.path));
}

// ---- operations on one space (shared by the unary handlers and Batch) ----

OpStatus DoMmap(Space& sp, const v1::MmapRequest& r, v1::MmapResponse* out,
               SpaceRegistry& reg) {
  // As the kernel ignores fd with MAP_ANONYMOUS, file_id is ignored then; an unknown
  // file id reaches the engine as a null file, which answers EBADF in the kernel's order.
  const bool file = (r.flags() & MAP_ANONYMOUS) == 0 && r.file_id() != 0;
  const SysResult res =
      file ? sp.as.Mmap(r.addr(), r.len(), r.prot(), r.flags(), r.offset(),
                        reg.files().Get(reg.TableFileId(r.file_id(), sp.tenant)))
           : sp.as.Mmap(r.addr(), r.len(), r.prot(), r.flags(), r.offset());
  if (!res.ok()) return ErrnoError(res.error, "mmap");
  out->set_addr(res.value);
  return {};
}

OpStatus DoMunmap(Space& sp, const v1::MunmapRequest& r, v1::MunmapResponse*) {
  const SysResult res = sp.as.Munmap(r.addr(), r.len());
  if (!res.ok()) return ErrnoError(res.error, "munmap");
  return {};
}

OpStatus DoMprotect(Space& sp, const v1::MprotectRequest& r, v1::MprotectResponse*) {
  const SysResult res = sp.as.Mprotect(r.addr(), r.len(), r.prot());
  if (!res.ok()) return ErrnoError(res.error, "mprotect");
  return {};
}

OpStatus DoMadvise(Space& sp, const v1::MadviseRequest& r, v1::MadviseResponse*) {
  const SysResult res = sp.as.Madvise(r.addr(), r.len(), r.advice());
  if (!res.ok()) return ErrnoError(res.error, "madvise");
  return {};
}

OpStatus DoMsync(Space& sp, const v1::MsyncRequest& r, v1::MsyncResponse*) {
  const SysResult res = sp.as.Msync(r.addr(), r.len(), r.flags());
  if (!res.ok()) return ErrnoError(res.error, "msync");
  return {};
}

OpStatus DoFault(Space& sp, const v1::FaultRequest& r, v1::FaultResponse* out) {
  AccessType access;
  if (!ToAccessType(r.access(), &access))
    return ErrnoErrorDetail(EINVAL, "Fault", "unknown access type");
  const FaultResult f = sp.as.Fault(r.addr(), access);
  if (OpStatus e = StopError(f, "Fault"); !e.ok()) return e;
  FillFault(f, out->mutable_fault());
  return {};
}

OpStatus DoAccess(Space& sp, const v1::AccessRequest& r, v1::AccessResponse* out,
                  uint64_t max_touches) {
  AccessType access;
  if (!ToAccessType(r.access(), &access))
    return ErrnoErrorDetail(EINVAL, "Access", "unknown access type");
  const uint64_t stride = r.stride() == 0 ? 1 : r.stride();
  const uint64_t touches = r.len() == 0 ? 0 : (r.len() - 1) / stride + 1;
  if (touches > max_touches)
    return ErrnoErrorDetail(EINVAL, "Access",
                            std::to_string(touches) + " touches (len / stride) exceed --max-access-touches=" +
                                std::to_string(max_touches));
  // The engine polls the call's stop check (CallScope) once per page table.
  const AccessResult ar = sp.as.Access(r.addr(), r.len(), stride, access);
  if (OpStatus e = StopError(ar.stop, "Access"); !e.ok()) return e;
  out->set_faults(ar.faults);
  out->set_major_faults(ar.major_faults);
  out->set_accesses(ar.accesses);
  if (ar.stop.failed()) FillFault(ar.stop, out->mutable_stop());
  return {};
}

// `buf`: the call's (or the stream's) buffer charge, grown by the data read.
OpStatus DoRead(Space& sp, const v1::ReadMemoryRequest& r, v1::ReadMemoryResponse* out,
                uint64_t max_io, Buffers& buf) {
  if (r.len() > max_io)
    return ErrnoErrorDetail(EINVAL, "ReadMemory",
                            "len " + std::to_string(r.len()) + " exceeds --max-io-bytes=" +
                                std::to_string(max_io));
  if (OpStatus e = buf.Resize("ReadMemory", buf.bytes() + r.len()); !e.ok()) return e;
  std::string* data = out->mutable_data();
  data->resize(r.len());
  const CopyResult cr = sp.as.ReadMemory(r.addr(), data->data(), r.len());
  if (OpStatus e = StopError(cr.stop, "ReadMemory"); !e.ok()) {
    out->clear_data();
    return e;
  }
  data->resize(cr.bytes);
  out->set_faults(cr.faults);
  if (cr.stop.failed()) FillFault(cr.stop, out->mutable_stop());
  return {};
}

OpStatus DoWrite(Space& sp, const v1::WriteMemoryRequest& r, v1::WriteMemoryResponse* out,
                 uint64_t max_io) {
  if (r.data().size() > max_io)
    return ErrnoErrorDetail(EINVAL, "WriteMemory",
                            "data of " + std::to_string(r.data().size()) +
                                " bytes exceeds --max-io-bytes=" + std::to_string(max_io));
  const CopyResult cr = sp.as.WriteMemory(r.addr(), r.data().data(), r.data().size());
  if (OpStatus e = StopError(cr.stop, "WriteMemory"); !e.ok()) return e;
  out->set_bytes_written(cr.bytes);
  out->set_faults(cr.faults);
  if (cr.stop.failed()) FillFault(cr.stop, out->mutable_stop());
  return {};
}

OpStatus DoGetMaps(Space& sp, const v1::GetMapsRequest& r, v1::GetMapsResponse* out,
                   uint64_t max_message, Buffers& buf) {
  const bool whole = r.start() == 0 && r.end() == 0;
  const uint64_t end = r.end() == 0 ? ~0ull : r.end();
  if (r.start() > end) return ErrnoErrorDetail(EINVAL, "GetMaps", "start > end");
  // Counted before anything is built: the whole space from map_count, a range in the
  // index (a walk that stops one past the most an answer may hold).
  const uint64_t most = max_message / kMinGetMapsBytesPerVma;
  const uint64_t n = whole ? sp.as.Counters().map_count : sp.as.CountVmas(r.start(), end, most + 1);
  if (n > most)
    return ErrnoErrorDetail(ENOMEM, "GetMaps",
                            "the answer for " + std::string(whole ? "" : "more than ") +
                                std::to_string(whole ? n : most) +
                                " VMAs would exceed --max-message-bytes; ask for a smaller range");
  // The list and the answer: at least this much per VMA while the call runs.
  const uint64_t want = n * (sizeof(VmaInfo) + 2 * kMinGetMapsBytesPerVma);
  if (OpStatus e = buf.Resize("GetMaps", want); !e.ok()) return e;
  const std::vector<VmaInfo> vmas = sp.as.Maps(r.start(), end);
  std::string* text = out->mutable_maps_text();
  for (const VmaInfo& v : vmas) {
    const std::string line = AddressSpace::FormatMapsLine(v);
    // perms ("rw-p") and dev ("00:00") are fields 2 and 4 of the engine's maps line.
    const std::vector<std::string> field = absl::StrSplit(line, absl::MaxSplits(' ', 4));
    v1::Vma* o = out->add_vmas();
    o->set_start(v.start);
    o->set_end(v.end);
    o->set_perms(field[1]);
    o->set_vm_flags(v.flags);
    o->set_smaps_vmflags(AddressSpace::VmFlagsString(v.flags));
    o->set_pgoff(v.pgoff);
    o->set_offset(v.offset);
    o->set_dev(field[3]);
    o->set_inode(v.inode);
    o->set_name(v.name);
    o->set_rss_bytes(v.rss_pages * kPageSize);
    *text += line;
    *text += '\n';
  }
  // The whole list is one snapshot, so its length is the exact map_count.
  out->set_map_count(whole ? vmas.size() : sp.as.Counters().map_count);
  const size_t bytes = out->ByteSizeLong();
  if (bytes > max_message) {
    out->Clear();
    return ErrnoErrorDetail(ENOMEM, "GetMaps",
                            "response of " + std::to_string(bytes) +
                                " bytes exceeds --max-message-bytes; ask for a smaller range");
  }
  return {};
}

// Validates CreateSpace settings and converts them to engine options; an empty or
// "default" locking_profile takes `default_profile`. max_map_count defaults to (and
// may not exceed) `max_map_count_limit`.
OpStatus ToSpaceOptions(const v1::SpaceSettings& s, const LockingProfile& default_profile,
                        uint64_t max_map_count_limit, SpaceOptions* o) {
  o->max_map_count = std::min(o->max_map_count, max_map_count_limit);
  if (s.has_max_map_count()) {
    if (s.max_map_count() > max_map_count_limit)
      return ErrnoErrorDetail(EINVAL, "CreateSpace",
                              "max_map_count " + std::to_string(s.max_map_count()) +
                                  " exceeds --max-map-count-limit=" + std::to_string(max_map_count_limit));
    o->max_map_count = s.max_map_count();
  }
  if (s.has_mmap_base()) o->mmap_base = s.mmap_base();
  if (s.has_mmap_min_addr()) o->mmap_min_addr = s.mmap_min_addr();
  if (s.has_dac_mmap_min_addr()) o->dac_mmap_min_addr = s.dac_mmap_min_addr();
  if (s.has_cap_sys_rawio()) o->cap_sys_rawio = s.cap_sys_rawio();
  if (s.has_fault_around_bytes()) o->fault_around_bytes = s.fault_around_bytes();
  if (!ValidFaultAroundBytes(o->fault_around_bytes))
    return ErrnoErrorDetail(EINVAL, "CreateSpace",
                            "fault_around_bytes must be a power of two in [4096, 2097152]");
  if (!s.shared_fault_completion().empty() &&
      !ParseSharedFaultCompletion(s.shared_fault_completion(), &o->shared_fault_completion))
    return ErrnoErrorDetail(EINVAL, "CreateSpace", "shared_fault_completion must be retry or completed");
  if (!s.i_mmap_scope().empty() && !ParseIMmapScope(s.i_mmap_scope(), &o->i_mmap_scope))
    return ErrnoErrorDetail(EINVAL, "CreateSpace", "i_mmap_scope must be wide or narrow");
  if (!PageAligned(o->mmap_base) || o->mmap_base == 0 || o->mmap_base > kTaskSize)
    return ErrnoErrorDetail(EINVAL, "CreateSpace",
                            "mmap_base must be page aligned and in (0, 0x7ffffffff000]");
  if (o->mmap_min_addr >= o->mmap_base)
    return ErrnoErrorDetail(EINVAL, "CreateSpace", "mmap_min_addr must be below mmap_base");
  if (o->dac_mmap_min_addr > kTaskSize)
    return ErrnoErrorDetail(EINVAL, "CreateSpace", "dac_mmap_min_addr beyond TASK_SIZE");
  if (s.locking_profile().empty() || s.locking_profile() == "default") {
    o->profile = default_profile;
  } else {
    std::string err;
    if (!LockingProfile::Parse(s.locking_profile(), &o->profile, &err))
      return ErrnoErrorDetail(EINVAL, "CreateSpace", "locking_profile: " + err);
  }
  return {};
}

// One call's place in PeerCalls (--max-calls-per-peer) for its lifetime; without
// calls or ctx, an uncounted call. Leaves exactly what it entered (a host of any
// spelling, "" included).
class PeerSlot {
 public:
  PeerSlot(PeerCalls* calls, grpc::ServerContext* ctx, uint64_t max) : calls_(calls) {
    const bool counted = calls != nullptr && ctx != nullptr;
    entered_ = counted && calls->Enter(ctx->peer(), max, &host_);
    admitted_ = !counted || entered_;
    if (!admitted_)
      refusal_ = ErrnoErrorDetail(EAGAIN, "call", "--max-calls-per-peer=" + std::to_string(max) +
                                                      " calls from " + host_ + " are in flight; try again later");
  }
  ~PeerSlot() {
    if (entered_) calls_->Leave(host_);
  }
  PeerSlot(const PeerSlot&) = delete;
  PeerSlot& operator=(const PeerSlot&) = delete;
  bool admitted() const { return admitted_; }
  const OpStatus& refusal() const { return refusal_; }

 private:
  PeerCalls* const calls_;
  std::string host_;
  bool entered_ = false;  // counted in calls_ under host_
  bool admitted_ = false;
  OpStatus refusal_;
};

// One Batch stream in the count of open streams (--max-streams) for its lifetime:
// counted when constructed, uncounted when destroyed, whether admitted or not. Build
// it only for a stream that is to be counted (after authentication).
class StreamSlot {
 public:
  StreamSlot(std::atomic<uint64_t>& open, uint64_t max)
      : open_(open), admitted_(open.fetch_add(1, std::memory_order_relaxed) < max) {}
  ~StreamSlot() { open_.fetch_sub(1, std::memory_order_relaxed); }
  StreamSlot(const StreamSlot&) = delete;
  StreamSlot& operator=(const StreamSlot&) = delete;
  /// Whether fewer than `max` streams were open before this one.
  bool admitted() const { return admitted_; }

 private:
  std::atomic<uint64_t>& open_;
  const bool admitted_;
};

// A one-entry cache of the last space looked up, for the ops of one batch message:
// `find(id)` is the caller's own space or null.
template <typename Find>
class SpaceCache {
 public:
  explicit SpaceCache(Find find) : find_(std::move(find)) {}
  Space* Get(uint64_t id) {
    if (!sp_ || sp_->id != id) sp_ = find_(id);
    return sp_.get();
  }

 private:
  Find find_;
  std::shared_ptr<Space> sp_;
};

void FillOpError(const OpStatus& s, v1::OpResult* out) {
  out->set_code(static_cast<int>(s.code));
  out->set_errno_(s.err);
  if (s.err != 0) out->set_errno_name(ErrnoName(s.err));
  out->set_message(s.message);
}

uint64_t OpSpaceId(const v1::Op& op) {
  switch (op.op_case()) {
    case v1::Op::kMmap: return op.mmap().space_id();
    case v1::Op::kMunmap: return op.munmap().space_id();
    case v1::Op::kMprotect: return op.mprotect().space_id();
    case v1::Op::kFault: return op.fault().space_id();
    case v1::Op::kAccess: return op.access().space_id();
    case v1::Op::kRead: return op.read().space_id();
    case v1::Op::kWrite: return op.write().space_id();
    case v1::Op::kMadvise: return op.madvise().space_id();
    case v1::Op::kMsync: return op.msync().space_id();
    case v1::Op::OP_NOT_SET: break;
  }
  return 0;
}

// Sets the `addr` field of `op`'s request (every op kind has one).
void SetOpAddr(v1::Op& op, uint64_t addr) {
  switch (op.op_case()) {
    case v1::Op::kMmap: op.mutable_mmap()->set_addr(addr); break;
    case v1::Op::kMunmap: op.mutable_munmap()->set_addr(addr); break;
    case v1::Op::kMprotect: op.mutable_mprotect()->set_addr(addr); break;
    case v1::Op::kFault: op.mutable_fault()->set_addr(addr); break;
    case v1::Op::kAccess: op.mutable_access()->set_addr(addr); break;
    case v1::Op::kRead: op.mutable_read()->set_addr(addr); break;
    case v1::Op::kWrite: op.mutable_write()->set_addr(addr); break;
    case v1::Op::kMadvise: op.mutable_madvise()->set_addr(addr); break;
    case v1::Op::kMsync: op.mutable_msync()->set_addr(addr); break;
    case v1::Op::OP_NOT_SET: break;
  }
}

uint64_t OpAddr(const v1::Op& op) {
  switch (op.op_case()) {
    case v1::Op::kMmap: return op.mmap().addr();
    case v1::Op::kMunmap: return op.munmap().addr();
    case v1::Op::kMprotect: return op.mprotect().addr();
    case v1::Op::kFault: return op.fault().addr();
    case v1::Op::kAccess: return op.access().addr();
    case v1::Op::kRead: return op.read().addr();
    case v1::Op::kWrite: return op.write().addr();
    case v1::Op::kMadvise: return op.madvise().addr();
    case v1::Op::kMsync: return op.msync().addr();
    case v1::Op::OP_NOT_SET: break;
  }
  return 0;
}

/// The addresses the last v1::BATCH_REF_WINDOW ops of one Batch stream returned, for
/// Op.addr_of (proto). Ops are numbered from 0 over the whole stream. The ring grows
/// with the stream up to the window (8 bytes per op: 128 KiB), so a short stream costs
/// little. Used by the stream's handler thread only.
class StreamResults {
 public:
  static constexpr uint64_t kWindow = v1::BATCH_REF_WINDOW;

  /// For the next op: if `ref` (its addr_of) is not null, sets its addr to the named
  /// op's address plus its own addr. EINVAL if the reference is out of range (this op or
  /// a later one, or older than the window) or names an op that failed or returned no
  /// address.
  OpStatus ApplyAddrOf(const v1::OpRef* ref, v1::Op& op) const {
    if (ref == nullptr) return {};
    uint64_t addr = 0;
    OpStatus s = Resolve(*ref, &addr);
    if (s.ok()) SetOpAddr(op, addr + OpAddr(op));
    return s;
  }

  /// Records the next op's result: `addr` if it was a successful mmap, else none.
  void Record(std::optional<uint64_t> addr) {
    const uint64_t v = addr ? *addr | kHasAddr : 0;
    if (ring_.size() < kWindow) ring_.push_back(v);
    else ring_[next_ % kWindow] = v;
    ++next_;
  }

 private:
  // Addresses are page aligned: bit 0 marks a recorded address (0 may be one).
  static constexpr uint64_t kHasAddr = 1;

  OpStatus Resolve(const v1::OpRef& ref, uint64_t* addr) const {
    const uint64_t n = next_;
    uint64_t t = 0;
    switch (ref.ref_case()) {
      case v1::OpRef::kBack:
        if (ref.back() == 0 || ref.back() > n)
          return Refused(n, "back " + std::to_string(ref.back()) + " is not in [1, " + std::to_string(n) +
                                "] (the ops before it in the stream)");
        t = n - ref.back();
        break;
      case v1::OpRef::kIndex:
        if (ref.index() >= n)
          return Refused(n, "index " + std::to_string(ref.index()) +
                                " names this op or a later one (each stream numbers its own ops from 0)");
        t = ref.index();
        break;
      case v1::OpRef::REF_NOT_SET: return Refused(n, "neither back nor index is set");
    }
    if (n - t > kWindow)
      return Refused(n, "op " + std::to_string(t) + " is older than the last " + std::to_string(kWindow) +
                            " ops (BATCH_REF_WINDOW)");
    const uint64_t v = ring_[t % kWindow];
    if ((v & kHasAddr) == 0)
      return Refused(n, "op " + std::to_string(t) + " failed or returned no address (only a successful mmap does)");
    *addr = v & ~kHasAddr;
    return {};
  }
  static OpStatus Refused(uint64_t n, const std::string& why) {
    return ErrnoErrorDetail(EINVAL, "Batch", "addr_of of op " + std::to_string(n) + " of the stream: " + why);
  }
  std::vector<uint64_t> ring_;
  uint64_t next_ = 0;
};

// Whether an op of kind `c` may fault pages in (the ops the tenant memory quota is
// checked for, as their unary calls): all but munmap, mprotect and msync, which only
// free or keep.
bool MayFaultIn(v1::Op::OpCase c) {
  switch (c) {
    case v1::Op::kMunmap:
    case v1::Op::kMprotect:
    case v1::Op::kMsync:
    case v1::Op::OP_NOT_SET: return false;
    default: return true;
  }
}

/// The ops of a PackedOps message (vmspace.proto, PackedOpKind), decoded one at a time
/// into an Op message of their kind that is kept from op to op (one per kind, its
/// request allocated once), so a packed op costs a few scalar stores. Handler thread
/// only.
class PackedOpDecoder {
 public:
  /// Checks the words of `p` (known kinds and flags, every op complete) and counts its
  /// ops; `may_fault_in`: any of them may fault pages in (MayFaultIn). False if the
  /// words do not decode.
  static bool Check(const v1::PackedOps& p, uint64_t* ops, bool* may_fault_in) {
    *ops = 0;
    *may_fault_in = false;
    const int n = p.words_size();
    for (int pos = 0; pos < n; ++*ops) {
      const Kind* k = KindOf(p.words(pos));
      if (k == nullptr) return false;
      pos += 1 + k->fields + (HasRef(p.words(pos)) ? 1 : 0);
      if (pos > n) return false;
      *may_fault_in = *may_fault_in || MayFaultIn(k->op);
    }
    return true;
  }

  /// The op at p.words(*pos) of a checked message (Check), its space p.space_id();
  /// moves *pos past it. `*ref` is its addr_of, or null. Both stay valid until the next
  /// call.
  v1::Op& Next(const v1::PackedOps& p, int* pos, const v1::OpRef** ref) {
    const uint64_t kind_word = p.words((*pos)++);
    const auto w = [&] { return p.words((*pos)++); };
    const auto i32 = [&] { return static_cast<int32_t>(w()); };
    const uint64_t id = p.space_id();
    v1::Op& op = op_[kind_word & kKindMask];
    switch (KindOf(kind_word)->op) {
      case v1::Op::kMmap: {
        v1::MmapRequest& r = *op.mutable_mmap();
        r.set_space_id(id);
        r.set_addr(w());
        r.set_len(w());
        r.set_prot(i32());
        r.set_flags(i32());
        r.set_offset(w());
        r.set_file_id(w());
        break;
      }
      case v1::Op::kMunmap: {
        v1::MunmapRequest& r = *op.mutable_munmap();
        r.set_space_id(id);
        r.set_addr(w());
        r.set_len(w());
        break;
      }
      case v1::Op::kMprotect: {
        v1::MprotectRequest& r = *op.mutable_mprotect();
        r.set_space_id(id);
        r.set_addr(w());
        r.set_len(w());
        r.set_prot(i32());
        break;
      }
      case v1::Op::kFault: {
        v1::FaultRequest& r = *op.mutable_fault();
        r.set_space_id(id);
        r.set_addr(w());
        r.set_access(static_cast<v1::AccessType>(i32()));
        break;
      }
      case v1::Op::kAccess: {
        v1::AccessRequest& r = *op.mutable_access();
        r.set_space_id(id);
        r.set_addr(w());
        r.set_len(w());
        r.set_stride(w());
        r.set_access(static_cast<v1::AccessType>(i32()));
        break;
      }
      case v1::Op::kMadvise: {
        v1::MadviseRequest& r = *op.mutable_madvise();
        r.set_space_id(id);
        r.set_addr(w());
        r.set_len(w());
        r.set_advice(i32());
        break;
      }
      case v1::Op::kMsync: {
        v1::MsyncRequest& r = *op.mutable_msync();
        r.set_space_id(id);
        r.set_addr(w());
        r.set_len(w());
        r.set_flags(i32());
        break;
      }
      default: break;  // not in the kind table
    }
    *ref = nullptr;
    if (kind_word & v1::PACKED_ADDR_OF_BACK) {
      ref_.set_back(w());
      *ref = &ref_;
    } else if (kind_word & v1::PACKED_ADDR_OF_INDEX) {
      ref_.set_index(w());
      *ref = &ref_;
    }
    return op;
  }

 private:
  struct Kind {
    v1::Op::OpCase op;
    int fields;  // words after the kind word (without addr_of)
  };
  static constexpr uint64_t kKindMask = 0xff;
  static constexpr uint64_t kRefFlags = v1::PACKED_ADDR_OF_BACK | v1::PACKED_ADDR_OF_INDEX;
  // Indexed by PackedOpKind: the fields of each kind's request, space_id left out.
  static constexpr Kind kKinds[] = {
      {v1::Op::OP_NOT_SET, 0}, {v1::Op::kMmap, 6},    {v1::Op::kMunmap, 2},  {v1::Op::kMprotect, 3},
      {v1::Op::kFault, 2},     {v1::Op::kAccess, 4},  {v1::Op::kMadvise, 3}, {v1::Op::kMsync, 3},
  };
  static constexpr size_t kNumKinds = sizeof(kKinds) / sizeof(kKinds[0]);

  static bool HasRef(uint64_t kind_word) { return (kind_word & kRefFlags) != 0; }
  /// The kind of a kind word; null for an unknown kind or flag, or both ref flags.
  static const Kind* KindOf(uint64_t kind_word) {
    const uint64_t k = kind_word & kKindMask;
    if (k == 0 || k >= kNumKinds || (kind_word & ~(kKindMask | kRefFlags)) != 0 ||
        (kind_word & kRefFlags) == kRefFlags)
      return nullptr;
    return &kKinds[k];
  }

  v1::Op op_[kNumKinds];
  v1::OpRef ref_;
};

// ---- files (the registry's FileTable; ids as clients see them, see TableFileId) ----

// The error of open(2) of `path`, with the reason spelt out where the errno alone
// would puzzle (no --data-dir, a path that leaves it).
OpStatus OpenError(int err, const std::string& path, const std::string& data_dir) {
  if (err == EACCES && data_dir.empty())
    return ErrnoErrorDetail(err, "open",
                            "vmspaced runs without --data-dir: host files are off "
                            "(CreateShmemFile still works)");
  if (err == EACCES)
    return ErrnoErrorDetail(err, "open", "'" + path + "' leads out of --data-dir or is not accessible");
  if (err == EINVAL) {
    bool dotdot = false;
    for (absl::string_view part : absl::StrSplit(path, '/')) dotdot = dotdot || part == "..";
    if (path.empty() || path[0] == '/' || dotdot)
      return ErrnoErrorDetail(err, "open",
                              "'" + path + "': want a relative path under --data-dir without '..'");
  }
  return ErrnoError(err, "open");
}

void FillFileInfo(const FileStat& st, uint64_t public_id, bool writable, v1::FileInfo* out) {
  out->set_file_id(public_id);
  out->set_path(st.path);
  out->set_shmem(st.shmem);
  out->set_size(st.size_bytes);
  out->set_inode(st.inode);
  out->set_dev(absl::StrFormat("%02x:%02x", st.dev_major, st.dev_minor));
  out->set_cached_pages(st.cached_pages);
  out->set_dirty_pages(st.dirty_pages);
  out->set_mapped_vmas(st.mapped_vmas);
  out->set_open_handles(st.open_handles);
  out->set_writable(writable);
}

OpStatus IoTooLarge(const char* what, uint64_t n, uint64_t max_io) {
  return ErrnoErrorDetail(EINVAL, what,
                          std::to_string(n) + " bytes exceed --max-io-bytes=" + std::to_string(max_io));
}

/// The answer to a request message that did not parse (unary: gRPC's INTERNAL with an
/// empty message, rewritten by ParseErrorInterceptor; Batch: a message of the stream).
grpc::Status ParseError(std::string_view method) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      "the request message of " + std::string(method) +
                          " could not be parsed (not a valid protobuf encoding of its type; "
                          "strings must be UTF-8)");
}

class ParseErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit ParseErrorInterceptor(const char* method) : method_(method ? method : "?") {}
  // method_ lives as long as the call (ServerRpcInfo::method()).
  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status st = m->GetSendStatus();
      // No handler answers INTERNAL with an empty message: that is gRPC's own answer
      // to a request it could not deserialize.
      if (st.error_code() == grpc::StatusCode::INTERNAL && st.error_message().empty())
        m->ModifySendStatus(ParseError(method_));
    }
    m->Proceed();
  }

 private:
  const char* const method_;
};

class ParseErrorInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new ParseErrorInterceptor(info->method());
  }
};

}  // namespace

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> ServiceInterceptors() {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> v;
  v.push_back(std::make_unique<ParseErrorInterceptorFactory>());
  return v;
}

bool PeerCalls::Enter(const std::string& peer, uint64_t max, std::string* host) {
  const size_t colon = peer.rfind(':');  // "ipv4:1.2.3.4:port", "ipv6:[::1]:port"
  *host = colon == std::string::npos || colon < peer.find(':') + 1 ? peer : peer.substr(0, colon);
  Shard& sh = ShardOf(*host);
  std::lock_guard<std::mutex> l(sh.mu);
  uint64_t& n = sh.n[*host];
  if (n >= max) {
    if (n == 0) sh.n.erase(*host);
    return false;
  }
  n++;
  return true;
}

void PeerCalls::Leave(const std::string& host) {
  Shard& sh = ShardOf(host);
  std::lock_guard<std::mutex> l(sh.mu);
  auto it = sh.n.find(host);
  if (it != sh.n.end() && --it->second == 0) sh.n.erase(it);
}

PeerCalls::Shard& PeerCalls::ShardOf(const std::string& host) {
  return shards_[std::hash<std::string>()(host) % shards_.size()];
}

VmSpaceService::VmSpaceService(SpaceRegistry& registry, const ServiceOptions& options,
                               const Authenticator* auth)
    : registry_(registry), auth_(auth), opts_(options) {}

template <typename Fn>
grpc::Status VmSpaceService::Handle(RpcMethod m, grpc::ServerContext* ctx, Fn&& fn) {
  RpcScope scope(m);
  Caller caller{"", true};
  OpStatus s;
  if (auth_ != nullptr) s = auth_->Authenticate(*ctx, &caller);
  if (s.ok()) s = fn(caller);
  scope.Finish(static_cast<int>(s.code));
  return ToGrpcStatus(s);
}

template <typename Fn>
grpc::Status VmSpaceService::OnSpace(RpcMethod m, grpc::ServerContext* ctx, uint64_t id,
                                     bool stoppable, bool allocates, Fn&& fn) {
  return Handle(m, ctx, [&](const Caller& c) -> OpStatus {
    PeerSlot peer(&peer_calls_, ctx, opts_.max_calls_per_peer);
    if (!peer.admitted()) return peer.refusal();
    if (allocates)
      if (OpStatus q = CheckMemoryQuota(c); !q.ok()) return q;
    std::shared_ptr<Space> sp = FindOwn(c, id);
    if (!sp) return SpaceNotFound(id);
    CallScope call(stoppable ? ctx : nullptr);
    return fn(*sp);
  });
}

std::shared_ptr<Space> VmSpaceService::FindOwn(const Caller& c, uint64_t id) const {
  std::shared_ptr<Space> sp = registry_.Find(id);
  return sp && sp->tenant == c.tenant ? sp : nullptr;
}

OpStatus VmSpaceService::CheckMemoryQuota(const Caller& c) const {
  if (opts_.tenant_max_memory_bytes == 0) return {};
  const TenantUsage u = registry_.Usage(c.tenant);
  if (u.memory_bytes < opts_.tenant_max_memory_bytes) return {};
  return ErrnoErrorDetail(ENOMEM, "tenant quota",
                          "tenant '" + c.tenant + "' uses " + std::to_string(u.memory_bytes) +
                              " bytes, --tenant-max-memory-bytes=" +
                              std::to_string(opts_.tenant_max_memory_bytes));
}

grpc::Status VmSpaceService::CreateSpace(grpc::ServerContext* ctx,
                                         const v1::CreateSpaceRequest* req,
                                         v1::CreateSpaceResponse* resp) {
  return Handle(RpcMethod::kCreateSpace, ctx, [&](const Caller& c) -> OpStatus {
    SpaceOptions opts;
    opts.fault_around_bytes = opts_.fault_around_bytes;
    if (req->label().size() > kMaxLabelBytes)
      return ErrnoErrorDetail(EINVAL, "CreateSpace", "label longer than 64 bytes");
    if (OpStatus s = ToSpaceOptions(req->settings(), opts_.default_profile,
                                    opts_.max_map_count_limit, &opts);
        !s.ok())
      return s;
    // Every valid switch combination is a named profile; Describe() covers "custom".
    const std::string profile =
        opts.profile.name == "custom" ? opts.profile.Describe() : opts.profile.name;
    bool tenant_full = false;
    const uint64_t id =
        registry_.Create(opts, c.tenant, req->label(), profile, opts_.tenant_max_spaces, &tenant_full);
    if (tenant_full)
      return ErrnoErrorDetail(ENOMEM, "CreateSpace",
                              "tenant '" + c.tenant + "' owns --tenant-max-spaces=" +
                                  std::to_string(opts_.tenant_max_spaces) + " spaces");
    if (id == 0)
      return ErrnoErrorDetail(ENOMEM, "CreateSpace",
                              "space limit reached (--max-spaces=" +
                                  std::to_string(registry_.max_spaces()) + ")");
    resp->set_space_id(id);
    Logf(LogLevel::kDebug, "tenant '%s' created space %llu \"%s\"", c.tenant.c_str(),
         static_cast<unsigned long long>(id), req->label().c_str());
    return {};
  });
}

grpc::Status VmSpaceService::DestroySpace(grpc::ServerContext* ctx,
                                          const v1::DestroySpaceRequest* req,
                                          v1::DestroySpaceResponse*) {
  return Handle(RpcMethod::kDestroySpace, ctx, [&](const Caller& c) -> OpStatus {
    // Only the owner or an admin; another tenant's space answers as an unknown one.
    const std::shared_ptr<Space> sp = c.admin ? registry_.Find(req->space_id())
                                              : FindOwn(c, req->space_id());
    if (!sp || !registry_.Destroy(req->space_id())) return SpaceNotFound(req->space_id());
    Logf(LogLevel::kDebug, "tenant '%s' destroyed space %llu", c.tenant.c_str(),
         static_cast<unsigned long long>(req->space_id()));
    return {};
  });
}

grpc::Status VmSpaceService::ListSpaces(grpc::ServerContext* ctx, const v1::ListSpacesRequest*,
                                        v1::ListSpacesResponse* resp) {
  return Handle(RpcMethod::kListSpaces, ctx, [&](const Caller& caller) -> OpStatus {
    for (const std::shared_ptr<Space>& sp : registry_.List()) {
      if (!caller.admin && sp->tenant != caller.tenant) continue;
      const SpaceCounters c = sp->as.Counters();
      v1::SpaceInfo* info = resp->add_spaces();
      info->set_space_id(sp->id);
      info->set_label(sp->label);
      info->set_map_count(c.map_count);
      info->set_total_vm_bytes(c.total_vm_pages * kPageSize);
      info->set_rss_bytes(c.rss_pages * kPageSize);
      info->set_pgtable_bytes(c.pgtable_bytes);
      info->set_locking_profile(sp->locking_profile);
    }
    if (resp->ByteSizeLong() > opts_.max_message_bytes) {
      resp->Clear();
      return ErrnoErrorDetail(ENOMEM, "ListSpaces", "response exceeds --max-message-bytes");
    }
    return {};
  });
}

grpc::Status VmSpaceService::Mmap(grpc::ServerContext* ctx, const v1::MmapRequest* req,
                                  v1::MmapResponse* resp) {
  return OnSpace(RpcMethod::kMmap, ctx, req->space_id(), true, true,
                 [&](Space& sp) { return DoMmap(sp, *req, resp, registry_); });
}

grpc::Status VmSpaceService::Munmap(grpc::ServerContext* ctx, const v1::MunmapRequest* req,
                                    v1::MunmapResponse* resp) {
  return OnSpace(RpcMethod::kMunmap, ctx, req->space_id(), false, false,
                 [&](Space& sp) { return DoMunmap(sp, *req, resp); });
}

grpc::Status VmSpaceService::Mprotect(grpc::ServerContext* ctx, const v1::MprotectRequest* req,
                                      v1::MprotectResponse* resp) {
  return OnSpace(RpcMethod::kMprotect, ctx, req->space_id(), false, false,
                 [&](Space& sp) { return DoMprotect(sp, *req, resp); });
}

grpc::Status VmSpaceService::Fault(grpc::ServerContext* ctx, const v1::FaultRequest* req,
                                   v1::FaultResponse* resp) {
  return OnSpace(RpcMethod::kFault, ctx, req->space_id(), true, true,
                 [&](Space& sp) { return DoFault(sp, *req, resp); });
}

grpc::Status VmSpaceService::Access(grpc::ServerContext* ctx, const v1::AccessRequest* req,
                                    v1::AccessResponse* resp) {
  return OnSpace(RpcMethod::kAccess, ctx, req->space_id(), true, true, [&](Space& sp) {
    return DoAccess(sp, *req, resp, opts_.max_access_touches);
  });
}

grpc::Status VmSpaceService::ReadMemory(grpc::ServerContext* ctx, const v1::ReadMemoryRequest* req,
                                        v1::ReadMemoryResponse* resp) {
  Buffers buf(registry_.frames());  // the data, while the call runs
  return OnSpace(RpcMethod::kReadMemory, ctx, req->space_id(), true, true, [&](Space& sp) {
    return DoRead(sp, *req, resp, opts_.max_io_bytes, buf);
  });
}

grpc::Status VmSpaceService::WriteMemory(grpc::ServerContext* ctx,
                                         const v1::WriteMemoryRequest* req,
                                         v1::WriteMemoryResponse* resp) {
  Buffers buf(registry_.frames());  // the request's data
  return OnSpace(RpcMethod::kWriteMemory, ctx, req->space_id(), true, true, [&](Space& sp) {
    if (OpStatus e = buf.Resize("WriteMemory", req->data().size()); !e.ok()) return e;
    return DoWrite(sp, *req, resp, opts_.max_io_bytes);
  });
}

grpc::Status VmSpaceService::GetMaps(grpc::ServerContext* ctx, const v1::GetMapsRequest* req,
                                     v1::GetMapsResponse* resp) {
  Buffers buf(registry_.frames());  // the list and the answer
  return OnSpace(RpcMethod::kGetMaps, ctx, req->space_id(), false, false, [&](Space& sp) {
    return DoGetMaps(sp, *req, resp, opts_.max_message_bytes, buf);
  });
}

grpc::Status VmSpaceService::Batch(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::BatchResponse, v1::BatchRequest>* stream) {
  RpcScope scope(RpcMethod::kBatch);
  auto finish = [&](const OpStatus& s) {
    scope.Finish(static_cast<int>(s.code));
    return ToGrpcStatus(s);
  };
  Caller caller{"", true};
  if (auth_ != nullptr)
    if (OpStatus a = auth_->Authenticate(*ctx, &caller); !a.ok()) return finish(a);
  // --max-streams: refused before it takes a thread for longer than this check.
  const StreamSlot slot(streams_, opts_.max_streams);
  if (!slot.admitted())
    return finish(ErrnoErrorDetail(EAGAIN, "Batch",
                                   "--max-streams=" + std::to_string(opts_.max_streams) +
                                       " Batch streams are open; try again later"));
  PeerSlot peer(&peer_calls_, ctx, opts_.max_calls_per_peer);
  if (!peer.admitted()) return finish(peer.refusal());
  CallScope call(ctx);
  // Each message's request and response on an arena (32 KiB kept per side).
  proto::ArenaMessage<v1::BatchRequest> req_arena;
  proto::ArenaMessage<v1::BatchResponse> resp_arena;
  StreamResults results;  // for Op.addr_of
  PackedOpDecoder packed_ops;  // for BatchRequest.packed
  // Response bytes beyond the ops' own results: tag, framing, slack.
  constexpr uint64_t kSlack = 1024;
  // The stream's buffers (the message read and the answer built) are charged to the
  // memory budget while each message is handled; a message the budget cannot hold
  // ends the stream RESOURCE_EXHAUSTED, a read op it cannot hold fails alone.
  Buffers buf(registry_.frames());
  constexpr uint64_t kSmallResultBytes = 64;
  // The sync API's Read is false both at the end of the stream and for a message that
  // does not parse. They differ in `req`: at the end gRPC leaves it untouched, while a
  // parse (protobuf's ParseFromZeroCopyStream) clears it first. So each Read starts
  // from a marked message, and a false Read that changed it was a bad message.
  constexpr uint64_t kUnread = ~0ull;
  for (;; req_arena.Next(), resp_arena.Next()) {
    v1::BatchRequest& req = req_arena.get();
    v1::BatchResponse& resp = resp_arena.get();
    req.set_tag(kUnread);
    if (!stream->Read(&req)) break;
    metrics::CountMsgReceived(RpcMethod::kBatch);
    if (call.CancelPolled()) return finish(Cancelled());
    const bool packed = req.has_packed();
    uint64_t n = static_cast<uint64_t>(req.ops_size());
    bool may_fault_in = std::any_of(req.ops().begin(), req.ops().end(),
                                    [](const v1::Op& op) { return MayFaultIn(op.op_case()); });
    if (packed && (n != 0 || !PackedOpDecoder::Check(req.packed(), &n, &may_fault_in)))
      return finish(ErrnoErrorDetail(EINVAL, "Batch",
                                     n != 0 ? "a message has either ops or packed, not both"
                                            : "the words of packed do not decode (PackedOpKind)"));
    if (n > opts_.max_batch)
      return finish(ErrnoErrorDetail(EINVAL, "Batch",
                                     std::to_string(n) + " ops in one message exceed --max-batch=" +
                                         std::to_string(opts_.max_batch)));
    resp.Clear();
    resp.set_tag(req.tag());
    // Over the quota or the budget a message of only munmap/mprotect/msync still runs
    // (it can free; its bytes, already received, are charged beyond the budget).
    if (may_fault_in)
      if (OpStatus q = CheckMemoryQuota(caller); !q.ok()) return finish(q);
    const uint64_t req_bytes = req.ByteSizeLong() + kSlack;
    if (OpStatus e = buf.Resize("Batch", req_bytes, /*force=*/!may_fault_in); !e.ok()) return finish(e);
    SpaceCache cache([&](uint64_t id) { return FindOwn(caller, id); });
    uint64_t resp_bytes = kSlack;
    auto stops = [](const OpStatus& s) {
      return s.code == grpc::StatusCode::CANCELLED || s.code == grpc::StatusCode::DEADLINE_EXCEEDED;
    };
    // Runs op `i` of the message (`ref`: its addr_of, or null) into `res` and records
    // its address for later addr_of; CANCELLED and DEADLINE_EXCEEDED end the stream.
    auto run = [&](int i, v1::Op& op, const v1::OpRef* ref, v1::OpResult* res) -> OpStatus {
      OpStatus s;
      Space* sp = nullptr;
      if (op.op_case() == v1::Op::OP_NOT_SET) {
        s = ErrnoErrorDetail(EINVAL, "Batch", "op " + std::to_string(i) + " is empty");
      } else if ((sp = cache.Get(OpSpaceId(op))) == nullptr) {
        s = SpaceNotFound(OpSpaceId(op));
      } else {
        s = results.ApplyAddrOf(ref, op);
      }
      if (sp != nullptr && s.ok()) {
        switch (op.op_case()) {
          case v1::Op::kMmap:
            s = DoMmap(*sp, op.mmap(), res->mutable_mmap(), registry_);
            break;
          case v1::Op::kMunmap: s = DoMunmap(*sp, op.munmap(), res->mutable_munmap()); break;
          case v1::Op::kMprotect:
            s = DoMprotect(*sp, op.mprotect(), res->mutable_mprotect());
            break;
          case v1::Op::kFault: s = DoFault(*sp, op.fault(), res->mutable_fault()); break;
          case v1::Op::kAccess:
            s = DoAccess(*sp, op.access(), res->mutable_access(), opts_.max_access_touches);
            break;
          case v1::Op::kRead:
            if (op.read().len() <= opts_.max_io_bytes &&
                resp_bytes + op.read().len() > opts_.max_message_bytes) {
              s = ErrnoErrorDetail(EINVAL, "ReadMemory",
                                   "the reads of this batch message would exceed "
                                   "--max-message-bytes");
            } else {
              s = DoRead(*sp, op.read(), res->mutable_read(), opts_.max_io_bytes, buf);
            }
            break;
          case v1::Op::kWrite:
            s = DoWrite(*sp, op.write(), res->mutable_write(), opts_.max_io_bytes);
            break;
          case v1::Op::kMadvise:
            s = DoMadvise(*sp, op.madvise(), res->mutable_madvise());
            break;
          case v1::Op::kMsync: s = DoMsync(*sp, op.msync(), res->mutable_msync()); break;
          case v1::Op::OP_NOT_SET: break;
        }
      }
      if (stops(s)) return s;
      if (!s.ok()) {
        res->clear_result();
        FillOpError(s, res);
      }
      results.Record(s.ok() && res->has_mmap() ? std::optional<uint64_t>(res->mmap().addr()) : std::nullopt);
      return s;
    };
    if (!packed) {
      for (int i = 0; i < req.ops_size(); i++) {
        if (i != 0 && i % kCancelCheckOps == 0 && call.CancelPolled()) return finish(Cancelled());
        v1::Op& op = *req.mutable_ops(i);
        v1::OpResult* res = resp.add_results();
        const OpStatus s = run(i, op, op.has_addr_of() ? &op.addr_of() : nullptr, res);
        if (stops(s)) return finish(s);
        // Only reads and errors can be large; any other successful result is at most
        // kSmallResultBytes (an AccessResponse with its FaultInfo: 56), which saves
        // sizing each op twice (here and when the response is serialized).
        resp_bytes += (s.ok() && !res->has_read() ? kSmallResultBytes : res->ByteSizeLong()) + 8;
      }
    } else {
      // Each op's result is built in full (at the end of out.full) and kept there only
      // if it says more than its value (PackedResults); no reads, so no resp_bytes.
      v1::PackedResults& out = *resp.mutable_packed();
      out.mutable_values()->Reserve(static_cast<int>(n));
      int pos = 0;
      for (int i = 0; i < static_cast<int>(n); i++) {
        if (i != 0 && i % kCancelCheckOps == 0 && call.CancelPolled()) return finish(Cancelled());
        const v1::OpRef* ref = nullptr;
        v1::Op& op = packed_ops.Next(req.packed(), &pos, &ref);
        v1::OpResult* res = out.add_full();
        const OpStatus s = run(i, op, ref, res);
        if (stops(s)) return finish(s);
        out.add_values(s.ok() && res->has_mmap() ? res->mmap().addr() : 0);
        if (s.ok() && res->has_access()) {
          const v1::AccessResponse& a = res->access();
          out.set_access_faults(out.access_faults() + a.faults());
          out.set_access_major_faults(out.access_major_faults() + a.major_faults());
          out.set_accesses(out.accesses() + a.accesses());
        }
        if (!s.ok() || res->has_fault() || (res->has_access() && res->access().has_stop()))
          out.add_full_index(static_cast<uint32_t>(i));
        else
          out.mutable_full()->RemoveLast();
      }
    }
    if (!stream->Write(resp)) return finish(Cancelled());
    metrics::CountMsgSent(RpcMethod::kBatch);
  }
  // The loop ended on a false Read, before Next(): get() is the message it read into.
  if (const v1::BatchRequest& last = req_arena.get(); last.tag() != kUnread || last.ops_size() != 0) {
    scope.Finish(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
    return ParseError("/vmspace.v1.VmSpace/Batch");
  }
  return finish(OpStatus{});
}

grpc::Status VmSpaceService::Madvise(grpc::ServerContext* ctx, const v1::MadviseRequest* req,
                                     v1::MadviseResponse* resp) {
  return OnSpace(RpcMethod::kMadvise, ctx, req->space_id(), false, true,
                 [&](Space& sp) { return DoMadvise(sp, *req, resp); });
}

grpc::Status VmSpaceService::GetLockStats(grpc::ServerContext* ctx,
                                          const v1::GetLockStatsRequest* req,
                                          v1::GetLockStatsResponse* resp) {
  return Handle(RpcMethod::kGetLockStats, ctx, [&](const Caller&) -> OpStatus {
    OpStatus s;
    int slot = -1;
    const std::string& name = req->locking_profile();
    if (name == "custom") {
      LockingProfile custom;
      custom.name = "custom";
      slot = custom.stats_slot();
    } else if (!name.empty()) {
      LockingProfile p;
      std::string err;
      if (LockingProfile::Parse(name, &p, &err))
        slot = p.stats_slot();
      else
        s = ErrnoErrorDetail(EINVAL, "GetLockStats", "locking_profile: " + err);
    }
    if (s.ok()) {
      const StatsSnapshot snap = ReadStats(slot);
      for (size_t c = 0; c < static_cast<size_t>(LockClass::kCount); c++) {
        for (size_t m = 0; m < static_cast<size_t>(LockMode::kCount); m++) {
          const auto cls = static_cast<LockClass>(c);
          const auto mode = static_cast<LockMode>(m);
          if (mode == LockMode::kRead && !LockClassShared(cls)) continue;  // never taken for read
          const LockStatCell& cell = snap.lock(cls, mode);
          v1::LockStat* l = resp->add_locks();
          l->set_lock(LockClassName(cls));
          l->set_mode(LockModeName(mode));
          l->set_acquisitions(cell.acquisitions);
          l->set_contentions(cell.contentions);
          l->set_wait_seconds_total(static_cast<double>(cell.wait_ns_total) * 1e-9);
          l->set_wait_seconds_max(static_cast<double>(cell.wait_ns_max) * 1e-9);
          l->set_hold_seconds_total(static_cast<double>(cell.hold_ns_total) * 1e-9);
          l->set_hold_seconds_max(static_cast<double>(cell.hold_ns_max) * 1e-9);
          l->mutable_wait_buckets()->Add(cell.wait_hist.begin(), cell.wait_hist.end());
          l->mutable_hold_buckets()->Add(cell.hold_hist.begin(), cell.hold_hist.end());
        }
      }
      resp->mutable_bucket_upper_seconds()->Add(kDurationBuckets.begin(), kDurationBuckets.end());
      auto* events = resp->mutable_events();
      for (size_t e = 0; e < static_cast<size_t>(Event::kCount); e++)
        (*events)[EventName(static_cast<Event>(e))] = snap.events[e];
      resp->set_text(FormatLockStat(snap));
      resp->set_lock_stats_enabled(LockStatsEnabled());
    }
    return s;
  });
}

grpc::Status VmSpaceService::Ping(grpc::ServerContext* ctx, const v1::PingRequest*,
                                  v1::PingResponse*) {
  return Handle(RpcMethod::kPing, ctx, [](const Caller&) { return OpStatus{}; });
}

grpc::Status VmSpaceService::GetServerInfo(grpc::ServerContext* ctx, const v1::GetServerInfoRequest*,
                                           v1::GetServerInfoResponse* resp) {
  return Handle(RpcMethod::kGetServerInfo, ctx, [&](const Caller&) {
    resp->set_shard(registry_.shard());
    resp->set_spaces(registry_.size());
    resp->set_max_spaces(registry_.max_spaces());
    resp->set_version(opts_.version);
    const MemoryBudget& b = registry_.frames().budget();
    for (int k = 0; k < kMemKinds; k++) {
      v1::MemoryUsage* u = resp->add_memory();
      u->set_kind(MemKindName(static_cast<MemKind>(k)));
      u->set_bytes(b.usage(static_cast<MemKind>(k)));
    }
    resp->set_memory_limit_bytes(b.limit_bytes());
    return OpStatus{};
  });
}

grpc::Status VmSpaceService::OpenFile(grpc::ServerContext* ctx, const v1::OpenFileRequest* req,
                                      v1::OpenFileResponse* resp) {
  return Handle(RpcMethod::kOpenFile, ctx, [&](const Caller& c) -> OpStatus {
    OpenFlags f;
    f.write = req->write();
    f.create = req->create();
    f.exclusive = req->exclusive();
    f.truncate = req->truncate();
    const SysResult r = registry_.files().Open(req->path(), f);
    if (!r.ok()) return OpenError(r.error, req->path(), registry_.data_dir());
    registry_.SetFileOwner(r.value, c.tenant);
    resp->set_file_id(registry_.PublicFileId(r.value));
    return {};
  });
}

grpc::Status VmSpaceService::CreateShmemFile(grpc::ServerContext* ctx,
                                             const v1::CreateShmemFileRequest* req,
                                             v1::CreateShmemFileResponse* resp) {
  return Handle(RpcMethod::kCreateShmemFile, ctx, [&](const Caller& c) -> OpStatus {
    const SysResult r = registry_.files().CreateShmem(req->name(), req->size());
    if (!r.ok()) return ErrnoError(r.error, "memfd_create");
    registry_.SetFileOwner(r.value, c.tenant);
    resp->set_file_id(registry_.PublicFileId(r.value));
    return {};
  });
}

grpc::Status VmSpaceService::CloseFile(grpc::ServerContext* ctx, const v1::CloseFileRequest* req,
                                       v1::CloseFileResponse*) {
  return Handle(RpcMethod::kCloseFile, ctx, [&](const Caller& c) -> OpStatus {
    const uint64_t id = registry_.TableFileId(req->file_id(), c.tenant);
    const int err = registry_.files().Close(id);
    if (err != 0) return ErrnoError(err, "close");
    registry_.ForgetFile(id);
    return {};
  });
}

grpc::Status VmSpaceService::TruncateFile(grpc::ServerContext* ctx,
                                          const v1::TruncateFileRequest* req,
                                          v1::TruncateFileResponse*) {
  return Handle(RpcMethod::kTruncateFile, ctx, [&](const Caller& c) -> OpStatus {
    const int err =
        registry_.files().Truncate(registry_.TableFileId(req->file_id(), c.tenant), req->size());
    return err == 0 ? OpStatus{} : ErrnoError(err, "ftruncate");
  });
}

grpc::Status VmSpaceService::StatFile(grpc::ServerContext* ctx, const v1::StatFileRequest* req,
                                      v1::StatFileResponse* resp) {
  return Handle(RpcMethod::kStatFile, ctx, [&](const Caller& c) -> OpStatus {
    const uint64_t id = registry_.TableFileId(req->file_id(), c.tenant);
    FileStat st;
    const SysResult r = registry_.files().Stat(id, &st);
    if (!r.ok()) return ErrnoError(r.error, "fstat");
    const std::shared_ptr<vmspace::OpenFile> f = registry_.files().Get(id);
    FillFileInfo(st, req->file_id(), f && f->writable, resp->mutable_file());
    return {};
  });
}

grpc::Status VmSpaceService::ListFiles(grpc::ServerContext* ctx, const v1::ListFilesRequest*,
                                       v1::ListFilesResponse* resp) {
  return Handle(RpcMethod::kListFiles, ctx, [&](const Caller& c) -> OpStatus {
    for (const FileStat& st : registry_.files().List()) {
      const uint64_t public_id = registry_.PublicFileId(st.file_id);
      if (registry_.TableFileId(public_id, c.tenant, c.admin) == 0) continue;  // not the caller's
      const std::shared_ptr<vmspace::OpenFile> f = registry_.files().Get(st.file_id);
      FillFileInfo(st, public_id, f && f->writable, resp->add_files());
    }
    if (resp->ByteSizeLong() > opts_.max_message_bytes) {
      resp->Clear();
      return ErrnoErrorDetail(ENOMEM, "ListFiles", "response exceeds --max-message-bytes");
    }
    return {};
  });
}

grpc::Status VmSpaceService::ReadFile(grpc::ServerContext* ctx, const v1::ReadFileRequest* req,
                                      v1::ReadFileResponse* resp) {
  Buffers buf(registry_.frames());  // the data, while the call runs
  return Handle(RpcMethod::kReadFile, ctx, [&](const Caller& c) -> OpStatus {
    if (req->len() > opts_.max_io_bytes) return IoTooLarge("pread", req->len(), opts_.max_io_bytes);
    if (OpStatus e = buf.Resize("ReadFile", req->len()); !e.ok()) return e;
    std::string* data = resp->mutable_data();
    data->resize(req->len());
    const SysResult r = registry_.files().Read(registry_.TableFileId(req->file_id(), c.tenant),
                                               req->offset(), data->data(), req->len());
    if (!r.ok()) {
      resp->clear_data();
      return ErrnoError(r.error, "pread");
    }
    data->resize(r.value);
    return {};
  });
}

grpc::Status VmSpaceService::WriteFile(grpc::ServerContext* ctx, const v1::WriteFileRequest* req,
                                       v1::WriteFileResponse* resp) {
  Buffers buf(registry_.frames());  // the request's data
  return Handle(RpcMethod::kWriteFile, ctx, [&](const Caller& c) -> OpStatus {
    if (req->data().size() > opts_.max_io_bytes)
      return IoTooLarge("pwrite", req->data().size(), opts_.max_io_bytes);
    if (OpStatus e = buf.Resize("WriteFile", req->data().size()); !e.ok()) return e;
    const SysResult r = registry_.files().Write(registry_.TableFileId(req->file_id(), c.tenant),
                                                req->offset(), req->data().data(),
                                                req->data().size());
    if (!r.ok()) return ErrnoError(r.error, "pwrite");
    resp->set_bytes_written(r.value);
    return {};
  });
}

grpc::Status VmSpaceService::FsyncFile(grpc::ServerContext* ctx, const v1::FsyncFileRequest* req,
                                       v1::FsyncFileResponse*) {
  return Handle(RpcMethod::kFsyncFile, ctx, [&](const Caller& c) -> OpStatus {
    const int err = registry_.files().Fsync(registry_.TableFileId(req->file_id(), c.tenant));
    return err == 0 ? OpStatus{} : ErrnoError(err, "fsync");
  });
}

grpc::Status VmSpaceService::Msync(grpc::ServerContext* ctx, const v1::MsyncRequest* req,
                                   v1::MsyncResponse* resp) {
  return OnSpace(RpcMethod::kMsync, ctx, req->space_id(), false, false,
                 [&](Space& sp) { return DoMsync(sp, *req, resp); });
}

}  // namespace vmspace::rpc
