// SPDX-License-Identifier: Apache-2.0
// Tests of the timed workloads (`vmspace bench page_fault1 | mmap1 | mixed`), `bench
// stress --compare`, --plot and `lockstat` usage: option parsing, --compare expansion,
// and short in-process runs whose figures must be real (ops, faults, lock counts); of
// `bench ... --sweep` (ops/s per task count) and `vmspace reproduce` (a results folder
// with provenance, CSV and chart from tiny alternating runs).
#include <gtest/gtest.h>

#include <elf.h>
#include <sched.h>
#include <sys/utsname.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "cli/cli.h"
#include "lib/parse.h"
#include "lib/plot.h"
#include "lib/willitscale.h"
#include "seed004_replay.h"
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

/// Runs the CLI with --json --quiet, expects exit 0, returns the object.
json CliJson(std::vector<std::string> args) {
  args.push_back("--json");
  args.push_back("--quiet");
  CliRun r = Cli(args);
  EXPECT_EQ(r.code, kExitOk) << ::testing::PrintToString(args) << "\n" << r.err;
  if (r.out.empty()) return json::object();
  return json::parse(r.out);
}

bool Contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

/// Whether a run started: it prints a result on stdout, and a progress line
/// ("vmspace bench: <workload> [1/N] profile ...") on stderr unless --quiet.
bool Ran(const CliRun& r) { return !r.out.empty() || Contains(r.err, "vmspace bench: "); }

TEST(Duration, Parse) {
  using client::ParseDurationSeconds;
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds("5s"), 5);
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds("500ms"), 0.5);
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds("1.5s"), 1.5);
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds("2m"), 120);
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds("5"), 5);
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds("250us"), 250e-6);
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds("1h"), 3600);
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds(" 200MS "), 0.2);
  for (const char* bad : {"", "s", "-1s", "0", "0ms", "5x", "1.2.3s", "25h", "5 s", "+5s", "ms5"}) {
    EXPECT_FALSE(ParseDurationSeconds(bad).has_value()) << bad;
  }
}

TEST(Compare, Expand) {
  std::vector<std::string> v;
  EXPECT_EQ(bench::ExpandCompare("linux-6.0,linux-6.1,linux-6.4,linux-6.6", "", &v), "");
  EXPECT_EQ(v, (std::vector<std::string>{"linux-6.0", "linux-6.1", "linux-6.4", "linux-6.6"}));
  // One switch and its values, applied to the base (linux-6.15 by default).
  EXPECT_EQ(bench::ExpandCompare("vma_lock=off,anon,all", "", &v), "");
  EXPECT_EQ(v, (std::vector<std::string>{"linux-6.15,vma_lock=off", "linux-6.15,vma_lock=anon", "linux-6.15,vma_lock=all"}));
  EXPECT_EQ(bench::ExpandCompare("vma_lock=off,vma_lock=all", "linux-6.4", &v), "");
  EXPECT_EQ(v, (std::vector<std::string>{"linux-6.4,vma_lock=off", "linux-6.4,vma_lock=all"}));
  // Full specs separated by ';'.
  EXPECT_EQ(bench::ExpandCompare("linux-6.0;linux-6.6,vma_lock=off", "", &v), "");
  EXPECT_EQ(v, (std::vector<std::string>{"linux-6.0", "linux-6.6,vma_lock=off"}));
  // index=rbtree needs vma_lock=off: a clear error with the way out, and the way out works.
  std::string e = bench::ExpandCompare("index=rbtree,maple", "", &v);
  EXPECT_TRUE(Contains(e, "needs index=maple")) << e;
  EXPECT_TRUE(Contains(e, "index=rbtree only works with vma_lock=off")) << e;
  EXPECT_EQ(bench::ExpandCompare("index=rbtree,maple", "linux-6.6,vma_lock=off", &v), "");
  EXPECT_EQ(v, (std::vector<std::string>{"linux-6.6,vma_lock=off,index=rbtree", "linux-6.6,vma_lock=off,index=maple"}));
  // Mistakes.
  EXPECT_TRUE(Contains(bench::ExpandCompare("linux-6.0,vma_lock=off", "", &v), "mixes profile names"));
  EXPECT_TRUE(Contains(bench::ExpandCompare("vma_lock=off,index=maple", "", &v), "more than one switch"));
  EXPECT_TRUE(Contains(bench::ExpandCompare("linux-6.0,linux-9.9", "", &v), "unknown locking profile 'linux-9.9'"));
  EXPECT_TRUE(Contains(bench::ExpandCompare("vma_lock=off,sometimes", "", &v), "unknown switch"));
  EXPECT_TRUE(Contains(bench::ExpandCompare("linux-6.0,,linux-6.6", "", &v), "empty item"));
  EXPECT_TRUE(Contains(bench::ExpandCompare("", "", &v), "empty"));
}

TEST(BenchCli, UsageErrors) {
  const std::vector<std::vector<std::string>> bad = {
      {"bench", "page_fault1", "--mode", "fibers"},
      {"bench", "page_fault1", "--duration", "0"},
      {"bench", "page_fault1", "--duration", "5parsecs"},
      {"bench", "page_fault1", "--clients", "0"},
      {"bench", "page_fault1", "--transport", "pigeon"},
      {"bench", "page_fault1", "--profile", "linux-9.9"},
      {"bench", "page_fault1", "--compare", "index=rbtree,maple"},
      {"bench", "page_fault1", "--compare", "linux-6.0,vma_lock=off"},
      {"bench", "page_fault1", "--profile", "linux-6.0", "--compare", "linux-6.0,linux-6.6"},
      {"bench", "page_fault1", "--profile", "linux-6.0", "--locking-profile", "linux-6.6"},
      {"bench", "page_fault1", "--plot"},
      {"bench", "page_fault1", "--compare", "linux-6.0,linux-6.6", "--plot", "x.pdf"},  // .svg or .png only
      {"bench", "page_fault1", "--compare", "linux-6.0,linux-6.6", "--plot", "chart"},
      {"bench", "mixed", "--clients", "1"},
      {"bench", "mixed", "--mode", "processes"},
      {"bench", "mmap1", "--bogus"},
      {"bench", "stress", "--compare", "linux-6.0,linux-9.9"},
      {"bench", "stress", "--plot", "x.svg"},  // a chart needs --compare
      {"bench", "stress", "--repeat", "3"},    // repetitions need --compare
      {"bench", "stress", "--repeat", "0", "--compare", "linux-6.0"},
      {"bench", "stress", "--repeat", "101", "--compare", "linux-6.0"},
      {"bench", "stress", "--scaling"},                      // scaling needs --clients >= 2
      {"bench", "stress", "--scaling", "--clients", "1"},
      {"bench", "stress", "--scaling", "--clients", "2", "--compare", "linux-6.0,linux-6.6"},
      {"bench", "stress", "--scaling", "--clients", "2", "--profile", "linux-9.9"},
      {"bench", "stress", "--scaling", "--clients", "2", "--seed-table"},
      {"lockstat", "--profile", "linux-9.9"},
  };
  for (const auto& args : bad) {
    CliRun r = Cli(args);
    EXPECT_EQ(r.code, kExitUsage) << ::testing::PrintToString(args) << "\n" << r.err;
    EXPECT_FALSE(Ran(r)) << ::testing::PrintToString(args) << ": ran before checking\n" << r.out << r.err;
  }
  CliRun r = Cli({"bench", "page_fault1", "--compare", "index=rbtree,maple"});
  EXPECT_TRUE(Contains(r.err, "index=rbtree only works with vma_lock=off")) << r.err;
  r = Cli({"bench", "mixed", "--clients", "1"});
  EXPECT_TRUE(Contains(r.err, "--clients >= 2")) << r.err;
}

