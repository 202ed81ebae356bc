// SPDX-License-Identifier: Apache-2.0
#include "lib/harness_grpc.h"

#include <sys/mman.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <initializer_list>
#include <mutex>
#include <thread>
#include <vector>

#include "arena_message.h"

namespace vmspace::harness {
namespace {

using client::Client;
using client::ClientOptions;

/// The client's own file on the daemon (Session::OpenFile): a host file under its
/// --data-dir, opened with create + exclusive, or, if the daemon has no --data-dir
/// (EACCES), a shmem file. Returns "" or the error.
std::string OpenDaemonFile(Client& cl, uint64_t space, uint64_t bytes, uint64_t* file, bool* shmem) {
  static std::atomic<uint64_t> n{0};
  v1::OpenFileRequest req;
  req.set_path("vmspace-bench-" + std::to_string(getpid()) + "-" + std::to_string(++n));
  req.set_write(true);
  req.set_create(true);
  req.set_exclusive(true);
  auto r = cl.OpenFile(req, space);
  *shmem = !r.ok() && r.error().err == EACCES;
  if (*shmem) r = cl.CreateShmemFile("vmspace-bench", bytes, space);
  if (!r.ok()) return (*shmem ? "memfd_create: " : "open: ") + r.error().ToString();
  *file = r.value();
  if (*shmem) return "";
  auto t = cl.TruncateFile(*file, bytes);
  return t.ok() ? "" : "ftruncate: " + t.error().ToString();
}

/// Tear-down of OpenDaemonFile: truncated to 0 first (as unlink, nothing is written back;
/// an empty file stays in --data-dir, which has no unlink call), then closed.
void CloseDaemonFile(Client& cl, uint64_t file) {
  (void)cl.TruncateFile(file, 0);
  (void)cl.CloseFile(file);
}

/// The error of an access that stopped on a signal or OOM ("" if it did not).
std::string AccessStop(const v1::AccessResponse& a) {
  if (a.stop().outcome() == v1::FAULT_OUTCOME_NONE) return "";
  return "access: stopped with " + v1::FaultOutcome_Name(a.stop().outcome());
}

// ---- unary ----

class UnarySession : public SyncSession {
 public:
  UnarySession(const ClientOptions& opts, uint64_t space) : cl_(opts), space_(space) {}

  bool OpenFile(uint64_t bytes, uint64_t* file, bool* shmem) override {
    std::string e = OpenDaemonFile(cl_, space_, bytes, file, shmem);
    return e.empty() || Fail(e);
  }
  void CloseFile(uint64_t file) override { CloseDaemonFile(cl_, file); }

 protected:
  bool DoMmap(uint64_t len, int prot, int flags, uint64_t file, uint64_t* addr) override {
    auto r = cl_.Mmap(space_, 0, len, prot, flags, 0, file);
    if (!r.ok()) return Fail("mmap: " + r.error().ToString());
    *addr = r.value();
    return true;
  }
  bool DoMunmap(uint64_t addr, uint64_t len) override {
    auto r = cl_.Munmap(space_, addr, len);
    return r.ok() || Fail("munmap: " + r.error().ToString());
  }
  bool DoAccess(uint64_t addr, uint64_t len, uint64_t stride, bool write) override {
    auto r = cl_.Access(space_, addr, len, stride, write ? v1::ACCESS_WRITE : v1::ACCESS_READ);
    if (!r.ok()) return Fail("access: " + r.error().ToString());
    counters_.bytes_touched += r.value().accesses();
    counters_.faults += r.value().faults();
    counters_.major_faults += r.value().major_faults();
    std::string stop = AccessStop(r.value());
    return stop.empty() || Fail(stop);
  }
  bool DoMadviseDontneed(uint64_t addr, uint64_t len) override {
    auto r = cl_.Madvise(space_, addr, len, MADV_DONTNEED);
    return r.ok() || Fail("madvise: " + r.error().ToString());
  }

