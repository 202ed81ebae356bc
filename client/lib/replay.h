// SPDX-License-Identifier: Apache-2.0
// Replays a recorded trace (trace.h) into vmspaced spaces through the client library:
// one space per recorded address space, its exec-time (or fork-time) layout recreated,
// then every recorded call issued, one client thread per recorded thread; optionally
// each result and each space's final maps compared with the kernel's (docs/replay.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/client.h"
#include "lib/trace.h"

namespace vmspace::trace {

struct ReplayOptions {
  client::ClientOptions client;
  std::string locking_profile;  // of the spaces; "" = the daemon's default
  std::string trace_dir;        // where captured file paths are relative to
  /// Compare results and final maps. Also keeps the recorded order of calls across
  /// threads (a call waits for the one recorded before it), so that placements match.
  bool check = false;
  bool paced = false;           // issue each call at its recorded time (else at once)
  size_t context = 5;           // calls shown before a difference
  /// The replay's files: false: memfds (CreateShmemFile; no --data-dir needed, but
  /// always writable); true: host files "vmspace-replay-<pid>-<id>-<name>" under the
  /// daemon's --data-dir (opened a second time read-only for read-only fds; left there).
  bool host_files = false;
};

/// One way the replay differs from the kernel.
struct Difference {
  uint64_t seq = 0;       // the trace record (call, layout or exit) it was found at
  std::string what;       // one line: "mmap returned 0x7ffff7fd0000, the kernel 0x7ffff7fce000"
  std::string context;    // lines: the calls before it, the VMAs around it
  std::string cause;      // "" or what explains it ("unsupported brk at seq 12", "the layout replica")
};

struct ReplayResult {
  std::string error;  // set if the replay could not run (setup failed)
  uint64_t spaces = 0, threads = 0;
  uint64_t issued = 0;         // calls sent to the daemon
  uint64_t recorded_only = 0;  // calls with no counterpart to send (open, close, dup, thread clone, ...)
  std::map<std::string, uint64_t> by_sys;        // issued calls per syscall
  std::map<std::string, uint64_t> unsupported;   // calls the daemon cannot serve yet, per name
  std::vector<Difference> differences;
  double call_seconds = 0;     // wall time of the call phase
  uint64_t faults = 0;         // faults of the fault-in phases (layout and exit residency)
  /// Lock contentions during the call phase, by "lock-R"/"lock-W" (GetLockStats before
  /// and after, of the spaces' profile), and acquisitions.
  std::map<std::string, uint64_t> contentions, acquisitions;
  /// Differences that no unsupported call explains.
  size_t Unexplained() const;
};

/// Replays `t` (see the file comment). Never throws; setup failures are in `error`.
ReplayResult Replay(const Trace& t, const ReplayOptions& opt);

/// "unsupported: 14 calls (brk 12, mremap 2)", or "" if none.
std::string UnsupportedSummary(const ReplayResult& r);

/// One call record as a line: "#12 tid 4711 mmap(addr=0, len=0x2000, ...) = 0x7ffff7fd0000".
std::string DescribeCall(const Event& e);

}  // namespace vmspace::trace
