// Seeded random differential test: thousands of mmap/munmap/mprotect/fault/fill ops
// on a test region plus non-fixed (top-down) placements, each followed by a
// comparison of the whole address space (maps, VmFlags, map_count) between the
// kernel child and the engine. On the first disagreement the op list is shrunk to a
// small reproducer, printed in the tests/oracle/cases/ format.
//
// Environment: VMSPACE_ORACLE_OPS (ops per seed, default 1500),
// VMSPACE_ORACLE_SEED (run only this seed; default: seeds 1..3).
#include "oracle_session.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace vmspace::oracle {
namespace {

constexpr uint64_t kRegionPages = 256;
constexpr uint64_t kRegionSize = kRegionPages * kPageSize;

std::string Hx(uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}
std::string Rel(uint64_t off) { return "base+" + Hx(off); }

/// Generates random ops in the case-file language. Keeps track of the non-fixed
/// placements that the kernel returned, so later ops can hit them.
class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  /// The next op line.
  std::string Next() {
    int k = Pick({22, 8, 12, 6, 14, 3, 12, 10, 5, 4});
    switch (k) {
      case 0: return MmapRegion();
      case 1: return MmapNull();
      case 2: return MunmapRegion();
      case 3: return placed_.empty() ? MunmapRegion() : MunmapPlaced();
      case 4: return MprotectRegion();
      case 5: return placed_.empty() ? MprotectRegion() : MprotectPlaced();
      case 6: return "read " + AccessAddr(false);
      case 7: return "write " + AccessAddr(false) + " " + Hx(SafeByte());
      case 8: return "exec " + AccessAddr(true);
      default: return Fill();
    }
  }

  /// Feeds back the kernel's answer of an mmap that was not MAP_FIXED.
  void Placed(uint64_t base, uint64_t addr, uint64_t len) {
    if (addr >= base && addr < base + kRegionSize) return;
    placed_.push_back({addr, (len + kPageSize - 1) & kPageMask});
  }

 private:
  uint64_t R(uint64_t n) { return n ? rng_() % n : 0; }
  int Pick(std::initializer_list<int> weights) {
    int total = 0;
    for (int w : weights) total += w;
    int r = static_cast<int>(R(static_cast<uint64_t>(total)));
    int i = 0;
    for (int w : weights) {
      if (r < w) return i;
      r -= w;
      i++;
    }
    return i - 1;
  }
  // Bytes that are harmless as the first instruction bytes of an exec probe
  // (see child/oracle_child.cc): nop, ret, int3, hlt, cmc, clc, stc, cld, push, pop,
  // and 0x00 (add to memory through a scratch register).
  uint64_t SafeByte() {
    static const uint8_t kSafe[] = {0x00, 0x90, 0xc3, 0xcc, 0xf4, 0xf5,
                                    0xf8, 0xf9, 0xfc, 0x50, 0x51, 0x58};
    return kSafe[R(sizeof kSafe)];
  }
  std::string Prot(bool for_mprotect) {
    static const char* kProts[] = {"none", "r", "rw", "rwx", "rx", "w", "x", "rw", "r", "rw"};
    std::string p = kProts[R(10)];
    int odd = static_cast<int>(R(100));
    if (for_mprotect) {
      if (odd < 2) p += "|0x10";
      else if (odd < 4) p += "|sem";
      else if (odd < 6) p += "|growsdown";
    } else if (odd < 2) {
      p += "|0x10";
    }
    return p;
  }
  // Page range inside the region: (first page, pages).
  std::pair<uint64_t, uint64_t> PageRange() {
    uint64_t pages = R(10) < 8 ? 1 + R(8) : 1 + R(48);
    if (pages > kRegionPages) pages = kRegionPages;
    uint64_t first = R(kRegionPages - pages + 1);
    return {first, pages};
  }
  std::string Len(uint64_t pages) {
    uint64_t len = pages * kPageSize;
    int odd = static_cast<int>(R(100));
    if (odd < 4) len -= 1 + R(kPageSize - 1);  // unaligned length: rounded up
    return Hx(len);
  }
  std::string AddrOf(uint64_t page) {
    uint64_t off = page * kPageSize;
    if (R(100) < 3) off += 1 + R(kPageSize - 1);  // unaligned address: EINVAL
    return Rel(off);
  }

