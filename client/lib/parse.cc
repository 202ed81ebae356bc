// SPDX-License-Identifier: Apache-2.0
#include "lib/parse.h"

#include <absl/time/time.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef MAP_DROPPABLE
#define MAP_DROPPABLE 0x08
#endif
#ifndef MAP_UNINITIALIZED
#define MAP_UNINITIALIZED 0x4000000
#endif

namespace vmspace::client {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits on ',' and '|', trimming each piece; empty pieces are kept (and rejected by callers).
std::vector<std::string_view> SplitNames(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == ',' || s[i] == '|') {
      out.push_back(Trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  return out;
}

bool LooksNumeric(std::string_view s) {
  return !s.empty() && std::isdigit(static_cast<unsigned char>(s.front()));
}

struct NamedBit {
  const char* name;
  int value;
};

constexpr std::array<NamedBit, 19> kMapFlagNames = {{
    {"shared", MAP_SHARED},
    {"private", MAP_PRIVATE},
    {"shared_validate", MAP_SHARED_VALIDATE},
    {"droppable", MAP_DROPPABLE},
    {"fixed", MAP_FIXED},
    {"anonymous", MAP_ANONYMOUS},
    {"32bit", MAP_32BIT},
    {"growsdown", MAP_GROWSDOWN},
    {"denywrite", MAP_DENYWRITE},
    {"executable", MAP_EXECUTABLE},
    {"locked", MAP_LOCKED},
    {"noreserve", MAP_NORESERVE},
    {"populate", MAP_POPULATE},
    {"nonblock", MAP_NONBLOCK},
    {"stack", MAP_STACK},
    {"hugetlb", MAP_HUGETLB},
    {"sync", MAP_SYNC},
    {"fixed_noreplace", MAP_FIXED_NOREPLACE},
    {"uninitialized", MAP_UNINITIALIZED},
}};

}  // namespace

std::optional<uint64_t> ParseU64(std::string_view s) {
  s = Trim(s);
  if (s.empty()) return std::nullopt;
  unsigned base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  } else if (s.size() > 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'O')) {
    base = 8;
    s.remove_prefix(2);
  } else if (s.size() > 2 && s[0] == '0' && (s[1] == 'b' || s[1] == 'B')) {
    base = 2;
    s.remove_prefix(2);
  }
  unsigned shift = 0;
  if (base != 16 && !s.empty()) {
    switch (std::toupper(static_cast<unsigned char>(s.back()))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: break;
    }
    if (shift != 0) s.remove_suffix(1);
  }
  uint64_t v = 0;
  bool any = false;
  for (char c : s) {
    if (c == '_' || c == '\'') continue;
    unsigned d;
    if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') d = static_cast<unsigned>(c - 'A' + 10);
    else return std::nullopt;
    if (d >= base) return std::nullopt;
    if (v > (UINT64_MAX - d) / base) return std::nullopt;
    v = v * base + d;
    any = true;
  }
  if (!any) return std::nullopt;
  if (shift != 0) {
    if (v > (UINT64_MAX >> shift)) return std::nullopt;
    v <<= shift;
  }
  return v;
}

