// SPDX-License-Identifier: Apache-2.0
// Kernel-oracle differential testing: one kernel child process and one engine
// AddressSpace that replay the same operations, and the comparison of their answers.
//
// Operations are written in a small line language (the format of the files in
// tests/oracle/cases/, described in tests/oracle/README.md), e.g.
//   mmap base+0x2000 0x3000 rw private,anonymous,fixed
//   fault base+0x2000 w 0x5a      (or: read ADDR / write ADDR VAL / exec ADDR)
//   touch base+0x2000 0x40000 0x1000 r
//   maps
// OracleSession::Run() executes one such line on both sides and compares the results
// as canonical text.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/address_space.h"
#include "engine/file.h"
#include "engine/frame_allocator.h"

namespace vmspace::oracle {

/// Where scripted cases put their test region (free in the child and the engine).
inline constexpr uint64_t kRegionBase = 0x200000000000ull;
/// Default region size when a case has no `region` line.
inline constexpr uint64_t kDefaultRegionSize = 0x100000;

/// The kernel child: vmspace_oracle_child started with ASLR off and an 8 MiB stack
/// rlimit, talking the line protocol described in child/oracle_child.cc.
class KernelChild {
 public:
  /// Forks and execs `path` (personality ADDR_NO_RANDOMIZE, RLIMIT_STACK 8 MiB) and
  /// reads its start-up report. Check ok() / error() afterwards.
  explicit KernelChild(const std::string& path);
  /// Asks the child to quit and reaps it.
  ~KernelChild();
  KernelChild(const KernelChild&) = delete;
  KernelChild& operator=(const KernelChild&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  /// The start-up report: "P ..." line, the whole maps as "M ..." lines, "C count".
  const std::vector<std::string>& hello() const { return hello_; }
  /// Sends one request line and returns the response lines (without the final ".").
  /// On a dead or hung child returns {"X <reason>"} and sets error().
  std::vector<std::string> Call(const std::string& request);
  /// The child's fork op: the child forks and the new process talks over two FIFOs
  /// the driver makes (see child/oracle_child.cc). Returns the new process (check its
  /// ok()), or null with *kernel_errno set if fork(2) failed in the child, or with
  /// *error set if the child or the channel failed.
  std::unique_ptr<KernelChild> Fork(int* kernel_errno, std::string* error);

 private:
  /// A process forked by another child: not the driver's child (its parent reaps it);
  /// the destructor waits for its exit through a pidfd.
  KernelChild(pid_t pid, int to_child, int from_child);
  bool ReadResponse(std::vector<std::string>* out);
  bool forked_ = false;
  int pidfd_ = -1;  // a forked child's pidfd (pidfd_open), -1 otherwise
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string buf_;
  std::string error_;
  std::vector<std::string> hello_;
};

/// Path of the vmspace_oracle_child binary (compile-time default, overridable with
/// the environment variable VMSPACE_ORACLE_CHILD).
std::string ChildPath();

/// The outcome of one operation on both sides.
struct StepResult {
  std::string op;      // the operation line as executed (variables expanded)
  std::string kernel;  // canonical answer of the kernel
  std::string engine;  // canonical answer of the engine
  bool match = true;
  bool is_mmap = false;   // for callers that track placements
  bool kernel_ok = false; // the kernel call succeeded / access did not signal
  uint64_t kernel_value = 0;  // mmap return value, etc.
  uint64_t kernel_si_addr = 0;  // si_addr when the kernel's access ended in a signal
  bool script_error = false;    // the line was not run (bad syntax, unknown variable)
  int process = 0;              // the process (`@N`) the op ran on
};

/// One kernel child + one engine AddressSpace with the child's initial layout
/// replicated as placeholder VMAs, and a test region at kRegionBase bracketed by
/// one-page PROT_NONE MAP_SHARED|MAP_ANONYMOUS guards.
class OracleSession {
 public:
  /// Starts the child and the engine. `region_size` 0 means: no region (no guards).
  explicit OracleSession(uint64_t region_size = kDefaultRegionSize,
                         const SpaceOptions& extra = SpaceOptions{});
  ~OracleSession();

