// SPDX-License-Identifier: Apache-2.0
// The `vmspace` command line: one subcommand per VmSpace RPC plus the benchmarks
// (`bench stress`, `bench page_fault1`, ...), parsed with CLI11.
// RunCli() is the whole program minus process start-up, so tests can run it in-process.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace vmspace::cli {

/// Exit codes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // the call failed (errno / gRPC status) or a run failed
inline constexpr int kExitUsage = 2;   // bad command line
inline constexpr int kExitPartial = 3;  // several daemons: some answered, some could not be reached

/// Runs the command line `args` (without the program name); writes results and help to
/// `out` and diagnostics/progress to `err`; returns the process exit code. Options take
/// "--name value" or "--name=value"; boolean flags also "--flag=false"; "-h"/"--help"
/// prints help (exit 0); "--" ends options; a repeated option's last value wins; the
/// global options (--target, --timeout, --json) may come anywhere on the line.
int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace vmspace::cli
