// SPDX-License-Identifier: Apache-2.0
// /metrics of a live daemon: valid exposition format (promtool check metrics), the
// documented families present, and counts that match the work done between scrapes.
#include "daemon.h"  // first (see there)
#include "vmspace_version.h"

#include <sys/mman.h>

#include <cmath>
#include <fstream>


namespace vmspace::service_test {
namespace {

constexpr uint64_t kPage = 4096;

using L = std::vector<std::pair<std::string, std::string>>;

std::string Rpc(const std::string& metric, const std::string& method, const std::string& type,
                const std::string& code = "") {
  L l = {{"grpc_service", "vmspace.v1.VmSpace"}, {"grpc_method", method}, {"grpc_type", type}};
  if (!code.empty()) l.emplace_back("grpc_code", code);
  return SeriesKey(metric, l);
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(d_.Start({"--metrics-listen=127.0.0.1:0", "--max-frame-bytes=268435456"}))
        << d_.stderr_text();
    ASSERT_GT(d_.metrics_port(), 0);
    stub_ = d_.NewStub();
  }
  void TearDown() override { EXPECT_EQ(d_.Stop(), 0); }

  std::string Scrape() {
    int status = 0;
    std::string body = HttpGet(d_.metrics_port(), "/metrics", &status);
    EXPECT_EQ(status, 200);
    return body;
  }

  /// Creates a space with `settings`, maps `pages` read-write pages with `flags` and
  /// writes each page once; returns the faults that took.
  uint64_t WriteEachPage(const v1::SpaceSettings& settings, int flags, int pages) {
    v1::CreateSpaceRequest c;
    *c.mutable_settings() = settings;
    v1::CreateSpaceResponse cs;
    EXPECT_TRUE(stub_->CreateSpace(Ctx().get(), c, &cs).ok());
    v1::MmapRequest m;
    m.set_space_id(cs.space_id());
    m.set_len(pages * kPage);
    m.set_prot(PROT_READ | PROT_WRITE);
    m.set_flags(flags);
    v1::MmapResponse mr;
    EXPECT_TRUE(stub_->Mmap(Ctx().get(), m, &mr).ok());
    v1::AccessRequest a;
    a.set_space_id(cs.space_id());
    a.set_addr(mr.addr());
    a.set_len(pages * kPage);
    a.set_stride(kPage);
    a.set_access(v1::ACCESS_WRITE);
    v1::AccessResponse ar;
    EXPECT_TRUE(stub_->Access(Ctx().get(), a, &ar).ok());
    return ar.faults();
  }

