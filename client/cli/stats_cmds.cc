// SPDX-License-Identifier: Apache-2.0
// The commands about the daemon itself: ping, stats (GetServerInfo), health
// (grpc.health.v1) and lockstat (GetLockStats, like /proc/lock_stat).
#include "cli/commands.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "cli/bench.h"
#include "cli/output.h"
#include "engine/stats.h"

namespace vmspace::cli {

namespace {

/// The lock cells of a GetLockStats answer as the engine's StatsSnapshot, so that the
/// table is the engine's own FormatLockStat (one renderer for daemon and CLI). Lock
/// classes or modes this build does not know are left out.
StatsSnapshot LockStatsSnapshot(const v1::GetLockStatsResponse& r) {
  auto ns = [](double seconds) { return static_cast<uint64_t>(std::llround(seconds * 1e9)); };
  StatsSnapshot snap;
  for (const v1::LockStat& l : r.locks()) {
    for (size_t c = 0; c < snap.locks.size(); ++c) {
      for (size_t m = 0; m < snap.locks[c].size(); ++m) {
        if (l.lock() != LockClassName(static_cast<LockClass>(c)) || l.mode() != LockModeName(static_cast<LockMode>(m)))
          continue;
        LockStatCell& x = snap.locks[c][m];
        x.acquisitions = l.acquisitions();
        x.contentions = l.contentions();
        x.wait_ns_total = ns(l.wait_seconds_total());
        x.wait_ns_max = ns(l.wait_seconds_max());
        x.hold_ns_total = ns(l.hold_seconds_total());
        x.hold_ns_max = ns(l.hold_seconds_max());
      }
    }
  }
  return snap;
}

}  // namespace

int CmdPing(Ctx& c) {
  Client cl(c.client);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<client::Error> unreachable;
  auto r = cl.Ping(&unreachable);
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) return Fail(c, r.error());
  Json j{{"ok", true}, {"latency_us", us}};
  const int code = Unreached(c, unreachable, &j);
  if (c.json) c.out << j.dump() << "\n";
  else c.out << "ok (" << std::fixed << std::setprecision(0) << us << " us)\n";
  return code;
}

int CmdStats(Ctx& c) {
  Client cl(c.client);
  std::vector<client::Error> unreachable;
  auto r = cl.GetServerInfo(&unreachable);
  if (!r.ok()) return Fail(c, r.error());
  // The targets that answered, in order (GetServerInfo's order).
  std::vector<std::string> answered;
  for (const std::string& t : cl.targets()) {
    if (std::none_of(unreachable.begin(), unreachable.end(), [&](const client::Error& e) { return e.target == t; }))
      answered.push_back(t);
  }
  Json all = Json::array();
  for (size_t n = 0; n < r.value().size(); ++n) {
    const v1::GetServerInfoResponse& i = r.value()[n];
    Json mem = Json::object();
    for (const v1::MemoryUsage& u : i.memory()) mem[u.kind()] = u.bytes();
    all.push_back(Json{{"target", n < answered.size() ? answered[n] : ""},
                       {"shard", i.shard()}, {"version", i.version()}, {"spaces", i.spaces()},
                       {"max_spaces", i.max_spaces()}, {"memory_bytes", mem},
                       {"memory_limit_bytes", i.memory_limit_bytes()}});
    if (c.json) continue;
    c.out << "shard " << i.shard() << " (vmspaced " << i.version() << "): " << i.spaces() << " of "
          << i.max_spaces() << " spaces\n";
    int64_t total = 0;
    for (const v1::MemoryUsage& u : i.memory()) {
      c.out << "  memory " << std::left << std::setw(12) << u.kind() << std::right << std::setw(14) << u.bytes()
            << " bytes\n";
      total += u.bytes();
    }
    c.out << "  memory " << std::left << std::setw(12) << "total" << std::right << std::setw(14) << total
          << " bytes of " << (i.memory_limit_bytes() ? std::to_string(i.memory_limit_bytes()) : "unlimited")
          << " (--max-memory-bytes)\n";
  }
  // --json: an array, one object per daemon; a daemon left out is {"target", "unreachable": true, "error"}.
  Json left;
  const int code = Unreached(c, unreachable, &left);
  if (left.contains("unreachable")) {
    for (const Json& u : left["unreachable"])
      all.push_back(Json{{"target", u["target"]}, {"unreachable", true}, {"error", u["code"].get<std::string>() + ": " + u["message"].get<std::string>()}});
  }
  if (c.json) c.out << all.dump() << "\n";
  return code;
}

int CmdHealth(Ctx& c) {
  const std::string service = c.args.Get("service", "vmspace.v1.VmSpace");
  Client cl(c.client);
  std::vector<client::Error> unreachable;
  auto r = cl.CheckHealth(service, &unreachable);
  if (!r.ok()) return Fail(c, r.error());
  const bool serving = r.value() == "SERVING";
  Json j{{"service", service}, {"status", r.value()}, {"serving", serving}};
  const int code = Unreached(c, unreachable, &j, serving ? kExitOk : kExitFailed);
  if (c.json) c.out << j.dump() << "\n";
  else c.out << r.value() << "\n";
  return serving ? code : kExitFailed;
}

int CmdLockstat(Ctx& c) {
  std::string p = ProfileOption(c);
  std::string name;  // "" = all profiles
  if (p == "custom") name = p;
  else if (!p.empty() && p != "all") {
    std::string e = bench::CheckProfile(p, &name);
    if (!e.empty()) throw UsageError{"--profile: " + e};
  }
  Client cl(c.client);
  std::vector<client::Error> unreachable;
  auto r = cl.GetLockStats(name, &unreachable);
  if (!r.ok()) return Fail(c, r.error());
  const v1::GetLockStatsResponse& s = r.value();
  std::map<std::string, uint64_t> events(s.events().begin(), s.events().end());
  if (c.json) {
    Json locks = Json::array();
    for (const v1::LockStat& l : s.locks()) {
      locks.push_back({{"lock", l.lock()},
                       {"mode", l.mode()},
                       {"acquisitions", l.acquisitions()},
                       {"contentions", l.contentions()},
                       {"wait_seconds_total", l.wait_seconds_total()},
                       {"wait_seconds_max", l.wait_seconds_max()},
                       {"hold_seconds_total", l.hold_seconds_total()},
                       {"hold_seconds_max", l.hold_seconds_max()}});
    }
    Json j{{"profile", name.empty() ? "all" : name},
           {"lock_stats_enabled", s.lock_stats_enabled()},
           {"locks", locks},
           {"events", events},
           {"text", s.text()}};
    const int code = Unreached(c, unreachable, &j);
    c.out << j.dump() << "\n";
    return code;
  }
  std::ostringstream o;
  o << FormatLockStat(LockStatsSnapshot(s)) << "profile " << (name.empty() ? "all" : name)
    << (s.lock_stats_enabled() ? "" : "; timing off (vmspaced --lock-stats=off): counts only") << "\n";
  char line[128];
  if (!events.empty()) {
    o << "\nevents:\n";
    for (const auto& [k, v] : events) {
      snprintf(line, sizeof line, "  %-22s %14llu\n", k.c_str(), static_cast<unsigned long long>(v));
      o << line;
    }
  }
  c.out << o.str();
  return Unreached(c, unreachable, nullptr);
}

}  // namespace vmspace::cli
