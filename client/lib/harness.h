// SPDX-License-Identifier: Apache-2.0
// The one workload harness behind `vmspace bench stress` (seed-004, seed004.h) and the
// will-it-scale workloads `vmspace bench page_fault1 | mmap1 | mixed` (willitscale.h).
//
// A Workload makes one ClientLoop per client: an untimed Setup, the timed Steps (one
// seed-004 round, one will-it-scale loop iteration) and an untimed Teardown, written
// against a Session: one client's ops on one address space. Ops are queued in order and
// return an op number; Wait(op) blocks until that op (and every op before it) is done.
// In-process, unary and native sessions run each op at once; a Batch-stream session
// (harness_grpc.h) packs ops into messages and keeps several unanswered, so a loop only
// waits where it needs a result (an mmap's address).
//
// Run() is the one runner: it creates the spaces on a Backend (one shared, or one per
// client), opens the sessions, starts one thread per client (optionally pinned), reads
// the lock statistics when every client has finished its set-up and again when every
// client has finished its timed phase (so the figures cover the timed phase only), stops
// the clients after a duration or lets them run to the end of their work, tears down and
// merges the clients' figures into one RunResult. RunNative() runs the same loops on the
// real kernel in forked children. Every --compare row is one Run() per locking profile.
//
// Depends on the engine library and libc only (no gRPC): tests/bench builds it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/stats.h"
#include "engine/per_thread.h"

