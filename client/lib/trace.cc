// SPDX-License-Identifier: Apache-2.0
// The trace's JSON-lines writer and reader (trace.h).
#include "lib/trace.h"

#include <cstring>
#include <nlohmann/json.hpp>

namespace vmspace::trace {

namespace {

using json = nlohmann::ordered_json;

json RunsJson(const std::vector<ResidentRun>& runs) {
  json a = json::array();
  for (const ResidentRun& r : runs) a.push_back(json::array({r.first, r.count, r.anon ? "a" : "f"}));
  return a;
}

std::vector<ResidentRun> RunsFrom(const json& a) {
  std::vector<ResidentRun> runs;
  for (const json& r : a) {
    runs.push_back({r.at(0).get<uint64_t>(), r.at(1).get<uint64_t>(), r.at(2).get<std::string>() == "a"});
  }
  return runs;
}

json VmaJson(const Vma& v) {
  json j{{"start", v.start}, {"end", v.end},  {"perms", v.perms},     {"offset", v.offset},
         {"dev", v.dev},     {"ino", v.ino},  {"name", v.name},       {"vmflags", v.vmflags}};
  if (v.file) j["file"] = *v.file;
  if (!v.resident.empty()) j["resident"] = RunsJson(v.resident);
  return j;
}

Vma VmaFrom(const json& j) {
  Vma v;
  v.start = j.at("start").get<uint64_t>();
  v.end = j.at("end").get<uint64_t>();
  v.perms = j.at("perms").get<std::string>();
  v.offset = j.at("offset").get<uint64_t>();
  v.dev = j.at("dev").get<std::string>();
  v.ino = j.at("ino").get<uint64_t>();
  v.name = j.at("name").get<std::string>();
  v.vmflags = j.value("vmflags", "");
  if (j.contains("file")) v.file = j["file"].get<uint64_t>();
  if (j.contains("resident")) v.resident = RunsFrom(j["resident"]);
  return v;
}

const char* KindName(Event::Kind k) {
  switch (k) {
    case Event::Kind::kCall: return "call";
    case Event::Kind::kLayout: return "layout";
    case Event::Kind::kExit: return "exit";
  }
  return "call";
}

}  // namespace

void Writer::WriteHeader(const Header& h) {
  json j{{"type", "header"},
         {"format", "vmspace-trace"},
         {"format_version", h.format_version},
         {"vmspace_version", h.vmspace_version},
         {"kernel", h.kernel},
         {"cpu", h.cpu},
         {"cores", h.cores},
         {"date", h.date},
         {"command", h.command},
         {"page_size", h.page_size},
         {"mmap_min_addr", h.mmap_min_addr},
         {"max_map_count", h.max_map_count},
         {"rlimit_stack", h.rlimit_stack},
         {"aslr_off", h.aslr_off}};
  out_ << j.dump() << "\n" << std::flush;
}

void Writer::WriteFile(const File& f) {
  json j{{"type", "file"}, {"id", f.id},     {"path", f.path},   {"dev", f.dev},
         {"ino", f.ino},   {"size", f.size}, {"shmem", f.shmem}};
  if (!f.captured.empty()) {
    j["captured"] = f.captured;
    j["captured_bytes"] = f.captured_bytes;
  }
  out_ << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n" << std::flush;
}

void Writer::WriteEvent(const Event& e) {
  json j{{"type", KindName(e.kind)}, {"seq", e.seq}, {"tid", e.tid}, {"tgid", e.tgid}, {"mm", e.mm}, {"t", e.t_ns}};
  if (e.kind == Event::Kind::kCall) {
    j["dur"] = e.dur_ns;
    j["sys"] = e.sys;
    json args = json::object();
    for (const auto& [k, v] : e.args) args[k] = v;
    for (const auto& [k, v] : e.sargs) args[k] = v;
    j["args"] = args;
    if (e.has_ret) j["ret"] = e.ret;
    if (!e.err.empty()) j["err"] = e.err;
    if (e.file) j["file"] = *e.file;
    if (!e.info.empty()) j["info"] = e.info;
    if (!e.touched.empty()) j["touched"] = RunsJson(e.touched);
  } else {
    j["reason"] = e.snap.reason;
    if (e.kind == Event::Kind::kLayout) j["start_brk"] = e.snap.start_brk;
    if (e.kind == Event::Kind::kExit) j["status"] = e.snap.status;
    json vmas = json::array();
    for (const Vma& v : e.snap.vmas) vmas.push_back(VmaJson(v));
    j["vmas"] = vmas;
  }
  out_ << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n" << std::flush;
}

std::optional<Trace> Read(std::istream& in, std::string* error) {
  Trace t;
  std::string line;
  size_t n = 0;
  bool have_header = false;
  auto fail = [&](const std::string& what) -> std::optional<Trace> {
    if (error) *error = "line " + std::to_string(n) + ": " + what;
    return std::nullopt;
  };
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    try {
      json j = json::parse(line);
      const std::string type = j.at("type").get<std::string>();
      if (!have_header) {
        if (type != "header" || j.value("format", "") != "vmspace-trace")
          return fail("not a vmspace trace (the first record must be its header)");
        Header& h = t.header;
        h.format_version = j.at("format_version").get<int>();
        if (h.format_version > kTraceFormatVersion)
          return fail("trace format version " + std::to_string(h.format_version) + " is newer than this reader's " +
                      std::to_string(kTraceFormatVersion));
        h.vmspace_version = j.value("vmspace_version", "");
        h.kernel = j.value("kernel", "");
        h.cpu = j.value("cpu", "");
        h.cores = j.value("cores", 0);
        h.date = j.value("date", "");
        h.command = j.value("command", std::vector<std::string>{});
        h.page_size = j.value("page_size", uint64_t{4096});
        h.mmap_min_addr = j.value("mmap_min_addr", uint64_t{65536});
        h.max_map_count = j.value("max_map_count", uint64_t{65530});
        h.rlimit_stack = j.value("rlimit_stack", uint64_t{0});
        h.aslr_off = j.value("aslr_off", true);
        have_header = true;
        continue;
      }
      if (type == "file") {
        File f;
        f.id = j.at("id").get<uint64_t>();
        f.path = j.at("path").get<std::string>();
        f.dev = j.at("dev").get<std::string>();
        f.ino = j.at("ino").get<uint64_t>();
        f.size = j.at("size").get<uint64_t>();
        f.shmem = j.value("shmem", false);
        f.captured = j.value("captured", "");
        f.captured_bytes = j.value("captured_bytes", uint64_t{0});
        t.files[f.id] = f;
        continue;
      }
      Event e;
      if (type == "call") e.kind = Event::Kind::kCall;
      else if (type == "layout") e.kind = Event::Kind::kLayout;
      else if (type == "exit") e.kind = Event::Kind::kExit;
      else return fail("unknown record type '" + type + "'");
      e.seq = j.at("seq").get<uint64_t>();
      e.tid = j.at("tid").get<int>();
      e.tgid = j.at("tgid").get<int>();
      e.mm = j.at("mm").get<uint64_t>();
      e.t_ns = j.at("t").get<uint64_t>();
      if (e.kind == Event::Kind::kCall) {
        e.dur_ns = j.value("dur", uint64_t{0});
        e.sys = j.at("sys").get<std::string>();
        for (const auto& [k, v] : j.at("args").items()) {
          if (v.is_string()) e.sargs[k] = v.get<std::string>();
          else e.args[k] = v.get<int64_t>();
        }
        e.has_ret = j.contains("ret");
        if (e.has_ret) e.ret = j["ret"].get<int64_t>();
        e.err = j.value("err", "");
        if (j.contains("file")) e.file = j["file"].get<uint64_t>();
        if (j.contains("info")) e.info = j["info"].get<std::map<std::string, int64_t>>();
        if (j.contains("touched")) e.touched = RunsFrom(j["touched"]);
      } else {
        e.snap.reason = j.value("reason", "");
        e.snap.start_brk = j.value("start_brk", uint64_t{0});
        e.snap.status = j.value("status", int64_t{0});
        for (const json& v : j.at("vmas")) e.snap.vmas.push_back(VmaFrom(v));
      }
      t.events.push_back(std::move(e));
    } catch (const std::exception& ex) {
      return fail(ex.what());
    }
  }
  if (!have_header) return fail("empty trace (no header)");
  return t;
}

std::string ErrnoName(int64_t ret) {
  if (ret >= 0 || ret < -4095) return "";
  const char* n = strerrorname_np(static_cast<int>(-ret));
  if (n != nullptr) return n;
  std::string s = "E";  // not "E" + std::to_string(): GCC 12 warns (-Wrestrict) on that
  s += std::to_string(-ret);
  return s;
}

int ErrnoNumber(const std::string& name) {
  for (int e = 1; e < 4096; ++e) {
    const char* n = strerrorname_np(e);
    if (n != nullptr && name == n) return e;
  }
  return 0;
}

}  // namespace vmspace::trace
