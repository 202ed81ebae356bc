// SPDX-License-Identifier: Apache-2.0
// Sharding across daemons: three real vmspaced on loopback (--shard 0, 1, 2) and the
// client library / CLI given all three targets. Spaces spread by the placement policy,
// every call reaches the daemon that holds its space, a stopped daemon fails only its
// own spaces' calls (UNAVAILABLE), and `vmspace bench stress --clients N` runs across
// the three.
#include "lib/client.h"  // first: vmspace.pb.h before <signal.h> (see daemon.h)

#include "daemon.h"

#include <sys/mman.h>

#include <set>

#include "../../client/tests/subprocess.h"

namespace vmspace::service_test {
namespace {

using client::Client;
using client::ClientOptions;
using client::ShardOfSpace;
constexpr uint64_t kPage = 4096;
constexpr int kRw = PROT_READ | PROT_WRITE;
constexpr int kAnon = MAP_PRIVATE | MAP_ANONYMOUS;

/// Three daemons, shard i on daemons_[i], each also reachable alone.
class ShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(d_[i].Start({"--shard=" + std::to_string(i), "--metrics-listen=127.0.0.1:0", "--log-level=warn"}))
          << d_[i].stderr_text();
      if (i > 0) targets_ += ',';
      targets_ += d_[i].grpc_addr();
    }
  }
  void TearDown() override {
    for (Daemon& d : d_) {
      if (d.running()) {
        EXPECT_EQ(d.Stop(), 0);
      }
    }
  }
  ClientOptions Opts(const std::string& target) const {
    ClientOptions o;
    o.target = target;
    o.timeout = std::chrono::milliseconds(10000);
    return o;
  }
  /// The ids of the spaces daemon i holds (asked of it alone).
  std::set<uint64_t> SpacesOn(int i) {
    Client one(Opts(d_[i].grpc_addr()));
    auto r = one.ListSpaces();
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    std::set<uint64_t> ids;
    if (r.ok())
      for (const v1::SpaceInfo& s : r.value()) ids.insert(s.space_id());
    return ids;
  }
  double Metric(int i, const std::string& key) {
    return Get(ParseMetrics(HttpGet(d_[i].metrics_port(), "/metrics")), key);
  }

  Daemon d_[3];
  std::string targets_;
};