 private:
  Client cl_;
  uint64_t space_;
};

// ---- stream ----

/// See the file comment of harness_grpc.h. Ops are queued and written by the client
/// thread; answers are read by reader_. mu_ guards everything both threads touch.
class StreamSession : public Session {
 public:
  StreamSession(const ClientOptions& opts, uint64_t space, int batch, int inflight)
      : cl_(opts), space_(space), batch_(std::max(1, batch)), max_inflight_(std::max(1, inflight)),
        stream_(cl_.OpenBatch()) {
    reader_ = std::thread([this] { ReadLoop(); });
  }
  ~StreamSession() override { Close(); }

  using Session::Access;
  using Session::Mmap;
  uint64_t Mmap(uint64_t len, int prot, int flags, uint64_t file, uint64_t* addr) override {
    Words({v1::PACKED_MMAP, 0, len, Word(prot), Word(flags), 0, file});
    return Queue("mmap", addr);
  }
  uint64_t Munmap(Addr addr, uint64_t len) override {
    Words({v1::PACKED_MUNMAP | RefFlag(addr), addr.value, len});
    RefWord(addr);
    return Queue("munmap", nullptr);
  }
  uint64_t Access(Addr addr, uint64_t len, uint64_t stride, bool write) override {
    Words({v1::PACKED_ACCESS | RefFlag(addr), addr.value, len, stride, Word(write ? v1::ACCESS_WRITE : v1::ACCESS_READ)});
    RefWord(addr);
    return Queue("access", nullptr);
  }
  uint64_t MadviseDontneed(uint64_t addr, uint64_t len) override {
    Words({v1::PACKED_MADVISE, addr, len, Word(MADV_DONTNEED)});
    return Queue("madvise", nullptr);
  }

  /// Set-up and tear-down only: unary calls beside the stream, after every queued op.
  bool OpenFile(uint64_t bytes, uint64_t* file, bool* shmem) override {
    if (!Wait(kAll)) return false;
    std::string e = OpenDaemonFile(cl_, space_, bytes, file, shmem);
    if (e.empty()) return true;
    std::lock_guard lk(mu_);
    Fail(e);
    return false;
  }
  void CloseFile(uint64_t file) override {
    if (Wait(kAll)) CloseDaemonFile(cl_, file);
  }

  bool Done(uint64_t op) override {
    std::lock_guard lk(mu_);
    return done_ >= op;
  }

  /// Every op of the session is an op of the stream, in order (session op n = stream op
  /// n - 1), so any op the daemon still remembers can be named.
  bool CanRefer(uint64_t op) override { return op >= 1 && queued_ + 1 - op <= v1::BATCH_REF_WINDOW; }

  bool Wait(uint64_t op) override {
    op = std::min(op, queued_);
    if (Done(op)) return ok();
    Flush();
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return done_ >= op || !error_.empty(); });
    return error_.empty();
  }

  bool ok() override {
    std::lock_guard lk(mu_);
    return error_.empty();
  }
  std::string error() override {
    std::lock_guard lk(mu_);
    return error_;
  }
  SessionCounters counters() override {
    std::lock_guard lk(mu_);
    return counters_;
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    bool all_done = Wait(kAll);
    {
      std::lock_guard lk(mu_);
      writes_done_ = all_done && error_.empty();
    }
    // The client thread wrote last; now it half-closes, the reader sees the end of the
    // stream, and only then is Finish() called: no Write or Read is outstanding on the
    // call at that point. After a failure there is nothing to do here: Fail() cancelled
    // the call, or the stream had already ended.
    if (writes_done_) stream_->WritesDone();
    reader_.join();
    grpc::Status st = stream_->Finish();
    std::lock_guard lk(mu_);
    bool cancelled_by_us = st.error_code() == grpc::StatusCode::CANCELLED && !error_.empty();
    if (!st.ok() && !cancelled_by_us) {
      // The stream's own status explains a broken stream best.
      std::string why = "batch stream: " + client::DecodeStatus(st).ToString();
      if (error_.empty()) error_ = why;
      else if (error_.rfind("batch stream", 0) == 0) error_ += " (" + why + ")";
    }
  }

 private:
  /// One op of a message: its name (for errors) and where an mmap's address goes.
  struct OpRef {
    const char* name;
    uint64_t* addr;
  };
  /// A message sent and not yet answered.
  struct Sent {
    uint64_t tag = 0;
    uint64_t first_op = 0;    // op number of its first op
    std::vector<OpRef> ops;
  };