  Daemon d_;
  std::unique_ptr<v1::VmSpace::Stub> stub_;
};

TEST_F(MetricsTest, PromtoolAcceptsTheScrape) {
  // Do a little of everything first so no family is trivially empty.
  v1::CreateSpaceResponse cs;
  ASSERT_TRUE(stub_->CreateSpace(Ctx().get(), {}, &cs).ok());
  v1::MmapRequest m;
  m.set_space_id(cs.space_id());
  m.set_len(16 * kPage);
  m.set_prot(PROT_READ | PROT_WRITE);
  m.set_flags(MAP_PRIVATE | MAP_ANONYMOUS);
  v1::MmapResponse mr;
  ASSERT_TRUE(stub_->Mmap(Ctx().get(), m, &mr).ok());
  v1::AccessRequest a;
  a.set_space_id(cs.space_id());
  a.set_addr(mr.addr());
  a.set_len(16 * kPage);
  a.set_stride(kPage);
  a.set_access(v1::ACCESS_WRITE);
  v1::AccessResponse ar;
  ASSERT_TRUE(stub_->Access(Ctx().get(), a, &ar).ok());

  const std::string body = Scrape();
  ASSERT_FALSE(body.empty());
  for (const char* family :
       {"vmspace_build_info", "vmspace_spaces", "vmspace_vmas", "vmspace_resident_bytes",
        "vmspace_pagetable_bytes", "vmspace_frame_bytes", "vmspace_frame_limit_bytes",
        "vmspace_lock_acquisitions_total", "vmspace_lock_contentions_total",
        "vmspace_lock_wait_seconds", "vmspace_lock_hold_seconds", "vmspace_faults_total",
        "vmspace_pgfault_total", "vmspace_vma_lock_total", "vmspace_pgmajfault_total",
        "vmspace_fault_around_pages_total", "vmspace_fault_retries_total", "vmspace_page_cache_bytes",
        "vmspace_page_cache_dirty_bytes", "vmspace_page_cache_writeback_bytes", "vmspace_writeback_passes_total",
        "vmspace_rcu_grace_periods_total", "vmspace_rcu_polled_gathers_total", "vmspace_rcu_sole_reuses_total", "vmspace_rcu_callbacks_total", "vmspace_rcu_callbacks_pending",
        "vmspace_rcu_worker_wakeups_total", "vmspace_frame_cache_bytes", "vmspace_frame_cache_limit_bytes", "vmspace_frames_returned_bytes_total",
        "vmspace_cache_bytes", "vmspace_heap_allocated_bytes", "vmspace_connections", "vmspace_connections_limit",
        "vmspace_ops_total", "grpc_server_started_total", "grpc_server_handled_total",
        "grpc_server_handling_seconds", "grpc_server_msg_received_total",
        "grpc_server_msg_sent_total"}) {
    EXPECT_NE(body.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
  }
  // Anonymous work only: no major fault, no fault-around, no retry, no page cache.
  const Samples anon = ParseMetrics(body);
  EXPECT_EQ(Get(anon, SeriesKey("vmspace_pgmajfault_total")), 0);
  EXPECT_EQ(Get(anon, SeriesKey("vmspace_fault_around_pages_total", {{"profile", "linux-6.15"}})), 0);
  EXPECT_EQ(Get(anon, SeriesKey("vmspace_fault_retries_total", {{"profile", "linux-6.15"}, {"reason", "file"}})), 0);
  EXPECT_EQ(Get(anon, SeriesKey("vmspace_page_cache_bytes")), 0);
  const Samples s = ParseMetrics(body);
  EXPECT_EQ(Get(s, SeriesKey("vmspace_build_info", {{"commit", VMSPACE_COMMIT}, {"version", VMSPACE_VERSION}})),
            1);  // the build's
  // Every lock class is exported; spinlocks and mutexes only in mode write (nothing
  // exported that can never move).
  for (const char* lock : {"mmap_lock", "vma_lock", "i_mmap_rwsem", "ptl", "page_table_lock", "i_pages_lock",
                           "wb_list_lock", "invalidate_lock"}) {
    const bool rw = std::string(lock) == "mmap_lock" || std::string(lock) == "vma_lock" ||
                    std::string(lock) == "i_mmap_rwsem" || std::string(lock) == "invalidate_lock";
    for (const char* mode : {"read", "write"}) {
      const double v = Get(s, SeriesKey("vmspace_lock_acquisitions_total",
                                        {{"lock", lock}, {"mode", mode}, {"profile", "linux-6.15"}}));
      EXPECT_EQ(v >= 0, rw || std::string(mode) == "write") << lock << " " << mode;
    }
  }
  EXPECT_GE(Get(s, SeriesKey("vmspace_lock_acquisitions_total",
                             {{"lock", "mmap_lock"}, {"mode", "write"}, {"profile", "linux-6.15"}})),
            1);
  // Hold times are sampled (one acquisition in 16 per thread, recorded with weight 16):
  // the histogram exists and its count is a multiple of 16.
  const double holds = Get(s, SeriesKey("vmspace_lock_hold_seconds_count",
                                        {{"lock", "mmap_lock"}, {"mode", "write"}, {"profile", "linux-6.15"}}));
  EXPECT_GE(holds, 0);
  EXPECT_EQ(std::fmod(holds, 16.0), 0.0);
  EXPECT_EQ(Get(s, "vmspace_frame_limit_bytes"), 268435456.0);
  EXPECT_EQ(Get(s, "vmspace_frame_cache_limit_bytes"), 64.0 * 1024 * 1024) << "--frame-cache-bytes default";

  const std::string promtool = FindOnPath("promtool");
  if (promtool.empty()) GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  const std::string file = ::testing::TempDir() + "vmspaced_metrics_" +
                           std::to_string(getpid()) + ".txt";
  {
    std::ofstream out(file);
    out << body;
  }
  const std::string cmd = promtool + " check metrics < " + file + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) output += buf;
  const int rc = pclose(p);
  unlink(file.c_str());
  EXPECT_EQ(rc, 0) << "promtool check metrics:\n" << output;
}

TEST_F(MetricsTest, CountsMatchTheWorkDone) {
  const Samples before = ParseMetrics(Scrape());
  const std::string mmap_ok = SeriesKey("vmspace_ops_total", {{"op", "mmap"}, {"errno", "OK"}});
  const std::string mmap_einval =
      SeriesKey("vmspace_ops_total", {{"op", "mmap"}, {"errno", "EINVAL"}});
  const std::string munmap_ok =
      SeriesKey("vmspace_ops_total", {{"op", "munmap"}, {"errno", "OK"}});
  ASSERT_EQ(Get(before, mmap_ok), 0);
  ASSERT_EQ(Get(before, SeriesKey("vmspace_spaces")), 0);

  v1::CreateSpaceResponse cs;
  ASSERT_TRUE(stub_->CreateSpace(Ctx().get(), {}, &cs).ok());
  const uint64_t id = cs.space_id();
  constexpr int kMmaps = 7, kBad = 2, kTouched = 5;
  std::vector<uint64_t> addrs;
  for (int i = 0; i < kMmaps; i++) {
    v1::MmapRequest m;
    m.set_space_id(id);
    m.set_addr(0x10000000 + static_cast<uint64_t>(i) * 16 * kPage);  // separate VMAs
    m.set_len(4 * kPage);
    m.set_prot(PROT_READ | PROT_WRITE);
    m.set_flags(MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
    v1::MmapResponse mr;
    ASSERT_TRUE(stub_->Mmap(Ctx().get(), m, &mr).ok());
    addrs.push_back(mr.addr());
  }
  for (int i = 0; i < kBad; i++) {
    v1::MmapRequest m;
    m.set_space_id(id);
    m.set_prot(PROT_READ);
    m.set_flags(MAP_PRIVATE | MAP_ANONYMOUS);  // len 0: EINVAL
    v1::MmapResponse mr;
    ASSERT_EQ(stub_->Mmap(Ctx().get(), m, &mr).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Write faults on kTouched pages of the first mapping, then one SIGSEGV.
  for (int i = 0; i < kTouched; i++) {
    v1::FaultRequest f;
    f.set_space_id(id);
    f.set_addr(addrs[0] + static_cast<uint64_t>(i % 4) * kPage + (i >= 4 ? kPage * 16 : 0));
    f.set_access(v1::ACCESS_WRITE);
    v1::FaultResponse fr;
    ASSERT_TRUE(stub_->Fault(Ctx().get(), f, &fr).ok());
    ASSERT_EQ(fr.fault().outcome(), v1::FAULT_OUTCOME_MINOR);
  }
  v1::FaultRequest f;
  f.set_space_id(id);
  f.set_addr(0x90000000);
  v1::FaultResponse fr;
  ASSERT_TRUE(stub_->Fault(Ctx().get(), f, &fr).ok());
  ASSERT_EQ(fr.fault().outcome(), v1::FAULT_OUTCOME_SIGSEGV);
  // One munmap of a whole mapping, one unknown-space call.
  v1::MunmapRequest u;
  u.set_space_id(id);
  u.set_addr(addrs.back());
  u.set_len(4 * kPage);
  v1::MunmapResponse ur;
  ASSERT_TRUE(stub_->Munmap(Ctx().get(), u, &ur).ok());
  v1::MmapRequest nf;
  nf.set_space_id(id + 999);
  v1::MmapResponse nfr;
  ASSERT_EQ(stub_->Mmap(Ctx().get(), nf, &nfr).error_code(), grpc::StatusCode::NOT_FOUND);
  // A Batch stream with two messages.
  {
    grpc::ClientContext ctx;
    auto stream = stub_->Batch(&ctx);
    for (uint64_t t = 0; t < 2; t++) {
      v1::BatchRequest b;
      b.set_tag(t);
      auto* m = b.add_ops()->mutable_mmap();
      m->set_space_id(id);
      m->set_addr(0x30000000 + t * 16 * kPage);
      m->set_len(kPage);
      m->set_prot(PROT_READ);
      m->set_flags(MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
      ASSERT_TRUE(stream->Write(b));
      v1::BatchResponse r;
      ASSERT_TRUE(stream->Read(&r));
      ASSERT_EQ(r.results(0).code(), 0);
    }
    stream->WritesDone();
    ASSERT_TRUE(stream->Finish().ok());
  }

  const Samples after = ParseMetrics(Scrape());
  auto delta = [&](const std::string& k) { return Count(after, k) - Count(before, k); };
  // Engine ops (unary + batch).
  EXPECT_EQ(delta(mmap_ok), kMmaps + 2);
  EXPECT_EQ(delta(mmap_einval), kBad);
  EXPECT_EQ(delta(munmap_ok), 1);
  // Faults.
  EXPECT_EQ(delta(SeriesKey("vmspace_faults_total",
                            {{"type", "anon_write"}, {"outcome", "minor"}, {"profile", "linux-6.15"}})),
            kTouched);
  EXPECT_EQ(delta(SeriesKey("vmspace_faults_total",
                            {{"type", "segv_maperr"}, {"outcome", "sigsegv"}, {"profile", "linux-6.15"}})),
            1);
  EXPECT_GE(delta("vmspace_pgfault_total"), kTouched);
  // RPCs, go-grpc-prometheus style.
  EXPECT_EQ(delta(Rpc("grpc_server_handled_total", "Mmap", "unary", "OK")), kMmaps);
  EXPECT_EQ(delta(Rpc("grpc_server_handled_total", "Mmap", "unary", "InvalidArgument")), kBad);
  EXPECT_EQ(delta(Rpc("grpc_server_handled_total", "Mmap", "unary", "NotFound")), 1);
  EXPECT_EQ(delta(Rpc("grpc_server_handled_total", "Fault", "unary", "OK")), kTouched + 1);
  EXPECT_EQ(delta(Rpc("grpc_server_started_total", "Mmap", "unary")), kMmaps + kBad + 1);
  EXPECT_EQ(delta(Rpc("grpc_server_handling_seconds_count", "Mmap", "unary")),
            kMmaps + kBad + 1);
  EXPECT_GT(delta(Rpc("grpc_server_handling_seconds_sum", "Mmap", "unary")), 0);
  EXPECT_EQ(delta(Rpc("grpc_server_handled_total", "Batch", "bidi_stream", "OK")), 1);
  EXPECT_EQ(delta(Rpc("grpc_server_msg_received_total", "Batch", "bidi_stream")), 2);
  EXPECT_EQ(delta(Rpc("grpc_server_msg_sent_total", "Batch", "bidi_stream")), 2);
  // Gauges.
  EXPECT_EQ(Get(after, "vmspace_spaces"), 1);
  EXPECT_EQ(Get(after, "vmspace_vmas"), kMmaps - 1 + 2);
  EXPECT_EQ(Get(after, "vmspace_resident_bytes"), kTouched * kPage);
  EXPECT_GE(Get(after, "vmspace_frame_bytes"), kTouched * kPage);
  EXPECT_GT(Get(after, "vmspace_pagetable_bytes"), 0);

  v1::DestroySpaceRequest dr;
  dr.set_space_id(id);
  v1::DestroySpaceResponse dresp;
  ASSERT_TRUE(stub_->DestroySpace(Ctx().get(), dr, &dresp).ok());
  const Samples gone = ParseMetrics(Scrape());
  EXPECT_EQ(Get(gone, "vmspace_spaces"), 0);
  EXPECT_EQ(Get(gone, "vmspace_vmas"), 0);
  EXPECT_EQ(Get(gone, "vmspace_resident_bytes"), 0);
}

// The mseal gauges: sealed VMAs and their bytes, summed over the spaces; a seal that
// joins a sealed neighbour adds bytes but no VMA; destroying the space clears both.
TEST_F(MetricsTest, SealedVmaGauges) {
  const Samples before = ParseMetrics(Scrape());
  ASSERT_EQ(Get(before, "vmspace_sealed_vmas"), 0);
  v1::CreateSpaceResponse cs;
  ASSERT_TRUE(stub_->CreateSpace(Ctx().get(), {}, &cs).ok());
  for (uint64_t i = 0; i < 3; i++) {
    v1::MmapRequest m;
    m.set_space_id(cs.space_id());
    m.set_addr(0x10000000 + i * 16 * kPage);  // three separate VMAs of 4 pages
    m.set_len(4 * kPage);
    m.set_prot(PROT_READ);
    m.set_flags(MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
    v1::MmapResponse mr;
    ASSERT_TRUE(stub_->Mmap(Ctx().get(), m, &mr).ok());
  }
  auto seal = [&](uint64_t addr, uint64_t len) {
    v1::MsealRequest r;
    r.set_space_id(cs.space_id());
    r.set_addr(addr);
    r.set_len(len);
    v1::MsealResponse resp;
    return stub_->Mseal(Ctx().get(), r, &resp).error_code();
  };
  ASSERT_EQ(seal(0x10000000, 2 * kPage), grpc::StatusCode::OK);  // splits the first VMA
  ASSERT_EQ(seal(0x10000000 + 16 * kPage, 4 * kPage), grpc::StatusCode::OK);
  Samples s = ParseMetrics(Scrape());
  EXPECT_EQ(Get(s, "vmspace_sealed_vmas"), 2);
  EXPECT_EQ(Get(s, "vmspace_sealed_bytes"), 6 * kPage);
  ASSERT_EQ(seal(0x10000000 + 2 * kPage, kPage), grpc::StatusCode::OK);  // merges into the sealed part
  s = ParseMetrics(Scrape());
  EXPECT_EQ(Get(s, "vmspace_sealed_vmas"), 2);
  EXPECT_EQ(Get(s, "vmspace_sealed_bytes"), 7 * kPage);
  v1::DestroySpaceRequest dr;
  dr.set_space_id(cs.space_id());
  v1::DestroySpaceResponse dresp;
  ASSERT_TRUE(stub_->DestroySpace(Ctx().get(), dr, &dresp).ok());
  s = ParseMetrics(Scrape());
  EXPECT_EQ(Get(s, "vmspace_sealed_vmas"), 0);
  EXPECT_EQ(Get(s, "vmspace_sealed_bytes"), 0);
}

TEST_F(MetricsTest, UnknownPathIsNotFound) {
  int status = 0;
  HttpGet(d_.metrics_port(), "/nope", &status);
  EXPECT_EQ(status, 404);
}

// Lock and fault metrics are labelled by locking profile: the same work in a
// linux-6.0 space and a linux-6.6 space lands in different series, and only the
// linux-6.6 faults (after the first, which assigns the anon_vma under mmap_lock) are
// handled under the per-VMA lock.
// Retries by reason: a space with shared_fault_completion=retry writing each page of a
// MAP_SHARED|MAP_ANONYMOUS mapping once takes one VM_FAULT_RETRY per page
// (reason="dirty"), a completed space none; pgfault counts 2 and 1 per page.
TEST_F(MetricsTest, DirtyRetriesByReason) {
  constexpr int kPages = 24;
  const Samples before = ParseMetrics(Scrape());
  for (const char* mode : {"retry", "completed"}) {
    v1::SpaceSettings settings;
    settings.set_shared_fault_completion(mode);
    ASSERT_EQ(WriteEachPage(settings, MAP_SHARED | MAP_ANONYMOUS, kPages), static_cast<uint64_t>(kPages));
    const Samples after = ParseMetrics(Scrape());
    const std::string dirty =
        SeriesKey("vmspace_fault_retries_total", {{"profile", "linux-6.15"}, {"reason", "dirty"}});
    const bool retry = std::string(mode) == "retry";
    EXPECT_EQ(Count(after, dirty) - Count(before, dirty), kPages) << mode;  // both runs' sum: the retry run's
    EXPECT_EQ(Get(after, "vmspace_pgfault_total") - Get(before, "vmspace_pgfault_total"),
              retry ? 2 * kPages : 3 * kPages)
        << mode;
  }
}

// A fresh daemon exports a few hundred samples, none of a locking profile no space has
// used; a profile's series appear with its first space, without the lock classes it
// cannot take; file work outside any space is profile="none"; process_*, the shard and
// the build's commit are exported.
TEST_F(MetricsTest, OnlySeriesThatCanMoveAreExported) {
  const std::string fresh = Scrape();
  const Samples s0 = ParseMetrics(fresh);
  EXPECT_LT(s0.size(), 1000u) << fresh;
  for (const auto& [key, v] : s0) {  // no space yet: only work outside any space ("none")
    EXPECT_EQ(key.find("profile=\"linux-"), std::string::npos) << key;
    EXPECT_EQ(key.find("profile=\"custom"), std::string::npos) << key;
  }
  EXPECT_EQ(Get(s0, SeriesKey("vmspace_build_info", {{"commit", VMSPACE_COMMIT}, {"version", VMSPACE_VERSION}})), 1);
  EXPECT_EQ(Get(s0, "vmspace_shard"), 0);
  EXPECT_GT(Get(s0, "process_open_fds"), 3);
  EXPECT_GT(Get(s0, "process_max_fds"), Get(s0, "process_open_fds"));
  EXPECT_GT(Get(s0, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GT(Get(s0, "process_start_time_seconds"), 1.7e9);
  // No errno but OK, and no gRPC code but OK, before anything failed; no latency
  // histogram of a method never called.
  EXPECT_EQ(Get(s0, SeriesKey("vmspace_ops_total", {{"errno", "EINVAL"}, {"op", "mmap"}})), -1);
  EXPECT_EQ(Get(s0, SeriesKey("vmspace_ops_total", {{"errno", "OK"}, {"op", "mmap"}})), 0);
  EXPECT_EQ(Get(s0, Rpc("grpc_server_handled_total", "Mmap", "unary", "NotFound")), -1);
  EXPECT_EQ(Get(s0, Rpc("grpc_server_handled_total", "Mmap", "unary", "OK")), 0);
  EXPECT_EQ(Get(s0, Rpc("grpc_server_handling_seconds_count", "Mmap", "unary")), -1);

  // File work (a memfd written through the page cache) is profile "none": page-cache
  // locks only.
  v1::CreateShmemFileRequest cq;
  cq.set_size(kPage);
  v1::CreateShmemFileResponse cr;
  ASSERT_TRUE(stub_->CreateShmemFile(Ctx().get(), cq, &cr).ok());
  v1::WriteFileRequest wq;
  wq.set_file_id(cr.file_id());
  wq.set_data("x");
  v1::WriteFileResponse wr;
  ASSERT_TRUE(stub_->WriteFile(Ctx().get(), wq, &wr).ok());
  // A linux-6.0 space (no per-VMA lock) faulting, and a bad mmap.
  v1::SpaceSettings settings;
  settings.set_locking_profile("linux-6.0");
  ASSERT_EQ(WriteEachPage(settings, MAP_PRIVATE | MAP_ANONYMOUS, 4), 4u);
  v1::MmapRequest bad;
  bad.set_len(kPage);
  v1::MmapResponse br;
  EXPECT_FALSE(stub_->Mmap(Ctx().get(), bad, &br).ok());
  const Samples s1 = ParseMetrics(Scrape());
  auto lock = [&](const char* l, const char* mode, const char* profile) {
    return Get(s1, SeriesKey("vmspace_lock_acquisitions_total", {{"lock", l}, {"mode", mode}, {"profile", profile}}));
  };
  EXPECT_GE(lock("i_pages_lock", "write", "none"), 1);
  EXPECT_GE(lock("invalidate_lock", "read", "none"), 1);  // the write brought its page in
  EXPECT_EQ(lock("mmap_lock", "read", "none"), -1);
  EXPECT_GE(lock("mmap_lock", "read", "linux-6.0"), 4);
  EXPECT_EQ(lock("vma_lock", "read", "linux-6.0"), -1);  // linux-6.0 has no per-VMA lock
  EXPECT_EQ(Get(s1, SeriesKey("vmspace_vma_lock_total", {{"profile", "linux-6.0"}, {"result", "success"}})), -1);
  EXPECT_EQ(lock("mmap_lock", "read", "linux-6.6"), -1);  // no space of it
  EXPECT_EQ(Get(s1, SeriesKey("vmspace_faults_total",
                              {{"outcome", "minor"}, {"profile", "linux-6.0"}, {"type", "anon_write"}})),
            4);
  EXPECT_GE(Get(s1, Rpc("grpc_server_handling_seconds_count", "Mmap", "unary")), 2);
  EXPECT_EQ(Get(s1, Rpc("grpc_server_handled_total", "Mmap", "unary", "NotFound")), 1);  // space 0
}

TEST_F(MetricsTest, LockMetricsArePerProfile) {
  const Samples before = ParseMetrics(Scrape());
  auto delta_of = [&](const Samples& after, const std::string& k) {
    auto g = [](const Samples& s, const std::string& key) {
      auto it = s.find(key);
      return it == s.end() ? 0.0 : it->second;
    };
    return g(after, k) - g(before, k);
  };
  constexpr int kPages = 16;
  for (const char* profile : {"linux-6.0", "linux-6.6"}) {
    v1::SpaceSettings settings;
    settings.set_locking_profile(profile);
    ASSERT_EQ(WriteEachPage(settings, MAP_PRIVATE | MAP_ANONYMOUS, kPages), static_cast<uint64_t>(kPages));
  }
  const Samples after = ParseMetrics(Scrape());
  auto mmap_read = [&](const char* p) {
    return delta_of(after, SeriesKey("vmspace_lock_acquisitions_total",
                                     {{"lock", "mmap_lock"}, {"mode", "read"}, {"profile", p}}));
  };
  auto vma_success = [&](const char* p) {
    return delta_of(after, SeriesKey("vmspace_vma_lock_total", {{"result", "success"}, {"profile", p}}));
  };
  // The scrape takes no space's mmap_lock (the counters are atomics).
  // linux-6.0: every fault takes mmap_lock for read; no VMA locks.
  EXPECT_EQ(mmap_read("linux-6.0"), kPages);
  EXPECT_EQ(vma_success("linux-6.0"), 0);
  // linux-6.6: the first fault aborts (no anon_vma yet) and takes mmap_lock; the rest
  // succeed under the VMA lock.
  EXPECT_EQ(mmap_read("linux-6.6"), 1);
  EXPECT_EQ(vma_success("linux-6.6"), kPages - 1);
  EXPECT_EQ(delta_of(after, SeriesKey("vmspace_vma_lock_total", {{"result", "abort"}, {"profile", "linux-6.6"}})), 1);
}

}  // namespace
}  // namespace vmspace::service_test