// page_fault2/3/4 and mmap2 in-process, each beside the same loops on this machine's
// kernel: every client has its own file, and every page touched is one op.
TEST(BenchCli, FileWorkloadsInprocessBesideNative) {
  for (const char* w : {"page_fault2", "page_fault3", "page_fault4", "mmap2"}) {
    SCOPED_TRACE(w);
    json j = CliJson({"bench", w, "--duration", "200ms", "--clients", "2"});
    EXPECT_EQ(j["workload"], w);
    ASSERT_EQ(j["results"].size(), 1u);
    const json& r = j["results"][0];
    EXPECT_TRUE(r["error"].is_null()) << r["error"];
    EXPECT_GT(r["ops"].get<uint64_t>(), 0u);
    EXPECT_EQ(r["files"]["count"], 2);
    EXPECT_EQ(r["files"]["shmem"], 0);
    ASSERT_TRUE(j["native"].is_object());
    EXPECT_TRUE(j["native"]["error"].is_null()) << j["native"]["error"];
    EXPECT_GT(j["native"]["ops"].get<uint64_t>(), 0u);
    EXPECT_GT(r["ratio_vs_native"].get<double>(), 0);
    const bool mmap_only = std::string(w) == "mmap2";
    // At most a fault per page (fault-around maps several per read fault); none for mmap2.
    // The kernel's threads also take a few faults of their own (stack, libc): slack 16.
    const json& native = j["native"];
    if (mmap_only) {
      EXPECT_EQ(r["faults"], 0);
      EXPECT_LE(native["faults"].get<uint64_t>(), 16u);
    } else {
      EXPECT_GT(r["faults"].get<uint64_t>(), 0u);
      EXPECT_LE(r["faults"].get<uint64_t>(), r["ops"].get<uint64_t>());
      EXPECT_LE(native["faults"].get<uint64_t>(), native["ops"].get<uint64_t>() + 16);
    }
  }
  CliRun skip = Cli({"bench", "page_fault3", "--duration", "100ms", "--skip-native", "--json", "--quiet"});
  ASSERT_EQ(skip.code, kExitOk) << skip.err;
  EXPECT_TRUE(json::parse(skip.out)["native"].is_null());
  CliRun text = Cli({"bench", "page_fault4", "--duration", "100ms", "--quiet"});
  ASSERT_EQ(text.code, kExitOk) << text.err;
  EXPECT_TRUE(Contains(text.out, "native (kernel, once)")) << text.out;
  EXPECT_TRUE(Contains(text.out, "fa-pages")) << text.out;
  CliRun help = Cli({"--help"});
  for (const char* cmd : {"bench page_fault1", "bench mmap1", "bench mixed", "bench page_fault2", "bench page_fault4",
                          "file open", "file stat", "msync", "lockstat"})
    EXPECT_TRUE(Contains(help.out, cmd)) << cmd;
}

const json& ByProfile(const json& j, const std::string& profile) {
  for (const json& r : j["results"])
    if (r["profile"] == profile) return r;
  static const json kNone = json::object();
  ADD_FAILURE() << "no result for " << profile << " in " << j.dump();
  return kNone;
}

/// A timed result of a run of `duration_s`: no error, rates present, and the clients
/// ran at least the duration (they are stopped `duration_s` after the last one started).
/// The engine's own fault counter over the timed phase equals the faults the accesses
/// reported (in-process, every access is done inside that phase).
void ExpectTimed(const json& r, double duration_s) {
  ASSERT_TRUE(r.contains("profile"));
  ASSERT_TRUE(r.contains("ops_per_s"));
  ASSERT_TRUE(r.contains("faults_per_s"));
  EXPECT_TRUE(r["error"].is_null()) << r["error"];
  EXPECT_GE(r["seconds"].get<double>(), duration_s);
  EXPECT_EQ(r["pgfault"], r["faults"]);
}

/// Pages written: the full passes over `pass_pages` each, plus at most one partial pass
/// per writing client (the one the stop flag cut short).
void ExpectPasses(const json& r, uint64_t pass_pages, uint64_t writers) {
  uint64_t ops = r["ops"], passes = r["iterations"];
  EXPECT_GT(ops, 0u);
  EXPECT_GE(ops, passes * pass_pages) << r.dump();
  EXPECT_LT(ops, (passes + writers) * pass_pages) << r.dump();
}

TEST(BenchInprocess, PageFault1ThreadsCompare) {
  json j = CliJson({"bench", "page_fault1", "--mode", "threads", "--clients", "2", "--duration", "200ms", "--compare",
                    "linux-6.0,linux-6.6"});
  EXPECT_EQ(j["workload"], "page_fault1");
  EXPECT_EQ(j["mode"], "threads");
  EXPECT_EQ(j["clients"], 2);
  EXPECT_EQ(j["transport"], "inprocess");
  EXPECT_EQ(j["pinned"], true);  // in-process clients are pinned to CPUs by default
  EXPECT_DOUBLE_EQ(j["duration_s"].get<double>(), 0.2);
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_TRUE(j["error"].is_null());
  for (const json& r : j["results"]) {
    SCOPED_TRACE(r["profile"].get<std::string>());
    ExpectTimed(r, 0.2);
    ExpectPasses(r, bench::kPageFaultBytes / bench::kPageBytes, 2);
    // One write fault per page written: every page of a fresh mapping.
    EXPECT_EQ(r["faults"], r["ops"]);
    EXPECT_TRUE(r["locks"].is_object());
  }
  const json& v60 = ByProfile(j, "linux-6.0");
  const json& v66 = ByProfile(j, "linux-6.6");
  EXPECT_EQ(v60["profile_name"], "linux-6.0");
  EXPECT_EQ(v60["vma_lock_success"], 0);
  // Every 6.0 fault takes mmap_lock for read.
  EXPECT_GE(v60["locks"]["mmap_lock"]["read"]["acquisitions"].get<uint64_t>(), v60["ops"].get<uint64_t>());
  EXPECT_GT(v66["vma_lock_success"].get<uint64_t>(), 0u);
  // 6.6: nearly all faults under the VMA lock; the first fault of each new VMA aborts
  // (no anon_vma yet) and takes mmap_lock.
  EXPECT_GE(v66["vma_lock_success"].get<double>(), 0.95 * v66["ops"].get<double>());
  EXPECT_GT(v66["vma_lock_abort"].get<uint64_t>(), 0u);
  EXPECT_LT(v66["locks"]["mmap_lock"]["read"]["acquisitions"].get<double>(), 0.05 * v66["ops"].get<double>());
  EXPECT_TRUE(v60["mmap_lock_contentions_per_1k_faults"].is_number());
  EXPECT_TRUE(v60["mmap_lock_wait_s_per_op"].is_number());
}