  /// "" if the session started correctly, else why not.
  const std::string& setup_error() const { return setup_error_; }
  /// Executes one operation line on both sides and compares the answers. Lines may
  /// start with "$NAME = " to bind the kernel's result (e.g. an mmap address).
  StepResult Run(const std::string& line);
  /// Runs the engine's invariant check; "" if all hold.
  std::string Validate();
  /// Compares the VMAs overlapping [lo, hi) as the op "maps LO HI" does; without
  /// `with_flags` the VmFlags are left out (the kernel reads /proc/self/maps instead
  /// of the much longer smaps: the random test's cheap check between full ones).
  StepResult Maps(uint64_t lo, uint64_t hi, bool with_flags);
  /// The same for process `process` (a handle of `fork`, 0 the first process); a
  /// script error if it has exited.
  StepResult Maps(uint64_t lo, uint64_t hi, bool with_flags, int process);

  /// Processes: the session starts with one (handle 0); the op `fork` makes a new one
  /// on both sides (the kernel child forks, the engine space is copied with
  /// AddressSpace::DupMmap) with the next handle (1, 2, ... never reused), `exit` ends
  /// one. An op line `@N OP` runs OP on process N, a line without `@` on process 0.
  /// The handles of the processes that have not exited, in order.
  std::vector<int> processes() const;
  /// Makes process `handle` the one that ops without `@` and the accessors engine(),
  /// kernel() address; false (nothing changed) if it has exited or never existed.
  bool Select(int handle);
  /// The handle of the selected process.
  int selected() const { return current_; }

  uint64_t base() const { return base_; }
  uint64_t region_size() const { return size_; }
  AddressSpace& engine() { return *engine_; }
  KernelChild& kernel() { return *child_; }
  /// Formats an address relative to the region when it lies in or next to it.
  std::string Addr(uint64_t a) const;
  /// Whether the kernel maps the shared zero page on anonymous read faults (the
  /// reference kernel does; some builds allocate a page on the read fault instead).
  bool kernel_zero_page() const { return kernel_zero_page_; }
  /// The child's THP alignment probe: bit 0 if 2 MiB anonymous mappings are placed
  /// 2 MiB aligned, bit 1 if 2 MiB + 4 KiB ones are too (Linux 6.7-6.11; the engine
  /// models only the 6.12+ rule, bit 0).
  uint64_t kernel_thp_align() const { return kernel_thp_align_; }
  /// vm.max_map_count of this machine (the engine is configured with it).
  uint64_t max_map_count() const { return max_map_count_; }
  /// Initial VMA ranges of the child (its own mappings, the fences and the top-down
  /// plug; see child/oracle_child.cc). Maps comparisons leave them out.
  const std::set<std::pair<uint64_t, uint64_t>>& initial() const { return initial_; }
  /// Evaluates an address expression of the op language ("base+0x1000", "$p3-0x2000",
  /// "NULL", numbers) with the variables bound so far; sets *err if it cannot.
  uint64_t Eval(const std::string& expr, std::string* err) const;