std::optional<int> ParseProt(std::string_view raw) {
  std::string_view s = Trim(raw);
  if (s.empty()) return std::nullopt;
  if (LooksNumeric(s)) {
    auto v = ParseU64(s);
    if (!v || *v > 0x7fffffff) return std::nullopt;
    return static_cast<int>(*v);
  }
  std::string l = Lower(s);
  if (l == "none" || l == "prot_none") return PROT_NONE;
  // Letter form: each of r, w, x at most once, '-' as a placeholder, optional trailing
  // 'p'/'s' as in the maps perms column ("rw-p").
  if (l.find_first_not_of("rwx-ps") == std::string::npos && l.size() <= 4) {
    int prot = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      char c = l[i];
      int bit = c == 'r' ? PROT_READ : c == 'w' ? PROT_WRITE : c == 'x' ? PROT_EXEC : 0;
      if ((c == 'p' || c == 's') && i + 1 != l.size()) return std::nullopt;
      if (bit != 0) {
        if (prot & bit) return std::nullopt;
        prot |= bit;
      }
    }
    if (l.find_first_of("rwx-") == std::string::npos) return std::nullopt;
    return prot;
  }
  int prot = 0;
  for (std::string_view piece : SplitNames(l)) {
    std::string name(piece);
    if (name.rfind("prot_", 0) == 0) name = name.substr(5);
    if (name == "read" || name == "r") prot |= PROT_READ;
    else if (name == "write" || name == "w") prot |= PROT_WRITE;
    else if (name == "exec" || name == "x") prot |= PROT_EXEC;
    else if (name == "none") {}
    else if (name == "growsdown") prot |= PROT_GROWSDOWN;
    else if (name == "growsup") prot |= PROT_GROWSUP;
    else if (LooksNumeric(name)) {
      auto v = ParseU64(name);
      if (!v || *v > 0x7fffffff) return std::nullopt;
      prot |= static_cast<int>(*v);
    } else {
      return std::nullopt;
    }
  }
  return prot;
}

namespace {

/// Names (case and `prefix` optional, '-' = '_') or numbers joined by ',' or '|', each
/// one of `names` (plus "anon" for "anonymous"); their bits ORed.
template <size_t N>
std::optional<int> ParseNamedBits(std::string_view raw, const std::array<NamedBit, N>& names,
                                  std::string_view prefix) {
  std::string_view s = Trim(raw);
  if (s.empty()) return std::nullopt;
  int flags = 0;
  const std::string lowered = Lower(s);
  for (std::string_view piece : SplitNames(lowered)) {
    if (piece.empty()) return std::nullopt;
    if (LooksNumeric(piece)) {
      auto v = ParseU64(piece);
      if (!v || *v > 0xffffffffull) return std::nullopt;
      flags |= static_cast<int>(static_cast<uint32_t>(*v));
      continue;
    }
    std::string name(piece);
    if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
    std::replace(name.begin(), name.end(), '-', '_');
    if (name == "anon") name = "anonymous";
    auto it = std::find_if(names.begin(), names.end(),
                           [&](const NamedBit& b) { return name == b.name; });
    if (it == names.end()) return std::nullopt;
    flags |= it->value;
  }
  return flags;
}

constexpr std::array<NamedBit, 3> kMsyncFlagNames = {
    {{"async", MS_ASYNC}, {"invalidate", MS_INVALIDATE}, {"sync", MS_SYNC}}};

}  // namespace

std::optional<int> ParseMapFlags(std::string_view raw) {
  return ParseNamedBits(raw, kMapFlagNames, "map_");
}

std::optional<int> ParseMsyncFlags(std::string_view raw) {
  return ParseNamedBits(raw, kMsyncFlagNames, "ms_");
}

namespace {

/// The MADV_* numbers of include/uapi/asm-generic/mman-common.h (Linux 6.18), the
/// advices AddressSpace::Madvise knows (engine/types.h).
constexpr std::array<NamedBit, 27> kMadviseNames = {{
    {"normal", 0},          {"random", 1},           {"sequential", 2},      {"willneed", 3},
    {"dontneed", 4},        {"free", 8},             {"remove", 9},          {"dontfork", 10},
    {"dofork", 11},         {"mergeable", 12},       {"unmergeable", 13},    {"hugepage", 14},
    {"nohugepage", 15},     {"dontdump", 16},        {"dodump", 17},         {"wipeonfork", 18},
    {"keeponfork", 19},     {"cold", 20},            {"pageout", 21},        {"populate_read", 22},
    {"populate_write", 23}, {"dontneed_locked", 24}, {"collapse", 25},       {"hwpoison", 100},
    {"soft_offline", 101},  {"guard_install", 102},  {"guard_remove", 103},
}};

}  // namespace

