// SPDX-License-Identifier: Apache-2.0
// The seed-004 mmap/munmap stress workload (the program of the linux-mm thread
// "[REGRESSION]: mmap performance regression starting with k-6.1", November 2023,
// https://lore.kernel.org/linux-mm/?q=s%3A%22mmap+performance+regression+starting+with+k-6.1%22)
// on the one workload harness (harness.h), with its
// runners that need no daemon: the vmspace engine in-process and the real kernel in
// forked children. The gRPC runners (unary, stream) are in stress_grpc.h.
//
// The program: 1024 slots, each an anonymous private rw mapping of 1..32 KiB (a random
// multiple of 1 KiB); then R rounds of: pick a random slot k, optionally write every
// 128th byte of it (the "page fault" variant), munmap it, mmap a new random size into
// slot k. The random numbers come from GlibcRandom, a bit-exact copy of glibc's
// rand()/random() (TYPE_3 additive feedback), so seed 1 replays the original C program
// exactly, and every runner (engine, daemon, kernel) sees the same sequence.
//
// Only the rounds are timed; the initial 1024 mmaps and the final munmaps are not.
// With C clients, client c runs the sequence of seed + c in its own space (kernel: its
// own process), or, with shared_space, all clients share one space (kernel: C threads
// of one process). A round's munmap needs the address of the slot's previous mmap: on a
// pipelined session (Batch stream) a round whose slot's mmap is still unanswered names
// that mmap's result (harness::Addr::Of), or, where the session cannot, waits for it
// (counted in StressStats::waits).
// This file depends only on the engine library and libc (no gRPC), so benchmarks that
// build without gRPC can compile it (with harness.cc).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lib/harness.h"

namespace vmspace::stress {

/// Bit-exact glibc random()/rand() (TYPE_3, degree 31, separation 3).
class GlibcRandom {
 public:
  /// As srandom(seed) (seed 0 acts as 1).
  explicit GlibcRandom(uint32_t seed = 1);
  /// As random(): a value in [0, 2^31).
  int32_t Next();

 private:
  std::array<int32_t, 31> state_{};
  int f_ = 3;  // index of fptr
  int r_ = 0;  // index of rptr
};

/// The seed-004 random choices for one client.
class Seed004Sequence {
 public:
  static constexpr int kSlots = 1024;
  explicit Seed004Sequence(uint32_t seed) : rng_(seed) {}
  /// Size of a new mapping: 1024 * (rand() % 32 + 1) bytes.
  uint64_t NextSize() { return 1024u * (static_cast<uint64_t>(rng_.Next()) % 32 + 1); }
  /// Slot to recycle: rand() % 1024.
  int NextSlot() { return static_cast<int>(rng_.Next() % kSlots); }

 private:
  GlibcRandom rng_;
};

/// What to run.
struct StressConfig {
  uint64_t rounds = 100000;   // rounds per client
  int clients = 1;            // concurrent clients
  bool shared_space = false;  // all clients in one space (one process for the kernel)
  bool page_fault = false;    // write every `stride`-th byte before each munmap
  uint32_t seed = 1;          // client c uses seed + c
  uint64_t stride = 128;
  /// Engine locking profile for the spaces ("linux-6.0", "linux-6.6,vma_lock=off", ...;
  /// "" = the engine's or daemon's default). Ignored by the kernel runner.
  std::string locking_profile;
  /// -1: clients are not pinned; k >= 0: client c runs pinned to the (k + c)-th CPU this
  /// process may run on (harness::AllowedCpus order, modulo their number), ours and the
  /// kernel's alike (bench stress --scaling: one client on each CPU, then all).
  int pin_first_cpu = -1;
};

/// Figures of one run: the harness's result. rounds = rounds done, ops = mmap + munmap
/// + access ops of the rounds, locks = the profile's lock deltas over the rounds.
using StressStats = harness::RunResult;
using harness::NewSharedProgress;
using harness::Progress;

/// The workload: one client loop per client, over any harness session.
class Seed004Workload : public harness::Workload {
 public:
  explicit Seed004Workload(const StressConfig& cfg) : cfg_(cfg) {}
  std::unique_ptr<harness::ClientLoop> NewClient(int client, int clients) const override;
  void Summarize(const std::vector<harness::ClientFigures>& clients, harness::RunResult& r) const override;

