// SPDX-License-Identifier: Apache-2.0
// Records a program's memory calls on this machine's kernel with ptrace (Linux,
// x86-64): the program runs with ASLR off (personality(ADDR_NO_RANDOMIZE) before its
// execve, as the kernel-oracle child), its threads and children are followed
// (PTRACE_O_TRACECLONE|TRACEFORK|TRACEVFORK|TRACEEXEC|TRACEEXIT|EXITKILL, TRACESYSGOOD),
// and each memory-related syscall is written with the kernel's result to a
// trace::Writer (trace.h; docs/replay.md lists the calls). Each address space's VMAs
// are taken from /proc/PID/smaps at the syscall-exit stop of its execve (or at a fork
// child's first stop) and at its exit_group entry (or PTRACE_EVENT_EXIT of a fatal
// signal), with the resident pages of /proc/PID/pagemap.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/trace.h"

namespace vmspace::trace {

/// What to record.
struct RecordOptions {
  std::vector<std::string> argv;  // the program (searched in $PATH) and its arguments
  /// Copy the first `capture_limit` bytes of every file the program maps or opens into
  /// `files_dir`/<file id>; File::captured is then `files_ref`/<id>.
  bool capture_files = false;
  uint64_t capture_limit = 16ull << 20;
  std::string files_dir;  // created if missing
  std::string files_ref;  // files_dir as the trace names it (relative to the trace's directory)
  std::string vmspace_version;
};

/// What a recording saw.
struct RecordSummary {
  int exit_status = 0;            // the program's: exit code, or 128 + signal
  uint64_t calls = 0;             // call records written
  uint64_t tasks = 0;             // threads and processes followed (the first included)
  uint64_t spaces = 0;            // address spaces (execs and forks)
  std::map<std::string, uint64_t> by_sys;  // call records per syscall name
};

/// Whether this process may trace a child (ptrace(PTRACE_TRACEME) in a forked child
/// succeeds; a seccomp or Yama policy may forbid it). False: `*why` says why.
bool PtraceAvailable(std::string* why);

/// Runs `opt.argv` under ptrace to its end and writes its trace (header first) to
/// `out`. Returns false with `*error` set if the program could not be started or
/// traced (nothing is written then but possibly the header). Blocks SIGINT/SIGTERM
/// handling of its own: the traced program dies with the recorder (PTRACE_O_EXITKILL).
bool Record(const RecordOptions& opt, Writer& out, RecordSummary* summary, std::string* error);

}  // namespace vmspace::trace
