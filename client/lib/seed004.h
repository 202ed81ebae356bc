// The seed-004 mmap/munmap stress workload (shared/seeds/004: "mmap performance
// regression starting with k-6.1"), as a deterministic operation sequence plus two
// runners that need no daemon: the vmspace engine in-process and the real kernel in a
// forked child. The gRPC runners (unary, stream) are in stress_grpc.h.
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
// of one process).
// This file depends only on the engine library and libc (no gRPC), so benchmarks that
// build without gRPC can compile it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

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
};

/// Figures of one run. Counts cover the timed rounds only unless named setup_/teardown_.
struct StressStats {
  double seconds = 0;         // wall time of the rounds phase (all clients)
  uint64_t rounds = 0;
  uint64_t mmaps = 0;
  uint64_t munmaps = 0;
  uint64_t accesses = 0;      // Access calls (one per round with page_fault)
  uint64_t bytes_touched = 0; // single-byte accesses made by those calls
  uint64_t faults = 0;        // page faults taken (engine: reported; kernel: ru_minflt)
  uint64_t major_faults = 0;
  uint64_t setup_mmaps = 0;
  uint64_t teardown_munmaps = 0;
  uint64_t messages = 0;      // Batch messages sent (stream transport)
  uint64_t waits = 0;         // stream: times a round waited for an earlier mmap reply
  /// Order-sensitive hash of every mmap address a client got, XOR-combined across
  /// clients; equal across runners that place mappings identically (engine and daemon
  /// with the same settings, separate spaces). 0 for the kernel and shared spaces.
  uint64_t addr_hash = 0;
  std::string error;          // "" on success, else what failed first
  bool ok() const { return error.empty(); }
  double rounds_per_sec() const { return seconds > 0 ? static_cast<double>(rounds) / seconds : 0; }
};

/// Running count of finished rounds, for progress reports (updated in steps).
struct Progress {
  std::atomic<uint64_t> rounds{0};
};

/// One client's figures and its own time window (POD: native children send it
/// through a pipe). MergeFigures() sums clients into a StressStats.
struct ClientFigures {
  uint64_t t0 = 0, t1 = 0;  // MonoNs() at the start and end of this client's rounds
  uint64_t rounds = 0, mmaps = 0, munmaps = 0, accesses = 0, bytes_touched = 0;
  uint64_t faults = 0, major_faults = 0, setup_mmaps = 0, teardown_munmaps = 0;
  uint64_t messages = 0, waits = 0;
  uint64_t addr_hash = 0;
  char error[200] = {};
  /// Keeps the first error only.
  void SetError(const std::string& what);
};

/// Sums clients into `s`: counts add up, the time is max(t1) - min(t0), hashes are
/// XOR-combined if `hash`, the first error wins.
void MergeFigures(StressStats& s, const std::vector<ClientFigures>& figs, bool hash);

/// Folds one mmap address into a client's running hash (order-sensitive).
inline uint64_t HashAddr(uint64_t h, uint64_t addr) {
  h ^= addr + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0x100000001b3ull;
}

/// Runs the workload on the engine library in this process: one FrameAllocator, one
/// vmspace::AddressSpace per client (or one shared), one thread per client.
StressStats RunEngineStress(const StressConfig& cfg, Progress* progress = nullptr);

/// Runs the same sequence on the real kernel in forked children with mmap/munmap (and
/// real writes with page_fault): one child process per client, or one child with a
/// thread per client for shared_space. The parent only waits and collects figures.
/// `progress`, if given, must live in memory shared with children (NewSharedProgress()).
StressStats RunNativeStress(const StressConfig& cfg, Progress* progress = nullptr);

/// A Progress in MAP_SHARED memory, so forked children can update it. Never freed
/// (one page, for the life of the process).
Progress* NewSharedProgress();

/// Wall-clock helper: monotonic nanoseconds.
uint64_t MonoNs();

}  // namespace vmspace::stress
