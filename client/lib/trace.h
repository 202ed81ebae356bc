// SPDX-License-Identifier: Apache-2.0
// The memory-call trace that `vmspace record` writes and `vmspace replay` reads: JSON
// lines (docs/replay.md). The first line is the header; then, in the order the recorder
// saw them, file records (a mapped or opened file, once each, before its first use),
// layout records (an address space's VMAs just after an exec, or at a fork), call
// records (one syscall of one thread, with the kernel's result) and exit records (the
// VMAs of an address space when its process exits).
//
// Every record carries "type". Addresses and lengths are JSON numbers (x86-64 user
// addresses are below 2^47, exact in every JSON reader).
#pragma once

#include <cstdint>
#include <istream>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace vmspace::trace {

/// The trace format's version; a reader refuses a header with a larger one.
inline constexpr int kTraceFormatVersion = 1;

/// Where and how the trace was recorded.
struct Header {
  int format_version = kTraceFormatVersion;
  std::string vmspace_version;       // VMSPACE_VERSION of the recorder
  std::string kernel;                // uname: "Linux 6.18.0 #1 SMP ... x86_64"
  std::string cpu;                   // "model name" of /proc/cpuinfo
  int cores = 0;                     // online CPUs
  std::string date;                  // UTC, ISO 8601
  std::vector<std::string> command;  // the program and its arguments
  uint64_t page_size = 4096;
  uint64_t mmap_min_addr = 65536;    // /proc/sys/vm/mmap_min_addr
  uint64_t max_map_count = 65530;    // /proc/sys/vm/max_map_count
  uint64_t rlimit_stack = 0;         // soft RLIMIT_STACK of the program (RLIM_INFINITY as ~0)
  bool aslr_off = true;              // personality(ADDR_NO_RANDOMIZE) before the exec
};

/// A file the program opened or mapped, identified as the kernel knows it.
struct File {
  uint64_t id = 0;         // the trace's number for it (records name files by it)
  std::string path;        // as /proc/PID/fd or maps names it ("/memfd:x (deleted)")
  std::string dev;         // "08:01", as in maps
  uint64_t ino = 0;
  uint64_t size = 0;       // st_size when first seen
  bool shmem = false;      // a memfd (memfd_create)
  std::string captured;    // with --capture-files: its bytes, path relative to the trace's directory
  uint64_t captured_bytes = 0;  // how many (at most the capture limit)
};

/// Resident pages of a VMA (from /proc/PID/pagemap): `count` pages from page `first`
/// (counted from the VMA's start), all anonymous (`anon`: not a page-cache page, i.e.
/// written into a private mapping, or private anonymous memory) or all not.
struct ResidentRun {
  uint64_t first = 0;
  uint64_t count = 0;
  bool anon = false;
  bool operator==(const ResidentRun&) const = default;
};

/// One VMA as /proc/PID/smaps shows it.
struct Vma {
  uint64_t start = 0, end = 0;
  std::string perms;    // "r-xp"
  uint64_t offset = 0;  // bytes
  std::string dev;      // "08:01"
  uint64_t ino = 0;
  std::string name;     // path, "[stack]", "" ...
  std::string vmflags;  // smaps VmFlags, "rd ex mr mw me"
  std::optional<uint64_t> file;  // File::id of a file-backed VMA
  std::vector<ResidentRun> resident;
  bool operator==(const Vma&) const = default;
};

/// An address space's VMAs at one moment: after an exec or at a fork ("layout"), or
/// when its process exits ("exit").
struct Snapshot {
  std::string reason;        // layout: "exec" | "fork"; exit: "exit_group" | "signal"
  uint64_t start_brk = 0;    // /proc/PID/stat start_brk (layout only)
  int64_t status = 0;        // exit: the exit_group status, or the signal number
  std::vector<Vma> vmas;
  bool operator==(const Snapshot&) const = default;
};

/// One record after the header.
struct Event {
  enum class Kind { kCall, kLayout, kExit };
  Kind kind = Kind::kCall;
  uint64_t seq = 0;      // position in the trace, from 0
  int tid = 0;           // the thread
  int tgid = 0;          // its process
  uint64_t mm = 0;       // the address space: a new number per exec and per fork
  uint64_t t_ns = 0;     // at syscall entry (call), or when taken; ns since recording began
  uint64_t dur_ns = 0;   // call: entry to exit

  // kCall
  std::string sys;                        // "mmap", "openat", ...
  std::map<std::string, int64_t> args;    // numeric arguments by name ("addr", "len", ...)
  std::map<std::string, std::string> sargs;  // string arguments ("path", "name")
  bool has_ret = false;                   // exit_group never returns
  int64_t ret = 0;                        // the kernel's result (-errno on failure)
  std::string err;                        // the errno name when it failed, "ENOMEM"
  std::optional<uint64_t> file;           // File::id the call's fd (or result fd) names
  std::map<std::string, int64_t> info;    // what the recorder saw after the call:
                                          // "size" (the file's), "child_tid", "child_mm"
  std::vector<ResidentRun> touched;       // mprotect: anonymous pages of [addr, addr+len) at entry

  // kLayout, kExit
  Snapshot snap;

  bool operator==(const Event&) const = default;
};

/// A whole trace in memory.
struct Trace {
  Header header;
  std::map<uint64_t, File> files;  // by File::id
  std::vector<Event> events;       // in trace order
};

/// Writes a trace, one JSON line per record, flushing each.
class Writer {
 public:
  explicit Writer(std::ostream& out) : out_(out) {}
  void WriteHeader(const Header& h);
  void WriteFile(const File& f);
  void WriteEvent(const Event& e);

 private:
  std::ostream& out_;
};

/// Reads a whole trace. Returns nullopt and sets `*error` ("line 3: ...") if a line is
/// not a record of this format (or a header of a newer version).
std::optional<Trace> Read(std::istream& in, std::string* error);

/// The -errno name of a kernel result ("ENOMEM"), "" if `ret` is not in [-4095, -1].
std::string ErrnoName(int64_t ret);
/// The errno number of a name ("ENOMEM" -> 12), 0 if unknown.
int ErrnoNumber(const std::string& name);

}  // namespace vmspace::trace
