// SPDX-License-Identifier: Apache-2.0
// Minimal leveled logging to stderr for the daemon ("vmspaced: <level>: <message>").
// One fprintf per line (stdio locks the stream, so lines from threads do not mix).
// Not for per-request hot paths except at debug level.
//
// Repeated lines are rate-limited: of the lines with one key (Logf: the format string)
// at most one is printed per kLogInterval; the next one printed after a quiet spell
// ends in "(N similar lines suppressed)".
#pragma once

#include <atomic>
#include <chrono>
#include <string_view>

namespace vmspace::rpc {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

/// Lines of one key printed at most once per this interval.
inline constexpr std::chrono::seconds kLogInterval{1};

/// Parses "error", "warn", "info" or "debug"; false if unknown.
bool ParseLogLevel(std::string_view s, LogLevel* out);
/// Sets the most verbose level printed (default kInfo). Thread-safe.
void SetLogLevel(LogLevel l);
/// Whether messages at `l` are printed.
bool LogEnabled(LogLevel l);
/// printf-style log line at level `l` (newline added), rate-limited by `fmt`.
void Logf(LogLevel l, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/// One line `msg` at level `l`, rate-limited by `key`. Thread-safe.
void LogLine(LogLevel l, std::string_view key, std::string_view msg);
/// Sends protobuf's own log messages (e.g. "String field ... contains invalid UTF-8
/// data", one per bad request) through LogLine, keyed by their source line.
void RouteProtobufLogs();

}  // namespace vmspace::rpc