namespace vmspace::harness {

/// Monotonic clock in nanoseconds (CLOCK_MONOTONIC).
uint64_t MonoNs();

/// Folds one mmap address into a running hash (order-sensitive).
inline uint64_t HashAddr(uint64_t h, uint64_t addr) {
  h ^= addr + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0x100000001b3ull;
}

/// Running count of finished steps (rounds) of a run, for progress reports; updated in
/// steps of a few hundred.
struct Progress {
  std::atomic<uint64_t> rounds{0};
};

/// A Progress in MAP_SHARED memory, so forked children (RunNative) can update it. Never
/// freed (one page, for the life of the process); nullptr if mmap fails.
Progress* NewSharedProgress();

/// One client's figures (POD: RunNative's children send it through a pipe). The loop
/// counts what it issued; the runner adds what the session measured in the timed phase.
struct alignas(kDestructiveInterferenceBytes) ClientFigures {
  uint64_t t0 = 0, t1 = 0;   // MonoNs() at the start and end of this client's timed phase
  uint64_t cpu_ns = 0;       // the client thread's CPU time over its timed phase (CLOCK_THREAD_CPUTIME_ID)
  uint64_t rounds = 0;       // whole loop iterations (see RunResult::rounds)
  uint64_t mmaps = 0, munmaps = 0, accesses = 0;  // ops issued in the timed phase
  uint64_t bytes_touched = 0;  // single-byte writes made by the accesses (timed phase)
  uint64_t faults = 0, major_faults = 0;          // page faults taken (timed phase)
  uint64_t setup_mmaps = 0, teardown_munmaps = 0;
  uint64_t messages = 0;     // Batch messages sent in the timed phase (stream sessions)
  uint64_t waits = 0;        // steps that waited for an earlier op's result
  uint64_t files = 0, shmem_files = 0;  // files opened in set-up; of them shmem (Session::OpenFile)
  uint64_t addr_hash = 0;    // HashAddr over every mmap address of the session, in order
  char error[200] = {};
  bool ok() const { return error[0] == 0; }
  /// Keeps the first error only.
  void SetError(const std::string& what);
};

/// Lock statistics and event counters of one locking profile (the engine's snapshot
/// type: lock cells in ns, events by vmspace::Event), totals or deltas over a run.
struct LockFigures {
  StatsSnapshot stats;
  bool timing = true;  // wait/hold times were recorded (--lock-stats=on)
  /// The cell of a lock class and mode by the engine's names (LockClassName,
  /// LockModeName: "mmap_lock", "read"); a zero cell for unknown names.
  const LockStatCell& lock(const std::string& cls, const std::string& mode) const;
  /// An event counter by its EventName() ("pgfault", "vma_lock_success"); 0 if unknown.
  uint64_t event(const std::string& name) const;
  /// Every event counter by name.
  std::map<std::string, uint64_t> events() const;
  /// Wait seconds of mmap_lock, read + write.
  double mmap_lock_wait_s() const;
  /// this - base (StatsSnapshot::Minus; maxima stay totals).
  LockFigures Minus(const LockFigures& base) const { return {stats.Minus(base.stats), timing}; }
};

/// Figures of one run (one locking profile): the clients' figures summed, the time,
/// the lock deltas over the timed phase.
struct RunResult {
  std::string profile;       // the locking profile spec asked for ("" = backend default)
  std::string profile_name;  // the engine's name for it: linux-6.x or "custom" ("" if none)
  std::string profile_desc;  // Describe(): "linux-6.15 (index=maple vma_lock=all vma_lock_form=refcnt): ..."
  double seconds = 0;        // timed phase: first client start to last client stop
  /// The lowest over the clients of a client thread's CPU time over its timed phase /
  /// that phase's wall time: below 1 when its CPU ran something else meanwhile (another
  /// thread of this process, such as the engine's call_rcu worker, or another process;
  /// time the host takes from a vCPU is not seen by the guest). In process, where the
  /// client threads do the engine's work themselves; 0 if not measured (the kernel's
  /// processes). A daemon transport's client threads wait for replies: far below 1.
  double on_cpu = 0;
  /// Whole loop iterations: seed-004 rounds; page_fault1 and the mixed faulters: full
  /// passes over their mapping; mmap1: mmap+munmap pairs.
  uint64_t rounds = 0;
  /// Each client's rounds over its own timed phase (rounds/s, client order; 0 for a
  /// client that never timed): how fast each one went beside the others.
  std::vector<double> client_rounds_per_s;
  /// The workload's unit of work: seed-004 mmap+munmap+access ops; page_fault1 and
  /// mixed: pages written; mmap1: mmap+munmap pairs.
  uint64_t ops = 0;
  uint64_t churn_ops = 0;    // mixed: the churner's mmap+munmap pairs
  uint64_t mmaps = 0, munmaps = 0, accesses = 0;  // ops issued in the timed phase
  uint64_t bytes_touched = 0;  // single-byte writes made (with a 4 KiB stride: pages)
  uint64_t faults = 0;       // page faults taken (engine/daemon: reported; kernel: ru_minflt)
  uint64_t major_faults = 0;
  uint64_t setup_mmaps = 0, teardown_munmaps = 0;
  uint64_t messages = 0;     // stream: Batch messages sent in the timed phase
  uint64_t waits = 0;        // stream: steps that waited for an unanswered mmap
  /// Files the clients opened (page_fault2/3/4: one each); of them memory-only shmem
  /// (a daemon without --data-dir) rather than files on a filesystem.
  uint64_t files = 0, shmem_files = 0;
  /// XOR of the clients' address hashes: equal across runners that place mappings
  /// identically (engine and daemon, separate spaces). 0 for the kernel and shared spaces.
  uint64_t addr_hash = 0;
  std::optional<LockFigures> locks;  // deltas over the timed phase; nullopt if unreadable
  std::string locks_note;    // why locks is missing, or a caveat about them
  std::string error;         // "" on success, else what failed first

