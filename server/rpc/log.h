// Minimal leveled logging to stderr for the daemon ("vmspaced: <level>: <message>").
// One fprintf per line (stdio locks the stream, so lines from threads do not mix).
// Not for per-request hot paths except at debug level.
#pragma once

#include <atomic>
#include <string_view>

namespace vmspace::rpc {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

/// Parses "error", "warn", "info" or "debug"; false if unknown.
bool ParseLogLevel(std::string_view s, LogLevel* out);
/// Sets the most verbose level printed (default kInfo). Thread-safe.
void SetLogLevel(LogLevel l);
/// Whether messages at `l` are printed.
bool LogEnabled(LogLevel l);
/// printf-style log line at level `l` (newline added).
void Logf(LogLevel l, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace vmspace::rpc
