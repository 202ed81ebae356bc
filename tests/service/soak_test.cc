// SPDX-License-Identifier: Apache-2.0
// Soak: 64 clients, each on its own connection and its own spaces, run random
// ops (mmap, munmap, mprotect, madvise, write, read, access, fault, a few requests the
// kernel refuses, and Batch messages of several) against a real vmspaced. Each client
// keeps a shadow model of its space (per page: mapped or not, prot, contents), predicts
// every answer from it and checks it: every ReadMemory returns exactly the shadow's
// bytes. The ops come from fixed seeds (client number), so every machine runs the same
// sequences; only their interleaving varies. At the end every space is destroyed and
// the daemon must be back to zero frames and page tables, its free-frame cache at most
// --frame-cache-bytes and its RSS back near where it started; RSS and thread count are
// sampled throughout and bounded.
//
// Length: kOpsPerClient ops per client (about a minute on a 2-core machine);
// VMSPACE_SOAK_SECONDS=600 runs 10x as many (the same sequences, longer).
#include "daemon.h"  // first (see there)

#include <sys/mman.h>

#include <atomic>
#include <fstream>
#include <random>
#include <sstream>

namespace vmspace::service_test {
namespace {

using grpc::StatusCode;

constexpr uint64_t kPage = 4096;
constexpr int kClients = 64;
constexpr uint64_t kWindowPages = 512;      // each client's addresses: [kBase, kBase + 2 MiB)
constexpr uint64_t kBase = 0x200000000ull;  // 8 GiB, far from mmap_base and mmap_min_addr
constexpr uint64_t kMaxRunPages = 32;       // most pages one op spans
constexpr uint64_t kMaxIo = 64 * 1024;      // most bytes one read/write/access spans
constexpr int kOpsPerSpace = 1500;          // then the space is destroyed and a new one made
constexpr int kOpsPerClient = 5500;         // for 60 s (VMSPACE_SOAK_SECONDS scales it)
constexpr uint64_t kFrameCache = 4ull << 20;    // --frame-cache-bytes
constexpr uint64_t kMaxFrames = 512ull << 20;   // --max-frame-bytes (never reached)
// RSS after the load beyond the start and the frame cache: gRPC's idle threads and
// connections, and what malloc keeps (vmspaced trims its heap every 5 s).
constexpr uint64_t kRssMargin = 32ull << 20;
constexpr int kUnmapped = -1;

/// What the daemon must answer for one op (from the shadow model).
struct Expect {
  StatusCode code = StatusCode::OK;
  std::string errno_name;  // of an error
  uint64_t mmap_addr = 0;
  std::string data;        // ReadMemory: exactly these bytes
  uint64_t bytes_written = 0;
  uint64_t accesses = 0;
  bool fault_sigsegv = false;  // Fault: SIGSEGV with si_code, else handled or none
  v1::SiCode si_code = v1::SI_CODE_NONE;
};

/// One client's space as it should be, and the generator of its next ops.
class Model {
 public:
  explicit Model(uint64_t seed) : rng_(seed) { Reset(); }

  /// A fresh, empty space.
  void Reset() {
    mem_.assign(kWindowPages * kPage, 0);
    prot_.assign(kWindowPages, kUnmapped);
  }

  uint64_t Rand(uint64_t n) { return rng_() % n; }

