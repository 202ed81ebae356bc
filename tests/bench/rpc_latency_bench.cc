// Unary RPC latency of Fault and Mmap beside the empty RPC (Ping) on the same daemon in
// the same run, at 1 and 16 concurrent clients (issue 3's target: within 1.3x of Ping).
//
// Usage: rpc_latency_bench --target HOST:PORT [--seconds S] [--clients 1,16]
// Each client has its own channel and its own space. Per RPC kind and client count it
// prints p50 / p99 latency (microseconds), calls/s, and the ratio to Ping's p50/p99
// measured in the same round. Fault touches pages whose PTEs already allow the access
// (the RPC plus the engine's TLB-hit path); Fault-miss touches fresh pages (a real
// write fault each); Mmap maps 16 KiB and the client munmaps it untimed.
#include "vmspace/v1/vmspace.grpc.pb.h"  // first: <signal.h> defines si_addr

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = vmspace::v1;

enum Kind { kPing, kFaultHit, kFaultMiss, kMmap, kKinds };
const char* const kNames[kKinds] = {"Ping", "Fault(hit)", "Fault(miss)", "Mmap"};

struct Result {
  std::vector<double> us;
  double seconds = 0;
};

std::unique_ptr<v1::VmSpace::Stub> NewStub(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per client
  return v1::VmSpace::NewStub(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
}

bool Call(v1::VmSpace::Stub& stub, Kind k, uint64_t space, uint64_t base, uint64_t& cursor,
          uint64_t& last_mmap) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  switch (k) {
    case kPing: {
      v1::PingResponse r;
      return stub.Ping(&ctx, {}, &r).ok();
    }
    case kFaultHit:
    case kFaultMiss: {
      v1::FaultRequest f;
      f.set_space_id(space);
      uint64_t off = k == kFaultHit ? (cursor++ % 16) * 4096 : (cursor++ % 16384) * 4096;
      f.set_addr(base + off);
      f.set_access(v1::ACCESS_WRITE);
      v1::FaultResponse r;
      return stub.Fault(&ctx, f, &r).ok();
    }
    case kMmap: {
      v1::MmapRequest m;
      m.set_space_id(space);
      m.set_len(16384);
      m.set_prot(PROT_READ);
      m.set_flags(MAP_PRIVATE | MAP_ANONYMOUS);
      v1::MmapResponse r;
      bool ok = stub.Mmap(&ctx, m, &r).ok();
      last_mmap = r.addr();
      return ok;
    }
    default:
      return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string target = "127.0.0.1:50051";
  double seconds = 2;
  std::vector<int> clients = {1, 16};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--target") target = v;
    else if (a == "--seconds") seconds = atof(v.c_str());
    else if (a == "--clients") {
      clients.clear();
      for (size_t p = 0; p < v.size();) {
        size_t q = v.find(',', p);
        clients.push_back(atoi(v.substr(p, q - p).c_str()));
        p = q == std::string::npos ? v.size() : q + 1;
      }
    } else {
      fprintf(stderr, "usage: %s --target HOST:PORT [--seconds S] [--clients 1,16]\n", argv[0]);
      return 2;
    }
  }
  printf("%-8s %-12s %10s %10s %10s %12s %12s\n", "clients", "rpc", "p50_us", "p99_us", "calls/s",
         "p50/Ping", "p99/Ping");
  for (int n : clients) {
    std::vector<std::unique_ptr<v1::VmSpace::Stub>> stubs;
    std::vector<uint64_t> spaces, bases;
    for (int c = 0; c < n; c++) {
      stubs.push_back(NewStub(target));
      grpc::ClientContext ctx;
      v1::CreateSpaceResponse cs;
      if (!stubs.back()->CreateSpace(&ctx, {}, &cs).ok()) {
        fprintf(stderr, "CreateSpace failed: is vmspaced running at %s?\n", target.c_str());
        return 1;
      }
      grpc::ClientContext mctx;
      v1::MmapRequest m;
      m.set_space_id(cs.space_id());
      m.set_len(64ull << 20);
      m.set_prot(PROT_READ | PROT_WRITE);
      m.set_flags(MAP_PRIVATE | MAP_ANONYMOUS);
      v1::MmapResponse mr;
      stubs.back()->Mmap(&mctx, m, &mr);
      spaces.push_back(cs.space_id());
      bases.push_back(mr.addr());
    }
    double p50_ping = 0, p99_ping = 0;
    for (int k = 0; k < kKinds; k++) {
      std::vector<Result> res(n);
      std::vector<std::thread> ts;
      std::atomic<bool> fail{false};
      for (int c = 0; c < n; c++)
        ts.emplace_back([&, c] {
          uint64_t cursor = 0, last = 0;
          auto& st = *stubs[c];
          for (int w = 0; w < 50; w++) Call(st, static_cast<Kind>(k), spaces[c], bases[c], cursor, last);
          auto t0 = Clock::now();
          auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
          while (Clock::now() < end) {
            auto a = Clock::now();
            bool ok = Call(st, static_cast<Kind>(k), spaces[c], bases[c], cursor, last);
            auto b = Clock::now();
            if (!ok) fail = true;
            res[c].us.push_back(std::chrono::duration<double, std::micro>(b - a).count());
            if (k == kMmap && last) {  // untimed cleanup
              grpc::ClientContext ctx;
              v1::MunmapRequest u;
              u.set_space_id(spaces[c]);
              u.set_addr(last);
              u.set_len(16384);
              v1::MunmapResponse ur;
              st.Munmap(&ctx, u, &ur);
            }
          }
          res[c].seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        });
      for (auto& t : ts) t.join();
      std::vector<double> all;
      double calls = 0;
      for (auto& r : res) {
        all.insert(all.end(), r.us.begin(), r.us.end());
        calls += r.us.size() / r.seconds;
      }
      std::sort(all.begin(), all.end());
      double p50 = all.empty() ? 0 : all[all.size() / 2];
      double p99 = all.empty() ? 0 : all[std::min(all.size() - 1, all.size() * 99 / 100)];
      if (k == kPing) {
        p50_ping = p50;
        p99_ping = p99;
      }
      printf("%-8d %-12s %10.1f %10.1f %10.0f %12.2f %12.2f%s\n", n, kNames[k], p50, p99, calls,
             p50 / p50_ping, p99 / p99_ping, fail ? "  (some calls failed)" : "");
      fflush(stdout);
    }
    for (int c = 0; c < n; c++) {
      grpc::ClientContext ctx;
      v1::DestroySpaceRequest d;
      d.set_space_id(spaces[c]);
      v1::DestroySpaceResponse dr;
      stubs[c]->DestroySpace(&ctx, d, &dr);
    }
  }
  return 0;
}
