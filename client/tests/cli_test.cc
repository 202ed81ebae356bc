// SPDX-License-Identifier: Apache-2.0
// Tests of the `vmspace` command line: option forms, help and usage errors, JSON shapes,
// errors of an unreachable daemon, and `bench stress --transport inprocess`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli.h"
#include "lib/parse.h"
#include "seed004_replay.h"
#include "subprocess.h"
#include "vmspace_version.h"

namespace vmspace::cli {
namespace {

using nlohmann::json;

struct CliRun {
  int code;
  std::string out, err;
};

CliRun Cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int code = RunCli(args, out, err);
  return {code, out.str(), err.str()};
}

// A port nothing listens on: connections are refused at once.
const char* kDeadTarget = "127.0.0.1:1";

// The forms of options, seen through a real command (bench stress in-process, a few
// rounds): "--name value", "--name=value", flags with "=false"/"=yes", a repeated
// option's last value, "-h", "--" ending options, and the errors.
TEST(Cli, FormsOfOptions) {
  CliRun r = Cli({"bench", "stress", "--rounds=20", "--seed", "0x10", "--skip-native", "--json", "--quiet"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["rounds"], 20);
  EXPECT_EQ(j["seed"], 16);
  EXPECT_TRUE(j["native"].is_null());
  // The last value wins; --json=false prints text; --skip-native=yes is --skip-native.
  r = Cli({"bench", "stress", "--rounds", "10", "--rounds", "30", "--skip-native=yes", "--json=false", "--quiet"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("30 rounds each"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("native (kernel)"), std::string::npos) << r.out;
  r = Cli({"bench", "stress", "-h"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_NE(r.out.find("--rounds N"), std::string::npos) << r.out;
  // After "--" come arguments only: the space id here (the call then fails: no daemon).
  r = Cli({"mmap", "--len", "4K", "--target", kDeadTarget, "--timeout", "2", "--", "7"});
  EXPECT_EQ(r.code, kExitFailed) << r.err;
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
  r = Cli({"mmap", "1", "--len"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--len"), std::string::npos) << r.err;
  r = Cli({"ping", "--json=maybe"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("maybe"), std::string::npos) << r.err;
}

TEST(Cli, HelpAndUsage) {
  CliRun r = Cli({"--help"});
  EXPECT_EQ(r.code, kExitOk);
  for (const char* cmd : {"create", "destroy", "list", "mmap", "munmap", "mprotect", "fault", "access", "read",
                          "write", "maps", "bench stress"}) {
    EXPECT_NE(r.out.find(cmd), std::string::npos) << cmd;
  }
  r = Cli({});
  EXPECT_EQ(r.code, kExitUsage);
  r = Cli({"mmap", "--help"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_NE(r.out.find("--flags FLAGS"), std::string::npos);
  r = Cli({"frobnicate"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos);
}

// --version prints the build's version (git describe, else the project version), exit 0.
TEST(Cli, Version) {
  CliRun r = Cli({"--version"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, std::string("vmspace ") + VMSPACE_VERSION + "\n");
  EXPECT_GT(std::string(VMSPACE_VERSION).size(), 0u);
  EXPECT_EQ(r.err, "");
  r = Cli({"--help"});
  EXPECT_NE(r.out.find("--version"), std::string::npos) << r.out;
}

TEST(Cli, UsageErrorsExit2) {
  EXPECT_EQ(Cli({"mmap", "1"}).code, kExitUsage);                               // --len missing
  EXPECT_EQ(Cli({"mmap", "--len", "4096"}).code, kExitUsage);                   // no space
  EXPECT_EQ(Cli({"mmap", "1", "--len", "12x"}).code, kExitUsage);               // bad number
  EXPECT_EQ(Cli({"mmap", "1", "--len", "4096", "--prot", "rwq"}).code, kExitUsage);
  EXPECT_EQ(Cli({"mmap", "1", "--len", "4096", "--flags", "private,bogus"}).code, kExitUsage);
  EXPECT_EQ(Cli({"mmap", "1", "2", "--len", "4096"}).code, kExitUsage);         // extra argument
  EXPECT_EQ(Cli({"fault", "1", "--addr", "0x1000", "--access", "rw"}).code, kExitUsage);
  EXPECT_EQ(Cli({"write", "1", "--addr", "0x1000"}).code, kExitUsage);          // no data
  EXPECT_EQ(Cli({"list", "--timeout", "-3"}).code, kExitUsage);
  EXPECT_EQ(Cli({"bench", "stress", "--transport", "carrier-pigeon"}).code, kExitUsage);
  EXPECT_EQ(Cli({"bench", "stress", "--clients", "0"}).code, kExitUsage);
  CliRun r = Cli({"munmap", "1", "--addr", "0x1000", "--len", "4096", "--frobs", "2"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("unknown option --frobs"), std::string::npos);
}

// A usage error prints the error, the command's one-line usage and where its help is:
// three lines on stderr, not the whole help; `COMMAND --help` still prints all of it.
TEST(Cli, UsageErrorIsTheErrorAndTheUsageLine) {
  CliRun r = Cli({"mmap", "1"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "vmspace mmap: --len is required\n"
            "Usage: vmspace mmap SPACE --len LEN [options]\n"
            "Run 'vmspace mmap --help' for its options.\n");
  r = Cli({"bench", "stress", "--clients", "0"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 3) << r.err;
  EXPECT_NE(r.err.find("\nUsage: vmspace bench stress [options]\n"), std::string::npos) << r.err;
  r = Cli({"frobnicate"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 3) << r.err;
  EXPECT_EQ(r.err.find("Global options"), std::string::npos) << r.err;
  r = Cli({"mmap", "--help"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_NE(r.out.find("--len LEN"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Global options"), std::string::npos) << r.out;
}

TEST(Cli, UnreachableDaemonFailsWithStatusName) {
  CliRun r = Cli({"--target", kDeadTarget, "--timeout", "2", "list"});
  EXPECT_EQ(r.code, kExitFailed);
  // In words first, how to start the daemon, then gRPC's own text on a second line.
  EXPECT_EQ(r.err.rfind("vmspace list: cannot reach the daemon at 127.0.0.1:1 (is vmspaced running? start it "
                        "with: vmspaced --listen 127.0.0.1:1)\n  UNAVAILABLE: ",
                        0),
            0u)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;
  // Global options after the command work too, and --json gives an error object.
  r = Cli({"mmap", "1", "--len", "4096", "--json", "--target", kDeadTarget, "--timeout", "2"});
  EXPECT_EQ(r.code, kExitFailed);
  json j = json::parse(r.out);
  EXPECT_EQ(j["error"]["code"], "UNAVAILABLE");
  EXPECT_EQ(j["error"]["errno"], 0);
  EXPECT_EQ(j["error"]["name"], "UNAVAILABLE");
  EXPECT_EQ(j["error"]["target"], kDeadTarget);
  // Not every failure is an unreachable daemon: a bad target list is said as it is.
  r = Cli({"--target", "a,,b", "list"});
  EXPECT_EQ(r.code, kExitFailed);
  EXPECT_EQ(r.err.find("cannot reach"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
}

// An environment variable for the length of a scope (unset at its end).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

// VMSPACE_TARGET and VMSPACE_TLS_* stand for --target and --tls-* when those are not given.
TEST(Cli, EnvironmentDefaults) {
  {
    ScopedEnv target("VMSPACE_TARGET", "127.0.0.1:1");
    CliRun r = Cli({"ping", "--timeout", "2"});
    EXPECT_EQ(r.code, kExitFailed);
    EXPECT_NE(r.err.find("cannot reach the daemon at 127.0.0.1:1 "), std::string::npos) << r.err;
    r = Cli({"ping", "--timeout", "2", "--target", "127.0.0.1:2"});  // the option wins
    EXPECT_NE(r.err.find("cannot reach the daemon at 127.0.0.1:2 "), std::string::npos) << r.err;
  }
  {
    ScopedEnv ca("VMSPACE_TLS_CA", "/nonexistent/ca.pem");
    CliRun r = Cli({"ping"});
    EXPECT_EQ(r.code, kExitUsage);
    EXPECT_EQ(r.err.rfind("vmspace ping: $VMSPACE_TLS_CA: cannot read /nonexistent/ca.pem\n", 0), 0u) << r.err;
    r = Cli({"ping", "--tls-ca", "/nonexistent/other.pem"});
    EXPECT_EQ(r.err.rfind("vmspace ping: --tls-ca: cannot read /nonexistent/other.pem\n", 0), 0u) << r.err;
  }
  {
    ScopedEnv cert("VMSPACE_TLS_CERT", "/proc/self/status");  // readable; no key beside it
    CliRun r = Cli({"ping"});
    EXPECT_EQ(r.code, kExitUsage);
    EXPECT_NE(r.err.find("--tls-cert and --tls-key go together"), std::string::npos) << r.err;
  }
  CliRun r = Cli({"--help"});
  for (const char* var : {"VMSPACE_TARGET", "VMSPACE_TOKEN", "VMSPACE_TLS_CA", "VMSPACE_TLS_CERT", "VMSPACE_TLS_KEY"})
    EXPECT_NE(r.out.find(var), std::string::npos) << var;
}

void ExpectOps(const json& ops, uint64_t mmap, uint64_t munmap, uint64_t access) {
  EXPECT_EQ(ops["mmap"], mmap);
  EXPECT_EQ(ops["munmap"], munmap);
  EXPECT_EQ(ops["access"], access);
  EXPECT_EQ(ops["total"], mmap + munmap + access);
}

TEST(Cli, BenchStressInprocessJson) {
  CliRun r = Cli({"bench", "stress", "--rounds", "3000", "--page-fault", "--json", "--quiet"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["workload"], "seed-004");
  EXPECT_EQ(j["transport"], "inprocess");
  EXPECT_EQ(j["rounds"], 3000);
  EXPECT_EQ(j["rounds_per_client"], 3000);
  EXPECT_EQ(j["clients"], 1);
  EXPECT_EQ(j["page_fault"], true);
  EXPECT_EQ(j["seed"], 1);
  ExpectOps(j["ops"], 3000, 3000, 3000);
  EXPECT_GT(j["seconds"].get<double>(), 0);
  // Every page of every accessed mapping faults once, and each gets a write per 128 bytes:
  // what the sequence itself says, replayed here.
  const testing_seed004::Touched touched = testing_seed004::ReplayTouched(1, 3000);
  EXPECT_EQ(j["faults"], touched.pages);
  EXPECT_EQ(j["bytes_touched"], touched.writes);
  EXPECT_EQ(j["setup_mmaps"], 1024);
  EXPECT_TRUE(j["addr_hash"].is_string());
  ASSERT_TRUE(j["native"].is_object());
  EXPECT_EQ(j["native"]["rounds"], 3000);
  ExpectOps(j["native"]["ops"], 3000, 3000, 3000);
  EXPECT_EQ(j["native"]["bytes_touched"], touched.writes);  // the kernel ran the same sequence
  ASSERT_TRUE(j["ratio_vs_native"].is_number());
  EXPECT_GT(j["ratio_vs_native"].get<double>(), 0);
  EXPECT_TRUE(j["error"].is_null());
}

TEST(Cli, BenchStressClientsSkipNative) {
  CliRun r = Cli({"bench", "stress", "--rounds", "500", "--clients", "3", "--shared-space", "--skip-native", "--json",
               "--quiet", "--seed", "0x10"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["rounds"], 1500);
  EXPECT_EQ(j["clients"], 3);
  EXPECT_EQ(j["shared_space"], true);
  EXPECT_EQ(j["seed"], 16);
  ExpectOps(j["ops"], 1500, 1500, 0);
  EXPECT_EQ(j["faults"], 0);
  EXPECT_TRUE(j["native"].is_null());
  EXPECT_TRUE(j["ratio_vs_native"].is_null());
  EXPECT_TRUE(j["addr_hash"].is_null());
}

TEST(Cli, BenchStressLockingProfiles) {
  std::string hash;
  for (const char* profile : {"linux-6.0", "linux-6.1", "linux-6.4", "linux-6.6"}) {
    CliRun r = Cli({"bench", "stress", "--rounds", "500", "--page-fault", "--skip-native", "--json", "--quiet",
                    "--locking-profile", profile});
    ASSERT_EQ(r.code, kExitOk) << profile << ": " << r.err;
    json j = json::parse(r.out);
    EXPECT_EQ(j["locking_profile"], profile);
    EXPECT_EQ(j["rounds"], 500);
    // Locking does not change placement.
    if (hash.empty()) hash = j["addr_hash"];
    EXPECT_EQ(j["addr_hash"], hash) << profile;
  }
  CliRun bad = Cli({"bench", "stress", "--rounds", "10", "--skip-native", "--locking-profile", "linux-9.9"});
  EXPECT_EQ(bad.code, kExitFailed);
  EXPECT_NE(bad.err.find("unknown locking profile"), std::string::npos) << bad.err;
}

TEST(Cli, BenchStressHumanTable) {
  CliRun r = Cli({"bench", "stress", "--rounds", "1000", "--quiet"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("rounds/s"), std::string::npos);
  EXPECT_NE(r.out.find("vmspace inprocess"), std::string::npos);
  EXPECT_NE(r.out.find("native (kernel)"), std::string::npos);
  EXPECT_NE(r.out.find("ratio vs native"), std::string::npos);
  EXPECT_NE(r.out.find("1000 mmap, 1000 munmap, 0 access"), std::string::npos);
}

// The installed binary: exit codes and stdout as a shell sees them.
// madvise and mincore take their arguments by position (SPACE ADDR LEN [ADVICE]) or as
// options; an advice that is neither an MADV_* name nor a number is a usage error,
// before any call.
TEST(Cli, MadviseAndMincoreUsage) {
  EXPECT_EQ(client::ParseMadvise("dontneed"), 4);
  EXPECT_EQ(client::ParseMadvise("MADV_FREE"), 8);
  EXPECT_EQ(client::ParseMadvise("guard-install"), 102);
  EXPECT_EQ(client::ParseMadvise("guard_remove"), 103);
  EXPECT_EQ(client::ParseMadvise("populate_write"), 23);
  EXPECT_EQ(client::ParseMadvise("0x19"), 25);
  EXPECT_EQ(client::ParseMadvise("999"), 999);
  EXPECT_EQ(client::ParseMadvise("dontneedx"), std::nullopt);
  EXPECT_EQ(client::ParseMadvise(""), std::nullopt);

  CliRun r = Cli({"madvise", "1", "0x1000", "4096", "sometimes"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("bad madvise advice 'sometimes'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Usage: vmspace madvise SPACE ADDR LEN ADVICE"), std::string::npos) << r.err;
  EXPECT_EQ(Cli({"madvise", "1", "0x1000", "4096"}).code, kExitUsage);           // no advice
  EXPECT_EQ(Cli({"mincore", "1", "0x1000"}).code, kExitUsage);                   // no length
  EXPECT_EQ(Cli({"mincore", "1", "0x1000", "4096", "5"}).code, kExitUsage);      // extra argument
  // A well-formed call reaches the (absent) daemon: exit 1, not a usage error.
  r = Cli({"--target", kDeadTarget, "--timeout", "2", "mincore", "1", "0x1000", "4096"});
  EXPECT_EQ(r.code, kExitFailed) << r.err;
  r = Cli({"--target", kDeadTarget, "--timeout", "2", "madvise", "1", "0x1000", "4096", "free"});
  EXPECT_EQ(r.code, kExitFailed) << r.err;
  r = Cli({"--help"});
  EXPECT_NE(r.out.find("madvise"), std::string::npos);
  EXPECT_NE(r.out.find("mincore"), std::string::npos);
}

// `vmspace fork SPACE [--profile P] [--label L]`: listed, its options, its usage errors,
// and the CloneSpace call on the parent's daemon.
TEST(Cli, ForkCommand) {
  CliRun r = Cli({"--help"});
  EXPECT_NE(r.out.find("fork"), std::string::npos) << r.out;
  r = Cli({"fork", "--help"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_NE(r.out.find("--profile P"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--label TEXT"), std::string::npos) << r.out;
  r = Cli({"fork"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("Usage: vmspace fork SPACE [--profile P] [--label L]"), std::string::npos) << r.err;
  EXPECT_EQ(Cli({"fork", "1", "2"}).code, kExitUsage);
  r = Cli({"--target", kDeadTarget, "--timeout", "2", "fork", "1", "--label", "kid"});
  EXPECT_EQ(r.code, kExitFailed);
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
}

TEST(CliBinary, ExitCodesAndJson) {
  auto r = testing::RunProgram(VMSPACE_CLI_PATH, {"--help"});
  EXPECT_EQ(r.exit_code, 0);
  r = testing::RunProgram(VMSPACE_CLI_PATH, {"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, std::string("vmspace ") + VMSPACE_VERSION + "\n");
  r = testing::RunProgram(VMSPACE_CLI_PATH, {"mmap"});
  EXPECT_EQ(r.exit_code, 2);
  r = testing::RunProgram(VMSPACE_CLI_PATH, {"ping", "--target", kDeadTarget, "--timeout", "2"});
  EXPECT_EQ(r.exit_code, 1);
  r = testing::RunProgram(VMSPACE_CLI_PATH, {"bench", "stress", "--rounds", "200", "--json", "--skip-native"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);  // exactly one JSON object on stdout
  EXPECT_EQ(j["rounds"], 200);
}

}  // namespace
}  // namespace vmspace::cli