  /// With mu_ held: records the first failure and cancels the call, which ends a Read
  /// or Write blocked in the other thread. A stream that has already ended needs no
  /// cancel (`cancel` false), and keeps the daemon's status for Finish().
  void Fail(const std::string& e, bool cancel = true) {
    if (error_.empty()) error_ = e;
    if (cancel) stream_->Cancel();
    cv_.notify_all();
  }

  // The op being queued, as words of the message's PackedOps (vmspace.proto,
  // PackedOpKind): its kind word and fields; an int32 field as protobuf stores it.
  void Words(std::initializer_list<uint64_t> w) {
    for (uint64_t x : w) cur().mutable_packed()->add_words(x);
  }
  static uint64_t Word(int32_t v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); }
  /// The kind-word flag of an op whose address is Addr::Of(mmap op): addr_of by index.
  static uint64_t RefFlag(const Addr& a) { return a.of != 0 ? v1::PACKED_ADDR_OF_INDEX : 0; }
  /// After the fields: the mmap's stream op number (stream ops count from 0, session
  /// ops from 1).
  void RefWord(const Addr& a) {
    if (a.of != 0) Words({a.of - 1});
  }

  uint64_t Queue(const char* name, uint64_t* addr) {
    cur_ops_.push_back({name, addr});
    uint64_t op = ++queued_;
    if (static_cast<int>(cur_ops_.size()) >= batch_) Flush();
    return op;
  }

  // Sends the message under construction, after waiting for room in the window. Only
  // the client thread writes, and one Write at a time.
  void Flush() {
    if (cur_ops_.empty()) return;
    Sent sent{next_tag_++, queued_ - static_cast<uint64_t>(cur_ops_.size()) + 1, std::move(cur_ops_)};
    cur().set_tag(sent.tag);
    cur().mutable_packed()->set_space_id(space_);
    cur_ops_.clear();
    bool send = false;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return static_cast<int>(inflight_.size()) < max_inflight_ || !error_.empty(); });
      if (error_.empty()) {
        inflight_.push_back(std::move(sent));
        ++counters_.messages;
        send = true;
      }
    }
    if (send && !stream_->Write(cur())) {
      // The call is over (the daemon ended it, or the connection broke): the reader's
      // Read ends too, and Finish() gets the reason.
      std::lock_guard lk(mu_);
      Fail("batch stream: write failed (stream broken)", false);
    }
    cur_msg_.Next();
  }

  void ReadLoop() {
    proto::ArenaMessage<v1::BatchResponse> msg;  // each answer's results on an arena
    for (;; msg.Next()) {
      v1::BatchResponse& resp = msg.get();
      if (!stream_->Read(&resp)) break;
      std::lock_guard lk(mu_);
      if (!error_.empty()) break;
      if (inflight_.empty() || resp.tag() != inflight_.front().tag) {
        Fail("batch stream: BatchResponse with unexpected tag " + std::to_string(resp.tag()));
        break;
      }
      Sent sent = std::move(inflight_.front());
      inflight_.pop_front();
      const v1::PackedResults& p = resp.packed();
      if (static_cast<size_t>(p.values_size()) != sent.ops.size() || p.full_index_size() != p.full_size()) {
        Fail("batch stream: BatchResponse with " + std::to_string(p.values_size()) + " values and " +
             std::to_string(p.full_size()) + " full results for " + std::to_string(sent.ops.size()) + " ops");
        break;
      }
      // The full results (in op order) carry every error and every stopped access.
      for (int j = 0; j < p.full_size() && error_.empty(); ++j) {
        const v1::OpResult& r = p.full(j);
        const uint32_t i = p.full_index(j);
        if (i >= sent.ops.size()) {
          Fail("batch stream: full result for op " + std::to_string(i) + " of " + std::to_string(sent.ops.size()));
        } else if (auto e = client::DecodeOpResult(r)) {
          Fail(std::string(sent.ops[i].name) + ": " + e->ToString());
        } else if (r.has_access()) {
          if (std::string stop = AccessStop(r.access()); !stop.empty()) Fail(stop);
        }
      }
      if (!error_.empty()) break;
      counters_.bytes_touched += p.accesses();
      counters_.faults += p.access_faults();
      counters_.major_faults += p.access_major_faults();
      for (size_t i = 0; i < sent.ops.size(); ++i) {
        if (uint64_t* addr = sent.ops[i].addr) {
          *addr = p.values(static_cast<int>(i));
          counters_.addr_hash = HashAddr(counters_.addr_hash, *addr);
        }
      }
      if (!error_.empty()) break;
      done_ = sent.first_op + sent.ops.size() - 1;
      cv_.notify_all();
    }
    // The stream ended: after our WritesDone with everything answered, or early (daemon
    // gone, deadline, cancelled). An early end fails the session, which wakes a client
    // thread waiting for an answer or for room in the window.
    std::lock_guard lk(mu_);
    if (!writes_done_ || !inflight_.empty()) {
      Fail("batch stream ended with " + std::to_string(inflight_.size()) + " messages unanswered", false);
    }
  }

  Client cl_;
  const uint64_t space_;
  const int batch_;
  const int max_inflight_;
  std::unique_ptr<client::BatchStream> stream_;
  std::thread reader_;
  bool closed_ = false;

  // Client thread only.
  proto::ArenaMessage<v1::BatchRequest> cur_msg_;  // the message under construction
  v1::BatchRequest& cur() { return cur_msg_.get(); }
  std::vector<OpRef> cur_ops_;
  uint64_t queued_ = 0;  // op number of the last op queued
  uint64_t next_tag_ = 1;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Sent> inflight_;
  uint64_t done_ = 0;  // every op up to this number is answered
  bool writes_done_ = false;
  SessionCounters counters_;
  std::string error_;
};

