// SPDX-License-Identifier: Apache-2.0
// RPC latency benchmarks against a running daemon (or, for vma_writers, the engine
// linked into this process).
//
// --scenario table (the default): unary latency of Fault and Mmap beside the empty RPC
// (Ping) on the same daemon in the same run, at 1 and 16 concurrent clients (the
// target: within 1.3x of Ping).
//   rpc_latency_bench --target HOST:PORT [--seconds S] [--clients 1,16]
// Each client has its own channel and its own space. Per RPC kind and client count it
// prints p50 / p99 latency (microseconds), calls/s, and the ratio to Ping's p50/p99
// measured in the same round. Fault touches pages whose PTEs already allow the access
// (the RPC plus the engine's TLB-hit path); Fault-miss touches fresh pages (a real
// write fault each); Mmap maps 16 KiB and the client munmaps it untimed.
//
// Authentication and TLS (vmspaced --token-file, --tls-cert): --token TOKEN sends a
// bearer token with every call; --tls-ca PEM connects with TLS (the CA file that signed
// the daemon's certificate). Channels are the client library's (client::MakeChannel).
//
// --scenario auth: the cost of authentication and TLS on the unary path. Ping on up to
// three daemons in one run, taking turns in short rounds (so load from elsewhere falls on
// all alike): --target an open daemon (no token), --token-target one with --token-file
// (every call sends --token), --tls-target one with TLS (--tls-ca; --token too, if given).
// Prints p50/p99 and calls/s per daemon and client count, and their ratios to the open one.
//   rpc_latency_bench --scenario auth --target OPEN --token-target HOST:PORT --token T
//       [--tls-target HOST:PORT --tls-ca PEM] [--seconds 6] [--clients 1,16] [--rounds 6]
//
// --scenario vma_writers: writers that must wait for per-VMA-lock readers
// (vma_start_write / vma_mark_detached waiting for readers while holding mmap_lock for
// write).
//   rpc_latency_bench --scenario vma_writers --target HOST:PORT [--seconds 10]
//       [--faulters 6] [--mprotectors 2] [--slice-kib 128] [--profile linux-6.6] [--json]
//   rpc_latency_bench --scenario vma_writers --in-process [...]   (no daemon, no Ping)
// One space (locking profile --profile, per-VMA locks on by default) with ONE rw private
// anonymous VMA. Each faulter owns a --slice-kib slice of it and loops {Access: write
// one byte per page of the slice; Madvise(MADV_DONTNEED) the slice}, so every page
// write is a real fault under the VMA's read lock (a page whose PTE already allows the
// write would take the lock-free path instead). Each mprotect client owns one page of
// the same VMA (between slices) and alternates PROT_READ|PROT_WRITE|PROT_EXEC and
// PROT_READ|PROT_WRITE on it: each call splits or re-merges the VMA and so write-locks
// it (vma_start_write), waiting for the faulters inside it. One more client loops Ping
// throughout. With more clients than cores a writer can wait behind a preempted reader.
// Prints per client kind calls/s and latency p50/p99/max (mprotect p99 against Ping p99:
// the target after the fix is <= 2x), and the daemon's lock statistics over the run
// (GetLockStats deltas for the profile): acquisitions, contentions, and the wait
// distribution from the wait histogram (p50/p99 are the upper bound of the bucket they
// fall in; the max is exact when the run raised it, else only bounded). Run it on a
// daemon of its own: the figures are per profile, so other users of that profile count
// too. --json prints the same figures as one JSON object. Exit status 3 if the run did
// not exercise what it measures (a failed call, an Access that did not fault on every
// page, no fault under the VMA lock, an Mprotect without a VMA write lock, no re-merge);
// ctest's bench.vma_writers_smoke runs it briefly in-process for that check.
#include "vmspace/v1/vmspace.grpc.pb.h"  // first: <signal.h> defines si_addr

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "engine/address_space.h"
#include "engine/stats.h"
#include "lib/client.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = vmspace::v1;

enum Kind { kPing, kFaultHit, kFaultMiss, kMmap, kKinds };
const char* const kNames[kKinds] = {"Ping", "Fault(hit)", "Fault(miss)", "Mmap"};

struct Result {
  std::vector<double> us;
  double seconds = 0;
};

/// The q-quantile (0..1) of sorted samples; 0 if there are none.
double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(sorted.size() * q))];
}

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(10);
}

/// --token and --tls-ca (contents) for every channel.
vmspace::client::ClientOptions g_conn;

std::unique_ptr<v1::VmSpace::Stub> NewStub(vmspace::client::ClientOptions o) {
  o.own_connection = true;  // one connection per client
  return v1::VmSpace::NewStub(vmspace::client::MakeChannel(o));
}

std::unique_ptr<v1::VmSpace::Stub> NewStub(const std::string& target) {
  vmspace::client::ClientOptions o = g_conn;
  o.target = target;
  return NewStub(o);
}

