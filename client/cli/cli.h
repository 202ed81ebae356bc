// The `vmspace` command line: one subcommand per VmSpace RPC plus `bench stress`.
// RunCli() is the whole program minus process start-up, so tests can run it in-process.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace vmspace::cli {

/// Exit codes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // the call failed (errno / gRPC status) or a run failed
inline constexpr int kExitUsage = 2;   // bad command line

/// One option of a subcommand. `arg` is the value's placeholder ("ADDR"), or "" for a
/// boolean flag (which also accepts --flag=true/false).
struct OptionSpec {
  std::string name;
  std::string arg;
  std::string help;
};

/// The parsed options of one subcommand: name -> value ("true"/"false" for flags).
struct ParsedArgs {
  std::map<std::string, std::string> values;
  std::vector<std::string> positional;
  bool Has(const std::string& name) const { return values.count(name) != 0; }
  std::string Get(const std::string& name, const std::string& def = "") const;
  /// A boolean flag's value (false if absent).
  bool Flag(const std::string& name) const;
};

/// Parses `args` against `specs`: "--name value", "--name=value", boolean "--flag",
/// "--flag=false", "-h" for "--help", "--" ends options; a repeated option's last value
/// wins. Returns "" or an error text.
std::string ParseArgs(const std::vector<std::string>& args, const std::vector<OptionSpec>& specs,
                      ParsedArgs* out);

/// Runs the command line `args` (without the program name); writes results to `out`
/// and diagnostics/progress to `err`; returns the process exit code.
int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace vmspace::cli
