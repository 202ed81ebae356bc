// SPDX-License-Identifier: Apache-2.0
// Output helpers shared by the `vmspace` subcommands: the error report of a failed call,
// number and byte formatting, hex dumps and JSON values. Internal to the CLI (cli/).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>

#include "cli/command.h"

namespace vmspace::cli {

using Json = nlohmann::ordered_json;

/// Prints a failed call: JSON error object on `out` with --json, and always one line on
/// `err` naming the errno. A daemon that cannot be reached (UNAVAILABLE from a named
/// target) is said so in words, how to start it, and gRPC's text on a second line.
/// Returns the exit code.
int Fail(Ctx& c, const client::Error& e);

/// The daemons a call on every daemon left out (client::Client's `unreachable`): one
/// line each on `err` ("vmspace list: no answer from TARGET: ERROR") and, with --json,
/// `(*j)["unreachable"]` = [{"target", "code", "message"}] (only when some were left out).
/// Returns kExitPartial if some were, else `code`.
int Unreached(Ctx& c, const std::vector<client::Error>& unreachable, Json* j, int code = kExitOk);

/// "cannot reach the daemon at HOST:PORT (is vmspaced running? start it with: vmspaced
/// --listen HOST:PORT)" for gRPC target `target` ("ipv4:"/"ipv6:"/"dns:" prefixes left out).
std::string CannotReach(const std::string& target);

/// `s` without a leading `prefix` (unchanged if it does not start with it).
std::string StripPrefix(const std::string& s, const std::string& prefix);

/// ASCII lower case.
std::string Lower(std::string s);

/// ASCII upper case.
std::string Upper(std::string s);

/// Writes `data` as `hexdump -C`-like lines, 16 bytes each, addressed from `addr`.
void HexDump(std::ostream& out, uint64_t addr, const std::string& data);

/// "512 B", "1.5 KiB", "128.0 MiB" (binary units, one decimal).
std::string HumanBytes(uint64_t b);

/// The value, or JSON null.
Json OptJson(std::optional<double> v);

/// The value printf-formatted with `fmt` (one double), or "-".
std::string Num(std::optional<double> v, const char* fmt);

/// `s` cut to `n` characters, its last one "~" when cut.
std::string Abbrev(const std::string& s, size_t n);

}  // namespace vmspace::cli
