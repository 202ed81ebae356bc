// SPDX-License-Identifier: Apache-2.0
// The Batch stream of VmSpaceService: many ops per message (or packed words), each
// run as its unary call would, with results that later ops may name (Op.addr_of).
#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <vector>

#include "arena_message.h"
#include "rpc/buffers.h"
#include "rpc/call_limits.h"
#include "rpc/call_scope.h"
#include "rpc/interceptors.h"
#include "rpc/memory_ops.h"
#include "rpc/service.h"

namespace vmspace::rpc {

using metrics::RpcMethod;
using metrics::RpcScope;

namespace {

// Ops of a batch between two cancellation checks (CallScope::CancelPolled).
constexpr int kCancelCheckOps = 256;

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
    case v1::Op::kBrk: return op.brk().space_id();
    case v1::Op::kMremap: return op.mremap().space_id();
    case v1::Op::kMlock: return op.mlock().space_id();
    case v1::Op::kMunlock: return op.munlock().space_id();
    case v1::Op::kMlockall: return op.mlockall().space_id();
    case v1::Op::kMunlockall: return op.munlockall().space_id();
    case v1::Op::kMseal: return op.mseal().space_id();
    case v1::Op::kMincore: return op.mincore().space_id();
    case v1::Op::OP_NOT_SET: break;
  }
  return 0;
}

