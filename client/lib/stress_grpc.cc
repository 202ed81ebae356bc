#include "lib/stress_grpc.h"

#include <sys/mman.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <barrier>
#include <mutex>
#include <thread>
#include <utility>

namespace vmspace::stress {
namespace {

using client::Client;
using client::ClientOptions;
namespace v1 = ::vmspace::v1;

constexpr int kProt = PROT_READ | PROT_WRITE;
constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS;
constexpr uint64_t kProgressStep = 64;

std::string OpError(const char* op, const client::Error& e) { return std::string(op) + ": " + e.ToString(); }

struct Slot {
  uint64_t addr = 0;
  uint64_t len = 0;
  bool pending = false;  // stream: the mmap filling this slot is not answered yet
};

/// Creates the shared space (if any), runs `body(client_index, space_id, figures,
/// wait_start)` on one thread per client, destroys the spaces, and merges the figures.
StressStats RunClients(const StressConfig& cfg, const ClientOptions& opts,
                       const std::function<void(Client&, int, uint64_t, ClientFigures&,
                                                const std::function<void()>&)>& body) {
  StressStats stats;
  ClientOptions own = opts;
  own.own_connection = true;
  uint64_t shared_id = 0;
  v1::SpaceSettings settings;
  settings.set_locking_profile(cfg.locking_profile);
  Client admin(opts);
  if (cfg.shared_space) {
    auto r = admin.CreateSpace(settings, "bench-stress-shared");
    if (!r.ok()) {
      stats.error = OpError("create space", r.error());
      return stats;
    }
    shared_id = r.value();
  }
  std::vector<ClientFigures> figs(static_cast<size_t>(cfg.clients));
  std::barrier<> start(cfg.clients);
  std::function<void()> wait_start = [&] { start.arrive_and_wait(); };
  std::vector<std::thread> threads;
  for (int c = 0; c < cfg.clients; ++c) {
    threads.emplace_back([&, c] {
      ClientFigures& f = figs[static_cast<size_t>(c)];
      Client cl(own);
      uint64_t space = shared_id;
      bool own_space = !cfg.shared_space;
      if (own_space) {
        auto r = cl.CreateSpace(settings, "bench-stress-c" + std::to_string(c));
        if (!r.ok()) {
          f.SetError(OpError("create space", r.error()));
          wait_start();  // keep the others' barrier count right
          return;
        }
        space = r.value();
      }
      body(cl, c, space, f, wait_start);
      if (own_space) {
        auto r = cl.DestroySpace(space);
        if (!r.ok()) f.SetError(OpError("destroy space", r.error()));
      }
    });
  }
  for (auto& t : threads) t.join();
  if (cfg.shared_space) {
    auto r = admin.DestroySpace(shared_id);
    if (!r.ok() && stats.error.empty()) stats.error = OpError("destroy space", r.error());
  }
  std::string pre_error = stats.error;
  MergeFigures(stats, figs, !cfg.shared_space);
  if (!pre_error.empty() && stats.error.empty()) stats.error = pre_error;
  return stats;
}

// ---- unary ----

void UnaryClient(Client& cl, const StressConfig& cfg, int client, uint64_t space, ClientFigures& f,
                 const std::function<void()>& wait_start, Progress* progress) {
  Seed004Sequence seq(cfg.seed + static_cast<uint32_t>(client));
  std::vector<Slot> slots(Seed004Sequence::kSlots);
  bool ok = true;
  for (Slot& s : slots) {
    s.len = seq.NextSize();
    auto r = cl.Mmap(space, 0, s.len, kProt, kFlags);
    if (!r.ok()) {
      f.SetError(OpError("setup mmap", r.error()));
      ok = false;
      break;
    }
    s.addr = r.value();
    f.addr_hash = HashAddr(f.addr_hash, s.addr);
    ++f.setup_mmaps;
  }
  wait_start();
  f.t0 = MonoNs();
  uint64_t reported = 0;
  for (uint64_t i = 0; ok && i < cfg.rounds; ++i) {
    Slot& s = slots[seq.NextSlot()];
    if (cfg.page_fault) {
      auto r = cl.Access(space, s.addr, s.len, cfg.stride, v1::ACCESS_WRITE);
      ++f.accesses;
      if (!r.ok()) {
        f.SetError(OpError("access", r.error()));
        break;
      }
      f.bytes_touched += r.value().accesses();
      f.faults += r.value().faults();
      f.major_faults += r.value().major_faults();
      if (r.value().stop().outcome() != v1::FAULT_OUTCOME_NONE) {
        f.SetError("access: stopped with " + v1::FaultOutcome_Name(r.value().stop().outcome()));
        break;
      }
    }
    auto u = cl.Munmap(space, s.addr, s.len);
    ++f.munmaps;
    if (!u.ok()) {
      f.SetError(OpError("munmap", u.error()));
      break;
    }
    s.len = seq.NextSize();
    auto m = cl.Mmap(space, 0, s.len, kProt, kFlags);
    ++f.mmaps;
    if (!m.ok()) {
      f.SetError(OpError("mmap", m.error()));
      break;
    }
    s.addr = m.value();
    f.addr_hash = HashAddr(f.addr_hash, s.addr);
    ++f.rounds;
    if (progress && f.rounds - reported >= kProgressStep) {
      progress->rounds.fetch_add(f.rounds - reported, std::memory_order_relaxed);
      reported = f.rounds;
    }
  }
  f.t1 = MonoNs();
  if (progress) progress->rounds.fetch_add(f.rounds - reported, std::memory_order_relaxed);
}

// ---- stream ----

/// Shared between a stream client's writer (the client thread) and its reader thread.
class StreamPipeline {
 public:
  StreamPipeline(Client& cl, const StressConfig& cfg, uint64_t space, int batch, int inflight,
                 ClientFigures& f, Progress* progress)
      : cl_(cl), cfg_(cfg), space_(space), batch_(batch), max_inflight_(inflight), f_(f),
        progress_(progress), slots_(Seed004Sequence::kSlots) {}

