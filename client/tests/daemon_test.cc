// SPDX-License-Identifier: Apache-2.0
// End-to-end tests of the `vmspace` CLI against a real vmspaced started on port 0.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "subprocess.h"

namespace vmspace::testing {
namespace {

using nlohmann::json;

/// A vmspaced child on ephemeral ports (plus `flags`); stderr is drained by a thread.
class Daemon {
 public:
  ~Daemon() { Stop(); }
  bool Start(const std::vector<std::string>& flags = {}) {
    int err_pipe[2];
    if (pipe2(err_pipe, O_CLOEXEC) != 0) return false;
    std::vector<std::string> args = {VMSPACED_PATH, "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(err_pipe[1], 2);
      int devnull = open("/dev/null", O_RDWR);
      dup2(devnull, 0);
      dup2(devnull, 1);
      execv(VMSPACED_PATH, argv.data());
      _exit(127);
    }
    close(err_pipe[1]);
    fd_ = err_pipe[0];
    // Read stderr until the "listening" line (or 30 s, or EOF).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::string buf;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char tmp[1024];
      ssize_t n = read(fd_, tmp, sizeof tmp);
      if (n <= 0) break;
      buf.append(tmp, static_cast<size_t>(n));
      size_t at = buf.find("vmspaced: listening grpc=");
      if (at != std::string::npos) {
        size_t start = at + std::string("vmspaced: listening grpc=").size();
        size_t end = buf.find_first_of(" \n", start);
        if (end == std::string::npos) continue;
        target_ = buf.substr(start, end - start);
        log_ = buf;
        drain_ = std::thread([this] { Drain(); });
        return true;
      }
    }
    log_ = buf;
    return false;
  }
  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st = 0;
      for (int i = 0; i < 100 && waitpid(pid_, &st, WNOHANG) == 0; ++i) usleep(100 * 1000);
      if (waitpid(pid_, &st, WNOHANG) == 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
      }
      pid_ = -1;
    }
    if (drain_.joinable()) drain_.join();
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  const std::string& target() const { return target_; }
  /// SIGKILL now (Stop() reaps it).
  void Kill() { Signal(SIGKILL); }
  /// Sends `sig` to the daemon.
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  std::string log() {
    std::lock_guard lk(mu_);
    return log_;
  }

 private:
  void Drain() {
    char tmp[4096];
    for (;;) {
      ssize_t n = read(fd_, tmp, sizeof tmp);
      if (n <= 0) return;
      std::lock_guard lk(mu_);
      if (log_.size() < (1 << 20)) log_.append(tmp, static_cast<size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string target_;
  std::mutex mu_;
  std::string log_;
  std::thread drain_;
};

class DaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = new Daemon;
    char dir[] = "/var/tmp/vmspace-daemon-test.XXXXXX";
    data_dir_ = mkdtemp(dir) ? dir : "";
    if (!daemon_->Start({"--data-dir=" + data_dir_})) {
      start_error_ = "vmspaced did not report its port; stderr:\n" + daemon_->log();
    }
  }
  static void TearDownTestSuite() {
    daemon_->Stop();
    delete daemon_;
    daemon_ = nullptr;
    std::error_code ec;
    if (!data_dir_.empty()) std::filesystem::remove_all(data_dir_, ec);
  }
  void SetUp() override { ASSERT_TRUE(start_error_.empty()) << start_error_; }

  /// Runs the CLI against the daemon (appends --target).
  static ProcResult Cli(std::vector<std::string> args) {
    args.push_back("--target");
    args.push_back(daemon_->target());
    return RunProgram(VMSPACE_CLI_PATH, args);
  }
  /// Runs the CLI with --json, expects exit 0 and returns the parsed object.
  static json CliJson(std::vector<std::string> args) {
    args.push_back("--json");
    ProcResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 0) << "args: " << ::testing::PrintToString(args) << "\nstderr: " << r.err;
    if (r.out.empty()) return json::object();
    return json::parse(r.out);
  }
  static uint64_t NewSpace() { return CliJson({"create", "--label", "daemon-test"})["space_id"].get<uint64_t>(); }

  static Daemon* daemon_;
  static std::string start_error_;
  static std::string data_dir_;  // the daemon's --data-dir
};

Daemon* DaemonTest::daemon_ = nullptr;
std::string DaemonTest::start_error_;
std::string DaemonTest::data_dir_;

