// Seeded random differential test: thousands of mmap/munmap/mprotect/fault/fill ops
// on a test region plus non-fixed (top-down) placements, each followed by a
// comparison of the whole address space (maps, VmFlags, map_count) between the
// kernel child and the engine. On the first disagreement the op list is shrunk to a
// small reproducer, printed in the tests/oracle/cases/ format.
//
// Environment: VMSPACE_ORACLE_OPS (ops per seed, default 1500),
// VMSPACE_ORACLE_SEED (run only this seed; default: seeds 1..3),
// VMSPACE_ORACLE_DUMP=FILE (write the whole op list up to a disagreement to FILE),
// VMSPACE_ORACLE_FAULT_COUNTS=1 (accesses also compare page-fault counts; off by
// default because exec probes then run into 51-exec-fetch-not-present.case; 2: only
// reads and writes compare counts).
#include "oracle_session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
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

/// A coarse model of the pages the ops touched, fed with the kernel's answers.
///
/// It exists for one environment difference: on a kernel that does not map the
/// shared zero page for anonymous read faults (the child reports it; see
/// 40-fault-zero-page-read-then-write.case), a read or exec fault on a never-written
/// private anonymous page allocates a page and an anon_vma, which changes later
/// VM_ACCOUNT and merge decisions relative to the reference kernel that the engine
/// models. On such a kernel the random ops do not read or execute pages that may be
/// never-written private memory, nor MAP_POPULATE non-writable private mappings, so
/// that they keep exploring instead of hitting that one known difference (the
/// shrinker applies the same rule to its candidates). On a zero-page kernel the model
/// is inactive and allows everything.
class PageModel {
 public:
  PageModel(uint64_t base, bool active) : base_(base), active_(active) {}

  /// Records the effect of `op` given the kernel's answer.
  void Observe(const std::string& op, const StepResult& r) {
    auto w = Words(op);
    if (w.empty()) return;
    if (w[0] == "mmap" && w.size() >= 5 && r.kernel_ok) {
      uint64_t a = r.kernel_value, len = Round(Num(w[2]));
      bool shared = w[4].find("shared") != std::string::npos;
      bool populate_w = !shared && w[4].find("populate") != std::string::npos &&
                        w[3].find('w') != std::string::npos;
      State st = shared ? kShared : populate_w ? kWritten : kUntouched;
      for (uint64_t p = a; p < a + len; p += kPageSize) pages_[p] = st;
      if (w[4].find("growsdown") != std::string::npos) growsdown_.push_back(a);
    } else if (w[0] == "munmap" && w.size() >= 3 && r.kernel_ok) {
      uint64_t a = Num(w[1]);
      pages_.erase(pages_.lower_bound(a), pages_.lower_bound(a + Round(Num(w[2]))));
    } else if (w[0] == "fault" && w.size() >= 4 && w[2] == "w") {
      Observe("write " + w[1] + " " + w[3], r);
    } else if ((w[0] == "write" || w[0] == "fill") && w.size() >= 3) {
      // Written: the pages of the bytes stored before the access stopped (a signal
      // at si_addr leaves si_addr's page untouched unless written before).
      uint64_t a = Num(w[1]);
      uint64_t end = r.kernel_ok ? a + (w[0] == "fill" ? Num(w[2]) : 1) : r.kernel_si_addr;
      if (!r.kernel_ok) end &= kPageMask;
      for (uint64_t p = a & kPageMask; p < end; p += kPageSize) {
        auto it = pages_.find(p);
        if (it == pages_.end() || it->second == kUntouched) pages_[p] = kWritten;
      }
    }
  }

  /// False if a read/exec fault at `a` may hit never-written private memory.
  bool SafeToRead(uint64_t a) const {
    if (!active_) return true;
    uint64_t p = a & kPageMask;
    auto it = pages_.find(p);
    if (it != pages_.end()) return it->second != kUntouched;
    for (uint64_t s : growsdown_)  // a stack that an access below it would grow
      if (s > p && s - p <= (16ull << 20)) return false;
    return true;
  }

