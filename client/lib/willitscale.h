// Timed scalability workloads after will-it-scale (antonblanchard/will-it-scale), run on
// vmspace address spaces for a fixed duration under one engine locking profile:
//
//   page_fault1  per client, forever: mmap 128 MiB rw private anon; write one byte per
//                4 KiB page; munmap. One op = one page written (one write fault).
//   mmap1        per client, forever: mmap 128 MiB rw private anon; munmap.
//                One op = one mmap+munmap pair.
//   mixed        in ONE space: C-1 faulters, each with its own 32 MiB rw region mapped
//                once, loop {write every page; madvise(MADV_DONTNEED) the region} (one
//                op = one page written), while one churner loops {mmap 16 KiB PROT_READ
//                private anon; munmap} (counted separately). PROT_READ keeps the
//                churner's VMAs from merging with the faulters'. This is the case per-VMA
//                locks exist for: faults no longer wait for the churner's mmap_lock.
//
// Mode threads: all clients in one space (the contended case, will-it-scale's *_threads);
// mode processes: one space per client (*_processes). Clients are threads of this process
// either way; a "process" is its own address space.
//
// The runner is independent of where the spaces live: a Backend creates spaces and
// per-client Sessions and reads lock statistics. InprocessBackend (here) uses the engine
// library; willitscale_grpc.h has the daemon backends (unary RPCs, Batch streams).
// No gRPC in this file: it builds into vmspace_workload.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vmspace::bench {

/// The workloads. page_fault2/3 and mmap2 need file mappings (not modelled yet).
enum class Workload { kPageFault1, kMmap1, kMixed };
/// "page_fault1", "mmap1", "mixed".
const char* WorkloadName(Workload w);
/// Parses a workload name; nullopt if unknown.
std::optional<Workload> ParseWorkload(std::string_view name);
/// True for will-it-scale workloads that need file mappings (page_fault2, page_fault3,
/// mmap2), which vmspace does not model yet.
bool NeedsFileMappings(std::string_view name);

/// threads: all clients share one space; processes: one space per client.
enum class Mode { kThreads, kProcesses };
const char* ModeName(Mode m);

/// Sizes of the workloads (will-it-scale's MEMSIZE for page_fault1/mmap1).
inline constexpr uint64_t kPageFaultBytes = 128ull << 20;
inline constexpr uint64_t kMixedRegionBytes = 32ull << 20;
inline constexpr uint64_t kChurnBytes = 16ull << 10;
inline constexpr uint64_t kPageBytes = 4096;

/// What to run for one profile.
struct BenchConfig {
  Workload workload = Workload::kPageFault1;
  Mode mode = Mode::kThreads;
  int clients = 1;            // mixed: clients-1 faulters + 1 churner (needs >= 2)
  double duration_s = 5;      // timed phase
  /// Locking profile spec as LockingProfile::Parse takes it ("linux-6.0",
  /// "linux-6.6,vma_lock=off"); "" = linux-6.6.
  std::string profile;
  /// Page writes are issued in chunks of this many bytes; the stop flag is checked
  /// between chunks (in-process and unary) or between messages (stream).
  uint64_t chunk_bytes = 2ull << 20;
  /// Pin client c to the c-th CPU this process may run on (modulo their number), as
  /// will-it-scale pins each task to a core.
  bool pin = false;
};

/// lock_stat figures of one lock class and mode over a run.
struct LockCell {
  uint64_t acquisitions = 0;
  uint64_t contentions = 0;
  double wait_s = 0;  // total wait
  double hold_s = 0;  // total hold
};

/// Lock classes and modes in the engine's order (stats.h LockClass/LockMode).
inline constexpr std::array<const char*, 4> kLockClassNames = {"mmap_lock", "vma_lock", "ptl",
                                                               "page_table_lock"};
inline constexpr std::array<const char*, 2> kLockModeNames = {"read", "write"};

/// Lock statistics and engine event counters (deltas over a run, or totals).
struct LockFigures {
  std::array<std::array<LockCell, 2>, 4> locks{};  // [class][mode], see kLock*Names
  std::map<std::string, uint64_t> events;          // "pgfault", "vma_lock_success", ...
  bool timing = true;                              // wait/hold times were recorded
  const LockCell& lock(const std::string& cls, const std::string& mode) const;
  uint64_t event(const std::string& name) const;
  /// this - base (counts never go below 0).
  LockFigures Minus(const LockFigures& base) const;
};

