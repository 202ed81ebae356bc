// SPDX-License-Identifier: Apache-2.0
// `vmspace trace-locks`: the daemon's sampled timeline of lock waits and holds, faults
// and operations (TraceLocks), written as a Chrome trace event file.
#include "cli/trace_locks.h"

#include <fstream>
#include <map>
#include <set>

#include "cli/commands.h"

namespace vmspace::cli {

namespace {

std::string HexAddr(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// The event's name on the timeline: "mmap_lock write wait", "fault", "munmap".
std::string EventName(const v1::TraceLockEvent& e) {
  if (e.kind() == "lock_wait") return e.lock() + " " + e.mode() + " wait";
  if (e.kind() == "lock_hold") return e.lock() + " " + e.mode() + " hold";
  if (e.kind() == "fault") return e.mode() == "write" ? "fault (write)" : "fault (read)";
  return e.name();
}

}  // namespace

Json ChromeTrace(const std::vector<v1::TraceLocksResponse>& daemons) {
  Json events = Json::array();
  uint64_t dropped = 0;
  for (size_t d = 0; d < daemons.size(); d++) {
    const int pid = static_cast<int>(d) + 1;
    dropped += daemons[d].dropped();
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
                      {"args", {{"name", "vmspaced " + std::to_string(pid)}}}});
    std::set<uint32_t> tids;
    for (const v1::TraceLockEvent& e : daemons[d].events()) {
      if (tids.insert(e.tid()).second)
        events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", e.tid()},
                          {"args", {{"name", "vmspaced thread " + std::to_string(e.tid())}}}});
      Json args = Json::object();
      if (e.space_id() != 0) args["space"] = e.space_id();
      if (!e.lock().empty()) args["lock"] = e.lock();
      if (!e.mode().empty()) args[e.kind() == "fault" ? "access" : "mode"] = e.mode();
      if (e.end() > e.start()) args[e.kind() == "fault" ? "address" : "range"] =
          e.kind() == "fault" ? HexAddr(e.start()) : HexAddr(e.start()) + "-" + HexAddr(e.end());
      if (e.kind() == "lock_wait") {
        std::string holder = "unknown";
        if (e.holder_readers())
          holder = e.holder_tid() ? "readers (last in: thread " + std::to_string(e.holder_tid()) + ")" : "readers";
        else if (e.holder_tid())
          holder = "thread " + std::to_string(e.holder_tid());
        args["holder"] = holder;
      }
      events.push_back({{"name", EventName(e)},
                        {"cat", e.kind()},
                        {"ph", "X"},
                        {"pid", pid},
                        {"tid", e.tid()},
                        {"ts", static_cast<double>(e.begin_ns()) / 1000.0},
                        {"dur", static_cast<double>(e.dur_ns()) / 1000.0},
                        {"args", args}});
    }
  }
  return Json{{"traceEvents", events},
              {"displayTimeUnit", "ns"},
              {"otherData", {{"source", "vmspace trace-locks"}, {"dropped_events", dropped}}}};
}

bool WriteChromeTrace(const std::vector<v1::TraceLocksResponse>& daemons, const std::string& path,
                      std::string* error) {
  std::ofstream f(path);
  if (!f) {
    *error = "cannot write " + path;
    return false;
  }
  f << ChromeTrace(daemons).dump() << "\n";
  f.close();
  if (!f) {
    *error = "cannot write " + path;
    return false;
  }
  return true;
}

int CmdTraceLocks(Ctx& c) {
  const bool all = c.args.Flag("all");
  if (all == c.args.Has("space")) throw UsageError{"give --space ID or --all"};
  const uint64_t space = all ? 0 : c.U64("space");
  const std::string out = c.args.Get("out", "vmspace-timeline.json");
  double seconds = 5;
  if (c.args.Has("seconds")) {
    try {
      seconds = std::stod(c.args.Get("seconds"));
    } catch (const std::exception&) {
      throw UsageError{"--seconds: a number of seconds"};
    }
  }
  Client cl(c.client);
  auto r = cl.TraceLocks(space, all, seconds, c.U64("max-events", 0));
  if (!r.ok()) {
    c.err << "vmspace trace-locks: " << r.error().message << "\n";
    return kExitFailed;
  }
  std::string error;
  if (!WriteChromeTrace(r.value(), out, &error)) {
    c.err << "vmspace trace-locks: " << error << "\n";
    return kExitFailed;
  }
  std::map<std::string, uint64_t> by_kind;
  std::set<std::pair<size_t, uint32_t>> threads;
  uint64_t dropped = 0;
  for (size_t d = 0; d < r.value().size(); d++) {
    dropped += r.value()[d].dropped();
    for (const v1::TraceLockEvent& e : r.value()[d].events()) {
      by_kind[e.kind()]++;
      threads.insert({d, e.tid()});
    }
  }
  if (c.json) {
    c.out << Json{{"out", out}, {"events", by_kind}, {"threads", threads.size()}, {"dropped", dropped}}.dump() << "\n";
  } else {
    c.out << out << ": " << threads.size() << " threads;";
    for (const auto& [k, n] : by_kind) c.out << " " << k << " " << n << ";";
    c.out << " " << dropped << " dropped (open it in https://ui.perfetto.dev or chrome://tracing)\n";
  }
  return kExitOk;
}

}  // namespace vmspace::cli