  void Run(int client, const std::function<void()>& wait_start) {
    Seed004Sequence seq(cfg_.seed + static_cast<uint32_t>(client));
    stream_ = cl_.OpenBatch();
    bool ok = Setup(seq);
    wait_start();
    f_.t0 = MonoNs();
    if (ok) {
      std::thread reader([this] { ReadLoop(); });
      Rounds(seq);
      Drain();
      f_.t1 = MonoNs();
      if (Failed()) stream_->Cancel();
      else stream_->WritesDone();
      reader.join();
    } else {
      stream_->Cancel();
      f_.t1 = MonoNs();
    }
    grpc::Status st = stream_->Finish();
    std::lock_guard lk(mu_);
    if (ok && !st.ok() && st.error_code() != grpc::StatusCode::CANCELLED) {
      // The stream's own status explains a broken stream best.
      std::string why = "batch stream: " + client::DecodeStatus(st).ToString();
      if (error_.empty()) error_ = why;
      else if (error_.rfind("batch stream", 0) == 0) error_ += " (" + why + ")";
    }
    if (!error_.empty()) f_.SetError(error_);
    f_.rounds = rounds_done_;
  }

 private:
  struct Sent {
    uint64_t tag = 0;
    int ops = 0;
    std::vector<std::pair<int, int>> mmaps;  // (op index, slot)
  };

  bool Failed() {
    std::lock_guard lk(mu_);
    return !error_.empty();
  }
  void Fail(const std::string& e) {  // with mu_ held
    if (error_.empty()) error_ = e;
    cv_.notify_all();
  }

  v1::Op* AddOp() { return cur_.add_ops(); }