bool Call(v1::VmSpace::Stub& stub, Kind k, uint64_t space, uint64_t base, uint64_t& cursor,
          uint64_t& last_mmap) {
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline());
  switch (k) {
    case kPing: {
      v1::PingResponse r;
      return stub.Ping(&ctx, {}, &r).ok();
    }
    case kFaultHit:
    case kFaultMiss: {
      v1::FaultRequest f;
      f.set_space_id(space);
      uint64_t off = k == kFaultHit ? (cursor++ % 16) * 4096 : (cursor++ % 16384) * 4096;
      f.set_addr(base + off);
      f.set_access(v1::ACCESS_WRITE);
      v1::FaultResponse r;
      return stub.Fault(&ctx, f, &r).ok();
    }
    case kMmap: {
      v1::MmapRequest m;
      m.set_space_id(space);
      m.set_len(16384);
      m.set_prot(PROT_READ);
      m.set_flags(MAP_PRIVATE | MAP_ANONYMOUS);
      v1::MmapResponse r;
      bool ok = stub.Mmap(&ctx, m, &r).ok();
      last_mmap = r.addr();
      return ok;
    }
    default:
      return false;
  }
}

int RunTable(const std::string& target, double seconds, const std::vector<int>& clients) {
  printf("%-8s %-12s %10s %10s %10s %12s %12s\n", "clients", "rpc", "p50_us", "p99_us", "calls/s",
         "p50/Ping", "p99/Ping");
  for (int n : clients) {
    std::vector<std::unique_ptr<v1::VmSpace::Stub>> stubs;
    std::vector<uint64_t> spaces, bases;
    for (int c = 0; c < n; c++) {
      stubs.push_back(NewStub(target));
      grpc::ClientContext ctx;
      v1::CreateSpaceResponse cs;
      if (!stubs.back()->CreateSpace(&ctx, {}, &cs).ok()) {
        fprintf(stderr, "CreateSpace failed: is vmspaced running at %s?\n", target.c_str());
        return 1;
      }
      grpc::ClientContext mctx;
      v1::MmapRequest m;
      m.set_space_id(cs.space_id());
      m.set_len(64ull << 20);
      m.set_prot(PROT_READ | PROT_WRITE);
      m.set_flags(MAP_PRIVATE | MAP_ANONYMOUS);
      v1::MmapResponse mr;
      stubs.back()->Mmap(&mctx, m, &mr);
      spaces.push_back(cs.space_id());
      bases.push_back(mr.addr());
    }
    double p50_ping = 0, p99_ping = 0;
    for (int k = 0; k < kKinds; k++) {
      std::vector<Result> res(n);
      std::vector<std::thread> ts;
      std::atomic<bool> fail{false};
      for (int c = 0; c < n; c++)
        ts.emplace_back([&, c] {
          uint64_t cursor = 0, last = 0;
          auto& st = *stubs[c];
          for (int w = 0; w < 50; w++) Call(st, static_cast<Kind>(k), spaces[c], bases[c], cursor, last);
          auto t0 = Clock::now();
          auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
          while (Clock::now() < end) {
            auto a = Clock::now();
            bool ok = Call(st, static_cast<Kind>(k), spaces[c], bases[c], cursor, last);
            auto b = Clock::now();
            if (!ok) fail = true;
            res[c].us.push_back(std::chrono::duration<double, std::micro>(b - a).count());
            if (k == kMmap && last) {  // untimed cleanup
              grpc::ClientContext ctx;
              v1::MunmapRequest u;
              u.set_space_id(spaces[c]);
              u.set_addr(last);
              u.set_len(16384);
              v1::MunmapResponse ur;
              st.Munmap(&ctx, u, &ur);
            }
          }
          res[c].seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        });
      for (auto& t : ts) t.join();
      std::vector<double> all;
      double calls = 0;
      for (auto& r : res) {
        all.insert(all.end(), r.us.begin(), r.us.end());
        calls += r.us.size() / r.seconds;
      }
      std::sort(all.begin(), all.end());
      double p50 = Quantile(all, 0.5);
      double p99 = Quantile(all, 0.99);
      if (k == kPing) {
        p50_ping = p50;
        p99_ping = p99;
      }
      printf("%-8d %-12s %10.1f %10.1f %10.0f %12.2f %12.2f%s\n", n, kNames[k], p50, p99, calls,
             p50 / p50_ping, p99 / p99_ping, fail ? "  (some calls failed)" : "");
      fflush(stdout);
    }
    for (int c = 0; c < n; c++) {
      grpc::ClientContext ctx;
      v1::DestroySpaceRequest d;
      d.set_space_id(spaces[c]);
      v1::DestroySpaceResponse dr;
      stubs[c]->DestroySpace(&ctx, d, &dr);
    }
  }
  return 0;
}

// ------------------------------------------------------------------ auth

/// One daemon of the auth scenario and how to reach it.
struct AuthVariant {
  std::string name;
  vmspace::client::ClientOptions conn;
  std::vector<double> us;  // Ping latencies over all rounds
  double calls = 0;        // calls over all rounds
  double seconds = 0;      // wall time over all rounds
};