  /// The next op on `space` and its expected answer; the model is updated as if it ran.
  std::pair<v1::Op, Expect> Next(uint64_t space) {
    v1::Op op;
    Expect e;
    const uint64_t p = Rand(kWindowPages);
    const uint64_t r = Rand(100);
    if (r < 10) {
      Mmap(space, p, op, e);
    } else if (r < 13) {
      const uint64_t n = 1 + Rand(std::min(kMaxRunPages, kWindowPages - p));
      v1::MunmapRequest* m = op.mutable_munmap();
      m->set_space_id(space);
      m->set_addr(Addr(p));
      m->set_len(n * kPage);
      Set(p, n, kUnmapped);
    } else if (r < 18) {
      const uint64_t n = RunOf(p, [](int pr) { return pr != kUnmapped; });
      v1::MprotectRequest* m = op.mutable_mprotect();
      m->set_space_id(space);
      m->set_addr(Addr(p));
      m->set_len(std::max<uint64_t>(n, 1) * kPage);
      m->set_prot(RandProt());
      if (n == 0) {  // starts in a hole: ENOMEM, nothing changed (do_mprotect_pkey)
        e.code = StatusCode::RESOURCE_EXHAUSTED;
        e.errno_name = "ENOMEM";
      } else {
        for (uint64_t i = p; i < p + n; i++) prot_[i] = m->prot();
      }
    } else if (r < 21) {
      const uint64_t n = RunOf(p, [](int pr) { return pr != kUnmapped; });
      v1::MadviseRequest* m = op.mutable_madvise();
      m->set_space_id(space);
      m->set_addr(Addr(p));
      m->set_advice(MADV_DONTNEED);
      if (n == 0) {  // nothing mapped there: ENOMEM
        m->set_len(kPage);
        e.code = StatusCode::RESOURCE_EXHAUSTED;
        e.errno_name = "ENOMEM";
      } else {
        m->set_len(n * kPage);
        std::fill_n(mem_.begin() + static_cast<long>(p * kPage), n * kPage, 0);  // zero-fill on next touch
      }
    } else if (r < 51) {
      uint64_t off, len;
      if (!Span(p, kWritable, &off, &len)) return Mmap(space, p, op, e), std::pair{op, e};
      std::string data(len, '\0');
      for (char& c : data) c = static_cast<char>(rng_());
      v1::WriteMemoryRequest* w = op.mutable_write();
      w->set_space_id(space);
      w->set_addr(kBase + off);
      w->set_data(data);
      std::copy(data.begin(), data.end(), mem_.begin() + static_cast<long>(off));
      e.bytes_written = len;
    } else if (r < 76) {
      uint64_t off, len;
      if (!Span(p, kReadable, &off, &len)) return Mmap(space, p, op, e), std::pair{op, e};
      v1::ReadMemoryRequest* rd = op.mutable_read();
      rd->set_space_id(space);
      rd->set_addr(kBase + off);
      rd->set_len(len);
      e.data.assign(mem_.begin() + static_cast<long>(off), mem_.begin() + static_cast<long>(off + len));
    } else if (r < 88) {
      const bool write = Rand(2) == 0;
      uint64_t off, len;
      if (!Span(p, write ? kWritable : kReadable, &off, &len)) return Mmap(space, p, op, e), std::pair{op, e};
      static constexpr uint64_t kStrides[] = {1, 3, 64, 100, 4096, 5000};
      const uint64_t stride = kStrides[Rand(std::size(kStrides))];
      v1::AccessRequest* a = op.mutable_access();
      a->set_space_id(space);
      a->set_addr(kBase + off);
      a->set_len(len);
      a->set_stride(stride);
      a->set_access(write ? v1::ACCESS_WRITE : v1::ACCESS_READ);
      for (uint64_t i = 0; i < len; i += stride) {
        if (write) mem_[off + i] = static_cast<uint8_t>(i);  // a write stores (uint8)i at addr+i
        e.accesses++;
      }
    } else if (r < 96) {
      const bool write = Rand(2) == 0;
      v1::FaultRequest* f = op.mutable_fault();
      f->set_space_id(space);
      f->set_addr(Addr(p) + Rand(kPage));
      f->set_access(write ? v1::ACCESS_WRITE : v1::ACCESS_READ);
      if (prot_[p] == kUnmapped) {
        e.fault_sigsegv = true;
        e.si_code = v1::SEGV_MAPERR;
      } else if (!(prot_[p] & (write ? PROT_WRITE : PROT_READ))) {
        e.fault_sigsegv = true;
        e.si_code = v1::SEGV_ACCERR;
      }
    } else {  // requests the kernel refuses: EINVAL, nothing changed
      e.code = StatusCode::INVALID_ARGUMENT;
      e.errno_name = "EINVAL";
      if (Rand(2) == 0) {
        v1::MunmapRequest* m = op.mutable_munmap();
        m->set_space_id(space);
        m->set_addr(Addr(p) + 1 + Rand(kPage - 1));  // unaligned
        m->set_len(kPage);
      } else {
        v1::MmapRequest* m = op.mutable_mmap();
        m->set_space_id(space);
        m->set_len(0);
        m->set_prot(PROT_READ);
        m->set_flags(MAP_PRIVATE | MAP_ANONYMOUS);
      }
    }
    return {op, e};
  }