  /// False if `op` is one the model keeps away from (see the class comment).
  bool Allowed(const std::string& op) const {
    if (!active_) return true;
    auto w = Words(op);
    if (w.size() >= 2 && (w[0] == "read" || w[0] == "exec")) return SafeToRead(Num(w[1]));
    if (w.size() >= 3 && w[0] == "fault" && w[2] != "w") return SafeToRead(Num(w[1]));
    if (w.size() >= 5 && w[0] == "mmap" && w[4].find("populate") != std::string::npos)
      return w[4].find("shared") != std::string::npos || w[3].find('w') != std::string::npos;
    return true;
  }

  bool active() const { return active_; }
  /// Start addresses of the GROWSDOWN mappings made so far.
  const std::vector<uint64_t>& growsdown() const { return growsdown_; }

 private:
  enum State { kUntouched, kWritten, kShared };
  static std::vector<std::string> Words(const std::string& s) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i < s.size()) {
      size_t j = s.find(' ', i);
      if (j == std::string::npos) j = s.size();
      if (j > i) out.push_back(s.substr(i, j - i));
      i = j + 1;
    }
    return out;
  }
  uint64_t Num(const std::string& t) const {
    if (t.rfind("base+", 0) == 0) return base_ + strtoull(t.c_str() + 5, nullptr, 0);
    if (t == "NULL") return 0;
    return strtoull(t.c_str(), nullptr, 0);
  }
  static uint64_t Round(uint64_t len) { return (len + kPageSize - 1) & kPageMask; }

  uint64_t base_;
  bool active_;
  std::map<uint64_t, State> pages_;   // mapped pages (absent: unmapped)
  std::vector<uint64_t> growsdown_;   // starts of GROWSDOWN mappings ever made
};

/// Generates random ops in the case-file language; targets are chosen with the
/// help of the PageModel and the non-fixed placements the kernel returned.
class Generator {
 public:
  /// `fault_counts` 1: emit `fault ADDR r|w|x` (also comparing page-fault counts)
  /// instead of read/write/exec; 2: the same for reads and writes only.
  /// `keep_out`: ranges no MAP_FIXED may touch (the child's own VMAs).
  Generator(uint64_t seed, uint64_t base, const PageModel& model, int fault_counts,
            std::set<std::pair<uint64_t, uint64_t>> keep_out)
      : rng_(seed), base_(base), model_(model), counts_(fault_counts),
        keep_out_(std::move(keep_out)) {}

  /// The next op line.
  std::string Next() {
    int k = Pick({22, 8, 12, 6, 14, 3, 12, 10, 5, 4, 6});
    switch (k) {
      case 10: return Special();
      case 0: return MmapRegion();
      case 1: return MmapNull();
      case 2: return MunmapRegion();
      case 3: return placed_.empty() ? MunmapRegion() : MunmapPlaced();
      case 4: return MprotectRegion();
      case 5: return placed_.empty() ? MprotectRegion() : MprotectPlaced();
      case 6: return Access("read", false);
      case 7: return Write();
      case 8: return Access("exec", true);
      default: return Fill();
    }
  }