 private:
  struct MapLine;
  /// Sets res->match (and notes a dead child in res->kernel).
  void Finish(StepResult* res) const;
  /// The ops `fork` (on the selected process) and `exit`; false if `op` is neither.
  bool RunProcessOp(const std::string& op, StepResult* res, std::string* err);
  /// Select(handle), or, for a process that has exited, makes it the selected one
  /// with no parts (Run then answers a script error).
  void Reselect(int handle);
  /// A process that is not the selected one: its kernel child and engine space.
  struct Process {
    std::unique_ptr<KernelChild> child;
    std::unique_ptr<AddressSpace> engine;
  };
  /// Every live process but the selected one, whose parts are child_ and engine_
  /// (both null once it has exited).
  std::map<int, Process> others_;
  int current_ = 0;
  int next_process_ = 1;
  std::string KernelMaps(uint64_t lo, uint64_t hi, bool with_flags);
  std::string EngineMaps(uint64_t lo, uint64_t hi, bool with_flags);
  /// Canonical text of one maps line.
  std::string FormatMapLine(const MapLine& m) const;
  /// A line of a test file: $TMP for its directory, its label for device and inode.
  void NormalizeFileLine(MapLine* m, bool kernel) const;
  /// "map_count=child+N": N VMAs besides the child's initial ones (the same text on
  /// every machine as long as the child's own VMAs are untouched).
  std::string MapCountText(uint64_t count) const;

  /// A file of the case (`file LABEL SIZE [ro]`, `memfd LABEL SIZE`) on both sides.
  struct FileRef {
    uint64_t kernel_fd = 0;
    uint64_t engine_id = 0;
    uint64_t kernel_ino = 0, engine_ino = 0;  // host inodes, to label maps lines
    /// The processes whose descriptor table holds it: where it was opened and the
    /// processes forked from those since.
    std::set<int> processes = {0};
  };
  /// Runs the file ops (file, memfd, pread, pwrite, ftruncate, fstat); false if `op`
  /// is not one of them.
  bool RunFileOp(const std::vector<std::string>& w, StepResult* res, std::string* err);
  /// The label of the test file with inode `ino` on one side, or "".
  std::string FileLabel(uint64_t ino, bool kernel) const;

  std::unique_ptr<KernelChild> child_;
  std::unique_ptr<FrameAllocator> frames_;
  std::unique_ptr<AddressSpace> engine_;
  /// Files: the kernel child's live in tmp_/kernel, the engine's FileTable in tmp_/engine
  /// (created with the first file op, removed by the destructor).
  std::unique_ptr<FileTable> files_;
  std::string tmp_;
  std::map<std::string, FileRef> file_refs_;
  std::set<std::pair<uint64_t, uint64_t>> initial_;
  std::map<std::string, uint64_t> vars_;
  uint64_t base_ = kRegionBase;
  uint64_t size_ = 0;
  bool kernel_zero_page_ = true;
  uint64_t kernel_thp_align_ = 1;
  uint64_t max_map_count_ = kDefaultMaxMapCount;
  /// The child's break at start-up (its mm->start_brk: the child never calls brk
  /// itself), the engine's SpaceOptions::start_brk, and `brkbase` in expressions.
  uint64_t brkbase_ = 0;
  /// The child's start_brk: the start of its [heap] (static glibc's start-up takes its
  /// TLS from brk), or brkbase_ if it has none; `brkstart` in expressions.
  uint64_t brkstart_ = 0;
  std::string setup_error_;
};

/// Parses "rw", "r|0x10", "none", "0x7" into PROT_* bits; false if malformed.
bool ParseProt(const std::string& s, int* out);
/// Parses "private,anonymous,fixed" (names or hex, separated by ',' or '|').
bool ParseFlags(const std::string& s, int* out);
/// The canonical names used in scripts ("rw", "private,anonymous,fixed").
std::string ProtName(int prot);
std::string FlagsName(int flags);
/// "EINVAL" etc. for a positive errno.
std::string ErrName(int err);

/// A parsed case file: its operation lines (comments removed, with line numbers),
/// region size, and an optional skip reason.
struct CaseFile {
  std::string name;
  uint64_t region_size = kDefaultRegionSize;
  std::string skip;  // non-empty: the case is skipped with this reason
  std::vector<std::pair<int, std::string>> ops;  // (line number, op)
};
/// Reads and parses a case file; on error returns false with a message in *err.
bool LoadCase(const std::string& path, CaseFile* out, std::string* err);

}  // namespace vmspace::oracle