 private:
  static constexpr auto kReadable = [](int pr) { return pr != kUnmapped && (pr & PROT_READ); };
  static constexpr auto kWritable = [](int pr) { return pr != kUnmapped && (pr & PROT_WRITE); };

  static uint64_t Addr(uint64_t page) { return kBase + page * kPage; }

  int RandProt() {
    static constexpr int kProts[] = {PROT_NONE, PROT_READ, PROT_READ | PROT_WRITE, PROT_READ | PROT_WRITE};
    return kProts[Rand(std::size(kProts))];
  }

  void Set(uint64_t p, uint64_t n, int prot) {
    for (uint64_t i = p; i < p + n; i++) prot_[i] = static_cast<int8_t>(prot);
    std::fill_n(mem_.begin() + static_cast<long>(p * kPage), n * kPage, 0);
  }

  // MAP_FIXED private anonymous mapping of 1..kMaxRunPages pages at page p (replacing what was
  // there, zero-filled).
  void Mmap(uint64_t space, uint64_t p, v1::Op& op, Expect& e) {
    op.Clear();
    e = Expect{};
    const uint64_t n = 1 + Rand(std::min(kMaxRunPages, kWindowPages - p));
    v1::MmapRequest* m = op.mutable_mmap();
    m->set_space_id(space);
    m->set_addr(Addr(p));
    m->set_len(n * kPage);
    m->set_prot(RandProt());
    m->set_flags(MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
    Set(p, n, m->prot());
    e.mmap_addr = Addr(p);
  }

  // Pages from p (at most kMaxRunPages) whose prot satisfies `ok`; 0 if p does not.
  template <typename Pred>
  uint64_t RunOf(uint64_t p, Pred ok) const {
    uint64_t n = 0;
    while (p + n < kWindowPages && n < kMaxRunPages && ok(prot_[p + n])) n++;
    return n;
  }

  // A byte range [off, off + len) (offsets in the window) inside a run from page p,
  // unaligned, at most kMaxIo bytes; false if page p does not satisfy `ok`.
  template <typename Pred>
  bool Span(uint64_t p, Pred ok, uint64_t* off, uint64_t* len) {
    const uint64_t n = RunOf(p, ok);
    if (n == 0) return false;
    const uint64_t bytes = n * kPage;
    const uint64_t start = Rand(bytes);
    *off = p * kPage + start;
    *len = 1 + Rand(std::min(kMaxIo, bytes - start));
    return true;
  }

  std::mt19937_64 rng_;
  std::vector<uint8_t> mem_;
  std::vector<int8_t> prot_;
};

/// Runs one op as its unary call; the answer in Batch's form.
v1::OpResult Unary(v1::VmSpace::Stub& stub, const v1::Op& op) {
  v1::OpResult r;
  grpc::Status s;
  auto ctx = Ctx(120000);
  switch (op.op_case()) {
    case v1::Op::kMmap: s = stub.Mmap(ctx.get(), op.mmap(), r.mutable_mmap()); break;
    case v1::Op::kMunmap: s = stub.Munmap(ctx.get(), op.munmap(), r.mutable_munmap()); break;
    case v1::Op::kMprotect: s = stub.Mprotect(ctx.get(), op.mprotect(), r.mutable_mprotect()); break;
    case v1::Op::kMadvise: s = stub.Madvise(ctx.get(), op.madvise(), r.mutable_madvise()); break;
    case v1::Op::kFault: s = stub.Fault(ctx.get(), op.fault(), r.mutable_fault()); break;
    case v1::Op::kAccess: s = stub.Access(ctx.get(), op.access(), r.mutable_access()); break;
    case v1::Op::kRead: s = stub.ReadMemory(ctx.get(), op.read(), r.mutable_read()); break;
    case v1::Op::kWrite: s = stub.WriteMemory(ctx.get(), op.write(), r.mutable_write()); break;
    default: ADD_FAILURE() << "op " << op.op_case() << " not generated"; break;
  }
  r.set_code(s.error_code());
  if (!s.ok()) {
    r.set_message(s.error_message());
    r.set_errno_name(s.error_message().substr(0, s.error_message().find(':')));
  }
  return r;
}

/// "" if `r` is what `e` predicts for `op`, else what differs.
std::string Check(const v1::Op& op, const Expect& e, const v1::OpResult& r) {
  std::ostringstream out;
  if (r.code() != static_cast<int>(e.code) || (!e.errno_name.empty() && r.errno_name() != e.errno_name)) {
    out << "status " << r.code() << " " << r.errno_name() << " (" << r.message() << "), want " << e.code << " "
        << e.errno_name;
    return out.str();
  }
  if (e.code != StatusCode::OK) return "";
  switch (op.op_case()) {
    case v1::Op::kMmap:
      if (r.mmap().addr() != e.mmap_addr) out << "mmap at " << r.mmap().addr() << ", want " << e.mmap_addr;
      break;
    case v1::Op::kRead:
      if (r.read().data() != e.data) {
        size_t i = 0;
        while (i < e.data.size() && i < r.read().data().size() && e.data[i] == r.read().data()[i]) i++;
        out << "read of " << e.data.size() << " bytes got " << r.read().data().size() << ", first difference at +"
            << i;
      }
      break;
    case v1::Op::kWrite:
      if (r.write().bytes_written() != e.bytes_written)
        out << "wrote " << r.write().bytes_written() << ", want " << e.bytes_written;
      break;
    case v1::Op::kAccess:
      if (r.access().accesses() != e.accesses || r.access().stop().outcome() != v1::FAULT_OUTCOME_NONE)
        out << "access touched " << r.access().accesses() << " (stop " << r.access().stop().outcome()
            << "), want " << e.accesses;
      break;
    case v1::Op::kFault: {
      const v1::FaultInfo& f = r.fault().fault();
      const bool segv = f.outcome() == v1::FAULT_OUTCOME_SIGSEGV;
      if (segv != e.fault_sigsegv || (segv && f.si_code() != e.si_code) ||
          (!segv && f.outcome() != v1::FAULT_OUTCOME_NONE && f.outcome() != v1::FAULT_OUTCOME_MINOR))
        out << "fault outcome " << f.outcome() << " si_code " << f.si_code() << ", want "
            << (e.fault_sigsegv ? "SIGSEGV " : "no signal ") << e.si_code;
      break;
    }
    default: break;
  }
  return out.str();
}

/// Field `key` ("VmRSS", "Threads") of /proc/<pid>/status (VmRSS in bytes); 0 if absent.
uint64_t ProcStatus(pid_t pid, const std::string& key) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    const uint64_t v = std::stoull(line.substr(key.size() + 1));
    return key == "VmRSS" ? v * 1024 : v;
  }
  return 0;
}

struct ClientTotals {
  uint64_t ops = 0, batch_ops = 0, batches = 0, spaces = 0, reads_checked = 0, wrong = 0;
};

// One client: kOpsPerSpace ops per space, then DestroySpace and a new one; about one
// call in ten is a Batch message of 2..8 ops on the client's one stream.
void RunClient(const Daemon& d, int client, int ops, ClientTotals* t, std::chrono::seconds limit) {
  auto stub = d.NewStub();
  Model model(0x5eed0000 + static_cast<uint64_t>(client));
  grpc::ClientContext sctx;
  sctx.set_deadline(std::chrono::system_clock::now() + limit);
  auto stream = stub->Batch(&sctx);
  uint64_t space = 0;
  int space_ops = 0;
  auto fail = [&](const std::string& what) {
    if (t->wrong++ < 5) ADD_FAILURE() << "client " << client << ": " << what;
  };
  for (int i = 0; i < ops;) {
    if (space == 0 || space_ops >= kOpsPerSpace) {
      if (space) {
        v1::DestroySpaceRequest dr;
        dr.set_space_id(space);
        v1::DestroySpaceResponse dresp;
        const grpc::Status s = stub->DestroySpace(Ctx(120000).get(), dr, &dresp);
        if (!s.ok()) fail("DestroySpace: " + s.error_message());
      }
      v1::CreateSpaceRequest cr;
      cr.set_label("soak-" + std::to_string(client));
      v1::CreateSpaceResponse cresp;
      const grpc::Status s = stub->CreateSpace(Ctx(120000).get(), cr, &cresp);
      if (!s.ok()) return fail("CreateSpace: " + s.error_message());
      space = cresp.space_id();
      model.Reset();
      space_ops = 0;
      t->spaces++;
    }
    const int n = std::min(ops - i, model.Rand(10) == 0 ? 2 + static_cast<int>(model.Rand(7)) : 1);
    std::vector<std::pair<v1::Op, Expect>> ops_now;
    for (int k = 0; k < n; k++) ops_now.push_back(model.Next(space));
    std::vector<v1::OpResult> results;
    if (n == 1) {
      results.push_back(Unary(*stub, ops_now[0].first));
    } else {
      v1::BatchRequest req;
      req.set_tag(static_cast<uint64_t>(i));
      for (auto& [op, e] : ops_now) *req.add_ops() = op;
      v1::BatchResponse resp;
      if (!stream->Write(req) || !stream->Read(&resp)) return fail("Batch stream ended: " + stream->Finish().error_message());
      if (resp.tag() != static_cast<uint64_t>(i) || resp.results_size() != n)
        return fail("Batch answer tag " + std::to_string(resp.tag()) + " with " +
                    std::to_string(resp.results_size()) + " results");
      results.assign(resp.results().begin(), resp.results().end());
      t->batches++;
      t->batch_ops += n;
    }
    for (int k = 0; k < n; k++) {
      const std::string bad = Check(ops_now[k].first, ops_now[k].second, results[k]);
      if (!bad.empty()) fail("op " + std::to_string(i + k) + " " + ops_now[k].first.ShortDebugString().substr(0, 200) + ": " + bad);
      if (ops_now[k].first.has_read()) t->reads_checked++;
    }
    i += n;
    space_ops += n;
    t->ops += n;
  }
  stream->WritesDone();
  const grpc::Status s = stream->Finish();
  if (!s.ok()) fail("Batch stream: " + s.error_message());
  v1::DestroySpaceRequest dr;
  dr.set_space_id(space);
  v1::DestroySpaceResponse dresp;
  const grpc::Status ds = stub->DestroySpace(Ctx(120000).get(), dr, &dresp);
  if (!ds.ok()) fail("DestroySpace: " + ds.error_message());
}

Samples Scrape(const Daemon& d) { return ParseMetrics(HttpGet(d.metrics_port(), "/metrics")); }

TEST(SoakTest, SixtyFourClientsRandomOpsAgainstAShadowModel) {
  const char* env = getenv("VMSPACE_SOAK_SECONDS");
  const int seconds = env && *env ? std::max(1, atoi(env)) : 60;
  const int ops = static_cast<int>(static_cast<int64_t>(kOpsPerClient) * seconds / 60);
  Daemon d;
  ASSERT_TRUE(d.Start({"--metrics-listen=127.0.0.1:0", "--frame-cache-bytes=" + std::to_string(kFrameCache),
                       "--max-frame-bytes=" + std::to_string(kMaxFrames), "--max-streams=" + std::to_string(kClients),
                       "--deferred-flush-ms=100"}))
      << d.stderr_text();
  const uint64_t rss_start = ProcStatus(d.pid(), "VmRSS");
  const uint64_t threads_start = ProcStatus(d.pid(), "Threads");

  // Sampler: the daemon's RSS, threads and frame bytes, every 100 ms.
  std::atomic<bool> done{false};
  uint64_t rss_peak = rss_start, threads_peak = threads_start, frames_peak = 0;
  std::thread sampler([&] {
    for (int tick = 0; !done.load(); tick++) {
      rss_peak = std::max(rss_peak, ProcStatus(d.pid(), "VmRSS"));
      threads_peak = std::max(threads_peak, ProcStatus(d.pid(), "Threads"));
      if (tick % 5 == 0) {
        const double f = Get(Scrape(d), "vmspace_frame_bytes");
        frames_peak = std::max(frames_peak, static_cast<uint64_t>(std::max(0.0, f)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<ClientTotals> totals(kClients);
  std::vector<std::thread> clients;
  const std::chrono::seconds limit(seconds * 10 + 300);  // a hang fails, slowness does not
  for (int c = 0; c < kClients; c++)
    clients.emplace_back(RunClient, std::cref(d), c, ops, &totals[c], limit);
  for (std::thread& t : clients) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  done = true;
  sampler.join();

  ClientTotals sum;
  for (const ClientTotals& t : totals) {
    sum.ops += t.ops;
    sum.batches += t.batches;
    sum.batch_ops += t.batch_ops;
    sum.spaces += t.spaces;
    sum.reads_checked += t.reads_checked;
    sum.wrong += t.wrong;
  }
  EXPECT_EQ(sum.wrong, 0u) << "answers that differ from the shadow model";
  EXPECT_EQ(sum.ops, static_cast<uint64_t>(kClients) * ops) << "a client stopped early";

  // Every space destroyed: no space, no frame, no page table; the cache trimmed to the
  // watermark and the rest given back (polled: frees wait for a grace period, the trim
  // for the next --deferred-flush-ms tick, and frames a trim is handing back count as
  // held until its madvise returns).
  auto stub = d.NewStub();
  v1::ListSpacesRequest lr;
  v1::ListSpacesResponse lresp;
  ASSERT_TRUE(stub->ListSpaces(Ctx().get(), lr, &lresp).ok());
  EXPECT_EQ(lresp.spaces_size(), 0);
  Samples m;
  uint64_t rss_end = 0;
  for (int i = 0; i < 300; i++) {  // up to 30 s
    m = Scrape(d);
    rss_end = ProcStatus(d.pid(), "VmRSS");
    if (Get(m, "vmspace_frame_bytes") == 0 && Get(m, "vmspace_pagetable_bytes") == 0 &&
        Get(m, "vmspace_frame_cache_bytes") <= kFrameCache &&
        Get(m, "vmspace_frame_host_bytes") <= static_cast<double>(kFrameCache + (2ull << 20)) &&
        rss_end <= rss_start + kFrameCache + kRssMargin)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const uint64_t threads_end = ProcStatus(d.pid(), "Threads");
  EXPECT_EQ(Get(m, "vmspace_spaces"), 0);
  EXPECT_EQ(Get(m, "vmspace_frame_bytes"), 0);
  EXPECT_EQ(Get(m, "vmspace_pagetable_bytes"), 0);
  EXPECT_LE(Get(m, "vmspace_frame_cache_bytes"), static_cast<double>(kFrameCache));
  EXPECT_EQ(Get(m, "vmspace_frame_cache_limit_bytes"), static_cast<double>(kFrameCache));
  // What was freed beyond the watermark went back to the host.
  EXPECT_GE(Get(m, "vmspace_frames_returned_bytes_total") + static_cast<double>(kFrameCache),
            static_cast<double>(frames_peak));
  EXPECT_LE(Get(m, "vmspace_frame_host_bytes"), static_cast<double>(kFrameCache + (2ull << 20)))
      << "chunks less frames given back: the cache and at most one partly carved chunk";
  // RSS: bounded by the frame limit during the run, back near the start afterwards
  // (gRPC's and malloc's memory, the cache); threads: gRPC's, one per call in flight.
  EXPECT_LE(rss_peak, rss_start + kMaxFrames / 2);
  EXPECT_LE(rss_end, rss_start + kFrameCache + kRssMargin);
  if (frames_peak > kFrameCache + (32ull << 20)) {
    EXPECT_GE(rss_peak, rss_end + (frames_peak - kFrameCache) / 2) << "the frames freed left the daemon's RSS";
  }
  EXPECT_LE(threads_peak, threads_start + 2 * kClients + 32);
  EXPECT_EQ(d.Stop(), 0);

  printf("soak: %d clients, %llu ops (%llu in %llu Batch messages, %llu reads checked) on %llu spaces in %.1f s "
         "= %.0f ops/s\n",
         kClients, static_cast<unsigned long long>(sum.ops), static_cast<unsigned long long>(sum.batch_ops),
         static_cast<unsigned long long>(sum.batches), static_cast<unsigned long long>(sum.reads_checked),
         static_cast<unsigned long long>(sum.spaces), secs, static_cast<double>(sum.ops) / secs);
  printf("soak: daemon RSS start %.1f MiB, peak %.1f MiB, end %.1f MiB; threads start %llu, peak %llu, end %llu; "
         "frame bytes peak %.1f MiB, returned to the host %.1f MiB\n",
         rss_start / 1048576.0, rss_peak / 1048576.0, rss_end / 1048576.0,
         static_cast<unsigned long long>(threads_start), static_cast<unsigned long long>(threads_peak),
         static_cast<unsigned long long>(threads_end), frames_peak / 1048576.0,
         Get(m, "vmspace_frames_returned_bytes_total") / 1048576.0);
}

}  // namespace
}  // namespace vmspace::service_test