// Sets the `addr` field of `op`'s request (mremap: old_addr; brk, mlockall and
// munlockall take none).
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
    case v1::Op::kMremap: op.mutable_mremap()->set_old_addr(addr); break;
    case v1::Op::kMlock: op.mutable_mlock()->set_addr(addr); break;
    case v1::Op::kMunlock: op.mutable_munlock()->set_addr(addr); break;
    case v1::Op::kMseal: op.mutable_mseal()->set_addr(addr); break;
    case v1::Op::kMincore: op.mutable_mincore()->set_addr(addr); break;
    case v1::Op::kBrk:
    case v1::Op::kMlockall:
    case v1::Op::kMunlockall:
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
    case v1::Op::kMremap: return op.mremap().old_addr();
    case v1::Op::kMlock: return op.mlock().addr();
    case v1::Op::kMunlock: return op.munlock().addr();
    case v1::Op::kMseal: return op.mseal().addr();
    case v1::Op::kMincore: return op.mincore().addr();
    case v1::Op::kBrk:
    case v1::Op::kMlockall:
    case v1::Op::kMunlockall:
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
      return Refused(n, "op " + std::to_string(t) +
                            " failed or returned no address (only a successful mmap or mremap does)");
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
// checked for, as their unary calls): all but munmap, mprotect, msync, munlock,
// munlockall and mseal, which only free or keep, and mincore, which only looks.
bool MayFaultIn(v1::Op::OpCase c) {
  switch (c) {
    case v1::Op::kMunmap:
    case v1::Op::kMprotect:
    case v1::Op::kMsync:
    case v1::Op::kMunlock:
    case v1::Op::kMunlockall:
    case v1::Op::kMseal:
    case v1::Op::kMincore:
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
      case v1::Op::kBrk: {
        v1::BrkRequest& r = *op.mutable_brk();
        r.set_space_id(id);
        r.set_brk(w());
        break;
      }
      case v1::Op::kMremap: {
        v1::MremapRequest& r = *op.mutable_mremap();
        r.set_space_id(id);
        r.set_old_addr(w());
        r.set_old_len(w());
        r.set_new_len(w());
        r.set_flags(w());
        r.set_new_addr(w());
        break;
      }
      case v1::Op::kMlock: {
        v1::MlockRequest& r = *op.mutable_mlock();
        r.set_space_id(id);
        r.set_addr(w());
        r.set_len(w());
        r.set_flags(i32());
        break;
      }
      case v1::Op::kMunlock: {
        v1::MunlockRequest& r = *op.mutable_munlock();
        r.set_space_id(id);
        r.set_addr(w());
        r.set_len(w());
        break;
      }
      case v1::Op::kMseal: {
        v1::MsealRequest& r = *op.mutable_mseal();
        r.set_space_id(id);
        r.set_addr(w());
        r.set_len(w());
        r.set_flags(w());
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
      {v1::Op::kBrk, 1},       {v1::Op::kMremap, 5},
      {v1::Op::kMlock, 3},     {v1::Op::kMunlock, 2}, {v1::Op::kMseal, 3},
  };
  static constexpr size_t kNumKinds = sizeof(kKinds) / sizeof(kKinds[0]);

  static bool HasRef(uint64_t kind_word) { return (kind_word & kRefFlags) != 0; }
  /// The kind of a kind word; null for an unknown kind or flag, or both ref flags.
  static const Kind* KindOf(uint64_t kind_word) {
    const uint64_t k = kind_word & kKindMask;
    if (k == 0 || k >= kNumKinds || kKinds[k].op == v1::Op::OP_NOT_SET ||
        (kind_word & ~(kKindMask | kRefFlags)) != 0 ||
        (kind_word & kRefFlags) == kRefFlags)
      return nullptr;
    return &kKinds[k];
  }

  v1::Op op_[kNumKinds];
  v1::OpRef ref_;
};

}  // namespace

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
  TenantSlot share(&tenant_streams_, caller.tenant, opts_.tenant_max_streams, "--tenant-max-streams");
  if (!share.admitted()) return finish(share.refusal());
  PeerSlot peer(&peer_calls_, ctx, opts_.max_calls_per_peer);
  if (!peer.admitted()) return finish(peer.refusal());
  // The file pages the stream's ops add are charged to the caller's tenant.
  const std::shared_ptr<MemCgroup> memcg = TenantMemcg(caller);
  const ActiveMemcgScope charge_to(memcg.get());
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
          case v1::Op::kBrk: s = DoBrk(*sp, op.brk(), res->mutable_brk()); break;
          case v1::Op::kMremap: s = DoMremap(*sp, op.mremap(), res->mutable_mremap()); break;
          case v1::Op::kMlock: s = DoMlock(*sp, op.mlock(), res->mutable_mlock()); break;
          case v1::Op::kMunlock: s = DoMunlock(*sp, op.munlock(), res->mutable_munlock()); break;
          case v1::Op::kMlockall: s = DoMlockall(*sp, op.mlockall(), res->mutable_mlockall()); break;
          case v1::Op::kMunlockall:
            s = DoMunlockall(*sp, op.munlockall(), res->mutable_munlockall());
            break;
          case v1::Op::kMseal: s = DoMseal(*sp, op.mseal(), res->mutable_mseal()); break;
          case v1::Op::kMincore:
            // Its vector counts toward --max-message-bytes as a read's data does.
            if (MincorePages(op.mincore().len()) <= opts_.max_io_bytes &&
                resp_bytes + MincorePages(op.mincore().len()) > opts_.max_message_bytes) {
              s = ErrnoErrorDetail(EINVAL, "Mincore",
                                   "the vectors and reads of this batch message would exceed "
                                   "--max-message-bytes");
            } else {
              s = DoMincore(*sp, op.mincore(), res->mutable_mincore(), opts_.max_io_bytes, buf);
            }
            break;
          case v1::Op::OP_NOT_SET: break;
        }
      }
      if (stops(s)) return s;
      if (!s.ok()) {
        res->clear_result();
        FillOpError(s, res);
      }
      std::optional<uint64_t> addr;  // for a later addr_of
      if (s.ok() && res->has_mmap()) addr = res->mmap().addr();
      else if (s.ok() && res->has_mremap()) addr = res->mremap().addr();
      results.Record(addr);
      return s;
    };
    if (!packed) {
      for (int i = 0; i < req.ops_size(); i++) {
        if (i != 0 && i % kCancelCheckOps == 0 && call.CancelPolled()) return finish(Cancelled());
        v1::Op& op = *req.mutable_ops(i);
        v1::OpResult* res = resp.add_results();
        const OpStatus s = run(i, op, op.has_addr_of() ? &op.addr_of() : nullptr, res);
        if (stops(s)) return finish(s);
        // Only reads, mincore vectors and errors can be large; any other successful
        // result is at most kSmallResultBytes (an AccessResponse with its FaultInfo: 56),
        // which saves sizing each op twice (here and when the response is serialized).
        const bool small = s.ok() && !res->has_read() && !res->has_mincore();
        resp_bytes += (small ? kSmallResultBytes : res->ByteSizeLong()) + 8;
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
        out.add_values(!s.ok()             ? 0
                       : res->has_mmap()   ? res->mmap().addr()
                       : res->has_mremap() ? res->mremap().addr()
                       : res->has_brk()    ? res->brk().brk()
                                           : 0);
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

}  // namespace vmspace::rpc