TEST(BenchInprocess, Mmap1Processes) {
  json j = CliJson({"bench", "mmap1", "--mode", "processes", "--clients", "2", "--duration", "200ms", "--profile",
                    "linux-6.1", "--pin=false"});
  EXPECT_EQ(j["pinned"], false);
  ASSERT_EQ(j["results"].size(), 1u);
  const json& r = j["results"][0];
  ExpectTimed(r, 0.2);
  EXPECT_EQ(r["profile"], "linux-6.1");
  EXPECT_GT(r["ops"].get<uint64_t>(), 0u);
  EXPECT_EQ(r["iterations"], r["ops"]);  // one op = one loop iteration = one mmap+munmap pair
  EXPECT_EQ(r["faults"], 0);
  EXPECT_TRUE(r["mmap_lock_contentions_per_1k_faults"].is_null());  // no faults
  // mmap and munmap each take mmap_lock for write.
  EXPECT_GE(r["locks"]["mmap_lock"]["write"]["acquisitions"].get<uint64_t>(), 2 * r["ops"].get<uint64_t>());
  // Separate spaces: nobody to contend with.
  EXPECT_EQ(r["mmap_lock_contentions"], 0);
}

TEST(BenchInprocess, MixedCompare) {
  json j = CliJson({"bench", "mixed", "--clients", "2", "--duration", "200ms", "--compare", "linux-6.0,linux-6.6"});
  EXPECT_EQ(j["faulters"], 1);
  EXPECT_EQ(j["churners"], 1);
  ASSERT_EQ(j["results"].size(), 2u);
  for (const json& r : j["results"]) {
    SCOPED_TRACE(r["profile"].get<std::string>());
    ExpectTimed(r, 0.2);
    ExpectPasses(r, bench::kMixedRegionBytes / bench::kPageBytes, 1);
    EXPECT_GT(r["churn_ops"].get<uint64_t>(), 0u);
    // Every pass writes pages that MADV_DONTNEED dropped after the last: one fault each.
    EXPECT_EQ(r["faults"], r["ops"]);
    // The churner's mmap and munmap take mmap_lock for write.
    EXPECT_GE(r["locks"]["mmap_lock"]["write"]["acquisitions"].get<uint64_t>(), 2 * r["churn_ops"].get<uint64_t>());
  }
  EXPECT_EQ(ByProfile(j, "linux-6.0")["vma_lock_success"], 0);
  EXPECT_GT(ByProfile(j, "linux-6.6")["vma_lock_success"].get<uint64_t>(), 0u);
}

TEST(BenchInprocess, CompareOneSwitch) {
  // One switch varied from the base profile; each spec gets its own run and slot.
  json j = CliJson({"bench", "page_fault1", "--duration", "200ms", "--profile", "linux-6.4", "--compare",
                    "vma_lock=off,anon"});
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][0]["profile"], "linux-6.4,vma_lock=off");
  // The engine names the combination: the maple tree in RCU mode without per-VMA locks is
  // no era's (6.1.0 had no RCU mode), so "custom".
  EXPECT_EQ(j["results"][0]["profile_name"], "custom");
  EXPECT_EQ(j["results"][0]["vma_lock_success"], 0);
  EXPECT_EQ(j["results"][1]["profile"], "linux-6.4,vma_lock=anon");
  EXPECT_GT(j["results"][1]["vma_lock_success"].get<uint64_t>(), 0u);
}

TEST(BenchInprocess, RunBenchLibrary) {
  auto backend = bench::MakeInprocessBackend();
  bench::BenchConfig cfg;
  cfg.workload = bench::Workload::kPageFault1;
  cfg.duration_s = 0.1;
  cfg.profile = "linux-6.0";
  bench::BenchResult r = bench::RunBench(cfg, *backend);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_GT(r.ops, 0u);
  EXPECT_EQ(r.ops, r.faults);
  ASSERT_TRUE(r.locks.has_value());
  EXPECT_GE(r.locks->lock("mmap_lock", "read").acquisitions, r.ops);
  EXPECT_EQ(r.locks->event("vma_lock_success"), 0u);
  // Bad configurations fail without running.
  cfg.profile = "index=rbtree,vma_lock=all";
  EXPECT_TRUE(Contains(bench::RunBench(cfg, *backend).error, "needs index=maple"));
  cfg.profile = "linux-6.6";
  cfg.workload = bench::Workload::kMixed;
  cfg.clients = 1;
  EXPECT_FALSE(bench::RunBench(cfg, *backend).ok());
}

