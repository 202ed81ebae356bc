// SPDX-License-Identifier: Apache-2.0
// Output helpers shared by the subcommands (output.h).
#include "cli/output.h"

#include <cctype>
#include <cstdio>
#include <iomanip>
#include <sstream>

namespace vmspace::cli {

int Unreached(Ctx& c, const std::vector<client::Error>& unreachable, Json* j, int code) {
  if (unreachable.empty()) return code;
  Json list = Json::array();
  for (const client::Error& e : unreachable) {
    const std::string message = StripPrefix(e.message, e.target + ": ");  // the target is said once
    c.err << "vmspace " << c.command << ": no answer from " << e.target << ": " << client::StatusCodeName(e.code)
          << ": " << message << "\n";
    list.push_back({{"target", e.target}, {"code", client::StatusCodeName(e.code)}, {"message", message}});
  }
  if (j != nullptr) (*j)["unreachable"] = list;
  return kExitPartial;
}

std::string CannotReach(const std::string& target) {
  std::string address = target;
  for (const char* scheme : {"ipv4:", "ipv6:", "dns:///", "dns:"}) address = StripPrefix(address, scheme);
  return "cannot reach the daemon at " + address + " (is vmspaced running? start it with: vmspaced --listen " +
         address + ")";
}

int Fail(Ctx& c, const client::Error& e) {
  const bool unreachable = e.code == grpc::StatusCode::UNAVAILABLE && !e.target.empty();
  if (c.json) {
    Json j;
    j["error"] = {{"code", client::StatusCodeName(e.code)},
                  {"errno", e.err},
                  {"errno_name", e.errno_name},
                  {"name", e.Name()},
                  {"message", e.message}};
    if (!e.target.empty()) j["error"]["target"] = e.target;
    c.out << j.dump() << "\n";
  }
  if (unreachable) c.err << "vmspace " << c.command << ": " << CannotReach(e.target) << "\n  ";
  else c.err << "vmspace " << c.command << ": ";
  c.err << e.ToString() << "\n";
  return kExitFailed;
}

std::string StripPrefix(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string Upper(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

void HexDump(std::ostream& out, uint64_t addr, const std::string& data) {
  char line[128];
  for (size_t off = 0; off < data.size(); off += 16) {
    snprintf(line, sizeof line, "%016llx: ", static_cast<unsigned long long>(addr + off));
    std::string text = line;
    std::string ascii;
    for (size_t i = 0; i < 16; ++i) {
      if (off + i < data.size()) {
        unsigned char ch = static_cast<unsigned char>(data[off + i]);
        snprintf(line, sizeof line, "%02x", ch);
        text += line;
        ascii += (ch >= 0x20 && ch < 0x7f) ? static_cast<char>(ch) : '.';
      } else {
        text += "  ";
      }
      if (i % 2 == 1) text += ' ';
    }
    out << text << ' ' << ascii << "\n";
  }
}

std::string HumanBytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::ostringstream s;
  if (u == 0) s << b << " B";
  else s << std::fixed << std::setprecision(1) << v << ' ' << units[u];
  return s.str();
}

Json OptJson(std::optional<double> v) { return v ? Json(*v) : Json(nullptr); }

std::string Num(std::optional<double> v, const char* fmt) {
  if (!v) return "-";
  char b[64];
  snprintf(b, sizeof b, fmt, *v);
  return b;
}

std::string Abbrev(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 1) + "~"; }

}  // namespace vmspace::cli