 private:
  StressConfig cfg_;
};

/// One row of seed 004's table (David Wang, "Re: [REGRESSION]: mmap performance
/// regression starting with k-6.1", 2023-11-26, in the thread above): total system time of
/// kSeedRounds rounds of the program on one kernel, without and with the page-fault
/// variant, and the profile that models that kernel.
struct SeedFigure {
  const char* profile;   // "linux-6.0"
  const char* kernel;    // "6.0.0"
  double no_fault_s;     // system time, seconds, no page faults
  double fault_s;        // system time, seconds, with page faults
  bool fault_approx;     // the seed gives it as "~" (6.7.0-rc2: ~210 s)
};
inline constexpr uint64_t kSeedRounds = 10'000'000;
inline constexpr SeedFigure kSeedTable[] = {
    {"linux-6.0", "6.0.0", 13, 64, false},
    {"linux-6.1", "6.1.0", 49, 104, false},
    {"linux-6.7", "6.7.0-rc2", 67, 210, true},
};

/// A row of the seed table beside ours: the seed's time and its slowdown against the
/// base row, our time for kSeedRounds rounds at our measured rate and our slowdown
/// against the same base (both = time / the base's time; 1 for the base).
struct SeedComparison {
  const SeedFigure* seed;           // the seed's row
  double seed_s = 0;                // its time for this variant (page faults or not)
  double seed_slowdown = 0;         // seed_s / the base's seed_s
  std::optional<double> our_s;      // kSeedRounds / our rounds/s (none: not run or failed)
  std::optional<double> our_slowdown;  // our_s / the base's our_s
};
struct SeedComparisonTable {
  std::string base;  // the profile every slowdown is relative to
  bool page_fault = false;
  std::vector<SeedComparison> rows;  // in kSeedTable's order
};
/// The seed's rows beside ours. `ours` maps profile names to our rounds/s (0 or absent:
/// no figure). Every seed row is listed; the base is linux-6.0 if we have its figure,
/// else the first seed row we have a figure for, else linux-6.0 (then our columns are
/// empty). A pure function of its arguments (the client tests check it).
SeedComparisonTable CompareWithSeed(const std::map<std::string, double>& ours, bool page_fault);
/// Whether `profile` (a profile name) has a row in the seed's table.
bool InSeedTable(const std::string& profile);

/// Runs the workload on `backend` (harness::Run): one space per client or one shared.
StressStats RunStress(const StressConfig& cfg, harness::Backend& backend, Progress* progress = nullptr);

/// Runs the workload on the engine library in this process: one FrameAllocator, one
/// vmspace::AddressSpace per client (or one shared), one thread per client.
StressStats RunEngineStress(const StressConfig& cfg, Progress* progress = nullptr);

/// Runs the same sequence on the real kernel in forked children with mmap/munmap (and
/// real writes with page_fault): one child process per client, or one child with a
/// thread per client for shared_space. The parent only waits and collects figures.
/// `progress`, if given, must live in memory shared with children (NewSharedProgress()).
StressStats RunNativeStress(const StressConfig& cfg, Progress* progress = nullptr);

/// The controls of `bench stress --scaling`: code that shares nothing between threads.
enum class Control {
  /// Eight independent xorshift64 chains in general registers (a compiler barrier on
  /// each chain keeps them scalar: vectorized, they were bound by latency and hid a
  /// shared core). Bound by integer-unit throughput: no memory, no lock, no system call.
  /// Two vCPUs on one physical core's SMT siblings run it about half as fast side by
  /// side as alone; on two cores, as fast.
  kAlu,
  /// A std::map of 1024 random keys per thread: erase one, insert a new one, per step
  /// (a red-black tree walk, a malloc and a free from the thread's own arena).
  /// User-space data-structure code as the engine's, sharing nothing.
  kMap,
};

/// Runs `threads` threads of `control`, each `iters` steps, started together and
/// pinned one per allowed CPU in order (as the in-process clients are). Returns the
/// seconds from the start to the last thread's end.
double ControlSeconds(Control control, int threads, uint64_t iters);

}  // namespace vmspace::stress
