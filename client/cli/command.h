// SPDX-License-Identifier: Apache-2.0
// What a `vmspace` subcommand is given: its parsed options (Args), the context it runs
// in (Ctx: options, output streams, client options) and its entry in the command table
// (Command). Internal to the CLI (cli/).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "lib/client.h"
#include "lib/parse.h"

namespace vmspace::cli {

using client::Client;
using client::ClientOptions;
using client::Hex;
namespace v1 = ::vmspace::v1;

/// A usage error: printed with the command's usage, exit code 2.
struct UsageError {
  std::string what;
};

/// One option of a command. `arg` is the value's placeholder ("ADDR"), or "" for a
/// boolean flag (which also takes --flag=true/false, yes/no, 1/0).
struct OptionSpec {
  std::string name;
  std::string arg;
  std::string help;
};

/// The options of the command being run as CLI11 parsed them (its own and the global
/// ones, which may also have been given before the command). Values stay text; Ctx turns
/// them into numbers, protections etc. (lib/parse.h), so that an error names its option.
class Args {
 public:
  Args(const CLI::App* cmd, const std::map<const CLI::Option*, const bool*>* flags) : cmd_(cmd), flags_(flags) {}
  /// Whether --name was given (for "space": also as the first argument).
  bool Has(const std::string& name) const { return Find(name) != nullptr; }
  /// The value of --name (the last one if repeated), or `def` if not given.
  std::string Get(const std::string& name, const std::string& def = "") const {
    return Has(name) ? Find(name)->as<std::string>() : def;
  }
  /// A boolean flag's value (false if absent).
  bool Flag(const std::string& name) const {
    auto it = Has(name) ? flags_->find(Find(name)) : flags_->end();
    return it != flags_->end() && *it->second;
  }

 private:
  /// The nearest --name that was given: on the command, else on a parent (the global
  /// options are defined on every level). Null if none was given.
  const CLI::Option* Find(const std::string& name) const {
    for (const CLI::App* a = cmd_; a != nullptr; a = a->get_parent()) {
      const CLI::Option* o = a->get_option_no_throw("--" + name);
      if (o != nullptr && o->count() > 0) return o;
    }
    return nullptr;
  }
  const CLI::App* cmd_;
  const std::map<const CLI::Option*, const bool*>* flags_;
};

/// Everything a subcommand needs.
struct Ctx {
  Ctx(std::string cmd, Args a, std::ostream& o, std::ostream& e)
      : command(std::move(cmd)), args(a), out(o), err(e) {}
  std::string command;  // "mmap", "bench stress"
  Args args;
  std::ostream& out;
  std::ostream& err;
  bool json = false;
  ClientOptions client;
  /// The words after `--` of a command that runs a program (`record -- CMD ARGS...`).
  std::vector<std::string> rest;
  /// The whole command line as given, without the program name (for provenance).
  std::vector<std::string> argv;

  uint64_t U64(const std::string& name, std::optional<uint64_t> def = std::nullopt) const {
    if (!args.Has(name)) {
      if (def) return *def;
      throw UsageError{"--" + name + " is required"};
    }
    auto v = client::ParseU64(args.Get(name));
    if (!v) throw UsageError{"--" + name + ": not a number: '" + args.Get(name) + "'"};
    return *v;
  }
  /// The space id: --space, or the first positional argument (one CLI11 option).
  uint64_t Space() const {
    if (!args.Has("space")) throw UsageError{"a space id is required (--space ID or first argument)"};
    std::string s = args.Get("space");
    auto v = client::ParseU64(s);
    if (!v) throw UsageError{"bad space id '" + s + "'"};
    return *v;
  }
  int Prot(const std::string& name, const char* def) const {
    std::string s = args.Get(name, def);
    auto v = client::ParseProt(s);
    if (!v) throw UsageError{"--" + name + ": bad protection '" + s + "' (e.g. rw, r-x, none, 3)"};
    return *v;
  }
  int MapFlags(const std::string& name, const char* def) const {
    std::string s = args.Get(name, def);
    auto v = client::ParseMapFlags(s);
    if (!v) throw UsageError{"--" + name + ": bad flags '" + s + "' (e.g. private,anonymous,fixed or 0x22)"};
    return *v;
  }
  v1::AccessType Access(const char* def) const {
    std::string s = args.Get("access", def);
    auto v = client::ParseAccessType(s);
    if (!v) throw UsageError{"--access: bad access type '" + s + "' (read, write, exec)"};
    return static_cast<v1::AccessType>(*v);
  }
};

struct Command {
  std::string name;
  std::string synopsis;  // after "vmspace NAME "
  std::string summary;
  std::vector<OptionSpec> options;
  std::function<int(Ctx&)> run;
};

/// The bytes to write: exactly one of --data TEXT, --hex HEX, --`path_option` PATH.
std::string DataArg(const Ctx& c, const std::string& path_option);

}  // namespace vmspace::cli
