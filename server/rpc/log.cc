#include "rpc/log.h"

#include <cstdarg>
#include <cstdio>

namespace vmspace::rpc {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warning";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}
}  // namespace

bool ParseLogLevel(std::string_view s, LogLevel* out) {
  if (s == "error") *out = LogLevel::kError;
  else if (s == "warn" || s == "warning") *out = LogLevel::kWarn;
  else if (s == "info") *out = LogLevel::kInfo;
  else if (s == "debug") *out = LogLevel::kDebug;
  else return false;
  return true;
}

void SetLogLevel(LogLevel l) { g_level.store(static_cast<int>(l), std::memory_order_relaxed); }

bool LogEnabled(LogLevel l) {
  return static_cast<int>(l) <= g_level.load(std::memory_order_relaxed);
}

void Logf(LogLevel l, const char* fmt, ...) {
  if (!LogEnabled(l)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "vmspaced: %s: %s\n", LevelName(l), buf);
}

}  // namespace vmspace::rpc