TEST_F(ShardTest, SpacesSpreadAndEveryCallReachesItsDaemon) {
  Client all(Opts(targets_));
  ASSERT_EQ(all.targets().size(), 3u);
  // Least spaces: 30 creates one after another land 10 on each daemon.
  std::vector<uint64_t> ids;
  for (int k = 0; k < 30; ++k) {
    std::string label = "s";  // not "s" + std::to_string(k): GCC 12 warns (-Wrestrict)
    label += std::to_string(k);
    auto r = all.CreateSpace({}, label);
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    ids.push_back(r.value());
  }
  for (int i = 0; i < 3; ++i) {
    std::set<uint64_t> on = SpacesOn(i);
    EXPECT_EQ(on.size(), 10u) << "daemon " << i;
    for (uint64_t id : on) EXPECT_EQ(ShardOfSpace(id), static_cast<uint32_t>(i)) << id;
    // The shard's ids: distinct, never 0 in the low 40 bits, below 2^53.
    for (uint64_t id : on) EXPECT_NE(id & ((uint64_t{1} << 40) - 1), 0u) << id;
    EXPECT_LT(*on.rbegin(), uint64_t{1} << 53);
  }
  auto info = all.GetServerInfo();
  ASSERT_TRUE(info.ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(info.value()[static_cast<size_t>(i)].shard(), static_cast<uint32_t>(i));
    EXPECT_EQ(info.value()[static_cast<size_t>(i)].spaces(), 10u);
  }

  // Each call goes to its space's daemon: a mapping of a size that names the space,
  // seen by that daemon alone; the other daemons do not know the space.
  for (size_t k = 0; k < ids.size(); ++k) {
    const uint64_t id = ids[k];
    auto m = all.Mmap(id, 0, (k + 1) * kPage, kRw, kAnon);
    ASSERT_TRUE(m.ok()) << m.error().ToString();
    auto w = all.WriteMemory(id, m.value(), "space " + std::to_string(id));
    ASSERT_TRUE(w.ok());
    const int home = static_cast<int>(ShardOfSpace(id));
    for (int i = 0; i < 3; ++i) {
      Client one(Opts(d_[i].grpc_addr()));
      auto maps = one.GetMaps(id);
      if (i == home) {
        ASSERT_TRUE(maps.ok()) << maps.error().ToString();
        ASSERT_EQ(maps.value().vmas_size(), 1);
        EXPECT_EQ(maps.value().vmas(0).end() - maps.value().vmas(0).start(), (k + 1) * kPage);
        EXPECT_EQ(maps.value().vmas(0).rss_bytes(), kPage);
      } else {
        ASSERT_FALSE(maps.ok());
        EXPECT_EQ(maps.error().code, grpc::StatusCode::NOT_FOUND);
      }
    }
    auto r = all.ReadMemory(id, m.value(), 32);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r.value().data().substr(0, 6 + std::to_string(id).size()), "space " + std::to_string(id));
  }
  // A Batch stream opens on the daemon of its first op's space.
  {
    const uint64_t id = ids[2];
    auto bs = all.OpenBatch();
    v1::BatchRequest req;
    v1::MmapRequest* m = req.add_ops()->mutable_mmap();
    m->set_space_id(id);
    m->set_len(7 * kPage);
    m->set_prot(kRw);
    m->set_flags(kAnon);
    ASSERT_TRUE(bs->Write(req));
    v1::BatchResponse resp;
    ASSERT_TRUE(bs->Read(&resp));
    ASSERT_EQ(resp.results_size(), 1);
    EXPECT_EQ(resp.results(0).code(), 0) << resp.results(0).message();
    bs->WritesDone();
    EXPECT_FALSE(bs->Read(&resp));
    EXPECT_TRUE(bs->Finish().ok());
    // The daemon of that space has the 7 pages next to the space's 3 (merged into one VMA).
    Client one(Opts(d_[ShardOfSpace(id)].grpc_addr()));
    auto maps = one.GetMaps(id);
    ASSERT_TRUE(maps.ok());
    uint64_t mapped = 0;
    for (const v1::Vma& v : maps.value().vmas()) mapped += v.end() - v.start();
    EXPECT_EQ(mapped, 10 * kPage);
  }
  // The whole list, in id order.
  auto list = all.ListSpaces();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list.value().size(), 30u);
  for (size_t k = 1; k < list.value().size(); ++k)
    EXPECT_LT(list.value()[k - 1].space_id(), list.value()[k].space_id());
  // Each daemon's RPC counters saw the Mmap calls of its own 10 spaces only.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Metric(i, SeriesKey("grpc_server_handled_total", {{"grpc_service", "vmspace.v1.VmSpace"},
                                                                {"grpc_method", "Mmap"}, {"grpc_type", "unary"},
                                                                {"grpc_code", "OK"}})),
              10)
        << "daemon " << i;
  }
}

