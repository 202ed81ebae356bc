// SPDX-License-Identifier: Apache-2.0
// The seed-003 workload (`vmspace bench execl`): UnixBench's execl in the engine, as a
// real fork + exec loop. Each client is a space that exec'd a static program once
// (AddressSpace::Exec of vmspace-execl-true); each iteration forks it (DupMmap), execs
// the program in the child (Exec: the ELF loader maps its segments from the file, the
// child's old mm is dropped), touches a page of each part as the program would, and
// exits (destroys the space). Every client maps the same file, so its i_mmap_rwsem is
// the lock the thread (Yu Ma, 2023-06) saw hot. A checker thread meanwhile runs the
// rmap check (FileTable::CheckRmap) and counts how often it found a VMA in a space's
// tree but not in the file's i_mmap (only i_mmap_scope=narrow opens that window).
// Depends on the engine and libc only.
#pragma once

#include <cstdint>
#include <string>

#include "engine/address_space.h"

namespace vmspace::bench {

struct ExeclResult {
  std::string setting;  // "wide" / "narrow" (the engine), "native"
  int clients = 0;
  double seconds = 0;
  uint64_t iterations = 0;  // fork + exec + exit loops completed by all clients
  uint64_t i_mmap_acquisitions = 0, i_mmap_contentions = 0;  // i_mmap_rwsem write + read
  double i_mmap_wait_s = 0;  // i_mmap_rwsem wait seconds (read + write)
  uint64_t rmap_checks = 0, race_hits = 0;  // checker runs; of them the window was open
  std::string binary;  // the program exec'd
  std::string error;
  bool ok() const { return error.empty(); }
  double iterations_per_s() const { return seconds > 0 ? iterations / seconds : 0; }
};

/// The loop in the engine linked into this process, `clients` threads for `seconds`;
/// `program` is the static ELF program (a host path) copied into a scratch data
/// directory and exec'd.
ExeclResult RunExeclEngine(IMmapScope scope, const std::string& profile, int clients, double seconds,
                           const std::string& program);
/// The static binary the native loop execs: vmspace-execl-true next to the running
/// executable (/proc/self/exe), where the build and `make install` put it beside `vmspace`.
std::string DefaultExeclBinary();
/// UnixBench execl on this machine, the engine loop's counterpart: `clients` processes
/// running `binary` (a small static program: the kernel's exec maps only it) in its
/// "loop N NS" mode, each fork() + execve() of the same binary in the child + waitpid,
/// `iterations` loops in all (split evenly), or fewer if `seconds` pass first. seconds
/// of the result: the slowest client's time. error says so if the binary is missing,
/// or a fork, exec or child failed.
ExeclResult RunExeclNative(int clients, uint64_t iterations, double seconds, const std::string& binary);

}  // namespace vmspace::bench