int RunAuth(std::vector<AuthVariant> variants, double seconds, const std::vector<int>& clients, int rounds) {
  printf("%-8s %-14s %10s %10s %10s %10s %10s %12s\n", "clients", "daemon", "p50_us", "p99_us", "calls/s",
         "p50/open", "p99/open", "calls/open");
  for (int n : clients) {
    std::vector<std::vector<std::unique_ptr<v1::VmSpace::Stub>>> stubs(variants.size());
    for (size_t v = 0; v < variants.size(); v++) {
      variants[v].us.clear();
      variants[v].calls = variants[v].seconds = 0;
      for (int c = 0; c < n; c++) stubs[v].push_back(NewStub(variants[v].conn));
    }
    bool fail = false;
    for (int r = 0; r < rounds; r++) {
      for (size_t v = 0; v < variants.size(); v++) {
        std::vector<Result> res(n);
        std::vector<std::thread> ts;
        std::atomic<bool> f{false};
        const auto t0 = Clock::now();
        const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds / rounds));
        for (int c = 0; c < n; c++)
          ts.emplace_back([&, c] {
            uint64_t cursor = 0, lm = 0;
            for (int w = 0; w < 20; w++) Call(*stubs[v][c], kPing, 0, 0, cursor, lm);  // warm
            while (Clock::now() < end) {
              const auto a = Clock::now();
              if (!Call(*stubs[v][c], kPing, 0, 0, cursor, lm)) f = true;
              res[c].us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
            }
          });
        for (auto& t : ts) t.join();
        for (const Result& x : res) {
          variants[v].us.insert(variants[v].us.end(), x.us.begin(), x.us.end());
          variants[v].calls += static_cast<double>(x.us.size());
        }
        variants[v].seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        fail |= f;
      }
    }
    double p50_0 = 0, p99_0 = 0, rate_0 = 0;
    for (size_t v = 0; v < variants.size(); v++) {
      std::vector<double>& all = variants[v].us;
      std::sort(all.begin(), all.end());
      const double p50 = Quantile(all, 0.5), p99 = Quantile(all, 0.99);
      const double rate = variants[v].calls / variants[v].seconds;
      if (v == 0) {
        p50_0 = p50;
        p99_0 = p99;
        rate_0 = rate;
      }
      printf("%-8d %-14s %10.1f %10.1f %10.0f %10.2f %10.2f %12.2f\n", n, variants[v].name.c_str(), p50, p99, rate,
             p50 / p50_0, p99 / p99_0, rate / rate_0);
    }
    if (fail) {
      fprintf(stderr, "some Ping calls failed (wrong token, or a daemon not reachable?)\n");
      return 3;
    }
    fflush(stdout);
  }
  return 0;
}

// ------------------------------------------------------------------ vma_writers

constexpr uint64_t kPage = 4096;
constexpr int kProtRw = PROT_READ | PROT_WRITE;
constexpr int kProtRwx = PROT_READ | PROT_WRITE | PROT_EXEC;

/// One lock class and mode's lock_stat figures (cumulative, or a delta over a run).
struct LockFig {
  uint64_t acquisitions = 0;
  uint64_t contentions = 0;
  double wait_s = 0;                  // total timed wait
  double wait_max_s = 0;              // longest wait (since daemon start, see max_exact)
  bool max_exact = true;              // delta: the run raised the max, so it is the run's
  std::vector<uint64_t> wait_buckets;  // per bucket (not cumulative), last = +Inf
};

/// Lock statistics of one profile: "vma_lock write" -> figures, events, bucket bounds.
struct LockFigures {
  std::map<std::string, LockFig> locks;
  std::map<std::string, uint64_t> events;
  std::vector<double> bounds;  // bucket upper bounds, seconds, without +Inf
  bool timing = true;          // --lock-stats on

  /// this - base; the max is this run's only if it grew.
  LockFigures Minus(const LockFigures& base) const {
    LockFigures d = *this;
    for (auto& [name, l] : d.locks) {
      auto it = base.locks.find(name);
      if (it == base.locks.end()) continue;
      const LockFig& b = it->second;
      l.acquisitions -= b.acquisitions;
      l.contentions -= b.contentions;
      l.wait_s -= b.wait_s;
      l.max_exact = l.wait_max_s > b.wait_max_s;
      for (size_t i = 0; i < l.wait_buckets.size() && i < b.wait_buckets.size(); i++)
        l.wait_buckets[i] -= b.wait_buckets[i];
    }
    for (auto& [name, n] : d.events)
      if (auto it = base.events.find(name); it != base.events.end()) n -= it->second;
    return d;
  }
};

/// Timed waits in the histogram; with `bounds`, only those longer than `over` seconds
/// (whole buckets above it: `over` should be a bucket bound).
uint64_t Waits(const LockFig& l, const std::vector<double>& bounds = {}, double over = 0) {
  uint64_t n = 0;
  for (size_t i = 0; i < l.wait_buckets.size(); i++) {
    const double lower = i == 0 || bounds.empty() ? 0 : bounds[std::min(i, bounds.size()) - 1];
    if (lower >= over) n += l.wait_buckets[i];
  }
  return n;
}

/// Upper bound (seconds) of the bucket holding the q-quantile of the waits; +Inf for the
/// last bucket, NaN without waits.
double HistQuantile(const LockFig& l, const std::vector<double>& bounds, double q) {
  const uint64_t total = Waits(l);
  if (total == 0) return NAN;
  const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * total)));
  uint64_t cum = 0;
  for (size_t i = 0; i < l.wait_buckets.size(); i++) {
    cum += l.wait_buckets[i];
    if (cum >= rank) return i < bounds.size() ? bounds[i] : INFINITY;
  }
  return INFINITY;
}

/// One client's calls into the space (one thread each).
class Client {
 public:
  virtual ~Client() = default;
  /// Writes one byte per page of [addr, addr+len); adds the faults taken.
  virtual bool WritePages(uint64_t addr, uint64_t len, uint64_t* faults) = 0;
  virtual bool DontNeed(uint64_t addr, uint64_t len) = 0;
  virtual bool Mprotect(uint64_t addr, uint64_t len, int prot) = 0;
  virtual bool Ping() = 0;
};