// File ids carry their daemon's shard like space ids: a file made near a space lives on
// that space's daemon, calls on it reach that daemon, and another daemon's space cannot
// map it (EBADF: not its file).
TEST_F(ShardTest, FilesLiveOnTheirSpacesDaemon) {
  Client all(Opts(targets_));
  std::vector<uint64_t> spaces;
  for (int k = 0; k < 3; ++k) spaces.push_back(all.CreateSpace().value());  // one per daemon
  std::set<uint32_t> shards;
  for (uint64_t sp : spaces) shards.insert(ShardOfSpace(sp));
  ASSERT_EQ(shards.size(), 3u);
  for (uint64_t sp : spaces) {
    auto f = all.CreateShmemFile("near", 2 * kPage, sp);
    ASSERT_TRUE(f.ok()) << f.error().ToString();
    EXPECT_EQ(ShardOfSpace(f.value()), ShardOfSpace(sp));
    ASSERT_TRUE(all.WriteFile(f.value(), 0, "shard").ok());
    auto addr = all.Mmap(sp, 0, 2 * kPage, kRw, MAP_SHARED, 0, f.value());
    ASSERT_TRUE(addr.ok()) << addr.error().ToString();
    EXPECT_EQ(all.ReadMemory(sp, addr.value(), 5).value().data(), "shard");
    for (uint64_t other : spaces) {
      if (other == sp) continue;
      auto bad = all.Mmap(other, 0, 2 * kPage, kRw, MAP_SHARED, 0, f.value());
      ASSERT_FALSE(bad.ok());
      EXPECT_EQ(bad.error().errno_name, "EBADF");
    }
  }
  auto files = all.ListFiles();  // every daemon's, in id order
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(files.value().size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(ShardOfSpace(files.value()[i].file_id()), i);
}

TEST_F(ShardTest, PlacementKeyPinsADaemon) {
  Client all(Opts(targets_));
  std::set<uint32_t> shards_a, shards_any;
  for (int k = 0; k < 5; ++k) {
    auto r = all.CreateSpace({}, "", "tenant-a");
    ASSERT_TRUE(r.ok());
    shards_a.insert(ShardOfSpace(r.value()));
  }
  EXPECT_EQ(shards_a.size(), 1u) << "one key, one daemon";
  for (int k = 0; k < 30; ++k) {
    auto r = all.CreateSpace({}, "", "key-" + std::to_string(k));
    ASSERT_TRUE(r.ok());
    shards_any.insert(ShardOfSpace(r.value()));
  }
  EXPECT_EQ(shards_any.size(), 3u) << "30 keys reach all three daemons";
  // The same key from another client (another process would do the same) lands there too.
  Client other(Opts(targets_));
  auto r = other.CreateSpace({}, "", "tenant-a");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(ShardOfSpace(r.value()), *shards_a.begin());
}

TEST_F(ShardTest, StoppedDaemonFailsOnlyItsOwnSpaces) {
  Client all(Opts(targets_));
  std::vector<std::pair<uint64_t, uint64_t>> spaces;  // (id, addr)
  for (int k = 0; k < 6; ++k) {
    auto id = all.CreateSpace();
    ASSERT_TRUE(id.ok());
    auto a = all.Mmap(id.value(), 0, 4 * kPage, kRw, kAnon);
    ASSERT_TRUE(a.ok());
    spaces.emplace_back(id.value(), a.value());
  }
  EXPECT_EQ(d_[1].Stop(), 0);
  auto check = [&](Client& c, const char* which) {
    int failed = 0;
    for (auto [id, addr] : spaces) {
      auto f = c.Fault(id, addr, v1::ACCESS_WRITE);
      if (ShardOfSpace(id) == 1) {
        ASSERT_FALSE(f.ok()) << which << ": space " << id;
        EXPECT_EQ(f.error().code, grpc::StatusCode::UNAVAILABLE) << which << ": " << f.error().ToString();
        ++failed;
      } else {
        ASSERT_TRUE(f.ok()) << which << ": space " << id << ": " << f.error().ToString();
        EXPECT_EQ(f.value().outcome(), v1::FAULT_OUTCOME_MINOR);
      }
    }
    EXPECT_EQ(failed, 2) << which;
  };
  check(all, "client that knew the shard");
  for (auto& [id, addr] : spaces) addr += kPage;  // (a fresh page for the second round)
  Client fresh(Opts(targets_));
  check(fresh, "new client");
  // New spaces go to the daemons that answer; calls that need all of them fail.
  for (int k = 0; k < 4; ++k) {
    auto id = fresh.CreateSpace();
    ASSERT_TRUE(id.ok()) << id.error().ToString();
    EXPECT_NE(ShardOfSpace(id.value()), 1u);
  }
  auto list = fresh.ListSpaces();
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.error().code, grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(list.error().message.find(d_[1].grpc_addr()), std::string::npos) << list.error().message;
  // The CLI too: exit 1 naming UNAVAILABLE for shard 1's space, 0 for the others.
  for (auto [id, addr] : spaces) {
    testing::ProcResult r = testing::RunProgram(VMSPACE_CLI_PATH, {"--target", targets_, "maps", std::to_string(id)});
    EXPECT_EQ(r.exit_code, ShardOfSpace(id) == 1 ? 1 : 0) << r.err;
    if (ShardOfSpace(id) == 1) {
      EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
    }
  }
}

// `vmspace bench stress --clients N` across the three: each client's space on some
// daemon, all of its rounds there. Per daemon: mmaps = its spaces x (rounds + 1024).
TEST_F(ShardTest, BenchStressAcrossThreeDaemons) {
  constexpr int kRounds = 3000;
  for (const char* transport : {"stream", "unary"}) {
    const int clients = std::string(transport) == "stream" ? 6 : 3;
    std::vector<double> before(3);
    auto mmaps = [&](int i) {
      return Metric(i, SeriesKey("vmspace_ops_total", {{"op", "mmap"}, {"errno", "OK"}}));
    };
    auto creates = [&](int i) {
      return Metric(i, SeriesKey("grpc_server_handled_total", {{"grpc_service", "vmspace.v1.VmSpace"},
                                                               {"grpc_method", "CreateSpace"}, {"grpc_type", "unary"},
                                                               {"grpc_code", "OK"}}));
    };
    std::vector<double> mm0(3), cr0(3);
    for (int i = 0; i < 3; ++i) {
      mm0[static_cast<size_t>(i)] = std::max(0.0, mmaps(i));
      cr0[static_cast<size_t>(i)] = std::max(0.0, creates(i));
    }
    testing::ProcResult r = testing::RunProgram(
        VMSPACE_CLI_PATH, {"--target", targets_, "--json", "bench", "stress", "--transport", transport, "--clients",
                           std::to_string(clients), "--rounds", std::to_string(kRounds), "--skip-native", "--quiet"});
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    EXPECT_NE(r.out.find("\"rounds\":" + std::to_string(clients * kRounds) + ","), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"error\":null"), std::string::npos) << r.out;
    double total_creates = 0;
    for (int i = 0; i < 3; ++i) {
      const double c = creates(i) - cr0[static_cast<size_t>(i)];
      total_creates += c;
      EXPECT_EQ(mmaps(i) - mm0[static_cast<size_t>(i)], c * (kRounds + 1024)) << transport << ", daemon " << i;
    }
    EXPECT_EQ(total_creates, clients) << transport;
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(SpacesOn(i).empty()) << "bench spaces left on daemon " << i;
  }
}