  bool ok() const { return error.empty(); }
  double rounds_per_sec() const { return Rate(rounds); }
  double ops_per_s() const { return Rate(ops); }
  double faults_per_s() const { return Rate(faults); }
  double churn_ops_per_s() const { return Rate(churn_ops); }
  /// mmap_lock contentions, read + write (nullopt without lock figures).
  std::optional<uint64_t> mmap_lock_contentions() const;
  /// mmap_lock contentions per 1000 faults / rounds (nullopt without figures or faults/rounds).
  std::optional<double> contentions_per_1k_faults() const;
  std::optional<double> contentions_per_1k_rounds() const;
  /// mmap_lock wait seconds (read + write) per op / round (nullopt without figures or ops/rounds).
  std::optional<double> mmap_lock_wait_s_per_op() const;
  std::optional<double> mmap_lock_wait_s_per_round() const;

 private:
  double Rate(uint64_t n) const { return seconds > 0 ? static_cast<double>(n) / seconds : 0; }
};

/// What a session measured from its ops' results (cumulative since it was opened).
struct SessionCounters {
  uint64_t bytes_touched = 0, faults = 0, major_faults = 0;
  uint64_t messages = 0;   // Batch messages sent
  uint64_t addr_hash = 0;  // HashAddr over every mmap address returned, in op order
};

/// An address operand of a Session op: a literal address, or (Addr::Of) the address an
/// earlier mmap op of the same session returns, for a session that can name results
/// not yet answered (Session::CanRefer: a Batch stream, resolved by the daemon).
struct Addr {
  uint64_t value = 0;  // the address; with `of`, an offset added to that op's address
  uint64_t of = 0;     // op number of an mmap of this session; 0: `value` is the address
  Addr(uint64_t addr = 0) : value(addr) {}  // NOLINT(google-explicit-constructor): a literal address
  /// The address mmap op `op` returns.
  static Addr Of(uint64_t op) {
    Addr a;
    a.of = op;
    return a;
  }
};

/// One client's ops on one address space, used by one thread at a time. Ops run in the
/// order queued; each returns its op number (1, 2, ...). After the first failure the
/// session is failed: later ops do nothing and Wait() returns false.
class alignas(kDestructiveInterferenceBytes) Session {
 public:
  /// Wait() argument: every op queued so far.
  static constexpr uint64_t kAll = UINT64_MAX;
  virtual ~Session() = default;
  /// mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS); the address is stored in
  /// *addr when the op is done (Done/Wait), so *addr must stay valid until then.
  uint64_t Mmap(uint64_t len, int prot, uint64_t* addr) { return Mmap(len, prot, kAnonFlags, 0, addr); }
  /// mmap(NULL, len, prot, flags, file, 0): `file` is an OpenFile() handle when `flags`
  /// lacks MAP_ANONYMOUS (else ignored).
  virtual uint64_t Mmap(uint64_t len, int prot, int flags, uint64_t file, uint64_t* addr) = 0;
  /// munmap(addr, len).
  virtual uint64_t Munmap(Addr addr, uint64_t len) = 0;
  /// Writes (or with `write` false reads) one byte every `stride` bytes of
  /// [addr, addr + len), taking the faults.
  uint64_t Access(Addr addr, uint64_t len, uint64_t stride) { return Access(addr, len, stride, true); }
  virtual uint64_t Access(Addr addr, uint64_t len, uint64_t stride, bool write) = 0;
  /// madvise(addr, len, MADV_DONTNEED).
  virtual uint64_t MadviseDontneed(uint64_t addr, uint64_t len) = 0;
  /// True once op `op` is done (never blocks).
  virtual bool Done(uint64_t op) = 0;
  /// Whether the next op may take Addr::Of(op) (op an mmap of this session, done or not)
  /// instead of waiting for it. Default false: only literal addresses.
  virtual bool CanRefer(uint64_t op) { return false; }
  /// Blocks until op `op` (kAll: every queued op) is done or the session failed;
  /// returns ok().
  virtual bool Wait(uint64_t op = kAll) = 0;
  virtual bool ok() = 0;
  /// The first failure ("" if none).
  virtual std::string error() = 0;
  virtual SessionCounters counters() = 0;
  /// Ends the session (stream: half-close, drain, final status). Idempotent.
  virtual void Close() {}
  /// Set-up only, runs at once: this client's own read-write file of `bytes` bytes,
  /// sparse and nameless to others, as will-it-scale's mkstemp + ftruncate + unlink
  /// (kernel: under /var/tmp; engine and daemon: a host file in the data directory, or
  /// shmem where there is none, *shmem set). Stores its handle for Mmap in *file;
  /// false after a failure (the session's error).
  virtual bool OpenFile(uint64_t bytes, uint64_t* file, bool* shmem) = 0;
  /// Tear-down: drops the file (its mappings must be gone).
  virtual void CloseFile(uint64_t file) = 0;

