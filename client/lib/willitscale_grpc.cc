#include "lib/willitscale_grpc.h"

#include <sys/mman.h>

#include <algorithm>

namespace vmspace::bench {
namespace {

using client::Client;
using client::ClientOptions;

constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS;
/// Ops per Batch message (the daemon's default --max-batch is 4096).
constexpr size_t kMaxOpsPerMessage = 1024;

std::string OpName(const v1::Op& op) {
  switch (op.op_case()) {
    case v1::Op::kMmap: return "mmap";
    case v1::Op::kMunmap: return "munmap";
    case v1::Op::kAccess: return "access";
    case v1::Op::kMadvise: return "madvise";
    default: return "op";
  }
}

std::string Signal(const v1::FaultInfo& f) {
  return f.outcome() == v1::FAULT_OUTCOME_SIGBUS ? "SIGBUS" : "SIGSEGV";
}

class UnarySession : public Session {
 public:
  UnarySession(const ClientOptions& opts, uint64_t space) : cl_(opts), space_(space) {}
  std::string Mmap(uint64_t len, int prot, uint64_t* addr) override {
    auto r = cl_.Mmap(space_, 0, len, prot, kFlags);
    if (!r.ok()) return "mmap: " + r.error().ToString();
    *addr = r.value();
    return "";
  }
  std::string Munmap(uint64_t addr, uint64_t len) override {
    auto r = cl_.Munmap(space_, addr, len);
    return r.ok() ? "" : "munmap: " + r.error().ToString();
  }
  std::string TouchThen(uint64_t addr, uint64_t len, uint64_t chunk, const std::atomic<bool>& stop, Then then,
                        uint64_t* pages, uint64_t* faults) override {
    std::string err;
    for (uint64_t off = 0; off < len; off += chunk) {
      if (stop.load(std::memory_order_relaxed)) break;
      auto r = cl_.Access(space_, addr + off, std::min(chunk, len - off), kPageBytes, v1::ACCESS_WRITE);
      if (!r.ok()) {
        err = "access: " + r.error().ToString();
        break;
      }
      *pages += r.value().accesses();
      *faults += r.value().faults();
      if (r.value().stop().outcome() != v1::FAULT_OUTCOME_NONE) {
        err = "access: " + Signal(r.value().stop());
        break;
      }
    }
    std::string e2;
    if (then == Then::kMunmap) e2 = Munmap(addr, len);
    if (then == Then::kMadviseDontneed) {
      auto r = cl_.Madvise(space_, addr, len, MADV_DONTNEED);
      if (!r.ok()) e2 = "madvise: " + r.error().ToString();
    }
    return err.empty() ? e2 : err;
  }

 private:
  Client cl_;
  uint64_t space_;
};

class StreamSession : public Session {
 public:
  StreamSession(const ClientOptions& opts, uint64_t space) : cl_(opts), space_(space), bs_(cl_.OpenBatch()) {}
  ~StreamSession() override {
    if (broken_) return;  // already cancelled and finished
    bs_->WritesDone();
    v1::BatchResponse resp;
    while (bs_->Read(&resp)) {
    }
    (void)bs_->Finish();
  }
  std::string Mmap(uint64_t len, int prot, uint64_t* addr) override {
    v1::BatchRequest req;
    v1::MmapRequest* m = req.add_ops()->mutable_mmap();
    m->set_space_id(space_);
    m->set_len(len);
    m->set_prot(prot);
    m->set_flags(kFlags);
    v1::BatchResponse resp;
    if (std::string e = Exchange(req, &resp); !e.empty()) return e;
    if (auto e = client::DecodeOpResult(resp.results(0))) return "mmap: " + e->ToString();
    *addr = resp.results(0).mmap().addr();
    return "";
  }
  std::string Munmap(uint64_t addr, uint64_t len) override {
    v1::BatchRequest req;
    AddThen(req, Then::kMunmap, addr, len);
    v1::BatchResponse resp;
    if (std::string e = Exchange(req, &resp); !e.empty()) return e;
    if (auto e = client::DecodeOpResult(resp.results(0))) return "munmap: " + e->ToString();
    return "";
  }
  std::string TouchThen(uint64_t addr, uint64_t len, uint64_t chunk, const std::atomic<bool>& stop, Then then,
                        uint64_t* pages, uint64_t* faults) override {
    std::string err;
    uint64_t off = 0;
    for (;;) {
      bool stopped = stop.load(std::memory_order_relaxed) || !err.empty();
      v1::BatchRequest req;
      while (!stopped && off < len && static_cast<size_t>(req.ops_size()) < kMaxOpsPerMessage) {
        v1::AccessRequest* a = req.add_ops()->mutable_access();
        a->set_space_id(space_);
        a->set_addr(addr + off);
        a->set_len(std::min(chunk, len - off));
        a->set_stride(kPageBytes);
        a->set_access(v1::ACCESS_WRITE);
        off += chunk;
      }
      bool last = stopped || off >= len;
      if (last) AddThen(req, then, addr, len);
      if (req.ops_size() == 0) break;
      v1::BatchResponse resp;
      if (std::string e = Exchange(req, &resp); !e.empty()) return e;
      for (int i = 0; i < resp.results_size(); ++i) {
        const v1::OpResult& r = resp.results(i);
        if (auto e = client::DecodeOpResult(r)) {
          if (err.empty()) err = OpName(req.ops(i)) + ": " + e->ToString();
          continue;
        }
        if (r.has_access()) {
          *pages += r.access().accesses();
          *faults += r.access().faults();
          if (r.access().stop().outcome() != v1::FAULT_OUTCOME_NONE && err.empty())
            err = "access: " + Signal(r.access().stop());
        }
      }
      if (last) break;
    }
    return err;
  }