  std::string MmapRegion() {
    auto [first, pages] = PageRange();
    int type = static_cast<int>(R(100));
    std::string flags = type < 82 ? "private" : type < 96 ? "shared" : type < 98 ? "shared_validate"
                                                                                  : "0x0";
    flags += ",anonymous";
    int fx = static_cast<int>(R(100));
    flags += fx < 60 ? ",fixed" : fx < 80 ? ",fixed_noreplace" : fx < 83 ? ",fixed,fixed_noreplace" : "";
    if (R(100) < 10) flags += ",noreserve";
    if (R(100) < 5) flags += ",growsdown";
    if (R(100) < 3) flags += ",populate";
    if (R(100) < 2) flags += ",stack";
    std::string off = R(100) < 3 ? " " + Hx(R(2) ? 0x1000 : 0x10) : "";
    return "mmap " + AddrOf(first) + " " + Len(pages) + " " + Prot(false) + " " + flags + off;
  }
  std::string MmapNull() {
    uint64_t pages;
    int sz = static_cast<int>(R(100));
    if (sz < 80) pages = 1 + R(16);
    else if (sz < 88) pages = 512;   // 2 MiB: THP-aligned placement
    else if (sz < 92) pages = 1024;  // 4 MiB
    else if (sz < 96) pages = 513;
    else pages = 64 + R(256);
    if (placed_.size() > 24) pages = 1 + R(4);
    std::string flags = R(100) < 88 ? "private,anonymous" : "shared,anonymous";
    if (R(100) < 8) flags += ",noreserve";
    if (R(100) < 4 && flags[0] == 'p') flags += ",growsdown";
    std::string addr = "NULL";
    if (R(100) < 15) addr = AddrOf(R(kRegionPages));  // a hint into the region
    return "mmap " + addr + " " + Hx(pages * kPageSize) + " " + Prot(false) + " " + flags;
  }
  std::string MunmapRegion() {
    auto [first, pages] = PageRange();
    return "munmap " + AddrOf(first) + " " + Len(pages);
  }
  std::string MunmapPlaced() {
    size_t i = R(placed_.size());
    auto [a, l] = placed_[i];
    uint64_t pages = l / kPageSize;
    if (R(100) < 50 || pages == 1 || placed_.size() > 16) {
      placed_.erase(placed_.begin() + static_cast<long>(i));
      return "munmap " + Hx(a) + " " + Hx(l);
    }
    uint64_t first = R(pages), n = 1 + R(pages - first);
    return "munmap " + Hx(a + first * kPageSize) + " " + Hx(n * kPageSize);
  }
  std::string MprotectRegion() {
    auto [first, pages] = PageRange();
    return "mprotect " + AddrOf(first) + " " + Len(pages) + " " + Prot(true);
  }
  std::string MprotectPlaced() {
    auto [a, l] = placed_[R(placed_.size())];
    uint64_t pages = l / kPageSize;
    uint64_t first = R(pages), n = 1 + R(pages - first);
    return "mprotect " + Hx(a + first * kPageSize) + " " + Hx(n * kPageSize) + " " + Prot(true);
  }
  std::string AccessAddr(bool exec) {
    uint64_t a;
    bool rel = true;
    if (!placed_.empty() && R(100) < 20) {
      auto [pa, pl] = placed_[R(placed_.size())];
      a = pa + (R(pl / kPageSize) * kPageSize);
      rel = false;
    } else {
      a = R(kRegionPages) * kPageSize;
      if (R(100) < 2) a = kRegionSize;  // the upper guard page
    }
    a += exec ? R(64) : R(kPageSize);  // exec probes stay near the page start
    return rel ? Rel(a) : Hx(a);
  }
  std::string Fill() {
    uint64_t first = R(kRegionPages), pages = 1 + R(4);
    if (first + pages > kRegionPages) pages = kRegionPages - first;
    return "fill " + Rel(first * kPageSize) + " " + Hx(pages * kPageSize) + " " + Hx(SafeByte());
  }

  std::mt19937_64 rng_;
  std::vector<std::pair<uint64_t, uint64_t>> placed_;
};

/// The engine's Validate() is slow (it walks every page of every VMA), so it runs
/// every kValidateEvery ops and after the last one.
constexpr size_t kValidateEvery = 100;
bool ValidateDue(size_t i, size_t n) { return (i + 1) % kValidateEvery == 0 || i + 1 == n; }

/// Runs `ops` in a fresh session, comparing the op results and the whole address
/// space after every op; returns the index of the first disagreement, or -1.
int FirstDisagreement(const std::vector<std::string>& ops, std::string* why) {
  OracleSession s(kRegionSize);
  if (!s.setup_error().empty()) {
    if (why) *why = "setup: " + s.setup_error();
    return 0;
  }
  for (size_t i = 0; i < ops.size(); i++) {
    StepResult r = s.Run(ops[i]);
    StepResult m = s.Run("maps all");
    std::string v = ValidateDue(i, ops.size()) ? s.Validate() : "";
    if (!r.match || !m.match || !v.empty()) {
      if (why) {
        *why = "op: " + ops[i] + "\n";
        if (!r.match) *why += "--- kernel:\n" + r.kernel + "\n--- engine:\n" + r.engine + "\n";
        if (!m.match)
          *why += "--- maps after it, kernel:\n" + m.kernel + "\n--- engine:\n" + m.engine + "\n";
        if (!v.empty()) *why += "--- engine Validate(): " + v + "\n";
      }
      return static_cast<int>(i);
    }
  }
  return -1;
}