  // Setup: the initial mmaps in synchronous messages of `batch` ops (not timed).
  bool Setup(Seed004Sequence& seq) {
    int next = 0;
    while (next < Seed004Sequence::kSlots) {
      v1::BatchRequest req;
      req.set_tag(next_tag_++);
      int first = next;
      for (; next < Seed004Sequence::kSlots && req.ops_size() < batch_; ++next) {
        slots_[static_cast<size_t>(next)].len = seq.NextSize();
        v1::MmapRequest* m = req.add_ops()->mutable_mmap();
        m->set_space_id(space_);
        m->set_len(slots_[static_cast<size_t>(next)].len);
        m->set_prot(kProt);
        m->set_flags(kFlags);
      }
      v1::BatchResponse resp;
      if (!stream_->Write(req) || !stream_->Read(&resp)) {
        f_.SetError("setup: batch stream broke: " + client::DecodeStatus(stream_->Finish()).ToString());
        return false;
      }
      if (resp.results_size() != req.ops_size() || resp.tag() != req.tag()) {
        f_.SetError("setup: malformed BatchResponse (tag or result count)");
        return false;
      }
      for (int i = 0; i < resp.results_size(); ++i) {
        if (auto e = client::DecodeOpResult(resp.results(i))) {
          f_.SetError(OpError("setup mmap", *e));
          return false;
        }
        Slot& s = slots_[static_cast<size_t>(first + i)];
        s.addr = resp.results(i).mmap().addr();
        f_.addr_hash = HashAddr(f_.addr_hash, s.addr);
        ++f_.setup_mmaps;
      }
    }
    return true;
  }

