// SPDX-License-Identifier: Apache-2.0
#include "rpc/log.h"

#include <google/protobuf/stubs/logging.h>

#include <chrono>
#include <cstdarg>
#include <ctime>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>

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

struct Limiter {
  struct Key {
    std::chrono::steady_clock::time_point last;
    uint64_t suppressed = 0;
  };
  std::mutex mu;
  std::unordered_map<std::string, Key> keys;  // guarded by mu
};
Limiter& TheLimiter() {
  static Limiter* l = new Limiter;  // never destroyed: threads may log during exit
  return *l;
}

void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                 const std::string& msg) {
  LogLevel l = LogLevel::kInfo;
  if (level >= google::protobuf::LOGLEVEL_ERROR) l = LogLevel::kError;
  else if (level == google::protobuf::LOGLEVEL_WARNING) l = LogLevel::kWarn;
  LogLine(l, std::string(file ? file : "?") + ":" + std::to_string(line), "protobuf: " + msg);
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

namespace {
/// The wall-clock time of a log line: RFC 3339 in UTC with milliseconds
/// ("2026-12-05T18:40:12.123Z").
std::string Timestamp() {
  const auto now = std::chrono::system_clock::now();
  const time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[64];  // room for any int fields: no -Wformat-truncation
  snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
           tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}
}  // namespace

void SetLogLevel(LogLevel l) { g_level.store(static_cast<int>(l), std::memory_order_relaxed); }

bool LogEnabled(LogLevel l) {
  return static_cast<int>(l) <= g_level.load(std::memory_order_relaxed);
}

void LogLine(LogLevel l, std::string_view key, std::string_view msg) {
  if (!LogEnabled(l)) return;
  uint64_t suppressed = 0;
  {
    Limiter& lim = TheLimiter();
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> g(lim.mu);
    auto [it, fresh] = lim.keys.try_emplace(std::string(key));
    if (!fresh && now - it->second.last < kLogInterval) {
      it->second.suppressed++;
      return;
    }
    it->second.last = now;
    suppressed = it->second.suppressed;
    it->second.suppressed = 0;
  }
  const std::string ts = Timestamp();
  if (suppressed)
    fprintf(stderr, "%s vmspaced: %s: %.*s (%llu similar lines suppressed)\n", ts.c_str(), LevelName(l),
            static_cast<int>(msg.size()), msg.data(), static_cast<unsigned long long>(suppressed));
  else
    fprintf(stderr, "%s vmspaced: %s: %.*s\n", ts.c_str(), LevelName(l), static_cast<int>(msg.size()),
            msg.data());
}

void Logf(LogLevel l, const char* fmt, ...) {
  if (!LogEnabled(l)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  LogLine(l, fmt, buf);
}

void RouteProtobufLogs() { google::protobuf::SetLogHandler(&ProtobufLog); }

}  // namespace vmspace::rpc