/// Where the space lives: a daemon over gRPC, or the engine in this process.
class Target {
 public:
  virtual ~Target() = default;
  /// Creates the space with `profile` and maps `len` bytes rw; *base = its address.
  virtual std::string Setup(const std::string& profile, uint64_t len, uint64_t* base) = 0;
  virtual std::unique_ptr<Client> NewClient() = 0;
  virtual bool ReadLocks(const std::string& profile, LockFigures* out) = 0;
  virtual uint64_t MapCount() = 0;
  virtual void Teardown() = 0;
  virtual bool has_ping() const = 0;
};

class GrpcClient : public Client {
 public:
  GrpcClient(const std::string& target, uint64_t space) : stub_(NewStub(target)), space_(space) {}
  bool WritePages(uint64_t addr, uint64_t len, uint64_t* faults) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::AccessRequest a;
    a.set_space_id(space_);
    a.set_addr(addr);
    a.set_len(len);
    a.set_stride(kPage);
    a.set_access(v1::ACCESS_WRITE);
    v1::AccessResponse r;
    if (!stub_->Access(&ctx, a, &r).ok() || r.stop().outcome() != v1::FAULT_OUTCOME_NONE) return false;
    *faults += r.faults();
    return true;
  }
  bool DontNeed(uint64_t addr, uint64_t len) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::MadviseRequest m;
    m.set_space_id(space_);
    m.set_addr(addr);
    m.set_len(len);
    m.set_advice(MADV_DONTNEED);
    v1::MadviseResponse r;
    return stub_->Madvise(&ctx, m, &r).ok();
  }
  bool Mprotect(uint64_t addr, uint64_t len, int prot) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::MprotectRequest m;
    m.set_space_id(space_);
    m.set_addr(addr);
    m.set_len(len);
    m.set_prot(prot);
    v1::MprotectResponse r;
    return stub_->Mprotect(&ctx, m, &r).ok();
  }
  bool Ping() override {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::PingResponse r;
    return stub_->Ping(&ctx, {}, &r).ok();
  }

 private:
  std::unique_ptr<v1::VmSpace::Stub> stub_;
  uint64_t space_;
};

class GrpcTarget : public Target {
 public:
  explicit GrpcTarget(std::string target) : target_(std::move(target)), stub_(NewStub(target_)) {}
  std::string Setup(const std::string& profile, uint64_t len, uint64_t* base) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::CreateSpaceRequest req;
    req.mutable_settings()->set_locking_profile(profile);
    req.set_label("rpc_latency_bench vma_writers");
    v1::CreateSpaceResponse cs;
    grpc::Status s = stub_->CreateSpace(&ctx, req, &cs);
    if (!s.ok()) return "CreateSpace at " + target_ + ": " + s.error_message();
    space_ = cs.space_id();
    grpc::ClientContext mctx;
    mctx.set_deadline(Deadline());
    v1::MmapRequest m;
    m.set_space_id(space_);
    m.set_len(len);
    m.set_prot(kProtRw);
    m.set_flags(MAP_PRIVATE | MAP_ANONYMOUS);
    v1::MmapResponse mr;
    s = stub_->Mmap(&mctx, m, &mr);
    if (!s.ok()) return "Mmap: " + s.error_message();
    *base = mr.addr();
    return "";
  }
  std::unique_ptr<Client> NewClient() override { return std::make_unique<GrpcClient>(target_, space_); }
  bool ReadLocks(const std::string& profile, LockFigures* out) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::GetLockStatsRequest req;
    req.set_locking_profile(profile);
    v1::GetLockStatsResponse r;
    if (!stub_->GetLockStats(&ctx, req, &r).ok()) return false;
    *out = {};
    for (const v1::LockStat& l : r.locks()) {
      LockFig& f = out->locks[l.lock() + " " + l.mode()];
      f.acquisitions = l.acquisitions();
      f.contentions = l.contentions();
      f.wait_s = l.wait_seconds_total();
      f.wait_max_s = l.wait_seconds_max();
      f.wait_buckets.assign(l.wait_buckets().begin(), l.wait_buckets().end());
    }
    out->events.insert(r.events().begin(), r.events().end());
    out->bounds.assign(r.bucket_upper_seconds().begin(), r.bucket_upper_seconds().end());
    out->timing = r.lock_stats_enabled();
    return true;
  }
  uint64_t MapCount() override {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::GetMapsRequest req;
    req.set_space_id(space_);
    v1::GetMapsResponse r;
    return stub_->GetMaps(&ctx, req, &r).ok() ? r.map_count() : 0;
  }
  void Teardown() override {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    v1::DestroySpaceRequest d;
    d.set_space_id(space_);
    v1::DestroySpaceResponse dr;
    stub_->DestroySpace(&ctx, d, &dr);
  }
  bool has_ping() const override { return true; }

 private:
  std::string target_;
  std::unique_ptr<v1::VmSpace::Stub> stub_;
  uint64_t space_ = 0;
};