TEST(BenchCli, HumanTable) {
  CliRun r = Cli({"bench", "mixed", "--duration", "150ms", "--compare", "linux-6.0,linux-6.6"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* s : {"bench mixed: 1 faulter + 1 churner", "profile", "ops/s", "faults/s", "churn/s", "cont/1kflt",
                        "wait-s/op", "vl-success", "linux-6.0", "linux-6.6"}) {
    EXPECT_TRUE(Contains(r.out, s)) << s << "\n" << r.out;
  }
  EXPECT_TRUE(Contains(r.err, "[1/2] profile linux-6.0")) << r.err;  // progress on stderr
}

std::string TempPath(const char* name) {
  const char* dir = getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/vmspace-test-" + std::to_string(getpid()) + "-" + name;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(BenchPlot, WritesSvg) {
  if (bench::FindGnuplot().empty()) GTEST_SKIP() << "gnuplot not installed (apt-get install -y gnuplot-nox)";
  std::string svg = TempPath("pf1.svg");
  json j = CliJson({"bench", "page_fault1", "--duration", "150ms", "--compare", "linux-6.0,linux-6.6", "--plot", svg});
  EXPECT_EQ(j["plot"], svg);
  std::string text = ReadAll(svg);
  EXPECT_TRUE(Contains(text, "<svg")) << text.substr(0, 200);
  EXPECT_TRUE(Contains(text, "linux-6.6"));
  unlink(svg.c_str());

  // bench stress --compare draws one too.
  svg = TempPath("stress.svg");
  j = CliJson({"bench", "stress", "--rounds", "300", "--skip-native", "--compare", "linux-6.0,linux-6.6", "--plot", svg});
  EXPECT_TRUE(Contains(ReadAll(svg), "<svg"));
  unlink(svg.c_str());
}

// --plot FILE.png writes a PNG (gnuplot's pngcairo terminal); the extension names the
// format, and any other is a usage error before the run.
TEST(BenchPlot, FormatByExtension) {
  EXPECT_EQ(bench::PlotFormat("a/b.svg"), "svg");
  EXPECT_EQ(bench::PlotFormat("B.PNG"), "png");
  EXPECT_EQ(bench::PlotFormat("x.pdf"), "");
  EXPECT_EQ(bench::PlotFormat("dir.png/chart"), "");
  CliRun r = Cli({"bench", "page_fault1", "--compare", "linux-6.0,linux-6.6", "--plot", "x.pdf"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_TRUE(Contains(r.err, "--plot: 'x.pdf': the extension names the format: .svg (SVG) or .png (PNG)")) << r.err;
  if (bench::FindGnuplot().empty()) GTEST_SKIP() << "gnuplot not installed (apt-get install -y gnuplot-nox)";
  // bench stress --scaling draws the ratio per repetition (ours, the kernel's, the map control).
  std::string svg = TempPath("scaling.svg");
  json s = CliJson({"bench", "stress", "--rounds", "300", "--scaling", "--clients", "2", "--repeat", "2", "--plot", svg});
  EXPECT_EQ(s["plot"], svg);
  std::string text = ReadAll(svg);
  EXPECT_TRUE(Contains(text, "<svg")) << text.substr(0, 200);
  for (const char* label : {"rep 1", "rep 2", "median", "kernel: 2 / 1 processes", "control: a std::map per thread"})
    EXPECT_TRUE(Contains(text, label)) << label;
  unlink(svg.c_str());
  std::string png = TempPath("pf1.png");
  json j = CliJson({"bench", "page_fault1", "--duration", "150ms", "--compare", "linux-6.0,linux-6.6", "--plot", png});
  EXPECT_EQ(j["plot"], png);
  std::string bytes = ReadAll(png);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_FALSE(Contains(bytes, "<svg"));
  unlink(png.c_str());
}

TEST(BenchPlot, MissingGnuplotFailsFirst) {
  setenv("VMSPACE_GNUPLOT", "/nonexistent/gnuplot", 1);
  CliRun r = Cli({"bench", "page_fault1", "--duration", "5s", "--plot", TempPath("none.svg")});
  unsetenv("VMSPACE_GNUPLOT");
  EXPECT_EQ(r.code, kExitFailed);
  EXPECT_TRUE(Contains(r.err, "gnuplot-nox")) << r.err;
  EXPECT_FALSE(Ran(r)) << "should fail before running\n" << r.out << r.err;
}

TEST(BenchStressCompare, InprocessJson) {
  json j = CliJson({"bench", "stress", "--rounds", "2000", "--page-fault", "--compare",
                    "linux-6.0,linux-6.1,linux-6.4,linux-6.6"});
  EXPECT_EQ(j["workload"], "seed-004");
  EXPECT_EQ(j["compare"], true);
  const json& native = j["native"];
  ASSERT_TRUE(native.is_object());
  EXPECT_EQ(native["rounds"], 2000);
  ASSERT_EQ(j["results"].size(), 4u);
  std::string hash = j["results"][0]["addr_hash"];
  const testing_seed004::Touched touched = testing_seed004::ReplayTouched(1, 2000);
  for (const json& r : j["results"]) {
    SCOPED_TRACE(r["profile"].get<std::string>());
    // What 2000 rounds with page faults must do: an access, a munmap and an mmap each,
    // after 1024 untimed mmaps and before 1024 untimed munmaps.
    EXPECT_EQ(r["rounds"], 2000);
    EXPECT_EQ(r["ops"], json({{"mmap", 2000}, {"munmap", 2000}, {"access", 2000}, {"total", 6000}}));
    EXPECT_EQ(r["setup_mmaps"], 1024);
    EXPECT_EQ(r["teardown_munmaps"], 1024);
    // The kernel ran the same sequence: the same sizes drawn, so the same bytes written,
    // and each page of each accessed mapping faulted once (replayed from the sequence).
    EXPECT_EQ(r["ops"], native["ops"]);
    EXPECT_EQ(r["bytes_touched"], touched.writes);
    EXPECT_EQ(native["bytes_touched"], touched.writes);
    EXPECT_EQ(r["faults"], touched.pages);
    EXPECT_TRUE(r.contains("ops_per_s"));
    EXPECT_TRUE(r.contains("faults_per_s"));
    EXPECT_GT(r["ratio_vs_native"].get<double>(), 0);
    EXPECT_EQ(r["addr_hash"], hash);  // locking never changes placement
    // The engine's fault counter over the rounds equals the faults the accesses reported.
    EXPECT_EQ(r["pgfault"], r["faults"]);
    EXPECT_TRUE(r["error"].is_null());
  }
  EXPECT_EQ(ByProfile(j, "linux-6.0")["vma_lock_success"], 0);
  EXPECT_EQ(ByProfile(j, "linux-6.1")["vma_lock_success"], 0);
  EXPECT_GT(ByProfile(j, "linux-6.4")["vma_lock_success"].get<uint64_t>(), 0u);
  EXPECT_GT(ByProfile(j, "linux-6.6")["vma_lock_success"].get<uint64_t>(), 0u);
  EXPECT_GT(ByProfile(j, "linux-6.0")["locks"]["mmap_lock"]["read"]["acquisitions"].get<uint64_t>(), 0u);
}

// --repeat 3: each profile and the kernel run three times in turn. Each repetition ran
// the rounds asked for, on the same sequence (the same addresses whatever the profile),
// and a row's figures are those of one of its repetitions.
TEST(BenchStressCompare, RepeatRunsEveryProfileAndTheKernelEachTime) {
  json j = CliJson({"bench", "stress", "--rounds", "1000", "--repeat", "3", "--compare", "linux-6.0,linux-6.15"});
  EXPECT_EQ(j["repeat"], 3);
  const std::vector<double> nrps = j["native_rounds_per_s_runs"].get<std::vector<double>>();
  ASSERT_EQ(nrps.size(), 3u);
  EXPECT_EQ(j["native"]["rounds"], 1000);
  EXPECT_EQ(j["native"]["ops"], json({{"mmap", 1000}, {"munmap", 1000}, {"access", 0}, {"total", 2000}}));
  EXPECT_NE(std::find(nrps.begin(), nrps.end(), j["native"]["rounds_per_sec"].get<double>()), nrps.end());
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][0]["addr_hash"], j["results"][1]["addr_hash"]);  // locking never changes placement
  for (const json& r : j["results"]) {
    SCOPED_TRACE(r["profile"].get<std::string>());
    const std::vector<double> x = r["ratio_vs_native_runs"].get<std::vector<double>>();
    const std::vector<double> rps = r["rounds_per_s_runs"].get<std::vector<double>>();
    ASSERT_EQ(x.size(), 3u);
    ASSERT_EQ(rps.size(), 3u);
    EXPECT_EQ(r["rounds"], 1000);
    EXPECT_EQ(r["ops"], j["native"]["ops"]);
    EXPECT_NE(std::find(rps.begin(), rps.end(), r["rounds_per_sec"].get<double>()), rps.end());
    EXPECT_NE(std::find(x.begin(), x.end(), r["ratio_vs_native"].get<double>()), x.end());
  }
  CliRun t = Cli({"bench", "stress", "--rounds", "500", "--quiet", "--repeat", "2", "--compare", "linux-6.0"});
  ASSERT_EQ(t.code, kExitOk) << t.err;
  for (const char* s : {"native (kernel, median)", "x native per repetition", "median over 2 repetitions"})
    EXPECT_TRUE(Contains(t.out, s)) << s << "\n" << t.out;
}

// --scaling --clients 2 --repeat 3: each repetition runs 1 client, then 2 (each in its
// own space), then the kernel's 1 and 2 processes, every run all its rounds, then the
// two controls (alu, map: 1 thread, then 2). With two CPUs or more the clients are
// pinned and the 1-client run is made on each CPU (ours and the kernel's). Each median
// is one repetition's figure.
TEST(BenchStressScaling, EveryRepetitionRunsItsRoundsAndControls) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const bool pinned = CPU_COUNT(&set) >= 2;
  json j = CliJson({"bench", "stress", "--rounds", "1000", "--scaling", "--clients", "2", "--repeat", "3",
                    "--profile", "linux-6.0"});
  EXPECT_EQ(j["scaling"], true);
  EXPECT_EQ(j["clients"], 2);
  EXPECT_EQ(j["locking_profile"], "linux-6.0");
  EXPECT_EQ(j["profile_name"], "linux-6.0");
  EXPECT_EQ(j["error"], nullptr);
  const json& reps = j["repetitions"];
  ASSERT_EQ(reps.size(), 3u);
  EXPECT_EQ(j["pinned"], pinned);
  std::vector<double> ours, kernel, alu, map, over_map, matched, per_client;
  for (const json& r : reps) {
    // One 1-client run per CPU when pinned, else one; the first is the ratio's.
    for (const char* who : {"", "native_"}) {
      const std::string w = who;
      const json& solo = r[w.empty() ? "one_client_rounds_per_s_by_cpu" : "native_one_rounds_per_s_by_cpu"];
      ASSERT_EQ(solo.size(), pinned ? 2u : 1u) << w;
      const double first = r[w.empty() ? "one_client_rounds_per_s" : "native_one_rounds_per_s"].get<double>();
      EXPECT_DOUBLE_EQ(solo[0].get<double>(), first) << w;
      const double many = r[w + "clients_rounds_per_s"].get<double>();
      if (w.empty()) {  // in process: each client thread's CPU time over its wall time
        ASSERT_EQ(r["on_cpu_one_by_cpu"].size(), solo.size());
        for (const json& v : r["on_cpu_one_by_cpu"]) {
          EXPECT_GT(v.get<double>(), 0);
          EXPECT_LE(v.get<double>(), 1.05);
        }
        EXPECT_GT(r["clients_on_cpu"].get<double>(), 0);
        EXPECT_LE(r["clients_on_cpu"].get<double>(), 1.05);
      }
      if (!pinned) {
        EXPECT_TRUE(r[w + "matched_ratio"].is_null()) << w;
        continue;
      }
      ASSERT_GT(std::min(solo[0].get<double>(), solo[1].get<double>()), 0) << w;
      EXPECT_GE(r[w + "cpu_spread"].get<double>(), 1.0) << w;  // the fastest CPU over the slowest
      matched.push_back(r[w + "matched_ratio"].get<double>());
      if (!w.empty()) continue;
      per_client.push_back(r["per_client_ratio"].get<double>());
      // Each client timed a part of the run's span: their own rounds/s add up to at least
      // the aggregate over the whole span.
      const json& by_client = r["clients_rounds_per_s_by_client"];
      ASSERT_EQ(by_client.size(), 2u);
      EXPECT_GE(by_client[0].get<double>() + by_client[1].get<double>(), many * (1 - 1e-9));
    }
    EXPECT_EQ(r["one_client_rounds"], 1000);
    EXPECT_EQ(r["clients_rounds"], 2000);  // both clients ran all their rounds
    EXPECT_EQ(r["native_one_rounds"], 1000);
    EXPECT_EQ(r["native_clients_rounds"], 2000);
    ASSERT_GT(r["one_client_rounds_per_s"].get<double>(), 0);
    ours.push_back(r["ratio"].get<double>());
    kernel.push_back(r["native_ratio"].get<double>());
    // The controls ran: a 1-thread and a 2-thread time each.
    for (const char* ctl : {"alu", "map"}) {
      const std::string k = ctl;
      EXPECT_GT(r[k + "_one_thread_s"].get<double>(), 0) << k;
      EXPECT_GT(r[k + "_threads_s"].get<double>(), 0) << k;
    }
    alu.push_back(r["alu_ratio"].get<double>());
    map.push_back(r["map_ratio"].get<double>());
    over_map.push_back(r["ratio_over_map"].get<double>());
  }
  // Each median is one repetition's figure.
  auto one_of = [](const json& v, const std::vector<double>& runs) {
    return std::find(runs.begin(), runs.end(), v.get<double>()) != runs.end();
  };
  EXPECT_TRUE(one_of(j["ratio_median"], ours));
  EXPECT_TRUE(one_of(j["native_ratio_median"], kernel));
  EXPECT_TRUE(one_of(j["alu_ratio_median"], alu));
  EXPECT_TRUE(one_of(j["map_ratio_median"], map));
  EXPECT_TRUE(one_of(j["ratio_over_map_median"], over_map));
  if (pinned) {
    ASSERT_EQ(matched.size(), 6u);  // ours and the kernel's, per repetition
    EXPECT_TRUE(one_of(j["matched_ratio_median"], {matched[0], matched[2], matched[4]}));
    EXPECT_TRUE(one_of(j["native_matched_ratio_median"], {matched[1], matched[3], matched[5]}));
    EXPECT_TRUE(one_of(j["per_client_ratio_median"], per_client));
  } else {
    EXPECT_TRUE(j["matched_ratio_median"].is_null());
    EXPECT_TRUE(j["per_client_ratio_median"].is_null());
  }
  CliRun t = Cli({"bench", "stress", "--rounds", "500", "--quiet", "--scaling", "--clients", "2", "--skip-native"});
  ASSERT_EQ(t.code, kExitOk) << t.err;
  for (const char* s : {"seed-004 scaling", "2 clients r/s", "ours: median", "over 1 repetition\n",
                        "alu: median", "map: median", "ours/map: median", "ours/map\n",
                        "what this host gives user-space data-structure code",
                        "locking profile linux-6.15"})  // the engine's default, named
    EXPECT_TRUE(Contains(t.out, s)) << s << "\n" << t.out;
  if (pinned) {
    for (const char* s : {"matched   spread", "ours matched: median", "client c pinned to CPU",
                          "matched = the 2-client aggregate / the slowest CPU's 1-client rounds/s"})
      EXPECT_TRUE(Contains(t.out, s)) << s << "\n" << t.out;
  }
  for (const char* s : {"kernel: median", "the kernel: one process", "kernel 1 r/s"})  // --skip-native
    EXPECT_FALSE(Contains(t.out, s)) << s << "\n" << t.out;
}