class DaemonBackend : public Backend {
 public:
  DaemonBackend(const ClientOptions& opts, bool stream, int batch, int inflight)
      : opts_(opts), admin_(opts), stream_(stream), batch_(batch), inflight_(inflight) {
    opts_.own_connection = true;
  }
  std::string CreateSpace(const std::string& profile, const std::string& label, uint64_t* space) override {
    v1::SpaceSettings s;
    s.set_locking_profile(profile);
    auto r = admin_.CreateSpace(s, label);
    if (!r.ok()) return r.error().ToString();
    *space = r.value();
    return "";
  }
  std::string DestroySpace(uint64_t space) override {
    auto r = admin_.DestroySpace(space);
    return r.ok() ? "" : r.error().ToString();
  }
  std::string OpenSession(uint64_t space, std::unique_ptr<Session>* out) override {
    if (stream_) *out = std::make_unique<StreamSession>(opts_, space, batch_, inflight_);
    else *out = std::make_unique<UnarySession>(opts_, space);
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
  int batch_, inflight_;
};

uint64_t Ns(double seconds) { return static_cast<uint64_t>(std::llround(seconds * 1e9)); }

}  // namespace

LockFigures FromLockStats(const v1::GetLockStatsResponse& r) {
  LockFigures f;
  for (const v1::LockStat& l : r.locks()) {
    for (size_t c = 0; c < static_cast<size_t>(LockClass::kCount); ++c)
      for (size_t m = 0; m < static_cast<size_t>(LockMode::kCount); ++m)
        if (l.lock() == LockClassName(static_cast<LockClass>(c)) && l.mode() == LockModeName(static_cast<LockMode>(m))) {
          LockStatCell& x = f.stats.locks[c][m];
          x.acquisitions += l.acquisitions();
          x.contentions += l.contentions();
          x.wait_ns_total += Ns(l.wait_seconds_total());
          x.wait_ns_max = std::max(x.wait_ns_max, Ns(l.wait_seconds_max()));
          x.hold_ns_total += Ns(l.hold_seconds_total());
          x.hold_ns_max = std::max(x.hold_ns_max, Ns(l.hold_seconds_max()));
        }
  }
  for (size_t e = 0; e < f.stats.events.size(); ++e) {
    auto it = r.events().find(EventName(static_cast<Event>(e)));
    if (it != r.events().end()) f.stats.events[e] = it->second;
  }
  f.timing = r.lock_stats_enabled();
  return f;
}

std::unique_ptr<Backend> MakeDaemonBackend(const client::ClientOptions& opts, bool stream, int batch, int inflight) {
  return std::make_unique<DaemonBackend>(opts, stream, batch, inflight);
}

}  // namespace vmspace::harness