class EngineClient : public Client {
 public:
  explicit EngineClient(vmspace::AddressSpace& as) : as_(as) {}
  bool WritePages(uint64_t addr, uint64_t len, uint64_t* faults) override {
    const vmspace::AccessResult r = as_.Access(addr, len, kPage, vmspace::AccessType::kWrite);
    *faults += r.faults;
    return r.ok();
  }
  bool DontNeed(uint64_t addr, uint64_t len) override { return as_.Madvise(addr, len, MADV_DONTNEED).ok(); }
  bool Mprotect(uint64_t addr, uint64_t len, int prot) override { return as_.Mprotect(addr, len, prot).ok(); }
  bool Ping() override { return true; }

 private:
  vmspace::AddressSpace& as_;
};

/// The engine linked into this process: the clients are this process's threads, with
/// no RPC in between (so no Ping client either).
class EngineTarget : public Target {
 public:
  std::string Setup(const std::string& profile, uint64_t len, uint64_t* base) override {
    vmspace::SpaceOptions opts;
    std::string err;
    if (!vmspace::LockingProfile::Parse(profile, &opts.profile, &err)) return "--profile: " + err;
    slot_ = opts.profile.stats_slot();
    as_ = std::make_unique<vmspace::AddressSpace>(frames_, opts);
    vmspace::SysResult r = as_->Mmap(0, len, kProtRw, MAP_PRIVATE | MAP_ANONYMOUS);
    if (!r.ok()) return "Mmap: " + std::string(strerror(r.error));
    *base = r.value;
    return "";
  }
  std::unique_ptr<Client> NewClient() override { return std::make_unique<EngineClient>(*as_); }
  bool ReadLocks(const std::string&, LockFigures* out) override {
    using namespace vmspace;
    const StatsSnapshot s = ReadStats(slot_);
    *out = {};
    for (size_t c = 0; c < static_cast<size_t>(LockClass::kCount); c++)
      for (size_t m = 0; m < static_cast<size_t>(LockMode::kCount); m++) {
        const LockStatCell& cell = s.lock(static_cast<LockClass>(c), static_cast<LockMode>(m));
        LockFig& f = out->locks[std::string(LockClassName(static_cast<LockClass>(c))) + " " +
                                LockModeName(static_cast<LockMode>(m))];
        f.acquisitions = cell.acquisitions;
        f.contentions = cell.contentions;
        f.wait_s = cell.wait_ns_total * 1e-9;
        f.wait_max_s = cell.wait_ns_max * 1e-9;
        f.wait_buckets.assign(cell.wait_hist.begin(), cell.wait_hist.end());
      }
    for (size_t e = 0; e < static_cast<size_t>(Event::kCount); e++)
      out->events[EventName(static_cast<Event>(e))] = s.events[e];
    out->bounds.assign(kDurationBuckets.begin(), kDurationBuckets.end());
    out->timing = LockStatsEnabled();
    return true;
  }
  uint64_t MapCount() override { return as_->Counters().map_count; }
  void Teardown() override { as_.reset(); }
  bool has_ping() const override { return false; }

 private:
  vmspace::FrameAllocator frames_{0};
  std::unique_ptr<vmspace::AddressSpace> as_;
  int slot_ = 0;
};

struct WritersConfig {
  double seconds = 10;
  int faulters = 6;
  int mprotectors = 2;
  uint64_t slice_bytes = 128 << 10;
  std::string profile = "linux-6.6";
};

/// Latencies and counts of one client kind.
struct KindResult {
  std::vector<double> us;  // per call, sorted after the run
  double calls_per_s = 0;  // summed over the kind's clients
  uint64_t errors = 0;
  uint64_t faults = 0;  // WritePages only
};