TEST(BenchStressCompare, HumanTable) {
  CliRun r = Cli({"bench", "stress", "--rounds", "500", "--quiet", "--compare", "vma_lock=off,all"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* s : {"rounds/s", "x native", "linux-6.15,vma_lock=off", "linux-6.15,vma_lock=all",
                        "native (kernel, once)"}) {
    EXPECT_TRUE(Contains(r.out, s)) << s << "\n" << r.out;
  }
  EXPECT_FALSE(Contains(r.out, "seed 004 beside ours")) << r.out;  // no profile of the seed's table
}

TEST(BenchStressCompare, SeedTableBesideOursInJson) {
  json j = CliJson({"bench", "stress", "--rounds", "1000", "--skip-native", "--compare", "linux-6.0,linux-6.1,linux-6.7"});
  const json& t = j["seed_table"];
  ASSERT_TRUE(t.is_object()) << j.dump();
  EXPECT_EQ(t["base"], "linux-6.0");
  EXPECT_EQ(t["page_fault"], false);
  EXPECT_EQ(t["seed_rounds"], 10000000);
  ASSERT_EQ(t["rows"].size(), 3u);
  // The thread's figures (system time of 10 M rounds on 6.0.0, 6.1.0, 6.7.0-rc2), and a
  // figure of ours beside each, linux-6.0 the base of both.
  const double seed[] = {13, 49, 67};
  for (size_t i = 0; i < 3; i++) {
    const json& row = t["rows"][i];
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row["seed_seconds"].get<double>(), seed[i]);
    EXPECT_GT(row["our_seconds_per_seed_rounds"].get<double>(), 0);
  }
  EXPECT_EQ(t["rows"][0]["profile"], "linux-6.0");
  EXPECT_EQ(t["rows"][0]["seed_slowdown"], 1.0);
  EXPECT_EQ(t["rows"][0]["our_slowdown"], 1.0);
  EXPECT_TRUE(Contains(t["source"].get<std::string>(), "mmap performance regression starting with k-6.1")) << t["source"];
  EXPECT_EQ(t["rows"][2]["kernel"], "6.7.0-rc2");
}

