// SPDX-License-Identifier: Apache-2.0
// Daemon lifecycle: port conflicts are start-up errors, health reports SERVING, and
// SIGTERM/SIGINT drain and exit 0 even with clients connected and a stream open.
#include "daemon.h"  // first (see there)

#include <sys/resource.h>
#include <sys/socket.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "reflection.grpc.pb.h"

namespace vmspace::service_test {
namespace {

// Binds 127.0.0.1:0 and listens; returns the fd and the port (kept busy until closed).
int BusyPort(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 1) != 0) return -1;
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// The drain time vmspaced reports when it stops ("stopped: gRPC drained in N ms"), from
// its stderr after the exit; -1 if the line is missing.
long long DrainedMs(Daemon& d) {
  const std::string err = d.stderr_at_exit();
  std::smatch m;
  if (!std::regex_search(err, m, std::regex(R"(stopped: gRPC drained in (\d+) ms)"))) return -1;
  return std::stoll(m[1].str());
}

TEST(LifecycleTest, GrpcPortInUseIsStartupError) {
  Daemon first;
  ASSERT_TRUE(first.Start({})) << first.stderr_text();
  Daemon second;
  EXPECT_FALSE(second.Start({"--listen=127.0.0.1:" + std::to_string(first.grpc_port())}));
  const int rc = second.WaitExit(10000);
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "must exit by itself";
  EXPECT_NE(second.stderr_text().find("cannot listen"), std::string::npos)
      << second.stderr_text();
  EXPECT_EQ(first.Stop(), 0);
}

TEST(LifecycleTest, PortHeldByAnotherProgramIsStartupError) {
  int port = 0;
  const int fd = BusyPort(&port);
  ASSERT_GE(fd, 0);
  Daemon d;
  EXPECT_FALSE(d.Start({"--listen=127.0.0.1:" + std::to_string(port)}));
  const int rc = d.WaitExit(10000);
  EXPECT_GT(rc, 0);
  close(fd);
}

TEST(LifecycleTest, MetricsPortInUseIsStartupError) {
  int port = 0;
  const int fd = BusyPort(&port);
  ASSERT_GE(fd, 0);
  Daemon d;
  EXPECT_FALSE(d.Start({"--metrics-listen=127.0.0.1:" + std::to_string(port)}));
  const int rc = d.WaitExit(10000);
  EXPECT_GT(rc, 0);
  EXPECT_NE(d.stderr_text().find("metrics"), std::string::npos) << d.stderr_text();
  close(fd);
}

// --version prints the build's version (Abseil's own printed the build mode) and exits 0.
TEST(LifecycleTest, VersionIsTheBuildsVersion) {
  const char* env = getenv("VMSPACED");
  const std::string bin = env && *env ? env : VMSPACED_PATH;
  FILE* p = popen((bin + " --version").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[256] = {};
  const size_t n = fread(buf, 1, sizeof buf - 1, p);
  EXPECT_EQ(pclose(p), 0);
  const std::string out(buf, n);
  EXPECT_EQ(out.rfind("vmspaced ", 0), 0u) << out;
  EXPECT_EQ(out.find("NDEBUG"), std::string::npos) << out;
  EXPECT_GT(out.size(), std::string("vmspaced \n").size()) << out;
}

TEST(LifecycleTest, BadFlagIsStartupError) {
  Daemon d;
  EXPECT_FALSE(d.Start({"--lock-stats=maybe"}));
  EXPECT_GT(d.WaitExit(10000), 0);
}

// Files may use the descriptor limit (raised to the hard one) less 1024 kept for
// connections; more is a start-up error naming the figures. Log lines carry an RFC 3339
// UTC timestamp and a level.
TEST(LifecycleTest, MaxOpenFilesStaysBelowTheDescriptorLimit) {
  struct rlimit rl;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  const unsigned long long nofile = rl.rlim_max == RLIM_INFINITY ? (1ull << 20) : rl.rlim_max;
  if (nofile <= 2048) GTEST_SKIP() << "hard RLIMIT_NOFILE " << nofile << " leaves no room";
  Daemon bad;
  EXPECT_FALSE(bad.Start({"--max-open-files=" + std::to_string(nofile - 1023)}));
  EXPECT_EQ(bad.WaitExit(10000), 1);
  EXPECT_NE(bad.stderr_text().find("--max-open-files must be at most " + std::to_string(nofile - 1024) +
                                   " (RLIMIT_NOFILE " + std::to_string(nofile) + " less 1024"),
            std::string::npos)
      << bad.stderr_text();
  Daemon good;
  ASSERT_TRUE(good.Start({"--max-open-files=" + std::to_string(nofile - 1024)})) << good.stderr_text();
  EXPECT_EQ(good.Stop(), 0);
  const std::string log = good.stderr_text();
  EXPECT_NE(log.find("max-open-files=" + std::to_string(nofile - 1024) + " (RLIMIT_NOFILE " +
                     std::to_string(nofile) + ")"),
            std::string::npos)
      << log;
  const size_t info = log.find(" vmspaced: info: version ");
  ASSERT_NE(info, std::string::npos) << log;
  ASSERT_GE(info, 24u);
  const std::string ts = log.substr(info - 24, 24);  // 2026-12-05T18:40:12.123Z
  EXPECT_TRUE(ts[4] == '-' && ts[10] == 'T' && ts[19] == '.' && ts[23] == 'Z') << ts;
}

// More call threads than the engine serves at once (its RCU reader slots) is refused
// at startup; the largest allowed starts.
TEST(LifecycleTest, MaxThreadsStaysBelowTheEnginesThreadLimit) {
  Daemon bad;
  EXPECT_FALSE(bad.Start({"--max-threads=3841"}));
  EXPECT_EQ(bad.WaitExit(10000), 1);
  EXPECT_NE(bad.stderr_text().find("--max-threads must be in [4, 3840]"), std::string::npos) << bad.stderr_text();
  Daemon good;
  ASSERT_TRUE(good.Start({"--max-threads=3840"})) << good.stderr_text();
  EXPECT_EQ(good.Stop(), 0);
}

TEST(LifecycleTest, HealthServesTheService) {
  Daemon d;
  ASSERT_TRUE(d.Start({"--lock-stats=off", "--log-level=warn"})) << d.stderr_text();
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(d.grpc_addr(), grpc::InsecureChannelCredentials()));
  for (const char* name : {"", "vmspace.v1.VmSpace"}) {
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(name);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status s = health->Check(Ctx().get(), req, &resp);
    ASSERT_TRUE(s.ok()) << name << ": " << s.error_message();
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << name;
  }
  grpc::health::v1::HealthCheckRequest req;
  req.set_service("no.such.Service");
  grpc::health::v1::HealthCheckResponse resp;
  EXPECT_EQ(health->Check(Ctx().get(), req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(d.Stop(), 0);
}

TEST(LifecycleTest, ReflectionListsTheService) {
  Daemon d;
  ASSERT_TRUE(d.Start({})) << d.stderr_text();
  auto refl = grpc::reflection::v1alpha::ServerReflection::NewStub(
      grpc::CreateChannel(d.grpc_addr(), grpc::InsecureChannelCredentials()));
  auto ctx = Ctx();
  auto stream = refl->ServerReflectionInfo(ctx.get());
  grpc::reflection::v1alpha::ServerReflectionRequest req;
  req.set_list_services("*");
  ASSERT_TRUE(stream->Write(req));
  grpc::reflection::v1alpha::ServerReflectionResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  bool found = false;
  for (const auto& s : resp.list_services_response().service())
    found = found || s.name() == "vmspace.v1.VmSpace";
  EXPECT_TRUE(found) << resp.DebugString();
  // The file defining the service is served too (what grpcurl/buf curl need).
  req.set_file_containing_symbol("vmspace.v1.VmSpace");
  ASSERT_TRUE(stream->Write(req));
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_GE(resp.file_descriptor_response().file_descriptor_proto_size(), 1)
      << resp.DebugString();
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(d.Stop(), 0);
}

TEST(LifecycleTest, SigtermWithClientsConnectedExitsZero) {
  Daemon d;
  ASSERT_TRUE(d.Start({"--shutdown-grace-ms=1000"})) << d.stderr_text();
  auto stub = d.NewStub();
  auto idle = d.NewStub();
  v1::PingResponse pong;
  ASSERT_TRUE(idle->Ping(Ctx().get(), {}, &pong).ok());  // connected, then idle
  v1::CreateSpaceResponse cs;
  ASSERT_TRUE(stub->CreateSpace(Ctx().get(), {}, &cs).ok());

  // A Batch stream left open across the signal.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->Batch(&ctx);
  v1::BatchRequest req;
  req.set_tag(1);
  req.add_ops()->mutable_fault()->set_space_id(cs.space_id());
  ASSERT_TRUE(stream->Write(req));
  v1::BatchResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.tag(), 1u);

  kill(d.pid(), SIGTERM);
  // The open stream is cancelled after the grace period.
  EXPECT_FALSE(stream->Read(&resp));
  grpc::Status s = stream->Finish();
  EXPECT_FALSE(s.ok());
  // A daemon that never cancels the stream hangs: that is the failure the (generous)
  // bound is for. The daemon's own drain time shows the stream had its grace period.
  const int rc = d.WaitExit(60000);
  EXPECT_EQ(rc, 0) << d.stderr_text();
  EXPECT_GE(DrainedMs(d), 1000) << d.stderr_text();
  EXPECT_NE(d.stderr_text().find("SIGTERM: draining (grace 1000 ms)"), std::string::npos);
  // Nothing answers any more.
  EXPECT_FALSE(idle->Ping(Ctx(1000).get(), {}, &pong).ok());
}

TEST(LifecycleTest, IdleConnectedClientDoesNotHoldShutdown) {
  Daemon d;
  ASSERT_TRUE(d.Start({"--shutdown-grace-ms=20000"})) << d.stderr_text();
  auto stub = d.NewStub();
  v1::PingResponse pong;
  ASSERT_TRUE(stub->Ping(Ctx().get(), {}, &pong).ok());  // connected, now idle
  EXPECT_EQ(d.Stop(SIGTERM, 60000), 0) << d.stderr_text();
  const long long drained = DrainedMs(d);
  EXPECT_GE(drained, 0) << d.stderr_text();
  EXPECT_LT(drained, 20000) << "no call in flight: the daemon must not wait for the 20 s grace period";
}

TEST(LifecycleTest, SigintIdleExitsZeroQuickly) {
  Daemon d;
  ASSERT_TRUE(d.Start({"--metrics-listen=127.0.0.1:0", "--shutdown-grace-ms=20000"})) << d.stderr_text();
  EXPECT_GT(d.metrics_port(), 0);
  auto stub = d.NewStub();
  v1::PingResponse pong;
  ASSERT_TRUE(stub->Ping(Ctx().get(), {}, &pong).ok());
  EXPECT_EQ(d.Stop(SIGINT, 60000), 0) << d.stderr_text();
  const long long drained = DrainedMs(d);
  EXPECT_GE(drained, 0) << d.stderr_text();
  EXPECT_LT(drained, 20000) << "idle: the daemon must not wait for the grace period";
  EXPECT_NE(d.stderr_text().find("SIGINT: draining"), std::string::npos);
}

}  // namespace
}  // namespace vmspace::service_test