 private:
  void AddThen(v1::BatchRequest& req, Then then, uint64_t addr, uint64_t len) {
    if (then == Then::kMunmap) {
      v1::MunmapRequest* u = req.add_ops()->mutable_munmap();
      u->set_space_id(space_);
      u->set_addr(addr);
      u->set_len(len);
    } else if (then == Then::kMadviseDontneed) {
      v1::MadviseRequest* m = req.add_ops()->mutable_madvise();
      m->set_space_id(space_);
      m->set_addr(addr);
      m->set_len(len);
      m->set_advice(MADV_DONTNEED);
    }
  }
  std::string Exchange(v1::BatchRequest& req, v1::BatchResponse* resp) {
    req.set_tag(++tag_);
    if (!broken_ && bs_->Write(req) && bs_->Read(resp) && resp->results_size() == req.ops_size()) return "";
    broken_ = true;
    bs_->Cancel();
    grpc::Status st = bs_->Finish();
    return "batch stream ended: " + (st.ok() ? std::string("no answer") : client::DecodeStatus(st).ToString());
  }

  Client cl_;
  uint64_t space_;
  std::unique_ptr<client::BatchStream> bs_;
  uint64_t tag_ = 0;
  bool broken_ = false;
};

class DaemonBackend : public Backend {
 public:
  DaemonBackend(const ClientOptions& opts, bool stream) : opts_(opts), admin_(opts), stream_(stream) {
    opts_.own_connection = true;
  }
  std::string CreateSpace(const std::string& profile, uint64_t* space) override {
    v1::SpaceSettings s;
    s.set_locking_profile(profile);
    auto r = admin_.CreateSpace(s, "bench");
    if (!r.ok()) return r.error().ToString();
    *space = r.value();
    return "";
  }
  std::string DestroySpace(uint64_t space) override {
    auto r = admin_.DestroySpace(space);
    return r.ok() ? "" : r.error().ToString();
  }
  std::string OpenSession(uint64_t space, std::unique_ptr<Session>* out) override {
    if (stream_) out->reset(new StreamSession(opts_, space));
    else out->reset(new UnarySession(opts_, space));
    return "";
  }
  bool ReadLocks(const std::string& profile_name, LockFigures* out, std::string* why) override {
    auto r = admin_.GetLockStats(profile_name);
    if (!r.ok()) {
      if (r.error().code == grpc::StatusCode::UNIMPLEMENTED)
        *why = "the daemon does not implement GetLockStats (UNIMPLEMENTED): no lock figures";
      else
        *why = "GetLockStats failed: " + r.error().ToString();
      return false;
    }
    *out = FromLockStats(r.value());
    return true;
  }
  std::string LocksCaveat() const override {
    return "lock figures are the daemon's GetLockStats deltas for the profile: other clients using the "
           "same profile during the run are counted too";
  }

 private:
  ClientOptions opts_;
  Client admin_;
  bool stream_;
};

}  // namespace

LockFigures FromLockStats(const v1::GetLockStatsResponse& r) {
  LockFigures f;
  for (const v1::LockStat& l : r.locks()) {
    for (size_t c = 0; c < kLockClassNames.size(); ++c)
      for (size_t m = 0; m < kLockModeNames.size(); ++m)
        if (l.lock() == kLockClassNames[c] && l.mode() == kLockModeNames[m]) {
          LockCell& x = f.locks[c][m];
          x.acquisitions += l.acquisitions();
          x.contentions += l.contentions();
          x.wait_s += l.wait_seconds_total();
          x.hold_s += l.hold_seconds_total();
        }
  }
  for (const auto& [k, v] : r.events()) f.events[k] = v;
  f.timing = r.lock_stats_enabled();
  return f;
}

std::unique_ptr<Backend> MakeDaemonBackend(const client::ClientOptions& opts, bool stream) {
  return std::make_unique<DaemonBackend>(opts, stream);
}

}  // namespace vmspace::bench