  // Sends the message under construction (waiting for room in the window).
  bool Flush() {
    if (cur_.ops_size() == 0) return true;
    cur_.set_tag(next_tag_++);
    cur_meta_.tag = cur_.tag();
    cur_meta_.ops = cur_.ops_size();
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return static_cast<int>(inflight_.size()) < max_inflight_ || !error_.empty(); });
      if (!error_.empty()) return false;
      inflight_.push_back(std::move(cur_meta_));
    }
    cur_meta_ = Sent{};
    bool ok = stream_->Write(cur_);
    cur_.Clear();
    ++f_.messages;
    if (!ok) {
      std::lock_guard lk(mu_);
      Fail("batch stream: write failed (stream broken)");
    }
    return ok;
  }

  // Appends ops; sends the message whenever it holds `batch` ops.
  bool MaybeFlush() { return cur_.ops_size() < batch_ || Flush(); }

  void Rounds(Seed004Sequence& seq) {
    for (uint64_t i = 0; i < cfg_.rounds; ++i) {
      int k = seq.NextSlot();
      Slot* s = &slots_[static_cast<size_t>(k)];
      uint64_t addr, len;
      {
        std::unique_lock lk(mu_);
        if (!error_.empty()) return;
        if (s->pending) {
          // The slot's address is not back yet: send what we have and wait for it.
          ++f_.waits;
          lk.unlock();
          if (!Flush()) return;
          lk.lock();
          cv_.wait(lk, [&] { return !s->pending || !error_.empty(); });
          if (!error_.empty()) return;
        }
        addr = s->addr;
        len = s->len;
      }
      if (cfg_.page_fault) {
        v1::AccessRequest* a = AddOp()->mutable_access();
        a->set_space_id(space_);
        a->set_addr(addr);
        a->set_len(len);
        a->set_stride(cfg_.stride);
        a->set_access(v1::ACCESS_WRITE);
        ++f_.accesses;
        if (!MaybeFlush()) return;
      }
      v1::MunmapRequest* u = AddOp()->mutable_munmap();
      u->set_space_id(space_);
      u->set_addr(addr);
      u->set_len(len);
      ++f_.munmaps;
      if (!MaybeFlush()) return;
      uint64_t new_len = seq.NextSize();
      v1::MmapRequest* m = AddOp()->mutable_mmap();
      m->set_space_id(space_);
      m->set_len(new_len);
      m->set_prot(kProt);
      m->set_flags(kFlags);
      ++f_.mmaps;
      cur_meta_.mmaps.emplace_back(cur_.ops_size() - 1, k);
      {
        std::lock_guard lk(mu_);
        s->pending = true;
        s->len = new_len;
      }
      if (!MaybeFlush()) return;
    }
    Flush();
  }

  // Waits until every sent message is answered (or the stream failed).
  void Drain() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return inflight_.empty() || !error_.empty() || reader_done_; });
    if (!inflight_.empty() && error_.empty()) Fail("batch stream ended with messages unanswered");
  }

  void ReadLoop() {
    v1::BatchResponse resp;
    uint64_t reported = 0;
    while (stream_->Read(&resp)) {
      std::lock_guard lk(mu_);
      if (inflight_.empty() || resp.tag() != inflight_.front().tag) {
        Fail("BatchResponse with unexpected tag " + std::to_string(resp.tag()));
        break;
      }
      Sent sent = std::move(inflight_.front());
      inflight_.pop_front();
      if (resp.results_size() != sent.ops) {
        Fail("BatchResponse with " + std::to_string(resp.results_size()) + " results for " +
             std::to_string(sent.ops) + " ops");
        break;
      }
      for (const v1::OpResult& r : resp.results()) {
        if (auto e = client::DecodeOpResult(r)) {
          const char* what = r.has_mmap() ? "mmap" : r.has_munmap() ? "munmap" : r.has_access() ? "access" : "op";
          Fail(OpError(what, *e));
          break;
        }
        if (r.has_access()) {
          const v1::AccessResponse& a = r.access();
          f_.bytes_touched += a.accesses();
          f_.faults += a.faults();
          f_.major_faults += a.major_faults();
          if (a.stop().outcome() != v1::FAULT_OUTCOME_NONE) {
            Fail("access: stopped with " + v1::FaultOutcome_Name(a.stop().outcome()));
            break;
          }
        }
      }
      if (!error_.empty()) break;
      for (auto [idx, slot] : sent.mmaps) {
        Slot& s = slots_[static_cast<size_t>(slot)];
        s.addr = resp.results(idx).mmap().addr();
        s.pending = false;
        f_.addr_hash = HashAddr(f_.addr_hash, s.addr);
        ++rounds_done_;
      }
      if (progress_ && rounds_done_ - reported >= kProgressStep) {
        progress_->rounds.fetch_add(rounds_done_ - reported, std::memory_order_relaxed);
        reported = rounds_done_;
      }
      cv_.notify_all();
    }
    std::lock_guard lk(mu_);
    if (progress_) progress_->rounds.fetch_add(rounds_done_ - reported, std::memory_order_relaxed);
    // A stream that ends with messages unanswered (daemon gone, deadline) must wake a
    // writer waiting for a reply or for room in the window.
    if (!inflight_.empty()) {
      Fail("batch stream ended with " + std::to_string(inflight_.size()) + " messages unanswered");
    }
    reader_done_ = true;
    cv_.notify_all();
  }

  Client& cl_;
  const StressConfig& cfg_;
  const uint64_t space_;
  const int batch_;
  const int max_inflight_;
  ClientFigures& f_;
  Progress* progress_;
  std::unique_ptr<client::BatchStream> stream_;
  uint64_t next_tag_ = 1;
  v1::BatchRequest cur_;  // writer only
  Sent cur_meta_;         // writer only

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;  // addr/pending guarded by mu_ during the rounds
  std::deque<Sent> inflight_;
  uint64_t rounds_done_ = 0;
  bool reader_done_ = false;
  std::string error_;
};

}  // namespace

StressStats RunUnaryStress(const StressConfig& cfg, const ClientOptions& opts, Progress* progress) {
  return RunClients(cfg, opts, [&](Client& cl, int c, uint64_t space, ClientFigures& f,
                                   const std::function<void()>& wait_start) {
    UnaryClient(cl, cfg, c, space, f, wait_start, progress);
  });
}

StressStats RunStreamStress(const StressConfig& cfg, const ClientOptions& opts, int batch,
                            int inflight, Progress* progress) {
  if (batch < 1) batch = 1;
  if (inflight < 1) inflight = 1;
  return RunClients(cfg, opts, [&](Client& cl, int c, uint64_t space, ClientFigures& f,
                                   const std::function<void()>& wait_start) {
    StreamPipeline p(cl, cfg, space, batch, inflight, f, progress);
    p.Run(c, wait_start);
  });
}

}  // namespace vmspace::stress
