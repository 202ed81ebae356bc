// SPDX-License-Identifier: Apache-2.0
// Seeded random differential test: thousands of mmap/munmap/mprotect/fault/fill ops
// on a test region plus non-fixed (top-down) placements, each followed by a
// comparison of the whole address space (maps, VmFlags, map_count) between the
// kernel child and the engine. On the first disagreement the op list is shrunk to a
// small reproducer, printed in the tests/oracle/cases/ format.
//
// The op list of a seed is a function of the seed alone (GenerateOps): the generator
// sees no answer of the kernel or the engine, so every machine runs the same ops.
// Ops aim at the fixed test region (addresses "base+..") or at earlier non-fixed
// placements through the variables they bind ("$p3 = mmap NULL ..", then
// "munmap $p3+0x2000 0x1000"), resolved at run time. Placements are the same on every
// machine because the child plugs the top-down area above kPlugFloor (see
// child/oracle_child.cc); maps comparisons leave out the child's own VMAs.
//
// Environment (tests/oracle/README.md "Running"): VMSPACE_ORACLE_OPS (ops per seed, default 1500),
// VMSPACE_ORACLE_SEED (run only this seed), VMSPACE_ORACLE_SEEDS=N and
// VMSPACE_ORACLE_FIRST_SEED=F (seeds F..F+N-1; default seeds 1..3),
// VMSPACE_ORACLE_SHRINK=0 (report the first disagreement without shrinking),
// VMSPACE_ORACLE_DUMP=FILE|DIR (the op list up to a disagreement),
// VMSPACE_ORACLE_FAULT_COUNTS=1 (accesses also compare page-fault counts; 2: only
// reads and writes), VMSPACE_ORACLE_REPLAY=FILE and VMSPACE_ORACLE_PROFILE (Replay).
#include "oracle_session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace vmspace::oracle {
namespace {

constexpr uint64_t kRegionPages = 256;
constexpr uint64_t kFilePages = 32;  // the test file's size when it is created
constexpr uint64_t kRegionSize = kRegionPages * kPageSize;

std::string Hx(uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}

std::vector<std::string> Words(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t j = s.find(' ', i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

/// An address of a generated op: a symbol ("base", the region start, or a placement
/// variable such as "$p3") plus a byte offset.
struct Where {
  std::string sym;
  int64_t off = 0;
  Where Plus(int64_t d) const { return {sym, off + d}; }
  std::string Text() const {
    if (off == 0 && sym != "base") return sym;
    return sym + (off < 0 ? "-" : "+") + Hx(off < 0 ? static_cast<uint64_t>(-off) : static_cast<uint64_t>(off));
  }
};

/// Generates random ops in the case-file language from a seed alone.
class Generator {
 public:
  /// `fault_counts` 1: emit `fault ADDR r|w|x` (also comparing page-fault counts)
  /// instead of read/write/exec; 2: the same for reads and writes only. Only the
  /// spelling of the accesses changes, not the random choices.
  Generator(uint64_t seed, int fault_counts) : rng_(seed), counts_(fault_counts) {}

  /// The next op line: aimed at one of the live processes (drawn only once there are
  /// several), prefixed `@N ` unless it is the first process.
  std::string Next() {
    target_ = procs_.size() > 1 ? R(procs_.size()) : 0;
    const int handle = procs_[target_].handle;
    const std::string op = NextOp();
    return handle ? "@" + std::to_string(handle) + " " + op : op;
  }

 private:
  /// A process of the op list: its handle (`fork` numbers them 1, 2, ... as the session
  /// does) and the memfds and reopens its descriptor table holds, in order of creation.
  struct Process {
    int handle = 0;
    std::vector<std::string> memfds;
    std::vector<std::string> reopened;
  };
  static constexpr size_t kMaxProcesses = 4;

  std::string NextOp() {
    int k = Pick({22, 8, 12, 6, 14, 3, 12, 10, 5, 4, 6, 8, 12, 6, 6, 2, 2});
    switch (k) {
      case 16: return procs_.size() > 1 ? Exit() : Fill();
      case 15: return procs_.size() < kMaxProcesses ? Fork() : Fill();
      case 14: return HeapOp();
      case 13: return MemfdOp();
      case 12: return SyscallOp();
      case 11: return FileOp();
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

  // fork of the target process: the new one holds the same descriptors. exit of the
  // target (never the last process).
  std::string Fork() {
    Process child = procs_[target_];
    child.handle = next_handle_++;
    procs_.push_back(std::move(child));
    return "fork";
  }
  std::string Exit() {
    procs_.erase(procs_.begin() + static_cast<long>(target_));
    target_ = 0;  // Next() reads the handle of the erased entry no more
    return "exit";
  }

  struct Placement {
    Where at;      // the variable bound to the mmap's result
    uint64_t len;  // page-rounded length
  };

  // std::mt19937_64 and the modulo below are defined exactly by the standard, so the
  // sequence is the same with every compiler and library (uniform_int_distribution
  // is not). Every draw is a statement of its own (or sequenced by ?:, && or a
  // declarator): the order of the operands of + and of function arguments is up to
  // the compiler.
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
  Where AddrOf(uint64_t page) {
    uint64_t off = page * kPageSize;
    if (R(100) < 3) off += 1 + R(kPageSize - 1);  // unaligned address: EINVAL
    return Region(off);
  }
  static Where Region(uint64_t off) { return {"base", static_cast<int64_t>(off)}; }

  /// A non-fixed mmap: binds a new variable to its result. It becomes a target of
  /// later ops if it succeeds by construction (valid type, offset and flags; mmap
  /// ignores unknown prot bits such as 0x10).
  std::string Bind(const std::string& hint, uint64_t len, const std::string& prot,
                   const std::string& flags, const std::string& off = "") {
    Where v{"$p" + std::to_string(++vars_), 0};
    std::string op = v.sym + " = mmap " + hint + " " + Hx(len) + " " + prot + " " + flags + off;
    bool shared = flags.find("shared") != std::string::npos;
    bool growsdown = flags.find("growsdown") != std::string::npos;
    bool valid = flags.rfind("0x0", 0) != 0 && !(shared && growsdown) && off != " 0x10";
    if (valid) {
      placed_.push_back({v, (len + kPageSize - 1) & kPageMask});
      if (growsdown) growsdown_.push_back(v);
    }
    return op;
  }

  std::string MmapRegion() {
    auto [first, pages] = PageRange();
    int type = static_cast<int>(R(100));
    bool priv = type < 82;
    std::string flags = priv ? "private" : type < 96 ? "shared" : type < 98 ? "shared_validate" : "0x0";
    flags += ",anonymous";
    int fx = static_cast<int>(R(100));
    bool fixed = fx < 83;
    flags += fx < 60 ? ",fixed" : fx < 80 ? ",fixed_noreplace" : fx < 83 ? ",fixed,fixed_noreplace" : "";
    if (R(100) < 10) flags += ",noreserve";
    bool growsdown = R(100) < 5;
    if (growsdown) flags += ",growsdown";
    std::string prot = Prot(false);
    if (R(100) < 3) flags += ",populate";
    if (R(100) < 2) flags += ",stack";
    std::string off = R(100) < 3 ? " " + Hx(R(2) ? 0x1000 : 0x10) : "";
    Where a = AddrOf(first);
    uint64_t len = Len(pages);
    if (!fixed) return Bind(a.Text(), len, prot, flags, off);
    if (growsdown) growsdown_.push_back(a);
    return "mmap " + a.Text() + " " + Hx(len) + " " + prot + " " + flags + off;
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
    if (R(100) < 15) addr = AddrOf(R(kRegionPages)).Text();  // a hint into the region
    return Bind(addr, pages * kPageSize, Prot(false), flags);
  }
  std::string MunmapRegion() {
    auto [first, pages] = PageRange();
    uint64_t len = Len(pages);
    Where a = AddrOf(first);
    return "munmap " + a.Text() + " " + Hx(len);
  }
  std::string MunmapPlaced() {
    size_t i = R(placed_.size());
    auto [a, l] = placed_[i];
    uint64_t pages = l / kPageSize;
    if (R(100) < 50 || pages == 1 || placed_.size() > 16) {
      placed_.erase(placed_.begin() + static_cast<long>(i));
      return "munmap " + a.Text() + " " + Hx(l);
    }
    uint64_t first = R(pages), n = 1 + R(pages - first);
    return "munmap " + a.Plus(static_cast<int64_t>(first * kPageSize)).Text() + " " +
           Hx(n * kPageSize);
  }
  std::string MprotectRegion() {
    auto [first, pages] = PageRange();
    std::string prot = Prot(true);
    uint64_t len = Len(pages);
    Where a = AddrOf(first);
    return "mprotect " + a.Text() + " " + Hx(len) + " " + prot;
  }
  std::string MprotectPlaced() {
    auto [a, l] = placed_[R(placed_.size())];
    uint64_t pages = l / kPageSize;
    uint64_t first = R(pages), n = 1 + R(pages - first);
    return "mprotect " + a.Plus(static_cast<int64_t>(first * kPageSize)).Text() + " " +
           Hx(n * kPageSize) + " " + Prot(true);
  }
  Where AccessAddr(bool exec) {
    Where a;
    if (!placed_.empty() && R(100) < 20) {
      auto [pa, pl] = placed_[R(placed_.size())];
      a = pa.Plus(static_cast<int64_t>(R(pl / kPageSize) * kPageSize));
    } else {
      a = Region(R(kRegionPages) * kPageSize);
      if (R(100) < 2) a = Region(kRegionSize);  // the upper guard page
    }
    // exec probes stay near the page start
    return a.Plus(static_cast<int64_t>(exec ? R(64) : R(kPageSize)));
  }
  std::string Access(const char* kind, bool exec) { return AccessAt(kind, AccessAddr(exec)); }
  std::string AccessAt(const std::string& kind, const Where& a) {
    bool exec = kind == "exec";
    if (counts_ == 1 || (counts_ == 2 && !exec)) return "fault " + a.Text() + (exec ? " x" : " r");
    return kind + " " + a.Text();
  }
  std::string Write() { return WriteAt(AccessAddr(false)); }
  std::string WriteAt(const Where& a) {
    if (counts_) return "fault " + a.Text() + " w " + Hx(SafeByte());
    return "write " + a.Text() + " " + Hx(SafeByte());
  }

  // Ops aimed at the less common paths: accesses just below a GROWSDOWN mapping
  // (stack expansion and its guard rule), hints and MAP_FIXED mappings among the
  // top-down placements.
  std::string Special() {
    int k = static_cast<int>(R(3));
    if (k == 0 && !growsdown_.empty()) {
      Where g = growsdown_[R(growsdown_.size())];
      uint64_t pages_below = 1 + R(4);
      uint64_t bytes_below = R(2) ? R(kPageSize) : 0;
      int64_t below = static_cast<int64_t>(pages_below * kPageSize + bytes_below);
      Where a = g.Plus(-below);
      return R(2) ? WriteAt(a) : AccessAt("read", a);
    }
    if (placed_.empty()) return MmapNull();
    auto [pa, pl] = placed_[R(placed_.size())];
    uint64_t pages = 1 + R(8);
    uint64_t up = R(2) ? R(pl / kPageSize) * kPageSize : pl;
    int64_t down = R(2) ? static_cast<int64_t>(pages * kPageSize) : 0;
    Where a = pa.Plus(static_cast<int64_t>(up) - down);
    std::string flags = R(100) < 85 ? "private,anonymous" : "shared,anonymous";
    if (R(100) < 20 && flags[0] == 'p') flags += ",growsdown";
    std::string prot = Prot(false);
    if (k == 1) return Bind(a.Text(), pages * kPageSize, prot, flags);
    flags += R(2) ? ",fixed" : ",fixed_noreplace";
    if (flags.find("growsdown") != std::string::npos) growsdown_.push_back(a);
    return "mmap " + a.Text() + " " + Hx(pages * kPageSize) + " " + prot + " " + flags;
  }
  // Ops on the test file f0 (GenerateOps opens it first): fixed mappings of it in the
  // region (private or shared, at offsets up to 8 pages past its first size, so some
  // extend beyond EOF), pwrite, pread, ftruncate (shrink and grow) and msync.
  std::string FileOp() {
    int k = Pick({10, 3, 2, 3, 2});
    if (k == 0) {
      auto [first, pages] = PageRange();
      std::string flags = R(100) < 60 ? "private" : "shared";
      flags += R(100) < 85 ? ",fixed" : ",fixed_noreplace";
      std::string prot = Prot(false);
      const uint64_t off = R(kFilePages + 8) * kPageSize;
      Where a = AddrOf(first);
      uint64_t len = Len(pages);
      return "mmap " + a.Text() + " " + Hx(len) + " " + prot + " " + flags + " " + Hx(off) + " f0";
    }
    if (k == 1 || k == 2) {
      uint64_t off = R(kFilePages + 8) * kPageSize;
      off += R(kPageSize);
      uint64_t len = 1 + R(k == 1 ? 64 : 2 * kPageSize);
      if (k == 2) return "pread f0 " + Hx(off) + " " + Hx(len);
      return "pwrite f0 " + Hx(off) + " " + Hx(len) + " " + Hx(SafeByte());
    }
    if (k == 3) {
      uint64_t size = R(kFilePages + 8) * kPageSize;
      if (R(4) == 0) size += R(kPageSize);
      return "ftruncate f0 " + Hx(size);
    }
    auto [first, pages] = PageRange();
    return "msync " + Region(first * kPageSize).Text() + " " + Hx(pages * kPageSize) +
           (R(2) ? " sync" : " async");
  }
  // The rest of a process's memory calls on the region: mremap (in place, MAYMOVE,
  // FIXED into the region, DONTUNMAP), madvise with every advice that behaves the same
  // on every machine (not COLLAPSE, which depends on THP, nor HWPOISON/SOFT_OFFLINE,
  // which would poison a page where CONFIG_MEMORY_FAILURE is on), mincore, mlock2 /
  // munlock, and (rarely: it is for good) mseal.
  std::string SyscallOp() {
    auto [first, pages] = PageRange();
    Where a = AddrOf(first);
    uint64_t len = Len(pages);
    return SyscallOpAt(a, len);
  }
  // SyscallOp's calls on [a, a + len).
  std::string SyscallOpAt(const Where& a, uint64_t len) {
    int k = Pick({6, 8, 3, 4, 1});
    if (k == 0) {
      const uint64_t new_len = Len(1 + R(12));
      int f = Pick({4, 3, 4, 2, 1});
      if (f == 0) return "mremap " + a.Text() + " " + Hx(len) + " " + Hx(new_len) + " 0";
      if (f == 1) return "mremap " + a.Text() + " " + Hx(len) + " " + Hx(new_len) + " maymove";
      Where to = AddrOf(R(kRegionPages));
      if (f == 2) return "mremap " + a.Text() + " " + Hx(len) + " " + Hx(new_len) + " maymove|fixed " + to.Text();
      if (f == 3) return "mremap " + a.Text() + " " + Hx(len) + " " + Hx(len) + " maymove|dontunmap|fixed " + to.Text();
      return "mremap " + a.Text() + " " + Hx(len) + " " + Hx(new_len) + " " + Hx(R(16));  // odd flags
    }
    if (k == 1) {
      static const char* kAdvice[] = {"normal", "random", "sequential", "willneed", "dontneed", "free", "remove",
                                      "dontfork", "dofork", "hugepage", "nohugepage", "dontdump", "dodump",
                                      "wipeonfork", "keeponfork", "cold", "pageout", "populate_read",
                                      "populate_write", "guard_install", "guard_remove", "dontneed_locked",
                                      "dontneed", "free", "guard_install", "99"};
      return "madvise " + a.Text() + " " + Hx(len) + " " + kAdvice[R(sizeof kAdvice / sizeof *kAdvice)];
    }
    if (k == 2) return "mincore " + a.Text() + " " + Hx(len);
    if (k == 3) {
      if (R(2)) return "munlock " + a.Text() + " " + Hx(len);
      return "mlock " + a.Text() + " " + Hx(len) + (R(3) == 0 ? " onfault" : "");
    }
    return "mseal " + a.Text() + " " + Hx(len);
  }
  // The heap: brk(2) moving the break within 64 pages above the child's break
  // (`brkbase`, never below it: the child's TLS lies under it; GenerateOps removes the
  // fence above it first), brk queries (0 and below start_brk), and the other calls on
  // pages of the brk area (accesses, mprotect, munmap, and SyscallOpAt's mremap out of
  // it, madvise, mincore, mlock and mseal), so brk meets split, locked, sealed, moved
  // and unmapped heap VMAs.
  std::string HeapOp() {
    constexpr uint64_t kHeapPages = 64;
    int k = Pick({8, 1, 3, 3, 1, 1, 4});
    if (k == 0) {
      uint64_t off = R(kHeapPages + 1) * kPageSize;
      if (R(4) == 0) off += R(kPageSize);  // an unaligned break is returned as given
      return "brk " + Where{"brkbase", static_cast<int64_t>(off)}.Text();
    }
    if (k == 1) return R(2) ? "brk 0" : "brk brkstart-0x1000";  // queries
    uint64_t pages = 1 + R(8);
    uint64_t first = R(kHeapPages - pages + 1);
    Where a{"brkbase", static_cast<int64_t>(first * kPageSize)};
    if (k == 2) return AccessAt("read", a.Plus(static_cast<int64_t>(R(kPageSize))));
    if (k == 3) return WriteAt(a.Plus(static_cast<int64_t>(R(kPageSize))));
    uint64_t len = Len(pages);
    if (k == 4) return "mprotect " + a.Text() + " " + Hx(len) + " " + Prot(true);
    if (k == 5) return "munmap " + a.Text() + " " + Hx(len);
    return SyscallOpAt(a, len);
  }
  // Sealable memfds (mm/memfd.c): the current one (the first MemfdOp creates m1; now
  // and then a new one replaces it, seals being for good) is mapped into the region shared or
  // private, written, read and truncated, and gets seals (F_ADD_SEALS of write,
  // future_write, shrink, grow, exec, rarely seal) after which the writes, truncates and
  // writable shared mmaps they forbid answer EPERM (or F_ADD_SEALS EBUSY). Memfds are
  // made MFD_NOEXEC_SEAL or MFD_ALLOW_SEALING (with vm.memfd_noexec 0 an executable one,
  // so F_SEAL_EXEC adds the write seals), rarely without sealing; a read-only reopen and
  // F_ADD_SEALS on the host file f0 (EINVAL) now and then. A process uses the memfds it
  // made or inherited (fork copies the descriptor table).
  std::string MemfdOp() {
    int k = Pick({10, 3, 2, 2, 4, 1, 1, 1, 1});
    std::vector<std::string>& memfds = procs_[target_].memfds;
    std::vector<std::string>& reopened = procs_[target_].reopened;
    if (k == 8 || memfds.empty()) {
      std::string label = "m" + std::to_string(++memfd_labels_);
      memfds.push_back(label);
      int f = static_cast<int>(R(10));
      return "memfd " + label + " " + Hx(kFilePages * kPageSize) +
             (f < 5 ? " noexec_seal" : f < 9 ? " sealing" : "");
    }
    // The current memfd mostly, an earlier one or a read-only reopen sometimes.
    std::string m = memfds.back();
    if (R(4) == 0) m = memfds[R(memfds.size())];
    else if (!reopened.empty() && R(8) == 0) m = reopened[R(reopened.size())];
    if (k == 0) {
      auto [first, pages] = PageRange();
      std::string flags = R(100) < 75 ? "shared" : "private";
      flags += R(100) < 90 ? ",fixed" : ",fixed_noreplace";
      std::string prot = Prot(false);
      const uint64_t off = R(kFilePages + 8) * kPageSize;
      Where a = AddrOf(first);
      uint64_t len = Len(pages);
      return "mmap " + a.Text() + " " + Hx(len) + " " + prot + " " + flags + " " + Hx(off) + " " + m;
    }
    if (k == 1 || k == 2) {
      uint64_t off = R(kFilePages + 8) * kPageSize;
      off += R(kPageSize);
      uint64_t len = 1 + R(k == 1 ? 64 : 2 * kPageSize);
      if (k == 2) return "pread " + m + " " + Hx(off) + " " + Hx(len);
      return "pwrite " + m + " " + Hx(off) + " " + Hx(len) + " " + Hx(SafeByte());
    }
    if (k == 3) {
      uint64_t size = R(kFilePages + 8) * kPageSize;
      if (R(4) == 0) size += R(kPageSize);
      return "ftruncate " + m + " " + Hx(size);
    }
    if (k == 4) {
      static const char* kSeals[] = {"write", "future_write", "shrink", "grow", "exec", "shrink,grow",
                                     "write,shrink", "future_write,grow", "0x40", "seal"};
      int n = static_cast<int>(R(sizeof kSeals / sizeof *kSeals));
      if (n == 9 && R(3)) n = static_cast<int>(R(4));  // F_SEAL_SEAL is rarer
      return "seal " + m + " " + kSeals[n];
    }
    if (k == 5) return "seals " + m;
    if (k == 6) return R(4) ? "seal " + m + " write" : "seal f0 shrink";
    reopened.push_back(m + "r" + std::to_string(++reopen_labels_));
    return "reopen " + reopened.back() + " " + m + " ro";
  }
  std::string Fill() {
    uint64_t first = R(kRegionPages), pages = 1 + R(4);
    if (first + pages > kRegionPages) pages = kRegionPages - first;
    return "fill " + Region(first * kPageSize).Text() + " " + Hx(pages * kPageSize) + " " +
           Hx(SafeByte());
  }

  std::mt19937_64 rng_;
  int counts_;
  uint64_t vars_ = 0;              // placement variables bound so far
  std::vector<Placement> placed_;  // targets: non-fixed placements
  std::vector<Where> growsdown_;   // starts of GROWSDOWN mappings made so far
  std::vector<Process> procs_ = {Process{}};  // the live processes, the first one first
  size_t target_ = 0;                         // the index in procs_ of the op's process
  int next_handle_ = 1;
  int memfd_labels_ = 0;   // memfds made so far (m1, m2, ...)
  int reopen_labels_ = 0;  // their read-only reopens (m1r1, ...)
};

/// The first `n` ops of `seed` (a function of its arguments alone).
std::vector<std::string> GenerateOps(uint64_t seed, uint64_t n, int fault_counts) {
  Generator gen(seed, fault_counts);
  std::vector<std::string> ops;
  ops.reserve(n);
  if (n) ops.push_back("file f0 " + Hx(kFilePages * kPageSize));  // the target of FileOp
  if (ops.size() < n) ops.push_back("munmap brkbase 0x1000");      // the fence above the heap
  while (ops.size() < n) ops.push_back(gen.Next());
  return ops;
}

uint64_t EnvU64(const char* name, uint64_t def) {
  const char* e = getenv(name);
  return e && *e ? strtoull(e, nullptr, 0) : def;
}

SpaceOptions ProfileOptions(const std::string& profile) {
  SpaceOptions o;
  std::string err;
  if (!LockingProfile::Parse(profile, &o.profile, &err)) ADD_FAILURE() << err;
  return o;
}

/// The engine's Validate() is slow (it scans the whole page table), so it runs
/// every kValidateEvery ops and after the last one.
constexpr size_t kValidateEvery = 100;
bool ValidateDue(size_t i, size_t n) { return (i + 1) % kValidateEvery == 0 || i + 1 == n; }
/// RunSeed compares the maps lines after every op but the VmFlags (the kernel's
/// smaps, ~20 times longer than maps) only every kFlagsEvery ops and after the last;
/// a disagreement found so is then pinned to its op by a replay that compares
/// everything after every op.
constexpr size_t kFlagsEvery = 8;

/// FirstDisagreement's answer for a list with a line that cannot run (e.g. it uses
/// a variable whose mmap a shrinking step removed).
constexpr int kScriptError = -2;

/// `op` without its process prefix (`@N `).
std::string Unaddressed(const std::string& op) {
  if (op.empty() || op[0] != '@') return op;
  const size_t sp = op.find(' ');
  return sp == std::string::npos ? "" : op.substr(sp + 1);
}

/// The op comparing every VMA of process `process`: "maps all" with its prefix.
std::string MapsAllOf(int process) {
  return process ? "@" + std::to_string(process) + " maps all" : "maps all";
}

/// Whether process `process` of `s` is live.
bool IsLive(const OracleSession& s, int process) {
  const std::vector<int> live = s.processes();
  return std::find(live.begin(), live.end(), process) != live.end();
}

/// Runs `ops` in a fresh session, comparing the op results and the whole address
/// space after every op; returns the index of the first disagreement, -1 if none,
/// or kScriptError. With `maps_each_op` false the address space is compared only
/// after the last op (the shrinker's fast mode); op results are always compared.
int FirstDisagreement(const std::vector<std::string>& ops, const SpaceOptions& opts,
                      std::string* why, bool maps_each_op = true) {
  OracleSession s(kRegionSize, opts);
  if (!s.setup_error().empty()) {
    if (why) *why = "setup: " + s.setup_error();
    return 0;
  }
  for (size_t i = 0; i < ops.size(); i++) {
    StepResult r = s.Run(ops[i]);
    if (r.script_error) {
      if (why) *why = "op: " + ops[i] + "\n" + r.kernel + "\n";
      return kScriptError;
    }
    bool last = i + 1 == ops.size();
    // The maps of the op's process (an op changes no other process's VMAs).
    StepResult m = (maps_each_op || last) && IsLive(s, r.process) ? s.Run(MapsAllOf(r.process)) : StepResult{};
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

bool IsAccess(const std::string& addressed) {
  const std::string op = Unaddressed(addressed);
  return op.rfind("read", 0) == 0 || op.rfind("write", 0) == 0 || op.rfind("exec", 0) == 0 ||
         op.rfind("fault", 0) == 0;
}

/// Whether `op` names a file label (file, memfd, reopen, seal(s), pread, pwrite,
/// ftruncate, fstat), or its last word does (an mmap of a file).
bool IsFileOp(const std::string& op) {
  static const std::set<std::string> kFileOps = {"file",  "memfd", "reopen", "seal",  "seals",
                                                 "pread", "pwrite", "ftruncate", "fstat"};
  auto w = Words(Unaddressed(op));
  return !w.empty() && kFileOps.count(w[0]);
}

/// Ops that change state beyond an address range of their own (files, seals, the
/// break, processes): the shrinker's window slice keeps them all.
bool IsStateOp(const std::string& op) {
  auto w = Words(Unaddressed(op));
  return IsFileOp(op) || (!w.empty() && (w[0] == "brk" || w[0] == "mlockall" || w[0] == "munlockall" ||
                                         w[0] == "fork" || w[0] == "exit"));
}

/// "p3" for "$p3 = mmap ...", else "".
std::string BoundVar(const std::string& op) {
  auto w = Words(Unaddressed(op));
  return w.size() > 2 && w[0][0] == '$' && w[1] == "=" ? w[0].substr(1) : "";
}

/// The variables an op uses (not the one it binds).
std::set<std::string> UsedVars(const std::string& op) {
  std::set<std::string> out;
  size_t from = BoundVar(op).empty() ? 0 : op.find('=');
  for (size_t i = op.find('$', from); i != std::string::npos; i = op.find('$', i + 1)) {
    size_t j = i + 1;
    while (j < op.size() && (isalnum(static_cast<unsigned char>(op[j])) || op[j] == '_')) j++;
    out.insert(op.substr(i + 1, j - i - 1));
  }
  return out;
}

/// The page range an op acts on, with the variables `s` has bound: an mmap that
/// binds a variable covers what it got; [0, 0) for ops without a range (and for
/// failed placements).
std::pair<uint64_t, uint64_t> OpRange(const std::string& addressed, const OracleSession& s) {
  const std::string op = Unaddressed(addressed);
  std::string var = BoundVar(op);
  auto w = Words(var.empty() ? op : op.substr(op.find('=') + 1));
  if (w.size() < 2 || w[1] == "all") return {0, 0};
  std::string err;
  uint64_t a = var.empty() ? (w[1] == "NULL" ? 0 : s.Eval(w[1], &err)) : s.Eval("$" + var, &err);
  if (!err.empty() || (!var.empty() && a == 0) || (var.empty() && w[1] == "NULL")) return {0, 0};
  uint64_t len = 1;
  if ((w[0] == "mmap" || w[0] == "munmap" || w[0] == "mprotect" || w[0] == "fill") &&
      w.size() > 2)
    len = s.Eval(w[2], &err);
  return {a & kPageMask, ((a + len + kPageSize - 1) & kPageMask)};
}

/// Replays `ops` and returns the address window where the last op's answers differ
/// (the differing maps lines, or the op's own range), widened by a page on each
/// side; `ranges` receives each op's OpRange.
std::pair<uint64_t, uint64_t> DisagreementWindow(const std::vector<std::string>& ops,
                                                 const SpaceOptions& opts,
                                                 std::vector<std::pair<uint64_t, uint64_t>>* ranges) {
  OracleSession s(kRegionSize, opts);
  StepResult r, m;
  for (const auto& op : ops) r = s.Run(op);
  m = IsLive(s, r.process) ? s.Run(MapsAllOf(r.process)) : s.Run("maps all");
  ranges->clear();
  for (const auto& op : ops) ranges->push_back(OpRange(op, s));
  uint64_t lo = ~0ull, hi = 0;
  auto widen = [&](uint64_t a, uint64_t b) {
    lo = std::min(lo, a > kPageSize ? a - kPageSize : 0);
    hi = std::max(hi, b + kPageSize);
  };
  if (!r.match && !ranges->empty()) {
    auto [a, b] = ranges->back();
    if (b > a) widen(a, b);
  }
  if (!m.match) {
    auto lines = [](const std::string& t) {
      std::set<std::string> out;
      for (size_t i = 0; i < t.size();) {
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
        size_t sp = l.find(' ');
        size_t dash = l.find('-', l.rfind("base-", 0) == 0 ? 5 : 1);
        if (dash == std::string::npos || sp == std::string::npos || dash > sp) continue;
        std::string err;
        widen(s.Eval(l.substr(0, dash), &err), s.Eval(l.substr(dash + 1, sp - dash - 1), &err));
      }
    }
  }
  return {lo, hi};
}

/// Shrinks a disagreeing op list (the last op disagrees first): first keeps only the
/// ops acting on the address window of the disagreement (and the placements whose
/// variables they use), then removes chunks of ops greedily as long as the last op
/// still is the first to disagree. Bounded in time.
std::vector<std::string> Shrink(std::vector<std::string> ops, const SpaceOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  auto out_of_time = [&] {
    return std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60);
  };
  int f = FirstDisagreement(ops, opts, nullptr);
  if (f < 0) return ops;
  ops.resize(static_cast<size_t>(f) + 1);
  auto still_fails = [&](const std::vector<std::string>& cand) {
    return FirstDisagreement(cand, opts, nullptr, false) == static_cast<int>(cand.size()) - 1;
  };
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  auto [lo, hi] = DisagreementWindow(ops, opts, &ranges);
  if (hi > lo) {
    // The window grows to the whole range of every mapping op that overlaps it;
    // accesses up to 16 MiB below it are kept (they may grow a GROWSDOWN VMA).
    for (bool grew = true; grew;) {
      grew = false;
      for (size_t i = 0; i < ops.size(); i++) {
        auto [a, b] = ranges[i];
        if (b <= a || IsAccess(ops[i]) || a >= hi || b <= lo) continue;
        if (a < lo || b > hi) {
          lo = std::min(lo, a);
          hi = std::max(hi, b);
          grew = true;
        }
      }
    }
    uint64_t access_lo = lo > (16ull << 20) ? lo - (16ull << 20) : 0;
    std::vector<bool> keep(ops.size());
    std::map<std::string, size_t> def;
    for (size_t i = 0; i < ops.size(); i++) {
      auto [a, b] = ranges[i];
      uint64_t from = IsAccess(ops[i]) ? access_lo : lo;
      keep[i] = i + 1 == ops.size() || (b > a && a < hi && b > from) || IsStateOp(ops[i]);
      if (std::string v = BoundVar(ops[i]); !v.empty()) def[v] = i;
    }
    for (bool grew = true; grew;) {  // the placements whose variables kept ops use
      grew = false;
      for (size_t i = 0; i < ops.size(); i++) {
        if (!keep[i]) continue;
        for (const auto& v : UsedVars(ops[i])) {
          auto it = def.find(v);
          if (it != def.end() && !keep[it->second]) keep[it->second] = grew = true;
        }
      }
    }
    std::vector<std::string> sliced;
    for (size_t i = 0; i < ops.size(); i++)
      if (keep[i]) sliced.push_back(ops[i]);
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
  // The candidates compared the maps after their last op only: if the shrunk list
  // disagrees earlier, that earlier op is the reproducer's end; shrink again.
  if (int g = FirstDisagreement(ops, opts, nullptr); g >= 0 && g + 1 < static_cast<int>(ops.size())) {
    ops.resize(static_cast<size_t>(g) + 1);
    return Shrink(std::move(ops), opts);
  }
  return ops;
}

/// Shrinks `ops` and formats the reproducer (case-file format) and its disagreement.
std::string Reproducer(const std::vector<std::string>& ops, const SpaceOptions& opts,
                       const std::string& origin) {
  std::vector<std::string> small = Shrink(ops, opts);
  std::string why;
  FirstDisagreement(small, opts, &why);
  std::string repro = "# reproducer from " + origin + ", profile " + opts.profile.name +
                      " (shrunk from " + std::to_string(ops.size()) + " ops)\nregion " +
                      Hx(kRegionSize) + "\n";
  for (const auto& o : small) repro += o + "\n";
  repro += "maps all\n";
  return "\nMinimal reproducer (tests/oracle/cases/ format):\n" + repro +
         "\nIts disagreement:\n" + why;
}

/// Writes `ops` as a case file to VMSPACE_ORACLE_DUMP (a file, or a directory that
/// gets one file per profile and seed).
void Dump(const std::vector<std::string>& ops, const std::string& profile, uint64_t seed) {
  const char* dump = getenv("VMSPACE_ORACLE_DUMP");
  if (!dump || !*dump) return;
  std::string path = dump;
  if (std::filesystem::is_directory(path))
    path += "/" + profile + "-seed" + std::to_string(seed) + ".case";
  if (FILE* f = fopen(path.c_str(), "w")) {
    fprintf(f, "# OracleRandom seed %" PRIu64 ", profile %s\nregion %s\n", seed,
            profile.c_str(), Hx(kRegionSize).c_str());
    for (const auto& o : ops) fprintf(f, "%s\n", o.c_str());
    fclose(f);
  }
}

void RunSeed(const std::string& profile, uint64_t seed, uint64_t nops) {
  const int counts = static_cast<int>(EnvU64("VMSPACE_ORACLE_FAULT_COUNTS", 0));
  const std::vector<std::string> ops = GenerateOps(seed, nops, counts);
  const SpaceOptions opts = ProfileOptions(profile);
  OracleSession s(kRegionSize, opts);
  ASSERT_EQ(s.setup_error(), "");
  if (!s.kernel_zero_page())
    std::printf("note: this kernel allocates a page on anonymous read faults (no zero page); "
                "the engine models it (SpaceOptions::zero_page = false)\n");
  if (s.kernel_thp_align() & 2)
    std::printf("note: this kernel THP-aligns anonymous mmaps of any length >= 2 MiB "
                "(Linux 6.7-6.11); the engine models the 6.12+ rule (multiples of 2 MiB)\n");
  for (size_t i = 0; i < ops.size(); i++) {
    StepResult r = s.Run(ops[i]);
    bool last = i + 1 == ops.size();
    const bool flags = (i + 1) % kFlagsEvery == 0 || last;
    // The maps of the op's process (after an exit: none); after the last op, of all.
    StepResult m;
    if (IsLive(s, r.process)) m = s.Maps(0, ~0ull, flags, r.process);
    for (int p : last ? s.processes() : std::vector<int>{})
      if (m.match) m = s.Maps(0, ~0ull, true, p);
    std::string v = ValidateDue(i, ops.size()) ? s.Validate() : "";
    if (r.match && m.match && v.empty()) continue;

    // Pin the disagreement to its op (the VmFlags were compared only now).
    std::vector<std::string> upto(ops.begin(), ops.begin() + static_cast<long>(i) + 1);
    std::string why;
    int f = FirstDisagreement(upto, opts, &why);
    ASSERT_GE(f, 0) << "a disagreement at op " << i + 1 << " (" << ops[i]
                    << ") did not come back in a replay: " << why;
    upto.resize(static_cast<size_t>(f) + 1);
    Dump(upto, profile, seed);
    std::string first = "seed " + std::to_string(seed) + ", profile " + profile + ", op " +
                        std::to_string(f + 1) + ": " + why;
    if (EnvU64("VMSPACE_ORACLE_SHRINK", 1) == 0) FAIL() << "engine and kernel disagree.\n" << first;
    FAIL() << "engine and kernel disagree.\nFirst disagreement: " << first
           << Reproducer(upto, opts, "OracleRandom seed " + std::to_string(seed));
  }
  std::printf("seed %" PRIu64 ", %s: %" PRIu64 " ops, kernel and engine agreed on all\n", seed,
              profile.c_str(), nops);
}

std::vector<uint64_t> Seeds() {
  if (uint64_t only = EnvU64("VMSPACE_ORACLE_SEED", 0)) return {only};
  uint64_t first = EnvU64("VMSPACE_ORACLE_FIRST_SEED", 1), n = EnvU64("VMSPACE_ORACLE_SEEDS", 3);
  std::vector<uint64_t> out;
  for (uint64_t i = 0; i < n; i++) out.push_back(first + i);
  return out;
}

uint64_t Ops() { return EnvU64("VMSPACE_ORACLE_OPS", 1500); }

std::string SeedName(const testing::TestParamInfo<uint64_t>& i) { return std::to_string(i.param); }

// The default profile (maple tree, per-VMA locks) and the rbtree one, as the cases.
class OracleRandom : public testing::TestWithParam<uint64_t> {};
TEST_P(OracleRandom, Ops) { RunSeed("linux-6.6", GetParam(), Ops()); }
TEST_P(OracleRandom, OpsLinux60) { RunSeed("linux-6.0", GetParam(), Ops()); }
INSTANTIATE_TEST_SUITE_P(Seed, OracleRandom, testing::ValuesIn(Seeds()), SeedName);

// FNV-1a over the op lines: the fingerprint of a seed's op list.
uint64_t Fingerprint(const std::vector<std::string>& ops) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& op : ops)
    for (unsigned char c : op + "\n") h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The op list of a seed is a fixed list, the same on every machine: generated without
// the kernel or the engine, and every address in it is relative to the test region
// or to a placement variable. A change of the generator changes these fingerprints
// (update them then; the seeds' old reproducers no longer apply).
TEST(OracleRandom, OpListDependsOnlyOnTheSeed) {
  const uint64_t kExpected[] = {0xbd8c54f73890669aull, 0xfe53027e9e8a9cf7ull, 0xaa05fbf3f9012774ull};
  for (uint64_t seed = 1; seed <= 3; seed++) {
    std::vector<std::string> ops = GenerateOps(seed, 1500, 0);
    EXPECT_EQ(Fingerprint(ops), kExpected[seed - 1])
        << "seed " << seed << " first ops: " << ops[0] << " | " << ops[1] << " | " << ops[2];
    EXPECT_EQ(ops, GenerateOps(seed, 1500, 0));
    size_t bindings = 0, uses = 0, forks = 0, exits = 0, addressed = 0;
    for (const auto& op : ops) {
      auto w = Words(Unaddressed(op));
      if (op[0] == '@') addressed++;
      // fork and exit take no argument; the first process is addressed without `@`.
      if (w.size() == 1 && (w[0] == "fork" || w[0] == "exit")) {
        (w[0] == "fork" ? forks : exits)++;
        continue;
      }
      EXPECT_NE(op.rfind("@0 ", 0), 0u) << op;
      if (!BoundVar(op).empty()) {
        bindings++;
        w.erase(w.begin(), w.begin() + 2);
      }
      uses += UsedVars(op).size();
      // The address argument: region- or heap-relative, a variable, or NULL (file ops
      // name a file label instead: f0, or a memfd m1, m2.. and their reopens).
      ASSERT_GE(w.size(), 2u) << op;
      if (IsFileOp(op)) {
        EXPECT_TRUE(w[1] == "f0" || w[1][0] == 'm') << op;
        continue;
      }
      const std::string& a = w[1];
      EXPECT_TRUE(a.rfind("base+", 0) == 0 || a.rfind("base-", 0) == 0 || a[0] == '$' ||
                  a == "NULL" || a.rfind("brkbase", 0) == 0 || (w[0] == "brk" && (a == "0" || a == "brkstart-0x1000")))
          << op;
    }
    EXPECT_GT(bindings, 50u) << "seed " << seed;  // placements and their uses are generated
    EXPECT_GT(uses, 50u) << "seed " << seed;
    EXPECT_GT(forks, 5u) << "seed " << seed;  // processes come and go
    EXPECT_GT(exits, 2u) << "seed " << seed;
    EXPECT_GT(addressed, 100u) << "seed " << seed;
  }
  // Fault-count mode spells the accesses differently, with the same choices.
  std::vector<std::string> plain = GenerateOps(1, 1500, 0), counted = GenerateOps(1, 1500, 1);
  ASSERT_EQ(plain.size(), counted.size());
  for (size_t i = 0; i < plain.size(); i++) {
    if (!IsAccess(plain[i])) EXPECT_EQ(plain[i], counted[i]);
    else EXPECT_EQ(Unaddressed(counted[i]).rfind("fault ", 0), 0u) << counted[i];
  }
}

// VMSPACE_ORACLE_REPLAY=FILE: replays an op list written by VMSPACE_ORACLE_DUMP (or
// any case file of the random test's region size) with VMSPACE_ORACLE_PROFILE
// (default linux-6.6) and shrinks it if it disagrees.
TEST(OracleRandom, Replay) {
  const char* path = getenv("VMSPACE_ORACLE_REPLAY");
  if (!path || !*path) GTEST_SKIP() << "set VMSPACE_ORACLE_REPLAY=FILE to replay an op list";
  const char* profile = getenv("VMSPACE_ORACLE_PROFILE");
  const SpaceOptions opts = ProfileOptions(profile && *profile ? profile : "linux-6.6");
  CaseFile cf;
  std::string err;
  ASSERT_TRUE(LoadCase(path, &cf, &err)) << err;
  ASSERT_EQ(cf.region_size, kRegionSize) << "the random test's region size is required";
  std::vector<std::string> ops;
  for (const auto& [line, op] : cf.ops)
    if (op != "maps all") ops.push_back(op);
  std::string why;
  int f = FirstDisagreement(ops, opts, &why);
  if (f == -1) return;
  ASSERT_NE(f, kScriptError) << why;
  ops.resize(static_cast<size_t>(f) + 1);
  FAIL() << "disagreement at op " << f + 1 << ": " << why << Reproducer(ops, opts, path);
}

}  // namespace
}  // namespace vmspace::oracle