/// Figures of one run (one profile).
struct BenchResult {
  std::string profile;       // the spec asked for ("linux-6.6,vma_lock=off")
  std::string profile_name;  // the engine's name for it: linux-6.x or "custom"
  std::string profile_desc;  // "linux-6.6 (index=maple vma_lock=all)"
  double seconds = 0;        // timed phase: first client start to last client stop
  uint64_t ops = 0;          // pages written (page_fault1, mixed) or mmap+munmap pairs (mmap1)
  uint64_t faults = 0;       // faults reported by the accesses
  uint64_t churn_ops = 0;    // mixed: the churner's mmap+munmap pairs
  uint64_t iterations = 0;   // whole loop iterations (page_fault1: 128 MiB mappings)
  std::optional<LockFigures> locks;  // deltas; nullopt if the backend could not read them
  std::string locks_note;    // why locks is missing, or a caveat about them
  std::string error;         // "" on success

  bool ok() const { return error.empty(); }
  double ops_per_s() const { return seconds > 0 ? static_cast<double>(ops) / seconds : 0; }
  double faults_per_s() const { return seconds > 0 ? static_cast<double>(faults) / seconds : 0; }
  double churn_ops_per_s() const { return seconds > 0 ? static_cast<double>(churn_ops) / seconds : 0; }
  /// mmap_lock contentions, read + write (nullopt without lock figures).
  std::optional<uint64_t> mmap_lock_contentions() const;
  /// mmap_lock contentions per 1000 faults (nullopt without figures or faults).
  std::optional<double> contentions_per_1k_faults() const;
  /// mmap_lock wait seconds (read + write) per op (nullopt without figures or ops).
  std::optional<double> mmap_lock_wait_s_per_op() const;
};

/// One client's handle on one space. Used by one thread at a time.
class Session {
 public:
  virtual ~Session() = default;
  /// mmap(len, prot, MAP_PRIVATE|MAP_ANONYMOUS). Returns "" or an error text.
  virtual std::string Mmap(uint64_t len, int prot, uint64_t* addr) = 0;
  virtual std::string Munmap(uint64_t addr, uint64_t len) = 0;
  /// What TouchThen does after the writes.
  enum class Then { kNothing, kMunmap, kMadviseDontneed };
  /// Writes one byte per page of [addr, addr+len) in chunks of `chunk` bytes, stopping
  /// early (between chunks or messages) once `stop` is set, then applies `then` to the
  /// whole range (also when stopped). Adds the pages written and faults taken.
  virtual std::string TouchThen(uint64_t addr, uint64_t len, uint64_t chunk, const std::atomic<bool>& stop,
                                Then then, uint64_t* pages, uint64_t* faults) = 0;
};

/// Where spaces live. Spaces are created and destroyed by the runner's thread; sessions
/// are opened there too and then used by one client thread each.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Creates a space with locking profile `profile` (a spec); returns "" or an error.
  virtual std::string CreateSpace(const std::string& profile, uint64_t* space) = 0;
  virtual std::string DestroySpace(uint64_t space) = 0;
  virtual std::string OpenSession(uint64_t space, std::unique_ptr<Session>* out) = 0;
  /// Cumulative lock figures of the profile named `profile_name` (linux-6.x or
  /// "custom"). Returns false with *why set if unavailable.
  virtual bool ReadLocks(const std::string& profile_name, LockFigures* out, std::string* why) = 0;
  /// Makes about `bytes` of frame memory ready before the timed phase (in-process: the
  /// host pages behind the frames are faulted in once, so the first pass does not time
  /// the host kernel's page faults). Default: nothing.
  virtual void Prepare(uint64_t bytes) {}
  /// A caveat printed with the lock figures ("" if none).
  virtual std::string LocksCaveat() const { return ""; }
};

/// The engine linked into this process: one FrameAllocator per backend, AddressSpaces
/// as spaces, statistics from vmspace::ReadStats(profile slot). Lock figures of
/// "custom" profiles share one slot, so runs must not overlap (the runner runs
/// profiles one after another).
std::unique_ptr<Backend> MakeInprocessBackend();

/// Runs `cfg` once on fresh spaces of `backend`: set-up (untimed), lock figures before,
/// the timed phase, lock figures after, tear-down. Never throws; failures are in
/// BenchResult::error.
BenchResult RunBench(const BenchConfig& cfg, Backend& backend);

/// Expands a --compare list into profile specs:
///   "linux-6.0,linux-6.6"          profile names (each may carry no '=')
///   "vma_lock=off,anon,all"        one switch and its values, each applied to `base`
///                                  ("" = linux-6.6): "BASE,vma_lock=off", ...
///   "linux-6.4;linux-6.6,vma_lock=off"  full specs separated by ';'
/// Every spec is checked with LockingProfile::Parse. Returns "" or an error text.
std::string ExpandCompare(const std::string& list, const std::string& base, std::vector<std::string>* out);

/// Checks one profile spec; returns "" or the error (with a hint for index=rbtree).
std::string CheckProfile(const std::string& spec, std::string* name = nullptr, std::string* desc = nullptr);

}  // namespace vmspace::bench