/// Starts n client threads. Each waits for `go`, then calls body(client, i, call,
/// &faults) until `end`; call k's latency goes to kinds[k % kinds.size()] (a faulter
/// alternates two kinds of call). body returns false for a failed call.
template <typename Body>
void Spawn(std::vector<std::thread>& ts, int n, Target& t, std::vector<KindResult*> kinds,
           std::mutex& mu, const std::atomic<bool>& go, const Clock::time_point& end, Body body) {
  for (int i = 0; i < n; i++)
    ts.emplace_back([&mu, &go, &end, i, body, kinds, client = std::shared_ptr<Client>(t.NewClient())] {
      std::vector<KindResult> mine(kinds.size());
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      const auto t0 = Clock::now();
      for (uint64_t call = 0; Clock::now() < end; call++) {
        KindResult& k = mine[call % kinds.size()];
        const auto a = Clock::now();
        const bool ok = body(*client, i, call, &k.faults);
        k.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
        if (!ok) k.errors++;
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      std::lock_guard<std::mutex> l(mu);
      for (size_t j = 0; j < kinds.size(); j++) {
        KindResult& k = *kinds[j];
        k.us.insert(k.us.end(), mine[j].us.begin(), mine[j].us.end());
        k.calls_per_s += mine[j].us.size() / s;
        k.errors += mine[j].errors;
        k.faults += mine[j].faults;
      }
    });
}

std::string Us(double seconds) {
  if (std::isnan(seconds)) return "-";
  if (std::isinf(seconds)) return ">1s";
  char b[32];
  snprintf(b, sizeof b, seconds < 1e-6 ? "%.2f" : "%.1f", seconds * 1e6);
  return b;
}

int RunVmaWriters(Target& target, const WritersConfig& cfg, bool json, const std::string& where) {
  // Layout: cells of [slice][one page]; faulter i writes slice i, mprotect client j
  // toggles the page after slice j * cells / mprotectors.
  const int cells = std::max(cfg.faulters, cfg.mprotectors);
  const uint64_t cell = cfg.slice_bytes + kPage;
  uint64_t base = 0;
  if (std::string err = target.Setup(cfg.profile, cells * cell, &base); !err.empty()) {
    fprintf(stderr, "vma_writers: %s\n", err.c_str());
    return 1;
  }
  auto slice = [base, cell](int i) { return base + i * cell; };
  auto toggled_page = [base, cell, cells, &cfg](int j) {
    return base + static_cast<uint64_t>(j * cells / cfg.mprotectors) * cell + cfg.slice_bytes;
  };
  {  // warm-up: the first write fault gives the VMA its anon_vma (under mmap_lock)
    auto c = target.NewClient();
    uint64_t f = 0;
    for (int i = 0; i < cfg.faulters; i++)
      if (!c->WritePages(slice(i), cfg.slice_bytes, &f) || !c->DontNeed(slice(i), cfg.slice_bytes)) {
        fprintf(stderr, "vma_writers: warm-up access failed\n");
        return 1;
      }
  }
  LockFigures before, after;
  if (!target.ReadLocks(cfg.profile, &before)) {
    fprintf(stderr, "vma_writers: GetLockStats failed\n");
    return 1;
  }
  KindResult access, madvise, mprotect, ping;
  std::mutex mu;
  std::atomic<bool> go{false};
  const Clock::time_point end =
      Clock::now() + std::chrono::milliseconds(200) +  // thread start-up
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg.seconds));
  std::vector<std::thread> ts;
  Spawn(ts, cfg.faulters, target, {&access, &madvise}, mu, go, end,
        [&](Client& c, int i, uint64_t call, uint64_t* faults) {
          return call % 2 == 0 ? c.WritePages(slice(i), cfg.slice_bytes, faults)
                               : c.DontNeed(slice(i), cfg.slice_bytes);
        });
  Spawn(ts, cfg.mprotectors, target, {&mprotect}, mu, go, end,
        [&](Client& c, int j, uint64_t call, uint64_t*) {
          return c.Mprotect(toggled_page(j), kPage, call % 2 == 0 ? kProtRwx : kProtRw);
        });
  if (target.has_ping())
    Spawn(ts, 1, target, {&ping}, mu, go, end, [](Client& c, int, uint64_t, uint64_t*) { return c.Ping(); });
  go.store(true, std::memory_order_release);
  for (auto& t : ts) t.join();
  {  // every toggled page back to rw: the VMA should be one again
    auto c = target.NewClient();
    for (int j = 0; j < cfg.mprotectors; j++) c->Mprotect(toggled_page(j), kPage, kProtRw);
  }
  if (!target.ReadLocks(cfg.profile, &after)) {
    fprintf(stderr, "vma_writers: GetLockStats failed\n");
    return 1;
  }
  const uint64_t map_count = target.MapCount();
  target.Teardown();
  const LockFigures d = after.Minus(before);

  const char* const kLockRows[] = {"vma_lock write", "vma_lock read", "mmap_lock write", "mmap_lock read"};
  struct Row {
    const char* name;
    KindResult* k;
  };
  std::vector<Row> rows = {{"Mprotect", &mprotect}, {"Access", &access}, {"Madvise", &madvise}};
  if (target.has_ping()) rows.push_back({"Ping", &ping});
  for (Row& r : rows) std::sort(r.k->us.begin(), r.k->us.end());
  const double p99_ratio = target.has_ping() ? Quantile(mprotect.us, 0.99) / Quantile(ping.us, 0.99) : NAN;
  const double p999_ratio = target.has_ping() ? Quantile(mprotect.us, 0.999) / Quantile(ping.us, 0.999) : NAN;
  const uint64_t mprotect_calls = mprotect.us.size();
  const uint64_t pages = cfg.slice_bytes / kPage;
  // The scenario did what it is for: no failed call, every Access faulted on every page,
  // faults took the VMA read lock (profiles with per-VMA locks), every Mprotect
  // write-locked the VMA, and the toggled pages re-merged. Exit status 3 otherwise.
  std::string broken;
  uint64_t errors = 0;
  for (const KindResult* k : {&access, &madvise, &mprotect, &ping}) errors += k->errors;
  if (errors) broken += " failed calls;";
  if (access.faults != pages * access.us.size()) broken += " an Access did not fault on every page;";
  if (d.locks.at("vma_lock write").acquisitions < mprotect_calls) broken += " an Mprotect took no VMA write lock;";
  if (map_count != 1) broken += " the VMA did not re-merge;";
  vmspace::LockingProfile prof;
  std::string perr;
  if (vmspace::LockingProfile::Parse(cfg.profile, &prof, &perr) && prof.vma_lock != vmspace::VmaLockMode::kOff &&
      d.events.at("vma_lock_success") == 0)
    broken += " no fault took the VMA read lock;";
  if (!broken.empty()) fprintf(stderr, "vma_writers: scenario broken:%s\n", broken.c_str());
  const int status = broken.empty() ? 0 : 3;

  if (json) {
    nlohmann::json j;
    j["scenario"] = "vma_writers";
    j["target"] = where;
    j["profile"] = cfg.profile;
    j["seconds"] = cfg.seconds;
    j["faulters"] = cfg.faulters;
    j["mprotectors"] = cfg.mprotectors;
    j["slice_bytes"] = cfg.slice_bytes;
    j["cpus"] = std::thread::hardware_concurrency();
    for (Row& r : rows)
      j["clients"][r.name] = {{"calls", r.k->us.size()},         {"calls_per_s", r.k->calls_per_s},
                              {"p50_us", Quantile(r.k->us, 0.5)}, {"p99_us", Quantile(r.k->us, 0.99)},
                              {"p999_us", Quantile(r.k->us, 0.999)},
                              {"max_us", r.k->us.empty() ? 0 : r.k->us.back()}, {"errors", r.k->errors}};
    j["clients"]["Access"]["faults"] = access.faults;
    if (target.has_ping()) {
      j["mprotect_p99_over_ping_p99"] = p99_ratio;
      j["mprotect_p999_over_ping_p999"] = p999_ratio;
    }
    j["lock_stats_enabled"] = d.timing;
    for (const char* name : kLockRows) {
      const LockFig& l = d.locks.at(name);
      const uint64_t w = Waits(l);
      auto num = [](double s) { return std::isfinite(s) ? nlohmann::json(s * 1e6) : nlohmann::json(nullptr); };
      j["locks"][name] = {{"acquisitions", l.acquisitions},
                          {"contentions", l.contentions},
                          {"timed_waits", w},
                          {"waits_over_1ms", Waits(l, d.bounds, 1e-3)},
                          {"wait_mean_us", w ? num(l.wait_s / w) : nullptr},
                          {"wait_p50_le_us", num(HistQuantile(l, d.bounds, 0.5))},
                          {"wait_p99_le_us", num(HistQuantile(l, d.bounds, 0.99))},
                          {"wait_max_us", l.wait_max_s * 1e6},
                          {"wait_max_exact", l.max_exact},
                          {"wait_buckets", l.wait_buckets}};
    }
    std::vector<double> bounds_us;
    for (double b : d.bounds) bounds_us.push_back(b * 1e6);
    j["bucket_upper_us"] = bounds_us;
    j["events"] = d.events;
    j["map_count_after"] = map_count;
    printf("%s\n", j.dump(2).c_str());
    return status;
  }

  printf("vma_writers on %s: %d faulters (%llu KiB slice each: write %llu pages, MADV_DONTNEED), "
         "%d mprotect clients (split/merge one page each)%s, one VMA, profile %s, %.1f s, %u CPUs\n",
         where.c_str(), cfg.faulters, static_cast<unsigned long long>(cfg.slice_bytes >> 10),
         static_cast<unsigned long long>(pages), cfg.mprotectors, target.has_ping() ? ", 1 Ping client" : "",
         cfg.profile.c_str(), cfg.seconds, std::thread::hardware_concurrency());
  printf("\n%-10s %10s %10s %10s %10s %10s %8s\n", "client", "calls/s", "p50_us", "p99_us", "p99.9_us",
         "max_us", "errors");
  for (Row& r : rows)
    printf("%-10s %10.0f %10.1f %10.1f %10.1f %10.1f %8llu\n", r.name, r.k->calls_per_s, Quantile(r.k->us, 0.5),
           Quantile(r.k->us, 0.99), Quantile(r.k->us, 0.999), r.k->us.empty() ? 0 : r.k->us.back(),
           static_cast<unsigned long long>(r.k->errors));
  printf("faults/s %.0f (%.1f per Access; %llu expected)\n",
         access.faults / std::max(1.0, static_cast<double>(access.us.size())) * access.calls_per_s,
         access.us.empty() ? 0.0 : static_cast<double>(access.faults) / access.us.size(),
         static_cast<unsigned long long>(pages));
  if (target.has_ping())
    printf("Mprotect p99 / Ping p99 = %.2f (target after the fix: <= 2); p99.9 / p99.9 = %.2f\n", p99_ratio,
           p999_ratio);

  printf("\nlock statistics over the run (profile %s%s)\n", cfg.profile.c_str(),
         d.timing ? "" : "; --lock-stats off: no wait times");
  printf("%-16s %12s %12s %8s %8s %10s %10s %10s %11s\n", "lock", "acquisitions", "contentions", "waits",
         ">1ms", "mean_us", "p50<=_us", "p99<=_us", "max_us");
  for (const char* name : kLockRows) {
    const LockFig& l = d.locks.at(name);
    const uint64_t w = Waits(l);
    const std::string max = w == 0 ? "-" : (l.max_exact ? "" : "<=") + Us(l.max_exact ? l.wait_max_s
                                                                                      : HistQuantile(l, d.bounds, 1));
    printf("%-16s %12llu %12llu %8llu %8llu %10s %10s %10s %11s\n", name,
           static_cast<unsigned long long>(l.acquisitions), static_cast<unsigned long long>(l.contentions),
           static_cast<unsigned long long>(w), static_cast<unsigned long long>(Waits(l, d.bounds, 1e-3)),
           w ? Us(l.wait_s / w).c_str() : "-",
           Us(HistQuantile(l, d.bounds, 0.5)).c_str(), Us(HistQuantile(l, d.bounds, 0.99)).c_str(), max.c_str());
  }
  const LockFig& vw = d.locks.at("vma_lock write");
  printf("vma_lock write waits by bucket:");
  for (size_t i = 0; i < vw.wait_buckets.size(); i++)
    if (vw.wait_buckets[i])
      printf(" %s%sus:%llu", i < d.bounds.size() ? "<=" : ">", Us(d.bounds[std::min(i, d.bounds.size() - 1)]).c_str(),
             static_cast<unsigned long long>(vw.wait_buckets[i]));
  printf("\n");
  printf("vma_lock write-locks per Mprotect %.2f; faults under the VMA lock %llu of %llu "
         "(vma_lock_abort %llu); VMAs after: %llu\n",
         mprotect_calls ? static_cast<double>(vw.acquisitions) / mprotect_calls : 0.0,
         static_cast<unsigned long long>(d.events.at("vma_lock_success")),
         static_cast<unsigned long long>(d.events.at("pgfault")),
         static_cast<unsigned long long>(d.events.at("vma_lock_abort")),
         static_cast<unsigned long long>(map_count));
  return status;
}