TEST(BenchStressCompare, SeedTableWithPageFaultsInText) {
  CliRun r = Cli({"bench", "stress", "--rounds", "300", "--page-fault", "--skip-native", "--quiet", "--compare",
                  "linux-6.1;linux-6.15"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  // linux-6.1 is the base (no linux-6.0 run): 64 / 104, 104 / 104, ~210 / 104.
  for (const char* s : {"seed 004 beside ours", "page faults on", "slowdown = time / linux-6.1's", "6.7.0-rc2",
                        "~210", "0.62", "2.02"}) {
    EXPECT_TRUE(Contains(r.out, s)) << s << "\n" << r.out;
  }
  // No profile of the seed's: only with --seed-table (then without figures of ours).
  r = Cli({"bench", "stress", "--rounds", "300", "--skip-native", "--quiet", "--compare", "linux-6.15"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_FALSE(Contains(r.out, "seed 004 beside ours")) << r.out;
  r = Cli({"bench", "stress", "--rounds", "300", "--skip-native", "--quiet", "--compare", "linux-6.15", "--seed-table"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(Contains(r.out, "seed 004 beside ours")) << r.out;
  EXPECT_TRUE(Contains(r.out, "5.15")) << r.out;  // 67 / 13: the seed's own, linux-6.0 the base
}

TEST(Lockstat, UnreachableDaemon) {
  CliRun r = Cli({"lockstat", "--target", "127.0.0.1:1", "--timeout", "2"});
  EXPECT_EQ(r.code, kExitFailed);
  EXPECT_TRUE(Contains(r.err, "UNAVAILABLE")) << r.err;
}

// bench shmem-dirty (seed 002): retry handles each page's fault twice (pgfault 2 per
// page, one VM_FAULT_RETRY each), completed once; min_flt 1 per page either way, and
// the kernel's memfd loop (VM_FAULT_COMPLETED since 5.19) 1 per page.
TEST(BenchShmemDirty, RetryVsCompleted) {
  json j = CliJson({"bench", "shmem-dirty", "--size", "8M", "--runs", "2", "--compare",
                    "shared_fault_completion=retry,completed"});
  ASSERT_EQ(j["results"].size(), 2u);
  const json& retry = j["results"][0];
  const json& completed = j["results"][1];
  EXPECT_EQ(retry["shared_fault_completion"], "retry");
  EXPECT_EQ(retry["pages"], 2048);
  EXPECT_EQ(retry["pgfault"], 4096);
  EXPECT_EQ(retry["retries"], 2048);
  EXPECT_EQ(retry["min_flt"], 2048);
  EXPECT_EQ(retry["mmap_lock"]["acquisitions"], 2048);  // the retried attempts (6.15: first under the VMA lock)
  EXPECT_EQ(completed["pgfault"], 2048);
  EXPECT_EQ(completed["retries"], 0);
  EXPECT_EQ(completed["completed"], 2048);
  EXPECT_EQ(completed["mmap_lock"]["acquisitions"], 0);
  // Each page enters the shmem page cache once (filemap_add_folio under i_pages_lock);
  // the retried fault finds it there.
  EXPECT_EQ(retry["i_pages_lock"]["acquisitions"], 2048);
  EXPECT_EQ(completed["i_pages_lock"]["acquisitions"], 2048);
  EXPECT_GT(retry["seconds"].get<double>(), 0);
  ASSERT_TRUE(j["native"].is_object());
  EXPECT_NEAR(j["native"]["min_flt_per_page"].get<double>(), 1.0, 0.05);
  EXPECT_TRUE(j["error"].is_null());
}

TEST(BenchShmemDirty, Usage) {
  EXPECT_EQ(Cli({"bench", "shmem-dirty", "--compare", "vma_lock=off,all"}).code, kExitUsage);
  EXPECT_EQ(Cli({"bench", "shmem-dirty", "--shared-fault-completion", "sometimes"}).code, kExitUsage);
}

// bench execl (seed 003): every iteration (fork of the client's space, exec of the static
// program in the child, exit) takes the program's i_mmap_rwsem the same number of times
// in both scopes, 16, and each client's first exec 4 more; the rmap checker never finds
// a VMA outside i_mmap under wide.
TEST(BenchExecl, WideNarrow) {
  json j = CliJson({"bench", "execl", "--clients", "2", "--duration", "300ms", "--skip-native"});
  ASSERT_EQ(j["results"].size(), 2u);
  for (const json& r : j["results"]) {
    SCOPED_TRACE(r.dump());
    EXPECT_GT(r["iterations"].get<uint64_t>(), 0u);
    EXPECT_EQ(r["i_mmap_rwsem"]["acquisitions"].get<uint64_t>(), 16 * r["iterations"].get<uint64_t>() + 4 * 2);
    EXPECT_GT(r["rmap_checks"].get<uint64_t>(), 0u);
  }
  EXPECT_EQ(j["results"][0]["i_mmap_scope"], "wide");
  EXPECT_EQ(j["results"][0]["race_hits"], 0);
  EXPECT_EQ(j["results"][1]["i_mmap_scope"], "narrow");
  EXPECT_TRUE(j["error"].is_null());
}

// The kernel's side of bench execl: processes of the static vmspace-execl-true built next
// to the CLI (ET_EXEC without PT_INTERP: exec maps only it, no ld.so) fork and execve it,
// as many loops as the engine ran or fewer in as long; a binary that is not there is an
// error naming it.
TEST(BenchExecl, NativeExecsTheStaticBinary) {
  json j = CliJson({"bench", "execl", "--clients", "2", "--duration", "200ms", "--compare", "i_mmap_scope=wide"});
  const json& n = j["native"];
  ASSERT_TRUE(n.is_object()) << j.dump();
  EXPECT_TRUE(n["error"].is_null()) << n.dump();
  EXPECT_GT(n["iterations"].get<uint64_t>(), 0u);
  EXPECT_LE(n["iterations"].get<uint64_t>(), j["results"][0]["iterations"].get<uint64_t>());
  EXPECT_GT(j["results"][0]["x_native"].get<double>(), 0);
  const std::string bin = n["binary"];
  EXPECT_EQ(bin.substr(bin.rfind('/') + 1), "vmspace-execl-true");
  std::ifstream f(bin, std::ios::binary);
  Elf64_Ehdr eh{};
  ASSERT_TRUE(f.read(reinterpret_cast<char*>(&eh), sizeof eh)) << bin;
  EXPECT_EQ(std::string(reinterpret_cast<char*>(eh.e_ident), 4), "\177ELF");
  EXPECT_EQ(eh.e_type, ET_EXEC);
  int interp = 0;
  for (int i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph{};
    f.seekg(static_cast<std::streamoff>(eh.e_phoff + i * eh.e_phentsize));
    ASSERT_TRUE(f.read(reinterpret_cast<char*>(&ph), sizeof ph));
    interp += ph.p_type == PT_INTERP;
  }
  EXPECT_EQ(interp, 0);
  CliRun missing = Cli({"bench", "execl", "--clients", "1", "--duration", "50ms", "--compare", "i_mmap_scope=wide",
                        "--native-binary", "/nonexistent/true", "--quiet"});
  EXPECT_EQ(missing.code, kExitFailed);
  EXPECT_TRUE(Contains(missing.err, "/nonexistent/true")) << missing.err;
}

std::vector<std::string> Lines(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

/// A fresh directory under the test's temporary directory.
std::filesystem::path TempDir(const std::string& name) {
  const char* t = getenv("TMPDIR");
  std::filesystem::path d = std::filesystem::path(t != nullptr && *t ? t : "/tmp") /
                            ("vmspace-" + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(d);
  return d;
}

TEST(Reproduce, Seed004QuickWritesProvenanceCsvAndChart) {
  const std::filesystem::path dir = TempDir("reproduce");
  const CliRun r = Cli({"reproduce", "seed-004", "--quick", "--scale", "0.05", "--repeat", "2", "--out", dir.string(),
                        "--quiet", "--json"});
  const bool gnuplot = !bench::FindGnuplot().empty();
  ASSERT_EQ(r.code, gnuplot ? kExitOk : kExitFailed) << r.err;
  const json printed = json::parse(r.out);
  std::ifstream in(dir / "results.json");
  ASSERT_TRUE(in) << "no results.json in " << dir;
  const json j = json::parse(in);
  EXPECT_EQ(j, printed);

  // Provenance: this build, this host, now, the command line.
  const json& p = j["provenance"];
  EXPECT_EQ(p["vmspace_version"], VMSPACE_VERSION);
  EXPECT_EQ(p["vmspace_commit"], VMSPACE_COMMIT);
  utsname u{};
  ASSERT_EQ(uname(&u), 0);
  EXPECT_EQ(p["host_kernel"], u.release);
  EXPECT_EQ(p["machine"], u.machine);
  EXPECT_EQ(p["cores"].get<long>(), sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_GE(p["cores_allowed"].get<int>(), 1);
  EXPECT_TRUE(std::regex_match(p["date"].get<std::string>(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
      << p["date"];
  EXPECT_EQ(p["command_line"].get<std::string>().rfind("vmspace reproduce seed-004 --quick", 0), 0u) << p["command_line"];
  if (std::ifstream("/proc/cpuinfo").good() && std::string(u.machine) == "x86_64") {
    EXPECT_FALSE(p["cpu_model"].get<std::string>().empty());
  }

  // One study, two repetitions of the three profiles alternating, each beside the kernel.
  ASSERT_EQ(j["studies"].size(), 1u);
  const json& s = j["studies"][0];
  EXPECT_EQ(s["seed"], "seed-004");
  EXPECT_EQ(s["variants"], json({"linux-6.0", "linux-6.1", "linux-6.7"}));
  ASSERT_EQ(s["repetitions"].size(), 2u);
  EXPECT_EQ(s["repetitions"][0]["order"], json({"linux-6.0", "linux-6.1", "linux-6.7"}));
  EXPECT_EQ(s["repetitions"][1]["order"], json({"linux-6.7", "linux-6.1", "linux-6.0"}));
  for (const json& rep : s["repetitions"]) {
    EXPECT_GT(rep["kernel"]["value"].get<double>(), 0);
    for (const auto& [name, v] : rep["variants"].items()) {
      EXPECT_GT(v["value"].get<double>(), 0) << name;
      EXPECT_NEAR(v["x_native"].get<double>(), v["value"].get<double>() / rep["kernel"]["value"].get<double>(), 1e-9);
    }
  }
  // The thread's two ratios: 49/13 and 67/49 s, ours from the same repetitions.
  ASSERT_EQ(s["ratios"].size(), 2u);
  EXPECT_NEAR(s["ratios"][0]["thread"].get<double>(), 49.0 / 13, 1e-9);
  EXPECT_NEAR(s["ratios"][1]["thread"].get<double>(), 67.0 / 49, 1e-9);
  for (const json& c : s["ratios"]) {
    ASSERT_EQ(c["runs"].size(), 2u);
    const double lo = c["min"], hi = c["max"];
    EXPECT_LE(lo, hi);
    const std::string v = c["verdict"];
    EXPECT_EQ(v, lo > 1 ? "reproduced" : hi < 1 ? "not reproduced" : "not resolved on this machine");
  }
  const double r0 = s["repetitions"][0]["variants"]["linux-6.0"]["value"];
  const double r1 = s["repetitions"][0]["variants"]["linux-6.1"]["value"];
  EXPECT_NEAR(s["ratios"][0]["runs"][0].get<double>(), r0 / r1, 1e-9);
  EXPECT_EQ(s["verdict"].get<std::string>().rfind("linux-6.0 > linux-6.1 > linux-6.7: ", 0), 0u) << s["verdict"];

  // The CSV: a row per run (3 profiles + the kernel, twice).
  const std::vector<std::string> csv = Lines(dir / "results.csv");
  ASSERT_EQ(csv.size(), 1u + 2 * 4);
  EXPECT_EQ(csv[0], "seed,repetition,position,variant,value,unit,kernel_value,x_native,error");
  EXPECT_EQ(csv[1].rfind("seed-004,1,1,linux-6.0,", 0), 0u) << csv[1];
  EXPECT_EQ(csv[4].rfind("seed-004,1,4,native,", 0), 0u) << csv[4];
  EXPECT_EQ(csv[5].rfind("seed-004,2,1,linux-6.7,", 0), 0u) << csv[5];
  // The text summary and, with gnuplot, the chart.
  const std::vector<std::string> summary = Lines(dir / "summary.txt");
  ASSERT_FALSE(summary.empty());
  EXPECT_EQ(summary[0].rfind("vmspace reproduce seed-004", 0), 0u);
  if (gnuplot) {
    EXPECT_EQ(j["files"]["plot"], "ratios.svg");
    EXPECT_GT(std::filesystem::file_size(dir / "ratios.svg"), 500u);
  }
  std::filesystem::remove_all(dir);
}

TEST(Reproduce, UsageErrors) {
  EXPECT_EQ(Cli({"reproduce"}).code, kExitUsage);
  EXPECT_EQ(Cli({"reproduce", "seed-001"}).code, kExitUsage);
  EXPECT_EQ(Cli({"reproduce", "all", "--plot", "x.gif"}).code, kExitUsage);
  EXPECT_EQ(Cli({"reproduce", "all", "--scale", "0"}).code, kExitUsage);
  EXPECT_EQ(Cli({"reproduce", "all", "--repeat", "0"}).code, kExitUsage);
}

TEST(BenchSweep, StressEveryTaskCountBesideTheKernel) {
  const std::filesystem::path dir = TempDir("sweep");
  std::filesystem::create_directories(dir);
  const std::string csv = (dir / "sweep.csv").string();
  const CliRun r = Cli({"bench", "stress", "--sweep", "1..2", "--rounds", "3000", "--compare", "linux-6.0,linux-6.15",
                        "--csv", csv, "--json", "--quiet"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["sweep"], json({1, 2}));
  EXPECT_EQ(j["series"], json({"linux-6.0", "linux-6.15", "native"}));
  ASSERT_EQ(j["points"].size(), 2u);
  for (const json& p : j["points"])
    for (const auto& [series, v] : p["ops_per_s"].items()) EXPECT_GT(v.get<double>(), 0) << series;
  for (const auto& [series, v] : j["points"][0]["per_task_scaling"].items()) EXPECT_DOUBLE_EQ(v.get<double>(), 1.0);
  const double one = j["points"][0]["ops_per_s"]["native"], two = j["points"][1]["ops_per_s"]["native"];
  EXPECT_NEAR(j["points"][1]["per_task_scaling"]["native"].get<double>(), two / one / 2, 1e-9);
  const std::vector<std::string> lines = Lines(csv);
  ASSERT_EQ(lines.size(), 1u + 2 * 3);
  EXPECT_EQ(lines[0], "tasks,series,ops_per_s,per_task_scaling");
  EXPECT_EQ(lines[1].rfind("1,linux-6.0,", 0), 0u);
  EXPECT_EQ(lines[6].rfind("2,native,", 0), 0u);
  std::filesystem::remove_all(dir);
}

TEST(BenchSweep, Usage) {
  EXPECT_EQ(Cli({"bench", "stress", "--sweep", "2..1"}).code, kExitUsage);
  EXPECT_EQ(Cli({"bench", "stress", "--sweep", "1..2", "--clients", "2"}).code, kExitUsage);
  EXPECT_EQ(Cli({"bench", "stress", "--sweep", "1..2", "--scaling"}).code, kExitUsage);
  EXPECT_EQ(Cli({"bench", "mixed", "--sweep", "1..2"}).code, kExitUsage);
  EXPECT_EQ(Cli({"bench", "page_fault1", "--sweep", "x"}).code, kExitUsage);
  EXPECT_EQ(Cli({"bench", "page_fault1", "--sweep", "1,2", "--clients", "2"}).code, kExitUsage);
}

}  // namespace
}  // namespace vmspace::cli
