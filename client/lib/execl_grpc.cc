// SPDX-License-Identifier: Apache-2.0
#include "lib/execl_grpc.h"

#include <atomic>
#include <thread>
#include <vector>

#include "lib/harness.h"
#include "lib/harness_grpc.h"

namespace vmspace::bench {

ExeclResult RunExeclDaemon(const client::ClientOptions& opts, IMmapScope scope, const std::string& profile,
                           int clients, double seconds, const std::string& program) {
  ExeclResult r;
  r.setting = IMmapScopeName(scope);
  r.clients = clients;
  r.binary = program;
  const std::string prof = profile.empty() ? "linux-6.15" : profile;
  client::ClientOptions own = opts;
  own.own_connection = true;
  client::Client admin(opts);
  auto lock_figures = [&](harness::LockFigures* out) {
    auto s = admin.GetLockStats(prof);
    if (s.ok()) *out = harness::FromLockStats(s.value());
    return s.ok();
  };
  std::vector<std::string> errors(clients);
  std::vector<uint64_t> parents(clients, 0);
  std::vector<std::unique_ptr<client::Client>> conns;
  for (int c = 0; c < clients; ++c) {
    conns.push_back(std::make_unique<client::Client>(own));
    v1::SpaceSettings st;
    st.set_locking_profile(prof);
    st.set_i_mmap_scope(IMmapScopeName(scope));
    auto id = conns[c]->CreateSpace(st, "bench-execl");
    if (!id.ok()) {
      r.error = "CreateSpace: " + id.error().ToString();
      break;
    }
    parents[c] = id.value();
    auto e = conns[c]->ExecSpace(parents[c], program, {"/" + program});
    if (!e.ok()) {
      r.error = "ExecSpace " + program + ": " + e.error().ToString();
      break;
    }
  }
  harness::LockFigures before, after;
  const bool locks = r.error.empty() && lock_figures(&before);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> iters{0};
  const uint64_t t0 = harness::MonoNs();
  std::vector<std::thread> ts;
  if (r.error.empty())
    for (int c = 0; c < clients; ++c)
      ts.emplace_back([&, c] {
        client::Client& cl = *conns[c];
        while (!stop.load(std::memory_order_relaxed)) {
          auto child = cl.CloneSpace(parents[c]);
          if (!child.ok()) {
            errors[c] = "CloneSpace: " + child.error().ToString();
            break;
          }
          auto e = cl.ExecSpace(child.value(), program, {"/" + program});
          auto d = cl.DestroySpace(child.value());
          if (!e.ok() || !d.ok()) {
            errors[c] = !e.ok() ? "ExecSpace: " + e.error().ToString() : "DestroySpace: " + d.error().ToString();
            break;
          }
          iters.fetch_add(1, std::memory_order_relaxed);
        }
      });
  if (r.error.empty())
    while (harness::MonoNs() - t0 < static_cast<uint64_t>(seconds * 1e9))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop = true;
  for (auto& t : ts) t.join();
  r.seconds = static_cast<double>(harness::MonoNs() - t0) / 1e9;
  if (locks && lock_figures(&after)) {
    const harness::LockFigures d = after.Minus(before);
    for (const char* m : {"read", "write"}) {
      const LockStatCell& cell = d.lock("i_mmap_rwsem", m);
      r.i_mmap_acquisitions += cell.acquisitions;
      r.i_mmap_contentions += cell.contentions;
      r.i_mmap_wait_s += static_cast<double>(cell.wait_ns_total) / 1e9;
    }
  }
  for (int c = 0; c < clients; ++c)
    if (parents[c]) (void)conns[c]->DestroySpace(parents[c]);  // best effort: the run's figures are in
  r.iterations = iters.load();
  for (const std::string& e : errors)
    if (!e.empty() && r.error.empty()) r.error = e;
  return r;
}

}  // namespace vmspace::bench