  /// Feeds back the kernel's answer to an mmap: non-fixed placements outside the
  /// region become targets of later ops.
  void Placed(const std::string& op, const StepResult& r) {
    if (!r.is_mmap || !r.kernel_ok || op.find("fixed") != std::string::npos) return;
    uint64_t a = r.kernel_value;
    if (a >= base_ && a < base_ + kRegionSize) return;
    size_t sp = op.find(' ', 5);
    uint64_t len = strtoull(op.c_str() + sp + 1, nullptr, 0);
    placed_.push_back({a, (len + kPageSize - 1) & kPageMask});
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
  uint64_t Len(uint64_t pages) {
    uint64_t len = pages * kPageSize;
    if (R(100) < 4) len -= 1 + R(kPageSize - 1);  // unaligned length: rounded up
    return len;
  }
  uint64_t AddrOf(uint64_t page) {
    uint64_t off = page * kPageSize;
    if (R(100) < 3) off += 1 + R(kPageSize - 1);  // unaligned address: EINVAL
    return base_ + off;
  }
  std::string A(uint64_t a) const {
    if (a >= base_ && a <= base_ + kRegionSize) return "base+" + Hx(a - base_);
    return Hx(a);
  }

  std::string MmapRegion() {
    auto [first, pages] = PageRange();
    int type = static_cast<int>(R(100));
    bool priv = type < 82;
    std::string flags = priv ? "private" : type < 96 ? "shared" : type < 98 ? "shared_validate" : "0x0";
    flags += ",anonymous";
    int fx = static_cast<int>(R(100));
    flags += fx < 60 ? ",fixed" : fx < 80 ? ",fixed_noreplace" : fx < 83 ? ",fixed,fixed_noreplace" : "";
    if (R(100) < 10) flags += ",noreserve";
    if (R(100) < 5) flags += ",growsdown";
    std::string prot = Prot(false);
    if (R(100) < 3) flags += ",populate";
    if (R(100) < 2) flags += ",stack";
    std::string off = R(100) < 3 ? " " + Hx(R(2) ? 0x1000 : 0x10) : "";
    std::string op = "mmap " + A(AddrOf(first)) + " " + Hx(Len(pages)) + " " + prot + " " + flags + off;
    return model_.Allowed(op) ? op : MmapNull();
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
    bool shared = R(100) >= 88;
    std::string flags = shared ? "shared,anonymous" : "private,anonymous";
    if (R(100) < 8) flags += ",noreserve";
    if (R(100) < 4 && !shared) flags += ",growsdown";
    std::string addr = "NULL";
    if (R(100) < 15) addr = A(AddrOf(R(kRegionPages)));  // a hint into the region
    return "mmap " + addr + " " + Hx(pages * kPageSize) + " " + Prot(false) + " " + flags;
  }
  std::string MunmapRegion() {
    auto [first, pages] = PageRange();
    return "munmap " + A(AddrOf(first)) + " " + Hx(Len(pages));
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
    return "mprotect " + A(AddrOf(first)) + " " + Hx(Len(pages)) + " " + Prot(true);
  }
  std::string MprotectPlaced() {
    auto [a, l] = placed_[R(placed_.size())];
    uint64_t pages = l / kPageSize;
    uint64_t first = R(pages), n = 1 + R(pages - first);
    return "mprotect " + Hx(a + first * kPageSize) + " " + Hx(n * kPageSize) + " " + Prot(true);
  }
  uint64_t AccessAddr(bool exec) {
    uint64_t a;
    if (!placed_.empty() && R(100) < 20) {
      auto [pa, pl] = placed_[R(placed_.size())];
      a = pa + (R(pl / kPageSize) * kPageSize);
    } else {
      a = base_ + R(kRegionPages) * kPageSize;
      if (R(100) < 2) a = base_ + kRegionSize;  // the upper guard page
    }
    return a + (exec ? R(64) : R(kPageSize));  // exec probes stay near the page start
  }
  std::string Access(const char* kind, bool exec) {
    for (int i = 0; i < 10; i++) {
      uint64_t a = AccessAddr(exec);
      if (!model_.SafeToRead(a)) continue;
      if (counts_ == 1 || (counts_ == 2 && !exec)) return "fault " + A(a) + (exec ? " x" : " r");
      return std::string(kind) + " " + A(a);
    }
    return Write();
  }
  std::string Write() {
    if (counts_) return "fault " + A(AccessAddr(false)) + " w " + Hx(SafeByte());
    return "write " + A(AccessAddr(false)) + " " + Hx(SafeByte());
  }
  // True if [a, a+len) comes within a page of one of the child's own VMAs.
  bool KeepOut(uint64_t a, uint64_t len) const {
    for (const auto& [s, e] : keep_out_)
      if (a < e + kPageSize && a + len + kPageSize > s) return true;
    return false;
  }

  // Ops aimed at the less common paths: accesses just below a GROWSDOWN mapping
  // (stack expansion and its guard rule), hints and MAP_FIXED mappings among the
  // top-down placements.
  std::string Special() {
    int k = static_cast<int>(R(3));
    const auto& gd = model_.growsdown();
    if (k == 0 && !gd.empty()) {
      uint64_t a = gd[R(gd.size())] - (1 + R(4)) * kPageSize - (R(2) ? R(kPageSize) : 0);
      if (KeepOut(a, 1)) return Write();
      if (R(2)) return "write " + A(a) + " " + Hx(SafeByte());
      if (model_.SafeToRead(a)) return "read " + A(a);
      return "write " + A(a) + " " + Hx(SafeByte());
    }
    if (placed_.empty()) return MmapNull();
    auto [pa, pl] = placed_[R(placed_.size())];
    uint64_t pages = 1 + R(8);
    uint64_t a = pa + (R(2) ? R(pl / kPageSize) * kPageSize : pl) - (R(2) ? pages * kPageSize : 0);
    std::string flags = R(100) < 85 ? "private,anonymous" : "shared,anonymous";
    if (R(100) < 20 && flags[0] == 'p') flags += ",growsdown";
    if (k == 1) return "mmap " + Hx(a) + " " + Hx(pages * kPageSize) + " " + Prot(false) + " " + flags;
    flags += R(2) ? ",fixed" : ",fixed_noreplace";
    if (KeepOut(a, pages * kPageSize)) return MmapNull();
    std::string op = "mmap " + Hx(a) + " " + Hx(pages * kPageSize) + " " + Prot(false) + " " + flags;
    return model_.Allowed(op) ? op : MmapNull();
  }
  std::string Fill() {
    uint64_t first = R(kRegionPages), pages = 1 + R(4);
    if (first + pages > kRegionPages) pages = kRegionPages - first;
    return "fill " + A(base_ + first * kPageSize) + " " + Hx(pages * kPageSize) + " " +
           Hx(SafeByte());
  }

  std::mt19937_64 rng_;
  uint64_t base_;
  const PageModel& model_;
  int counts_;
  std::set<std::pair<uint64_t, uint64_t>> keep_out_;
  std::vector<std::pair<uint64_t, uint64_t>> placed_;  // non-fixed placements
};

/// The engine's Validate() is slow (it scans the whole page table), so it runs
/// every kValidateEvery ops and after the last one.
constexpr size_t kValidateEvery = 100;
bool ValidateDue(size_t i, size_t n) { return (i + 1) % kValidateEvery == 0 || i + 1 == n; }

/// Runs `ops` in a fresh session, comparing the op results and the whole address
/// space after every op; returns the index of the first disagreement, or -1.
/// With `model_rules`, a list containing an op the PageModel keeps away from counts
/// as agreeing (returns -1), so that the shrinker does not drift into that
/// difference.
/// With `maps_each_op` false the address space is compared only after the last op
/// (the shrinker's fast mode); op results are always compared.
int FirstDisagreement(const std::vector<std::string>& ops, std::string* why,
                      bool model_rules = true, bool maps_each_op = true) {
  OracleSession s(kRegionSize);
  if (!s.setup_error().empty()) {
    if (why) *why = "setup: " + s.setup_error();
    return 0;
  }
  PageModel model(s.base(), model_rules && !s.kernel_zero_page());
  for (size_t i = 0; i < ops.size(); i++) {
    if (!model.Allowed(ops[i])) return -1;
    StepResult r = s.Run(ops[i]);
    model.Observe(ops[i], r);
    bool last = i + 1 == ops.size();
    StepResult m = maps_each_op || last ? s.Run("maps all") : StepResult{};
    std::string v = (maps_each_op && ValidateDue(i, ops.size())) || last ? s.Validate() : "";
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

// ---- shrinking ---------------------------------------------------------------

/// Parses an address as printed by OracleSession::Addr ("base+0x..", "base-0x..",
/// "0x..").
uint64_t ParseShownAddr(const std::string& t, uint64_t base) {
  if (t.rfind("base+", 0) == 0) return base + strtoull(t.c_str() + 5, nullptr, 0);
  if (t.rfind("base-", 0) == 0) return base - strtoull(t.c_str() + 5, nullptr, 0);
  return strtoull(t.c_str(), nullptr, 0);
}

/// The address range an op acts on ([0, 0) for non-fixed placements without hint).
std::pair<uint64_t, uint64_t> OpRange(const std::string& op, uint64_t base) {
  std::vector<std::string> w;
  for (size_t i = 0; i < op.size();) {
    size_t j = op.find(' ', i);
    if (j == std::string::npos) j = op.size();
    if (j > i) w.push_back(op.substr(i, j - i));
    i = j + 1;
  }
  if (w.size() < 2 || w[1] == "NULL" || w[1] == "all") return {0, 0};
  uint64_t a = ParseShownAddr(w[1], base);
  uint64_t len = 1;
  if ((w[0] == "mmap" || w[0] == "munmap" || w[0] == "mprotect" || w[0] == "fill") &&
      w.size() > 2)
    len = strtoull(w[2].c_str(), nullptr, 0);
  return {a & kPageMask, ((a + len + kPageSize - 1) & kPageMask)};
}

/// The address window where the last op's answers differ: the differing maps lines
/// (or the op's own range), widened by a page on each side.
std::pair<uint64_t, uint64_t> DisagreementWindow(const std::vector<std::string>& ops) {
  OracleSession s(kRegionSize);
  StepResult r, m;
  for (const auto& op : ops) r = s.Run(op);
  m = s.Run("maps all");
  uint64_t lo = ~0ull, hi = 0;
  auto widen = [&](uint64_t a, uint64_t b) {
    lo = std::min(lo, a > kPageSize ? a - kPageSize : 0);
    hi = std::max(hi, b + kPageSize);
  };
  if (!r.match) {
    auto [a, b] = OpRange(ops.back(), s.base());
    if (b > a) widen(a, b);
  }
  if (!m.match) {
    auto lines = [](const std::string& t) {
      std::set<std::string> out;
      size_t i = 0;
      while (i < t.size()) {
        size_t j = t.find('\n', i);
        if (j == std::string::npos) j = t.size();
        out.insert(t.substr(i, j - i));
        i = j + 1;
      }
      return out;
    };
    auto kl = lines(m.kernel), el = lines(m.engine);
    for (const auto* side : {&kl, &el}) {
      const auto& other = side == &kl ? el : kl;
      for (const auto& l : *side) {
        if (other.count(l) || l.rfind("map_count", 0) == 0) continue;
        size_t dash = l.find('-', 5), sp = l.find(' ');
        if (dash == std::string::npos || sp == std::string::npos || dash > sp) continue;
        widen(ParseShownAddr(l.substr(0, dash), s.base()),
              ParseShownAddr(l.substr(dash + 1, sp - dash - 1), s.base()));
      }
    }
  }
  return {lo, hi};
}

/// Shrinks a disagreeing op list (the last op disagrees first): first keeps only the
/// ops acting on the address window of the disagreement, then removes chunks of ops
/// greedily as long as the last op still is the first to disagree. Bounded in time.
std::vector<std::string> Shrink(std::vector<std::string> ops) {
  auto t0 = std::chrono::steady_clock::now();
  auto out_of_time = [&] {
    return std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60);
  };
  int f = FirstDisagreement(ops, nullptr);
  if (f < 0) return ops;
  ops.resize(static_cast<size_t>(f) + 1);
  auto still_fails = [&](const std::vector<std::string>& cand) {
    return FirstDisagreement(cand, nullptr, true, false) == static_cast<int>(cand.size()) - 1;
  };
  auto [lo, hi] = DisagreementWindow(ops);
  if (hi > lo) {
    // The window grows to the whole range of every mapping op that overlaps it;
    // accesses up to 16 MiB below it are kept (they may grow a GROWSDOWN VMA).
    auto is_access = [](const std::string& op) {
      return op.rfind("read", 0) == 0 || op.rfind("write", 0) == 0 ||
             op.rfind("exec", 0) == 0 || op.rfind("fault", 0) == 0;
    };
    for (bool grew = true; grew;) {
      grew = false;
      for (const auto& op : ops) {
        auto [a, b] = OpRange(op, kRegionBase);
        if (b <= a || is_access(op) || a >= hi || b <= lo) continue;
        if (a < lo || b > hi) {
          lo = std::min(lo, a);
          hi = std::max(hi, b);
          grew = true;
        }
      }
    }
    uint64_t access_lo = lo > (16ull << 20) ? lo - (16ull << 20) : 0;
    std::vector<std::string> sliced;
    for (size_t i = 0; i < ops.size(); i++) {
      auto [a, b] = OpRange(ops[i], kRegionBase);
      uint64_t from = is_access(ops[i]) ? access_lo : lo;
      if (i + 1 == ops.size() || (b > a && a < hi && b > from)) sliced.push_back(ops[i]);
    }
    if (sliced.size() < ops.size() && still_fails(sliced)) ops = std::move(sliced);
  }
  for (size_t chunk = ops.size() / 2; chunk >= 1 && !out_of_time(); chunk /= 2) {
    for (size_t i = 0; i + 1 < ops.size() && !out_of_time();) {
      size_t n = std::min(chunk, ops.size() - 1 - i);
      std::vector<std::string> cand(ops.begin(), ops.begin() + static_cast<long>(i));
      cand.insert(cand.end(), ops.begin() + static_cast<long>(i + n), ops.end());
      if (still_fails(cand)) ops = std::move(cand);
      else i += n;
    }
    if (chunk == 1) break;
  }
  return ops;
}

/// Shrinks `ops` and formats the reproducer (case-file format) and its disagreement.
std::string Reproducer(const std::vector<std::string>& ops, const std::string& origin) {
  std::vector<std::string> small = Shrink(ops);
  std::string why;
  FirstDisagreement(small, &why);
  std::string repro = "# reproducer from " + origin + " (shrunk from " +
                      std::to_string(ops.size()) + " ops)\nregion " + Hx(kRegionSize) + "\n";
  for (const auto& o : small) repro += o + "\n";
  repro += "maps all\n";
  return "\nMinimal reproducer (tests/oracle/cases/ format):\n" + repro +
         "\nIts disagreement:\n" + why;
}

uint64_t EnvU64(const char* name, uint64_t def) {
  const char* e = getenv(name);
  return e && *e ? strtoull(e, nullptr, 0) : def;
}

void RunSeed(uint64_t seed, uint64_t nops) {
  OracleSession s(kRegionSize);
  ASSERT_EQ(s.setup_error(), "");
  PageModel model(s.base(), !s.kernel_zero_page());
  Generator gen(seed, s.base(), model, static_cast<int>(EnvU64("VMSPACE_ORACLE_FAULT_COUNTS", 0)), s.initial());
  if (!s.kernel_zero_page())
    std::printf("note: this kernel does not map the zero page on anonymous read faults; "
                "reads/execs of never-written private pages are not generated\n");
  std::vector<std::string> ops;
  for (uint64_t i = 0; i < nops; i++) {
    std::string op = gen.Next();
    ops.push_back(op);
    StepResult r = s.Run(op);
    model.Observe(op, r);
    gen.Placed(op, r);
    StepResult m = s.Run("maps all");
    std::string v = ValidateDue(i, nops) ? s.Validate() : "";
    if (r.match && m.match && v.empty()) continue;

    std::string first = "seed " + std::to_string(seed) + ", op " + std::to_string(i + 1) + ": " +
                        op + "\n";
    if (!r.match) first += "--- kernel:\n" + r.kernel + "\n--- engine:\n" + r.engine + "\n";
    if (!m.match)
      first += "--- maps after it, kernel:\n" + m.kernel + "\n--- engine:\n" + m.engine + "\n";
    if (!v.empty()) first += "--- engine Validate(): " + v + "\n";
    if (const char* dump = getenv("VMSPACE_ORACLE_DUMP")) {
      if (FILE* f = fopen(dump, "w")) {
        fprintf(f, "region %s\n", Hx(kRegionSize).c_str());
        for (const auto& o : ops) fprintf(f, "%s\n", o.c_str());
        fclose(f);
      }
    }
    FAIL() << "engine and kernel disagree.\nFirst disagreement: " << first
           << Reproducer(ops, "OracleRandom seed " + std::to_string(seed));
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

namespace vmspace::oracle {
namespace {

// VMSPACE_ORACLE_REPLAY=FILE: replays an op list written by VMSPACE_ORACLE_DUMP (or
// any case file of the random test's region size) and shrinks it if it disagrees.
TEST(OracleRandom, Replay) {
  const char* path = getenv("VMSPACE_ORACLE_REPLAY");
  if (!path || !*path) GTEST_SKIP() << "set VMSPACE_ORACLE_REPLAY=FILE to replay an op list";
  CaseFile cf;
  std::string err;
  ASSERT_TRUE(LoadCase(path, &cf, &err)) << err;
  ASSERT_EQ(cf.region_size, kRegionSize) << "the random test's region size is required";
  std::vector<std::string> ops;
  for (const auto& [line, op] : cf.ops)
    if (op != "maps all") ops.push_back(op);
  std::string why;
  int f = FirstDisagreement(ops, &why);
  if (f < 0) return;
  ops.resize(static_cast<size_t>(f) + 1);
  FAIL() << "disagreement at op " << f + 1 << ": " << why << Reproducer(ops, path);
}

}  // namespace
}  // namespace vmspace::oracle