// `vmspace health`: the container HEALTHCHECK. Exit 0 only when the service is SERVING.
TEST_F(DaemonTest, HealthIsServing) {
  ProcResult r = Cli({"health"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "SERVING\n");
  json j = CliJson({"health", "--service", ""});
  EXPECT_EQ(j, json({{"service", ""}, {"status", "SERVING"}, {"serving", true}}));
  ProcResult unknown = Cli({"health", "--service", "no.such.Service"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("NOT_FOUND"), std::string::npos) << unknown.err;
  ProcResult down = RunProgram(VMSPACE_CLI_PATH, {"health", "--target", "127.0.0.1:1", "--timeout", "2"});
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_NE(down.err.find("UNAVAILABLE"), std::string::npos) << down.err;
}

// Several daemons (--target A,B): the commands that ask every daemon answer for the
// reachable ones and name the others (exit 3, --json "unreachable"); none reachable:
// exit 1; two daemons of one shard: an error naming both.
TEST(SeveralDaemons, PartialAnswersAndOneShardTwice) {
  Daemon d0, d1, d1_again;
  ASSERT_TRUE(d0.Start({"--shard=0"})) << d0.log();
  ASSERT_TRUE(d1.Start({"--shard=1"})) << d1.log();
  ASSERT_TRUE(d1_again.Start({"--shard=1"})) << d1_again.log();
  const std::string both = d0.target() + "," + d1.target();
  for (const char* cmd : {"list", "ping", "health", "lockstat", "stats"}) {
    ProcResult r = RunProgram(VMSPACE_CLI_PATH, {cmd, "--target", both});
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.err;
  }
  ProcResult dup = RunProgram(VMSPACE_CLI_PATH, {"list", "--target", both + "," + d1_again.target()});
  EXPECT_EQ(dup.exit_code, 1);
  EXPECT_NE(dup.err.find(d1.target() + " and " + d1_again.target() + " both serve shard 1"), std::string::npos)
      << dup.err;
  d1.Stop();
  for (const char* cmd : {"list", "ping", "health", "lockstat", "stats"}) {
    ProcResult r = RunProgram(VMSPACE_CLI_PATH, {cmd, "--target", both, "--timeout", "5"});
    EXPECT_EQ(r.exit_code, 3) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find("vmspace " + std::string(cmd) + ": no answer from " + d1.target() + ": UNAVAILABLE: "),
              std::string::npos)
        << cmd << ": " << r.err;
    EXPECT_EQ(r.err.find("no answer from " + d0.target()), std::string::npos) << r.err;
  }
  ProcResult r = RunProgram(VMSPACE_CLI_PATH, {"list", "--json", "--target", both, "--timeout", "5"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  json j = json::parse(r.out);
  EXPECT_TRUE(j["spaces"].is_array());
  ASSERT_EQ(j["unreachable"].size(), 1u) << r.out;
  EXPECT_EQ(j["unreachable"][0]["target"], d1.target());
  EXPECT_EQ(j["unreachable"][0]["code"], "UNAVAILABLE");
  r = RunProgram(VMSPACE_CLI_PATH, {"stats", "--json", "--target", both, "--timeout", "5"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  j = json::parse(r.out);
  ASSERT_EQ(j.size(), 2u) << r.out;
  EXPECT_EQ(j[0]["target"], d0.target());
  EXPECT_EQ(j[0]["shard"], 0);
  EXPECT_EQ(j[1]["target"], d1.target());
  EXPECT_EQ(j[1]["unreachable"], true);
  d0.Stop();
  r = RunProgram(VMSPACE_CLI_PATH, {"ping", "--target", both, "--timeout", "5"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot reach the daemon at "), std::string::npos) << r.err;
}

TEST_F(DaemonTest, CreateMmapMapsReadWriteDestroy) {
  uint64_t id = NewSpace();
  std::string sid = std::to_string(id);
  json list = CliJson({"list"});
  bool found = false;
  for (const json& s : list["spaces"]) found |= s["space_id"] == id && s["label"] == "daemon-test";
  EXPECT_TRUE(found) << list.dump();

  json m = CliJson({"mmap", sid, "--len", "8K", "--prot", "rw", "--flags", "private,anonymous"});
  uint64_t addr = m["addr"].get<uint64_t>();
  EXPECT_EQ(addr % 4096, 0u);
  EXPECT_EQ(m["addr_hex"], "0x" + [&] { char b[32]; snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(addr)); return std::string(b); }());

  json maps = CliJson({"maps", sid});
  EXPECT_EQ(maps["map_count"], 1);
  ASSERT_EQ(maps["vmas"].size(), 1u);
  EXPECT_EQ(maps["vmas"][0]["start"], addr);
  EXPECT_EQ(maps["vmas"][0]["end"], addr + 8192);
  EXPECT_EQ(maps["vmas"][0]["perms"], "rw-p");
  ProcResult text = Cli({"maps", sid});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("rw-p 00000000 00:00 0"), std::string::npos) << text.out;

  std::string a = m["addr_hex"];
  json w = CliJson({"write", sid, "--addr", a, "--data", "hello"});
  EXPECT_EQ(w["bytes_written"], 5);
  EXPECT_EQ(w["faults"], 1);
  json r = CliJson({"read", sid, "--addr", a, "--len", "5"});
  EXPECT_EQ(r["data_hex"], "68656c6c6f");
  EXPECT_TRUE(r["stop"].is_null());

  json f = CliJson({"fault", sid, "--addr", a, "--access", "write"});
  EXPECT_EQ(f["outcome"], "none");  // already written: the PTE allows it
  json acc = CliJson({"access", sid, "--addr", a, "--len", "8192", "--stride", "128", "--access", "write"});
  EXPECT_EQ(acc["accesses"], 64);
  EXPECT_EQ(acc["faults"], 1);  // only the second page was not present

  CliJson({"mprotect", sid, "--addr", a, "--len", "4096", "--prot", "r"});
  f = CliJson({"fault", sid, "--addr", a, "--access", "write"});
  EXPECT_EQ(f["outcome"], "sigsegv");
  EXPECT_EQ(f["si_code"], "SEGV_ACCERR");
  EXPECT_EQ(CliJson({"maps", sid})["map_count"], 2);  // split by mprotect

  CliJson({"munmap", sid, "--addr", a, "--len", "8K"});
  EXPECT_EQ(CliJson({"maps", sid})["map_count"], 0);
  CliJson({"destroy", sid});
  ProcResult again = Cli({"destroy", sid});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("NOT_FOUND"), std::string::npos) << again.err;
}

// `vmspace fork`: prints the child's id; the child reads the parent's data and carries
// its own label; an unknown space fails NOT_FOUND.
TEST_F(DaemonTest, ForkPrintsTheChildsId) {
  const std::string sid = std::to_string(NewSpace());
  json m = CliJson({"mmap", sid, "--len", "4K"});
  const std::string a = m["addr_hex"];
  CliJson({"write", sid, "--addr", a, "--data", "hello"});
  ProcResult fork = Cli({"fork", sid, "--label", "kid"});
  ASSERT_EQ(fork.exit_code, 0) << fork.err;
  ASSERT_FALSE(fork.out.empty());
  EXPECT_EQ(fork.out.back(), '\n');
  const uint64_t child = std::stoull(fork.out);
  EXPECT_NE(std::to_string(child), sid);
  EXPECT_EQ(CliJson({"read", std::to_string(child), "--addr", a, "--len", "5"})["data_hex"], "68656c6c6f");
  bool found = false;
  const json list = CliJson({"list"});
  for (const json& s : list["spaces"]) found |= s["space_id"] == child && s["label"] == "kid";
  EXPECT_TRUE(found) << list.dump();
  json j = CliJson({"fork", std::to_string(child)});
  EXPECT_EQ(j["parent"], child);
  EXPECT_NE(j["space_id"].get<uint64_t>(), child);  // ids are a keyed permutation: no order
  EXPECT_NE(std::to_string(j["space_id"].get<uint64_t>()), sid);
  CliJson({"destroy", std::to_string(j["space_id"].get<uint64_t>())});
  CliJson({"destroy", std::to_string(child)});
  CliJson({"destroy", sid});
  ProcResult gone = Cli({"fork", sid});
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_NE(gone.err.find("NOT_FOUND"), std::string::npos) << gone.err;
}

TEST_F(DaemonTest, StatsShowsTheMemoryBudgetByKind) {
  const std::string sid = std::to_string(NewSpace());
  json m = CliJson({"mmap", sid, "--len", "8K", "--prot", "rw", "--flags", "private,anonymous"});
  CliJson({"access", sid, "--addr", m["addr_hex"], "--len", "8192", "--stride", "4096", "--access", "write"});
  json st = CliJson({"stats"});
  ASSERT_EQ(st.size(), 1u) << st.dump();
  EXPECT_EQ(st[0]["memory_limit_bytes"], 8ull << 30);  // the --max-memory-bytes default
  const json& mem = st[0]["memory_bytes"];
  for (const char* k : {"frames", "page_tables", "vmas", "index_nodes", "page_cache", "buffers"})
    EXPECT_TRUE(mem.contains(k)) << k << " missing in " << st.dump();
  EXPECT_GE(mem["frames"].get<int64_t>(), 8192);  // the two pages written (other spaces may add)
  EXPECT_GE(mem["page_tables"].get<int64_t>(), 3 * 4096);  // PUD, PMD and PTE pages of the space
  EXPECT_GT(mem["vmas"].get<int64_t>(), 0);
  ProcResult text = Cli({"stats"});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("  memory frames"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("bytes of 8589934592 (--max-memory-bytes)"), std::string::npos) << text.out;
  CliJson({"destroy", sid});
}

TEST_F(DaemonTest, ErrnoErrors) {
  std::string sid = std::to_string(NewSpace());
  ProcResult r = Cli({"mmap", sid, "--len", "0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("EINVAL"), std::string::npos) << r.err;

  r = Cli({"mmap", sid, "--len", "0", "--json"});
  EXPECT_EQ(r.exit_code, 1);
  json j = json::parse(r.out);
  EXPECT_EQ(j["error"]["errno"], 22);
  EXPECT_EQ(j["error"]["errno_name"], "EINVAL");
  EXPECT_EQ(j["error"]["code"], "INVALID_ARGUMENT");

  json m = CliJson({"mmap", sid, "--len", "4096"});
  r = Cli({"mmap", sid, "--len", "4096", "--addr", m["addr_hex"], "--flags", "private,anonymous,fixed_noreplace",
           "--json"});
  EXPECT_EQ(r.exit_code, 1);
  j = json::parse(r.out);
  EXPECT_EQ(j["error"]["errno_name"], "EEXIST");
  EXPECT_EQ(j["error"]["errno"], 17);

  r = Cli({"mmap", sid, "--len", "4096", "--flags", "private"});  // not anonymous: EBADF
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("EBADF"), std::string::npos) << r.err;

  r = Cli({"munmap", sid, "--addr", "0x1001", "--len", "4096"});
  EXPECT_NE(r.err.find("EINVAL"), std::string::npos) << r.err;
  CliJson({"destroy", sid});
}

// `vmspace file ...`, `mmap --file` and `msync` against a daemon with --data-dir.
TEST_F(DaemonTest, FileSubcommands) {
  const uint64_t f = CliJson({"file", "open", "notes.bin", "--write", "--create"})["file_id"].get<uint64_t>();
  const std::string fid = std::to_string(f);
  ProcResult text = Cli({"file", "open", "notes.bin"});  // read-only, text: the id alone
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out, fid + "\n");
  json w = CliJson({"file", "write", fid, "--offset", "4096", "--data", "hello"});
  EXPECT_EQ(w["bytes_written"], 5);
  json st = CliJson({"file", "stat", fid});
  EXPECT_EQ(st["file_id"], f);
  EXPECT_EQ(st["path"], "notes.bin");
  EXPECT_EQ(st["size"], 4101);
  EXPECT_EQ(st["dirty_pages"], 1);
  EXPECT_EQ(st["writable"], true);
  CliJson({"file", "fsync", fid});
  EXPECT_EQ(CliJson({"file", "stat", fid})["dirty_pages"], 0);
  json rd = CliJson({"file", "read", fid, "--offset", "4096", "--len", "100"});
  EXPECT_EQ(rd["data_hex"], "68656c6c6f");  // stops at EOF
  ProcResult dump = Cli({"file", "read", fid, "--offset", "4096", "--len", "5"});
  EXPECT_NE(dump.out.find("hello"), std::string::npos) << dump.out;
  bool listed = false;
  const json files = CliJson({"file", "ls"});
  for (const json& x : files["files"]) listed |= x["file_id"] == f;
  EXPECT_TRUE(listed);
  ProcResult ls = Cli({"file", "ls"});
  EXPECT_NE(ls.out.find("notes.bin"), std::string::npos) << ls.out;

  // Map it shared in a space, write there, msync, and find the bytes in the host file.
  const std::string sid = std::to_string(NewSpace());
  json m = CliJson({"mmap", sid, "--len", "8K", "--file", fid, "--flags", "shared"});
  const std::string a = m["addr_hex"];
  json r = CliJson({"read", sid, "--addr", std::to_string(m["addr"].get<uint64_t>() + 4096), "--len", "5"});
  EXPECT_EQ(r["data_hex"], "68656c6c6f");
  CliJson({"write", sid, "--addr", a, "--data", "HI"});
  CliJson({"msync", sid, "--addr", a, "--len", "8K"});
  std::ifstream host(data_dir_ + "/notes.bin", std::ios::binary);
  std::string head(2, '\0');
  host.read(head.data(), 2);
  EXPECT_EQ(head, "HI");
  ProcResult maps = Cli({"maps", sid});
  EXPECT_NE(maps.out.find("rw-s 00000000"), std::string::npos) << maps.out;
  EXPECT_NE(maps.out.find("notes.bin"), std::string::npos) << maps.out;
  // Truncate: the second page is beyond the end: SIGBUS.
  CliJson({"file", "truncate", fid, "--size", "4096"});
  json fault = CliJson({"fault", sid, "--addr", std::to_string(m["addr"].get<uint64_t>() + 4096)});
  EXPECT_EQ(fault["outcome"], "sigbus");
  EXPECT_EQ(fault["si_code"], "BUS_ADRERR");

  const uint64_t shm = CliJson({"file", "create-shmem", "--name", "scratch", "--size", "16K"})["file_id"];
  json sst = CliJson({"file", "stat", std::to_string(shm)});
  EXPECT_EQ(sst["shmem"], true);
  EXPECT_EQ(sst["size"], 16384);

  CliJson({"file", "close", fid});
  ProcResult closed = Cli({"file", "stat", fid, "--json"});
  EXPECT_EQ(closed.exit_code, 1);
  EXPECT_EQ(json::parse(closed.out)["error"]["errno_name"], "EBADF");
  ProcResult escape = Cli({"file", "open", "../outside", "--create", "--write"});
  EXPECT_EQ(escape.exit_code, 1);
  EXPECT_NE(escape.err.find("EINVAL"), std::string::npos) << escape.err;
  ProcResult usage = Cli({"file", "truncate", fid});  // --size missing
  EXPECT_EQ(usage.exit_code, 2) << usage.err;
  ProcResult bad_flags = Cli({"msync", sid, "--addr", a, "--len", "4K", "--flags", "sometimes"});
  EXPECT_EQ(bad_flags.exit_code, 2) << bad_flags.err;
  CliJson({"destroy", sid});
}

// vmspace madvise SPACE ADDR LEN ADVICE (by name or number) and vmspace mincore SPACE
// ADDR LEN (one 0/1 per page, or JSON), with the daemon's errors.
TEST_F(DaemonTest, MadviseAndMincore) {
  const std::string sid = std::to_string(NewSpace());
  json m = CliJson({"mmap", sid, "--len", "16K"});
  const uint64_t addr = m["addr"].get<uint64_t>();
  const std::string a = m["addr_hex"];
  CliJson({"write", sid, "--addr", a, "--data", "x"});
  CliJson({"write", sid, "--addr", std::to_string(addr + 8192), "--data", "y"});
  ProcResult text = Cli({"mincore", sid, a, "16K"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, "1010\n");
  json mc = CliJson({"mincore", sid, a, "16K"});
  EXPECT_EQ(mc["vec"], "1010");
  EXPECT_EQ(mc["pages"], 4);
  EXPECT_EQ(mc["resident"], 2);

  json md = CliJson({"madvise", sid, a, "4K", "dontneed"});
  EXPECT_EQ(md["advice"], 4);
  EXPECT_EQ(CliJson({"mincore", sid, a, "16K"})["vec"], "0010");
  EXPECT_EQ(CliJson({"madvise", sid, std::to_string(addr + 8192), "4K", "MADV_GUARD_INSTALL"})["advice"], 102);
  EXPECT_EQ(CliJson({"fault", sid, "--addr", std::to_string(addr + 8192)})["outcome"], "sigsegv");
  EXPECT_EQ(CliJson({"madvise", sid, a, "16K", "guard-remove"})["advice"], 103);
  EXPECT_EQ(CliJson({"madvise", "--space", sid, "--addr", a, "--len", "16K", "--advice", "willneed"})["advice"], 3);

  ProcResult unknown = Cli({"madvise", sid, a, "4K", "999", "--json"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_EQ(json::parse(unknown.out)["error"]["errno_name"], "EINVAL");
  ProcResult hole = Cli({"mincore", sid, a, "1G", "--json"});
  EXPECT_EQ(hole.exit_code, 1);
  EXPECT_EQ(json::parse(hole.out)["error"]["errno_name"], "ENOMEM");
  EXPECT_EQ(Cli({"madvise", sid, a, "4K", "sometimes"}).exit_code, 2);
  EXPECT_EQ(Cli({"madvise", sid, a, "4K"}).exit_code, 2);  // no advice
  CliJson({"destroy", sid});
}

// A short page_fault4 run on the daemon: its host files under --data-dir, beside the kernel.
TEST_F(DaemonTest, BenchPageFault4) {
  for (const char* transport : {"unary", "stream"}) {
    SCOPED_TRACE(transport);
    json j = CliJson({"bench", "page_fault4", "--transport", transport, "--duration", "300ms", "--quiet"});
    ASSERT_EQ(j["results"].size(), 1u);
    const json& r = j["results"][0];
    EXPECT_TRUE(r["error"].is_null()) << r["error"];
    EXPECT_GT(r["ops"].get<uint64_t>(), 0u);
    EXPECT_GT(r["faults"].get<uint64_t>(), 0u);
    EXPECT_LE(r["faults"].get<uint64_t>(), r["ops"].get<uint64_t>());
    EXPECT_EQ(r["files"]["count"], 1);
    EXPECT_EQ(r["files"]["shmem"], 0);
    EXPECT_GT(j["native"]["ops"].get<uint64_t>(), 0u);
    EXPECT_GT(r["ratio_vs_native"].get<double>(), 0);
  }
  const json files = CliJson({"file", "ls"});
  for (const json& x : files["files"])  // the bench closed its files
    EXPECT_EQ(x["path"].get<std::string>().rfind("vmspace-bench-", 0), std::string::npos) << x.dump();
}

/// inprocess figures with the same seed, for comparison.
json Inprocess(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"bench", "stress", "--json", "--quiet", "--skip-native"};
  args.insert(args.end(), extra.begin(), extra.end());
  ProcResult r = RunProgram(VMSPACE_CLI_PATH, args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

void ExpectSameRun(const json& got, const json& want, uint64_t rounds) {
  EXPECT_EQ(got["rounds"], rounds);
  EXPECT_EQ(got["ops"], want["ops"]);
  EXPECT_EQ(got["faults"], want["faults"]);
  EXPECT_EQ(got["bytes_touched"], want["bytes_touched"]);
  // The daemon places mappings exactly as the linked-in engine: same addresses.
  EXPECT_EQ(got["addr_hash"], want["addr_hash"]);
  EXPECT_TRUE(got["error"].is_null()) << got["error"];
}

TEST_F(DaemonTest, BenchStressUnary) {
  json j = CliJson({"bench", "stress", "--transport", "unary", "--rounds", "300", "--page-fault", "--quiet"});
  EXPECT_EQ(j["transport"], "unary");
  ExpectSameRun(j, Inprocess({"--rounds", "300", "--page-fault"}), 300);
  ASSERT_TRUE(j["native"].is_object());
  EXPECT_EQ(j["native"]["rounds"], 300);
  EXPECT_TRUE(j["ratio_vs_native"].is_number());
}

TEST_F(DaemonTest, BenchStressStream) {
  json j = CliJson({"bench", "stress", "--transport", "stream", "--batch", "64", "--rounds", "3000", "--page-fault",
                    "--quiet", "--skip-native"});
  EXPECT_EQ(j["transport"], "stream");
  EXPECT_EQ(j["batch"], 64);
  ExpectSameRun(j, Inprocess({"--rounds", "3000", "--page-fault"}), 3000);
  // A round whose slot's mmap is unanswered names its result (Op.addr_of) instead of
  // waiting: no round waits, every message but the last is full (9000 ops: 141).
  EXPECT_EQ(j["waits"], 0);
  EXPECT_EQ(j["messages"], (9000 + 63) / 64);
}

TEST_F(DaemonTest, BenchStressLockingProfile) {
  json j = CliJson({"bench", "stress", "--transport", "stream", "--rounds", "500", "--page-fault", "--quiet",
                    "--skip-native", "--locking-profile", "linux-6.0"});
  ExpectSameRun(j, Inprocess({"--rounds", "500", "--page-fault"}), 500);
  ProcResult r = Cli({"bench", "stress", "--transport", "unary", "--rounds", "10", "--quiet", "--skip-native",
                      "--locking-profile", "linux-9.9"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("EINVAL"), std::string::npos) << r.err;
}

TEST_F(DaemonTest, BenchStressStreamTinyBatches) {
  // batch 1 with one message in flight: a round's ops span messages; still exact.
  json j = CliJson({"bench", "stress", "--transport", "stream", "--batch", "1", "--inflight", "1", "--rounds", "200",
                    "--page-fault", "--quiet", "--skip-native"});
  ExpectSameRun(j, Inprocess({"--rounds", "200", "--page-fault"}), 200);
  EXPECT_EQ(j["messages"], 600);  // access, munmap, mmap: one message each
  // batch 2: a round's three ops straddle messages.
  j = CliJson({"bench", "stress", "--transport", "stream", "--batch", "2", "--rounds", "300", "--page-fault", "--quiet",
               "--skip-native"});
  ExpectSameRun(j, Inprocess({"--rounds", "300", "--page-fault"}), 300);
}

TEST_F(DaemonTest, BenchStressStreamWindowBeyondRefWindow) {
  // 8 messages of 4096 ops in flight: up to 32768 unanswered ops, twice what the daemon
  // remembers for addr_of (BATCH_REF_WINDOW = 16384). A round whose slot's mmap is
  // further back than that waits for it instead of naming it (a reference the daemon
  // no longer has would fail the op EINVAL and the run): still exact.
  json j = CliJson({"bench", "stress", "--transport", "stream", "--batch", "4096", "--inflight", "8", "--rounds",
                    "30000", "--quiet", "--skip-native"});
  ExpectSameRun(j, Inprocess({"--rounds", "30000"}), 30000);
}

TEST_F(DaemonTest, BenchStressClients) {
  json j = CliJson({"bench", "stress", "--transport", "stream", "--clients", "2", "--rounds", "500", "--quiet",
                    "--skip-native", "--seed", "7"});
  ExpectSameRun(j, Inprocess({"--rounds", "500", "--clients", "2", "--seed", "7"}), 1000);
  for (const char* transport : {"unary", "stream"}) {
    j = CliJson({"bench", "stress", "--transport", transport, "--clients", "2", "--shared-space", "--rounds", "200",
                 "--page-fault", "--quiet", "--skip-native"});
    EXPECT_EQ(j["rounds"], 400) << transport;
    EXPECT_EQ(j["ops"]["total"], 1200) << transport;
    EXPECT_TRUE(j["error"].is_null()) << j["error"];
  }
  // The spaces are gone afterwards.
  for (const json& s : CliJson({"list"})["spaces"]) {
    EXPECT_EQ(s["label"].get<std::string>().rfind("bench-stress", 0), std::string::npos) << s.dump();
  }
}

TEST_F(DaemonTest, BenchStressStreamManyClientsSmallBatches) {
  // 16 pipelines of 1-op messages with 64 in flight on one daemon: every answer still
  // lands on the right op (same figures and addresses as in-process).
  json j = CliJson({"bench", "stress", "--transport", "stream", "--clients", "16", "--batch", "1", "--inflight", "64",
                    "--rounds", "500", "--page-fault", "--quiet", "--skip-native"});
  ExpectSameRun(j, Inprocess({"--rounds", "500", "--clients", "16", "--page-fault"}), 16 * 500);
  EXPECT_EQ(j["messages"], 16 * 500 * 3);  // one message per op
}

// ---- Batch-stream failures: no abort, no hang, the first failure reported ----

/// Runs the CLI against `d`.
ProcResult CliAt(const Daemon& d, std::vector<std::string> args) {
  args.push_back("--target");
  args.push_back(d.target());
  return RunProgram(VMSPACE_CLI_PATH, args);
}

size_t SpacesLeft(const Daemon& d) {
  ProcResult r = CliAt(d, {"list", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? json::parse(r.out)["spaces"].size() : 0;
}

TEST(BenchStressStreamFailure, MessageRefusedInSetUp) {
  // 64-op messages to a daemon that takes 8: each stream's first message ends it with
  // INVALID_ARGUMENT while more messages are in flight. This used to abort the CLI
  // (GRPC_CALL_ERROR_TOO_MANY_OPERATIONS: Finish() called twice on one call).
  Daemon d;
  ASSERT_TRUE(d.Start({"--max-batch=8"})) << d.log();
  ProcResult r = CliAt(d, {"bench", "stress", "--transport", "stream", "--clients", "16", "--batch", "64",
                           "--inflight", "8", "--rounds", "1000", "--quiet", "--skip-native"});
  EXPECT_EQ(r.exit_code, 1) << "not a clean failure (-1: killed by a signal)\n" << r.err;
  EXPECT_NE(r.err.find("set-up: batch stream"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("64 ops in one message exceed --max-batch=8"), std::string::npos) << r.err;
  EXPECT_EQ(SpacesLeft(d), 0u);
}

TEST(BenchStressStreamFailure, OpErrorWhileWriting) {
  // 16 clients writing 2-op messages, 64 in flight, into 1 MiB of frames: an access
  // fails with ENOMEM in the reader while the client thread keeps writing; the reader
  // cancels the call, which ends the writer's side too.
  Daemon d;
  ASSERT_TRUE(d.Start({"--max-frame-bytes=1048576"})) << d.log();
  ProcResult r = CliAt(d, {"bench", "stress", "--transport", "stream", "--clients", "16", "--batch", "2",
                           "--inflight", "64", "--rounds", "100000", "--page-fault", "--quiet", "--skip-native"});
  EXPECT_EQ(r.exit_code, 1) << "not a clean failure (-1: killed by a signal)\n" << r.err;
  EXPECT_NE(r.err.find("access: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ENOMEM"), std::string::npos) << r.err;
  EXPECT_EQ(SpacesLeft(d), 0u);
}

TEST(BenchStressStreamFailure, StreamsBeyondMaxStreamsAreRefused) {
  // 16 stream clients against a daemon that serves 4 Batch streams at once: the other
  // streams end RESOURCE_EXHAUSTED at once, with messages in flight on them.
  Daemon d;
  ASSERT_TRUE(d.Start({"--max-streams=4"})) << d.log();
  ProcResult r = CliAt(d, {"bench", "stress", "--transport", "stream", "--clients", "16", "--batch", "4",
                           "--inflight", "16", "--rounds", "20000", "--page-fault", "--quiet", "--skip-native"});
  EXPECT_EQ(r.exit_code, 1) << "not a clean failure (-1: killed by a signal)\n" << r.err;
  EXPECT_NE(r.err.find("EAGAIN"), std::string::npos) << r.err;  // RESOURCE_EXHAUSTED, errno EAGAIN
  EXPECT_NE(r.err.find("--max-streams=4"), std::string::npos) << r.err;
  EXPECT_EQ(SpacesLeft(d), 0u);
}

// Runs `vmspace bench stress --transport stream` (`clients` clients, `rounds` rounds)
// against d, calls `mid_run` once the rounds are under way (every client passed the
// start barrier after its set-up, and page faults, taken only in the rounds, are
// counted), and returns the run's result. A hang is the failure being tested, so this
// one bound is on time (and generous).
ProcResult StreamStressDisturbed(Daemon& d, const std::string& clients, const std::string& rounds,
                                 const std::function<void()>& mid_run) {
  std::atomic<pid_t> cli{0};
  const std::vector<std::string> args = {"bench", "stress", "--transport", "stream", "--clients", clients,
                                         "--batch", "4", "--inflight", "16", "--rounds", rounds,
                                         "--page-fault", "--quiet", "--skip-native", "--target", d.target()};
  auto run = std::async(std::launch::async, [&] { return RunProgram(VMSPACE_CLI_PATH, args, &cli); });
  bool running = false;
  for (int i = 0; i < 600 && !running; ++i) {
    ProcResult l = CliAt(d, {"lockstat", "--json"});
    running = l.exit_code == 0 && json::parse(l.out)["events"]["pgfault"].get<uint64_t>() > 1000;
    if (!running) usleep(50 * 1000);
  }
  EXPECT_TRUE(running) << "the rounds never started";
  mid_run();
  if (run.wait_for(std::chrono::seconds(300)) != std::future_status::ready) {
    kill(cli.load(), SIGKILL);
    ADD_FAILURE() << "bench stress did not exit within 300 s";
  }
  return run.get();
}

TEST(BenchStressStreamFailure, DaemonStalledMidRun) {
  // The daemon stops (SIGSTOP) for a while in the middle of the rounds, with the
  // clients' windows filling up, then goes on (SIGCONT): the run completes.
  Daemon d;
  ASSERT_TRUE(d.Start()) << d.log();
  ProcResult r = StreamStressDisturbed(d, "8", "20000", [&] {
    d.Signal(SIGSTOP);
    usleep(1500 * 1000);
    d.Signal(SIGCONT);
  });
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(SpacesLeft(d), 0u);
}

TEST(BenchStressStreamFailure, DaemonKilledMidRun) {
  // Every stream ends early: the run must fail and exit.
  Daemon d;
  ASSERT_TRUE(d.Start()) << d.log();
  ProcResult r = StreamStressDisturbed(d, "16", "100000000", [&] { d.Kill(); });
  EXPECT_EQ(r.exit_code, 1) << "not a clean failure (-1: killed by a signal)\n" << r.err;
  EXPECT_NE(r.err.find("batch stream"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
}

// ---- lockstat and the timed workloads through the daemon ----

/// True (and the test should skip) if the daemon answered UNIMPLEMENTED.
bool Unimplemented(const ProcResult& r) { return r.exit_code == 1 && r.err.find("UNIMPLEMENTED") != std::string::npos; }

TEST_F(DaemonTest, Lockstat) {
  // Faults in a linux-6.0 space take mmap_lock for read: lockstat shows them.
  std::string sid = std::to_string(CliJson({"create", "--locking-profile", "linux-6.0"})["space_id"].get<uint64_t>());
  json m = CliJson({"mmap", sid, "--len", "64K"});
  CliJson({"access", sid, "--addr", m["addr_hex"], "--len", "64K", "--stride", "4096", "--access", "write"});
  // 16 pages of shmem: each enters its page cache under the i_pages lock.
  auto i_pages_of = [](const json& lockstat) {
    uint64_t n = 0;
    for (const json& l : lockstat["locks"])
      if (l["lock"] == "i_pages_lock") n = l["acquisitions"];
    return n;
  };
  const uint64_t i_pages0 = i_pages_of(CliJson({"lockstat", "--profile", "linux-6.0"}));
  json shm = CliJson({"mmap", sid, "--len", "64K", "--flags", "shared,anonymous"});
  CliJson({"access", sid, "--addr", shm["addr_hex"], "--len", "64K", "--stride", "4096", "--access", "write"});
  ProcResult r = Cli({"lockstat", "--profile", "linux-6.0", "--json"});
  if (Unimplemented(r)) {
    GTEST_SKIP() << "vmspaced answers UNIMPLEMENTED for GetLockStats (the server handler is not there yet); "
                    "rebuild vmspaced and rerun";
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["profile"], "linux-6.0");
  uint64_t read_acq = 0;
  for (const json& l : j["locks"])
    if (l["lock"] == "mmap_lock" && l["mode"] == "read") read_acq = l["acquisitions"];
  EXPECT_GE(read_acq, 16u);
  EXPECT_GE(j["events"]["pgfault"].get<uint64_t>(), 16u);
  // The page-cache lock is there with its count; exclusive locks have no read row.
  for (const json& l : j["locks"])
    for (const char* excl : {"ptl", "page_table_lock", "i_pages_lock", "wb_list_lock"})
      EXPECT_FALSE(l["lock"] == excl && l["mode"] == "read") << l.dump();
  EXPECT_EQ(i_pages_of(j) - i_pages0, 16u);
  EXPECT_EQ(j["events"]["vma_lock_success"], 0);
  // The CLI renders the table with the engine's FormatLockStat: the daemon's own text
  // (nothing ran in between, so the figures are the same).
  ProcResult same = Cli({"lockstat", "--profile", "linux-6.0"});
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(same.out.rfind(j["text"].get<std::string>(), 0), 0u) << same.out << "\nvs\n" << j["text"];
  ProcResult text = Cli({"lockstat"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("lock_stat version 0.4"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("mmap_lock-R:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("i_pages_lock-W:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("acquisitions"), std::string::npos);
  EXPECT_NE(text.out.find("pgfault"), std::string::npos);
  CliJson({"destroy", sid});
}

TEST_F(DaemonTest, BenchWorkloads) {
  for (const char* transport : {"unary", "stream"}) {
    SCOPED_TRACE(transport);
    json j = CliJson({"bench", "page_fault1", "--transport", transport, "--clients", "2", "--duration", "300ms",
                      "--compare", "linux-6.0,linux-6.6", "--quiet"});
    EXPECT_EQ(j["transport"], transport);
    EXPECT_EQ(j["target"], daemon_->target());
    ASSERT_EQ(j["results"].size(), 2u);
    for (const json& r : j["results"]) {
      EXPECT_TRUE(r["error"].is_null()) << r["error"];
      EXPECT_GT(r["ops"].get<uint64_t>(), 0u);
      EXPECT_NEAR(r["faults"].get<double>(), r["ops"].get<double>(), 0.01 * r["ops"].get<double>());
      EXPECT_GT(r["ops_per_s"].get<double>(), 0);
    }
    const json& v60 = j["results"][0];
    const json& v66 = j["results"][1];
    if (v60["locks"].is_null()) {
      // Without GetLockStats the figures are missing, with the reason.
      EXPECT_NE(v60["locks_note"].get<std::string>().find("GetLockStats"), std::string::npos);
    } else {
      EXPECT_EQ(v60["vma_lock_success"], 0);
      EXPECT_GE(v60["locks"]["mmap_lock"]["read"]["acquisitions"].get<uint64_t>(), v60["ops"].get<uint64_t>());
      EXPECT_GT(v66["vma_lock_success"].get<uint64_t>(), 0u);
    }
    json mm = CliJson({"bench", "mmap1", "--transport", transport, "--mode", "processes", "--clients", "2",
                       "--duration", "200ms", "--quiet"});
    EXPECT_GT(mm["results"][0]["ops"].get<uint64_t>(), 0u);
    EXPECT_EQ(mm["results"][0]["faults"], 0);

    ProcResult r = Cli({"bench", "mixed", "--transport", transport, "--duration", "300ms", "--quiet", "--json"});
    if (Unimplemented(r)) {
      ADD_FAILURE() << "mixed needs the Madvise RPC: " << r.err;
      continue;
    }
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json mx = json::parse(r.out);
    EXPECT_GT(mx["results"][0]["ops"].get<uint64_t>(), 0u);
    EXPECT_GT(mx["results"][0]["churn_ops"].get<uint64_t>(), 0u);
  }
  // The benchmark's spaces are gone afterwards.
  for (const json& s : CliJson({"list"})["spaces"]) EXPECT_NE(s["label"], "bench") << s.dump();
}

TEST_F(DaemonTest, BenchStressCompare) {
  json j = CliJson({"bench", "stress", "--transport", "stream", "--rounds", "500", "--page-fault", "--quiet",
                    "--skip-native", "--compare", "linux-6.0,linux-6.6"});
  ASSERT_EQ(j["results"].size(), 2u);
  json want = Inprocess({"--rounds", "500", "--page-fault"});
  for (const json& r : j["results"]) {
    EXPECT_EQ(r["rounds"], 500);
    EXPECT_EQ(r["addr_hash"], want["addr_hash"]);
    EXPECT_EQ(r["faults"], want["faults"]);
    EXPECT_TRUE(r["ratio_vs_native"].is_null());  // --skip-native
  }
  if (!j["results"][1]["locks"].is_null()) {
    EXPECT_EQ(j["results"][0]["vma_lock_success"], 0);
    EXPECT_GT(j["results"][1]["vma_lock_success"].get<uint64_t>(), 0u);
  }
}

// Records the trace target (client/tests/trace_target.c) on this kernel and replays
// it with --check: every result of the calls the daemon serves and the final maps
// agree with the kernel's, or differ only where an unsupported call explains it.
TEST_F(DaemonTest, RecordAndReplayCheck) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("vmspace-replay-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string trace = (dir / "target.trace").string();
  ProcResult rec = RunProgram(VMSPACE_CLI_PATH, {"record", "--json", "--out", trace, "--", VMSPACE_TRACE_TARGET,
                                                 (dir / "mapped").string()});
  if (rec.exit_code != 0 && rec.err.find("PTRACE_TRACEME") != std::string::npos) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << "ptrace is not allowed here: " << rec.err;
  }
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  // The program's own output comes first, the record's JSON last.
  ASSERT_NE(rec.out.find("anon=0x"), std::string::npos) << rec.out;
  json r = json::parse(rec.out.substr(rec.out.rfind("\n{") + 1));
  EXPECT_EQ(r["exit_status"], 0);
  EXPECT_GE(r["by_syscall"]["mmap"].get<uint64_t>(), 6u);
  ProcResult rep = Cli({"replay", trace, "--check"});
  EXPECT_EQ(rep.exit_code, 0) << rep.out << rep.err;
  EXPECT_NE(rep.out.find(" calls issued"), std::string::npos) << rep.out;
  EXPECT_NE(rep.out.find("check: "), std::string::npos) << rep.out;
  json j = json::parse(Cli({"replay", trace, "--check", "--json"}).out);
  EXPECT_EQ(j["unexplained"], 0) << j.dump(1);
  EXPECT_GE(j["issued"].get<uint64_t>(), 20u);
  EXPECT_EQ(j["threads"], 2);
  // Every difference that remains names the unsupported call or the layout replica.
  for (const json& d : j["differences"]) EXPECT_FALSE(d["cause"].get<std::string>().empty()) << d.dump();
  std::filesystem::remove_all(dir);
}

// `vmspace trace-locks`: a Chrome trace of the daemon's threads while a benchmark
// faults; each complete event carries pid, tid, ts, dur and its args. A trace of an
// idle space records nothing.
TEST_F(DaemonTest, TraceLocksWritesAChromeTimeline) {
  char dir[] = "/tmp/vmspace-timeline.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string out = std::string(dir) + "/t.json";
  ProcResult traced;
  std::thread t([&] { traced = Cli({"trace-locks", "--all", "--seconds", "3", "--out", out}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  json b = CliJson({"bench", "page_fault4", "--transport", "unary", "--duration", "1s", "--quiet"});
  t.join();
  ASSERT_EQ(traced.exit_code, 0) << traced.err;
  std::ifstream f(out);
  json j = json::parse(f);
  ASSERT_TRUE(j["traceEvents"].is_array());
  std::map<std::string, int> by_cat;
  std::set<uint64_t> tids;
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_EQ(e["pid"], 1);
    EXPECT_GE(e["ts"].get<double>(), 0);
    EXPECT_GE(e["dur"].get<double>(), 0);
    by_cat[e["cat"].get<std::string>()]++;
    tids.insert(e["tid"].get<uint64_t>());
    if (e["cat"] == "fault") {
      EXPECT_TRUE(e["args"].contains("address")) << e.dump();
      EXPECT_TRUE(e["args"]["access"] == "write" || e["args"]["access"] == "read") << e.dump();
    }
    if (e["cat"] == "lock_wait" || e["cat"] == "lock_hold") {
      EXPECT_TRUE(e["args"].contains("lock")) << e.dump();
      EXPECT_TRUE(e["args"]["mode"] == "read" || e["args"]["mode"] == "write") << e.dump();
    }
    if (e["cat"] == "lock_wait") {
      EXPECT_TRUE(e["args"].contains("holder")) << e.dump();
    }
  }
  EXPECT_GT(by_cat["op"], 0) << j.dump().substr(0, 2000);
  EXPECT_GT(by_cat["fault"], 0);
  EXPECT_GT(by_cat["lock_hold"], 0);
  EXPECT_GE(tids.size(), 1u);
  // Every thread with a complete event is named.
  std::set<uint64_t> named;
  for (const json& e : j["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") named.insert(e["tid"].get<uint64_t>());
  EXPECT_EQ(named, tids);

  // Idle: nothing happens in the space, nothing is recorded.
  const std::string sid = std::to_string(NewSpace());
  json idle = CliJson({"trace-locks", "--space", sid, "--seconds", "0.3", "--out", out});
  EXPECT_EQ(idle["threads"], 0) << idle.dump();
  EXPECT_TRUE(idle["events"].empty()) << idle.dump();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vmspace::testing