TEST(ShardFlagTest, ShardInIdsAndBadValues) {
  Daemon top;
  ASSERT_TRUE(top.Start({"--shard=8191"})) << top.stderr_text();
  Client c([&] {
    ClientOptions o;
    o.target = top.grpc_addr();
    return o;
  }());
  auto id = c.CreateSpace();
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(ShardOfSpace(id.value()), 8191u);
  EXPECT_NE(id.value() & ((uint64_t{1} << 40) - 1), 0u);
  EXPECT_LT(id.value(), uint64_t{1} << 53);  // exact as a JSON number
  EXPECT_EQ(top.Stop(), 0);
  for (const char* bad : {"--shard=8192", "--shard=-1", "--shard=x1", "--shard="}) {
    Daemon d;
    EXPECT_FALSE(d.Start({bad})) << bad;
    EXPECT_EQ(d.WaitExit(10000), 1) << bad;
    EXPECT_NE(d.stderr_text().find("--shard"), std::string::npos) << d.stderr_text();
  }
}

// "shards:NAME:PORT": every address of the name is a daemon (one here: localhost's
// 127.0.0.1; its ::1, if any, answers nothing and is left out of placement).
TEST(ShardFlagTest, DnsNameTarget) {
  Daemon d;
  ASSERT_TRUE(d.Start({"--shard=3"})) << d.stderr_text();
  auto t = client::ParseTargets("shards:localhost:" + std::to_string(d.grpc_port()));
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  EXPECT_EQ(t.value()[0], "ipv4:127.0.0.1:" + std::to_string(d.grpc_port()));
  ClientOptions o;
  o.target = "shards:localhost:" + std::to_string(d.grpc_port());
  Client c(o);
  auto id = c.CreateSpace();
  ASSERT_TRUE(id.ok()) << id.error().ToString();
  EXPECT_EQ(ShardOfSpace(id.value()), 3u);
  auto m = c.Mmap(id.value(), 0, kPage, kRw, kAnon);
  ASSERT_TRUE(m.ok()) << m.error().ToString();
  EXPECT_EQ(c.Fault(id.value(), m.value(), v1::ACCESS_WRITE).value().outcome(), v1::FAULT_OUTCOME_MINOR);
  EXPECT_FALSE(client::ParseTargets("a:1,,b:2").ok());
  EXPECT_EQ(client::ParseTargets("shards:no-such-host.invalid:1").error().code, grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(d.Stop(), 0);
}

// Two daemons claiming one shard cannot both be routed to: the calls say so.
TEST(ShardFlagTest, DuplicateShardIsAnError) {
  Daemon a, b;
  ASSERT_TRUE(a.Start({"--shard=0"}));
  ASSERT_TRUE(b.Start({"--shard=0"}));
  ClientOptions o;
  o.target = a.grpc_addr() + "," + b.grpc_addr();
  Client c(o);
  auto id = c.CreateSpace();
  ASSERT_TRUE(id.ok());
  auto m = c.Mmap(id.value(), 0, kPage, kRw, kAnon);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(m.error().message.find("both serve shard 0"), std::string::npos) << m.error().message;
  // A name with no address yet (a headless Service before its first pod is ready).
  Daemon first;
  ASSERT_TRUE(first.Start({"--shard=6", "--peers=shards:no-such-host.invalid:50051"})) << first.stderr_text();
  EXPECT_NE(first.stderr_text().find("has no address yet"), std::string::npos) << first.stderr_text();
  EXPECT_EQ(first.Stop(), 0);
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
}


// --peers: at start-up a daemon asks each peer its shard and refuses to serve one a live
// peer already serves (exit 1, naming the peer); a peer that does not answer is left out.
TEST(ShardFlagTest, PeersRefuseADuplicateShardAtStartUp) {
  Daemon a;
  ASSERT_TRUE(a.Start({"--shard=4"})) << a.stderr_text();
  const std::string nobody = "127.0.0.1:1";  // nothing listens there
  Daemon dup;
  EXPECT_FALSE(dup.Start({"--shard=4", "--peers=" + nobody + "," + a.grpc_addr()}));
  EXPECT_EQ(dup.WaitExit(10000), 1);
  EXPECT_NE(dup.stderr_text().find("shard 4 is already served by the daemon at " + a.grpc_addr()), std::string::npos)
      << dup.stderr_text();
  EXPECT_NE(dup.stderr_text().find(nobody + " does not answer"), std::string::npos) << dup.stderr_text();
  // Another shard starts, and both then route.
  Daemon b;
  ASSERT_TRUE(b.Start({"--shard=5", "--peers=" + nobody + "," + a.grpc_addr()})) << b.stderr_text();
  EXPECT_NE(b.stderr_text().find(a.grpc_addr() + " serves shard 4"), std::string::npos) << b.stderr_text();
  ClientOptions o;
  o.target = a.grpc_addr() + "," + b.grpc_addr();
  Client c(o);
  auto info = c.GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.error().ToString();
  ASSERT_EQ(info.value().size(), 2u);
  EXPECT_EQ(info.value()[0].shard(), 4u);
  EXPECT_EQ(info.value()[1].shard(), 5u);
  for (const char* bad : {"--peers=a:1,,b:2", "--peers=shards:x", "--peers=,"}) {
    Daemon d;
    EXPECT_FALSE(d.Start({bad})) << bad;
    EXPECT_EQ(d.WaitExit(10000), 1) << bad;
    EXPECT_NE(d.stderr_text().find("--peers: "), std::string::npos) << d.stderr_text();
  }
  // A name with no address yet (a headless Service before its first pod is ready).
  Daemon first;
  ASSERT_TRUE(first.Start({"--shard=6", "--peers=shards:no-such-host.invalid:50051"})) << first.stderr_text();
  EXPECT_NE(first.stderr_text().find("has no address yet"), std::string::npos) << first.stderr_text();
  EXPECT_EQ(first.Stop(), 0);
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
}

}  // namespace
}  // namespace vmspace::service_test