  static constexpr int kAnonFlags = 0x22;  // MAP_PRIVATE | MAP_ANONYMOUS
};

/// A Session whose ops run when queued (in-process, unary, native). Subclasses do the
/// ops; each returns false after Fail().
class SyncSession : public Session {
 public:
  using Session::Access;
  using Session::Mmap;
  uint64_t Mmap(uint64_t len, int prot, int flags, uint64_t file, uint64_t* addr) final;
  uint64_t Munmap(Addr addr, uint64_t len) final;
  uint64_t Access(Addr addr, uint64_t len, uint64_t stride, bool write) final;
  uint64_t MadviseDontneed(uint64_t addr, uint64_t len) final;
  bool Done(uint64_t) final { return true; }
  bool Wait(uint64_t = kAll) final { return error_.empty(); }
  bool ok() final { return error_.empty(); }
  std::string error() final { return error_; }
  SessionCounters counters() override { return counters_; }

 protected:
  virtual bool DoMmap(uint64_t len, int prot, int flags, uint64_t file, uint64_t* addr) = 0;
  virtual bool DoMunmap(uint64_t addr, uint64_t len) = 0;
  /// Adds the bytes touched and faults taken to counters_.
  virtual bool DoAccess(uint64_t addr, uint64_t len, uint64_t stride, bool write) = 0;
  virtual bool DoMadviseDontneed(uint64_t addr, uint64_t len) = 0;
  /// Records the first failure; returns false.
  bool Fail(const std::string& what);
  SessionCounters counters_;

 private:
  /// True for a literal address; else fails the session (ops run at once: nothing to name).
  bool Literal(const Addr& addr);
  std::string error_;
  uint64_t ops_ = 0;
};

/// "op: EINVAL (22)" for an errno value.
std::string ErrnoText(const char* op, int err);

/// Where the spaces live. Spaces are created and destroyed and sessions opened by the
/// runner's thread; each session is then used by one client thread.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Creates a space with locking profile `profile` ("" = the backend's default) and
  /// `label` (daemon: shown by `vmspace list`); returns "" or an error text.
  virtual std::string CreateSpace(const std::string& profile, const std::string& label, uint64_t* space) = 0;
  virtual std::string DestroySpace(uint64_t space) = 0;
  virtual std::string OpenSession(uint64_t space, std::unique_ptr<Session>* out) = 0;
  /// Cumulative lock figures of the profile named `profile_name` (linux-6.x, "custom";
  /// "" = all profiles). Returns false with *why set if unavailable.
  virtual bool ReadLocks(const std::string& profile_name, LockFigures* out, std::string* why) = 0;
  /// Makes about `bytes` of frame memory ready before the timed phase (in-process: the
  /// host pages behind the frames are faulted in once, so the first pass does not time
  /// the host kernel's page faults). Default: nothing.
  virtual void Prepare(uint64_t bytes) {}
  /// A caveat printed with the lock figures ("" if none).
  virtual std::string LocksCaveat() const { return ""; }
};

/// The engine linked into this process: one FrameAllocator, vmspace::AddressSpaces as
/// spaces, statistics from vmspace::ReadStats(profile slot). Lock figures of "custom"
/// profiles share one slot, so runs must not overlap.
std::unique_ptr<Backend> MakeInprocessBackend();