std::optional<int> ParseMadvise(std::string_view raw) {
  std::string name = Lower(Trim(raw));
  if (name.empty()) return std::nullopt;
  if (LooksNumeric(name)) {
    auto v = ParseU64(name);
    if (!v || *v > 0x7fffffffull) return std::nullopt;
    return static_cast<int>(*v);
  }
  if (name.rfind("madv_", 0) == 0) name = name.substr(5);
  std::replace(name.begin(), name.end(), '-', '_');
  for (const NamedBit& b : kMadviseNames)
    if (name == b.name) return b.value;
  return std::nullopt;
}

std::optional<int> ParseAccessType(std::string_view raw) {
  std::string l = Lower(Trim(raw));
  if (l == "read" || l == "r" || l == "0") return 0;
  if (l == "write" || l == "w" || l == "1") return 1;
  if (l == "exec" || l == "execute" || l == "x" || l == "2") return 2;
  return std::nullopt;
}

std::string FormatProt(int prot) {
  std::string s;
  s += (prot & PROT_READ) ? 'r' : '-';
  s += (prot & PROT_WRITE) ? 'w' : '-';
  s += (prot & PROT_EXEC) ? 'x' : '-';
  int rest = prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC);
  if (rest != 0) {
    s += '+';
    s += Hex(static_cast<uint32_t>(rest));
  }
  return s;
}

std::string FormatMapFlags(int flags) {
  std::string s;
  auto add = [&](const std::string& n) { s += (s.empty() ? "" : "|") + n; };
  uint32_t left = static_cast<uint32_t>(flags);
  // The mapping type is a 2-bit field, not independent bits.
  switch (left & 0x3) {
    case MAP_SHARED: add("shared"); break;
    case MAP_PRIVATE: add("private"); break;
    case MAP_SHARED_VALIDATE: add("shared_validate"); break;
    default: break;
  }
  left &= ~0x3u;
  for (const NamedBit& b : kMapFlagNames) {
    uint32_t v = static_cast<uint32_t>(b.value);
    if (v <= 0x3 || (v & (v - 1)) != 0) continue;
    if (left & v) {
      add(b.name);
      left &= ~v;
    }
  }
  if (left != 0) add(Hex(left));
  return s.empty() ? "0" : s;
}

std::string Hex(uint64_t v) {
  static const char* kDigits = "0123456789abcdef";
  if (v == 0) return "0x0";
  std::string s;
  while (v != 0) {
    s += kDigits[v & 0xf];
    v >>= 4;
  }
  s += "x0";
  std::reverse(s.begin(), s.end());
  return s;
}

std::string HexBytes(std::string_view bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    s += kDigits[c >> 4];
    s += kDigits[c & 0xf];
  }
  return s;
}

std::optional<std::string> ParseHexBytes(std::string_view hex) {
  hex = Trim(hex);
  if (hex.size() >= 2 && hex[0] == '0' && (hex[1] == 'x' || hex[1] == 'X')) hex.remove_prefix(2);
  std::string out;
  int hi = -1;
  for (char c : hex) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == ':') continue;
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return std::nullopt;
    if (hi < 0) {
      hi = d;
    } else {
      out += static_cast<char>((hi << 4) | d);
      hi = -1;
    }
  }
  if (hi >= 0) return std::nullopt;
  return out;
}

std::optional<double> ParseDurationSeconds(std::string_view s) {
  std::string d = Lower(Trim(s));
  // absl::ParseDuration wants a unit ("5s"); a bare number is seconds here. Signs are
  // rejected (absl takes "-1s" and "+5s"), as are "inf" and durations over a day.
  if (d.empty() || d[0] == '-' || d[0] == '+') return std::nullopt;
  if (d.find_first_not_of("0123456789.") == std::string::npos) d += 's';
  absl::Duration v;
  if (!absl::ParseDuration(d, &v) || v <= absl::ZeroDuration() || v > absl::Hours(24)) return std::nullopt;
  return absl::ToDoubleSeconds(v);
}

}  // namespace vmspace::client