std::vector<int> ParseList(const std::string& v) {
  std::vector<int> out;
  for (size_t p = 0; p < v.size();) {
    size_t q = v.find(',', p);
    out.push_back(atoi(v.substr(p, q - p).c_str()));
    p = q == std::string::npos ? v.size() : q + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string target = "127.0.0.1:50051", scenario = "table";
  double seconds = -1;  // default per scenario
  std::vector<int> clients = {1, 16};
  std::string token_target, tls_target;
  int rounds = 6;
  WritersConfig wc;
  bool json = false, in_process = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--json") {
      json = true;
      continue;
    }
    if (a == "--in-process") {
      in_process = true;
      continue;
    }
    if (i + 1 >= argc) a = "--help";
    const std::string v = a == "--help" ? "" : argv[++i];
    if (a == "--target") target = v;
    else if (a == "--scenario") scenario = v;
    else if (a == "--seconds") seconds = atof(v.c_str());
    else if (a == "--clients") clients = ParseList(v);
    else if (a == "--faulters") wc.faulters = atoi(v.c_str());
    else if (a == "--mprotectors") wc.mprotectors = atoi(v.c_str());
    else if (a == "--slice-kib") wc.slice_bytes = strtoull(v.c_str(), nullptr, 10) << 10;
    else if (a == "--profile") wc.profile = v;
    else if (a == "--token") g_conn.token = v;
    else if (a == "--token-target") token_target = v;
    else if (a == "--tls-target") tls_target = v;
    else if (a == "--rounds") rounds = std::max(1, atoi(v.c_str()));
    else if (a == "--tls-ca") {
      std::ifstream in(v);
      std::stringstream pem;
      pem << in.rdbuf();
      g_conn.tls_ca_pem = pem.str();
      if (!in || g_conn.tls_ca_pem.empty()) {
        fprintf(stderr, "--tls-ca %s: cannot read\n", v.c_str());
        return 2;
      }
    } else {
      fprintf(stderr,
              "usage: %s [--target HOST:PORT] [--token TOKEN] [--tls-ca PEM] [--seconds S]\n"
              "          [--scenario table] [--clients 1,16]\n"
              "          --scenario auth --target OPEN --token-target HOST:PORT --token T\n"
              "                          [--tls-target HOST:PORT --tls-ca PEM] [--rounds 6]\n"
              "          --scenario vma_writers [--in-process] [--faulters 6] [--mprotectors 2]\n"
              "                                 [--slice-kib 128] [--profile linux-6.6] [--json]\n",
              argv[0]);
      return 2;
    }
  }
  if (scenario == "table") return RunTable(target, seconds < 0 ? 2 : seconds, clients);
  if (scenario == "auth") {
    std::vector<AuthVariant> vs;
    auto add = [&vs](const std::string& name, const std::string& at, const std::string& token,
                     const std::string& ca) {
      AuthVariant v;
      v.name = name;
      v.conn.target = at;
      v.conn.token = token;
      v.conn.tls_ca_pem = ca;
      vs.push_back(std::move(v));
    };
    add("open", target, "", "");
    if (!token_target.empty()) add("token", token_target, g_conn.token, "");
    if (!tls_target.empty())
      add(g_conn.token.empty() ? "tls" : "tls+token", tls_target, g_conn.token, g_conn.tls_ca_pem);
    if (vs.size() < 2 || (!tls_target.empty() && g_conn.tls_ca_pem.empty())) {
      fprintf(stderr, "--scenario auth needs --token-target (with --token) and/or --tls-target (with --tls-ca)\n");
      return 2;
    }
    return RunAuth(std::move(vs), seconds < 0 ? 6 : seconds, clients, rounds);
  }
  if (scenario != "vma_writers") {
    fprintf(stderr, "unknown --scenario %s (table | vma_writers)\n", scenario.c_str());
    return 2;
  }
  if (wc.faulters < 1 || wc.mprotectors < 1 || wc.slice_bytes < kPage || wc.slice_bytes % kPage) {
    fprintf(stderr, "vma_writers needs --faulters >= 1, --mprotectors >= 1 and a whole number of pages per slice\n");
    return 2;
  }
  wc.seconds = seconds < 0 ? 10 : seconds;
  if (in_process) {
    EngineTarget t;
    return RunVmaWriters(t, wc, json, "the engine in-process");
  }
  GrpcTarget t(target);
  return RunVmaWriters(t, wc, json, target);
}