/// One client's part of a workload, used by that client's thread only.
class ClientLoop {
 public:
  virtual ~ClientLoop() = default;
  /// Untimed, before the start (e.g. the initial mappings); the runner waits for its ops.
  virtual void Setup(Session& s, ClientFigures& f) {}
  /// One step of the timed phase (one round, one loop iteration). Returns false when
  /// this client's work is done (having done nothing) or the session failed. `stop` is
  /// set when the run's time is up or another client failed; long steps check it
  /// between their ops.
  virtual bool Step(Session& s, const std::atomic<bool>& stop, ClientFigures& f) = 0;
  /// Untimed, after every op of the timed phase is done (skipped after a failure).
  virtual void Teardown(Session& s, ClientFigures& f) {}
};

/// A workload: its client loops and what its figures mean.
class Workload {
 public:
  virtual ~Workload() = default;
  virtual std::unique_ptr<ClientLoop> NewClient(int client, int clients) const = 0;
  /// Frame memory the timed phase touches (for Backend::Prepare); default 0.
  virtual uint64_t FrameBytes(int clients) const { return 0; }
  /// Sets the workload's own totals (ops, churn_ops, ...) from the clients' figures,
  /// after the runner summed them into `r`.
  virtual void Summarize(const std::vector<ClientFigures>& clients, RunResult& r) const = 0;
  /// How errors name client c ("client 3", "churner 1").
  virtual std::string ClientName(int client, int clients) const;
};

/// How to run a workload.
struct RunSpec {
  int clients = 1;
  bool shared_space = false;  // all clients in one space (kernel: threads of one process)
  std::string profile;        // locking profile spec ("" = the backend's default)
  std::string label = "bench";  // label of the daemon's spaces
  /// Timed phase: stop the clients this long after the last one started; 0 = run
  /// every client's loop to the end of its work.
  double duration_s = 0;
  /// Pin client c to the (first_cpu + c)-th CPU this process may run on (modulo their
  /// number; AllowedCpus order).
  bool pin = false;
  int first_cpu = 0;
  Progress* progress = nullptr;  // RunNative: must be shared memory (NewSharedProgress)
};

/// Runs `w` on fresh spaces of `backend` (see the file comment). Never throws; failures
/// are in RunResult::error (the first one, with the client's name).
RunResult Run(const RunSpec& spec, const Workload& w, Backend& backend);

/// Runs the same loops on the real kernel with mmap/munmap/madvise and real writes: one
/// forked child per client (its own mm), or one child with a thread per client for
/// shared_space. The parent only starts, times and collects. No locks, no profile,
/// addr_hash 0; faults are the threads' ru_minflt + ru_majflt.
RunResult RunNative(const RunSpec& spec, const Workload& w);

/// Checks one locking profile spec; returns "" or the error (with a hint for
/// index=rbtree). Sets the engine's name for it and its description.
std::string CheckProfile(const std::string& spec, std::string* name = nullptr, std::string* desc = nullptr);

/// Expands a --compare list into profile specs:
///   "linux-6.0,linux-6.6"          profile names (each may carry no '=')
///   "vma_lock=off,anon,all"        one switch and its values, each applied to `base`
///                                  ("" = linux-6.6): "BASE,vma_lock=off", ...
///   "linux-6.4;linux-6.6,vma_lock=off"  full specs separated by ';'
/// Every spec is checked with CheckProfile. Returns "" or an error text.
std::string ExpandCompare(const std::string& list, const std::string& base, std::vector<std::string>* out);

/// The CPUs this process may run on (sched_getaffinity), in ascending order; empty if
/// unreadable. Clients and the --scaling controls are pinned to them in this order.
std::vector<int> AllowedCpus();

/// Pins the calling thread to `cpu` (pthread_setaffinity_np; a failure is ignored).
void PinTo(int cpu);

}  // namespace vmspace::harness