/// Greedy delta debugging: removes chunks of ops while some disagreement remains,
/// then cuts the list after the first disagreement. Bounded in time.
std::vector<std::string> Shrink(std::vector<std::string> ops) {
  auto t0 = std::chrono::steady_clock::now();
  auto out_of_time = [&] {
    return std::chrono::steady_clock::now() - t0 > std::chrono::seconds(40);
  };
  int f = FirstDisagreement(ops, nullptr);
  if (f < 0) return ops;
  ops.resize(static_cast<size_t>(f) + 1);
  for (size_t chunk = ops.size() / 2; chunk >= 1 && !out_of_time(); chunk /= 2) {
    for (size_t i = 0; i < ops.size() && !out_of_time();) {
      std::vector<std::string> cand;
      for (size_t j = 0; j < ops.size(); j++)
        if (j < i || j >= i + chunk) cand.push_back(ops[j]);
      int cf = cand.empty() ? -1 : FirstDisagreement(cand, nullptr);
      if (cf >= 0) {
        cand.resize(static_cast<size_t>(cf) + 1);
        ops = std::move(cand);
      } else {
        i += chunk;
      }
    }
    if (chunk == 1) break;
  }
  return ops;
}

uint64_t EnvU64(const char* name, uint64_t def) {
  const char* e = getenv(name);
  return e && *e ? strtoull(e, nullptr, 0) : def;
}

void RunSeed(uint64_t seed, uint64_t nops) {
  OracleSession s(kRegionSize);
  ASSERT_EQ(s.setup_error(), "");
  Generator gen(seed);
  std::vector<std::string> ops;
  for (uint64_t i = 0; i < nops; i++) {
    std::string op = gen.Next();
    ops.push_back(op);
    StepResult r = s.Run(op);
    if (r.is_mmap && r.kernel_ok && op.find("fixed") == std::string::npos) {
      uint64_t len = strtoull(op.substr(op.find(' ', 5) + 1).c_str(), nullptr, 0);
      gen.Placed(s.base(), r.kernel_value, len);
    }
    StepResult m = s.Run("maps all");
    std::string v = ValidateDue(i, nops) ? s.Validate() : "";
    if (r.match && m.match && v.empty()) continue;

    std::string first = "seed " + std::to_string(seed) + ", op " + std::to_string(i + 1) + ": " +
                        op + "\n";
    if (!r.match) first += "--- kernel:\n" + r.kernel + "\n--- engine:\n" + r.engine + "\n";
    if (!m.match)
      first += "--- maps after it, kernel:\n" + m.kernel + "\n--- engine:\n" + m.engine + "\n";
    if (!v.empty()) first += "--- engine Validate(): " + v + "\n";
    std::vector<std::string> small = Shrink(ops);
    std::string why;
    FirstDisagreement(small, &why);
    std::string repro = "# reproducer from OracleRandom seed " + std::to_string(seed) +
                        " (shrunk from " + std::to_string(ops.size()) + " ops)\nregion " +
                        Hx(kRegionSize) + "\n";
    for (const auto& o : small) repro += o + "\n";
    repro += "maps all\n";
    FAIL() << "engine and kernel disagree.\nFirst disagreement: " << first
           << "\nMinimal reproducer (tests/oracle/cases/ format):\n"
           << repro << "\nIts disagreement:\n"
           << why;
  }
  std::printf("seed %" PRIu64 ": %" PRIu64 " ops, kernel and engine agreed on all\n", seed, nops);
}

std::vector<uint64_t> Seeds() {
  uint64_t only = EnvU64("VMSPACE_ORACLE_SEED", 0);
  if (only) return {only};
  return {1, 2, 3};
}

class OracleRandom : public testing::TestWithParam<uint64_t> {};

TEST_P(OracleRandom, Ops) { RunSeed(GetParam(), EnvU64("VMSPACE_ORACLE_OPS", 1500)); }

INSTANTIATE_TEST_SUITE_P(Seed, OracleRandom, testing::ValuesIn(Seeds()),
                         [](const testing::TestParamInfo<uint64_t>& i) {
                           return std::to_string(i.param);
                         });

}  // namespace
}  // namespace vmspace::oracle
