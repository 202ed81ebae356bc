// SPDX-License-Identifier: Apache-2.0
// `vmspace file COMMAND`: open, create-shmem, close, truncate, fsync, stat, ls, read,
// write on the daemon's files (its --data-dir, or memory-only shmem files).
#include "cli/commands.h"

#include "cli/output.h"

#include <algorithm>
#include <string>
#include <utility>

namespace vmspace::cli {

namespace {

/// The file id: --file, or the first positional argument.
uint64_t FileId(const Ctx& c) {
  if (!c.args.Has("file")) throw UsageError{"a file id is required (--file ID or first argument)"};
  auto v = client::ParseU64(c.args.Get("file"));
  if (!v || *v == 0) throw UsageError{"bad file id '" + c.args.Get("file") + "'"};
  return *v;
}

Json FileJson(const v1::FileInfo& f) {
  return {{"file_id", f.file_id()},      {"path", f.path()},
          {"shmem", f.shmem()},          {"size", f.size()},
          {"inode", f.inode()},          {"dev", f.dev()},
          {"cached_pages", f.cached_pages()}, {"dirty_pages", f.dirty_pages()},
          {"mapped_vmas", f.mapped_vmas()},   {"open_handles", f.open_handles()},
          {"writable", f.writable()},   {"st_nlink", f.st_nlink()}};
}

std::string FileName(const v1::FileInfo& f) { return f.shmem() ? "(shmem)" : f.path(); }

/// --mode ro | wo | rw (O_RDONLY, O_WRONLY, O_RDWR).
v1::FileAccessMode AccessMode(const std::string& m) {
  if (m == "ro") return v1::FILE_ACCESS_RDONLY;
  if (m == "wo") return v1::FILE_ACCESS_WRONLY;
  if (m == "rw") return v1::FILE_ACCESS_RDWR;
  throw UsageError{"--mode: '" + m + "' is not ro, wo or rw"};
}

/// The F_SEAL_* names and bits, in bit order.
constexpr std::pair<const char*, uint32_t> kSeals[] = {{"seal", 0x1},         {"shrink", 0x2}, {"grow", 0x4},
                                                       {"write", 0x8},        {"future_write", 0x10},
                                                       {"exec", 0x20}};

/// "write,grow" or a number -> F_SEAL_* bits.
uint32_t ParseSeals(const std::string& s) {
  if (auto n = client::ParseU64(s)) return static_cast<uint32_t>(*n);
  uint32_t bits = 0;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string name = s.substr(pos, comma - pos);
    bool found = false;
    for (const auto& [n, b] : kSeals) {
      if (name == n) {
        bits |= b;
        found = true;
      }
    }
    if (!found) throw UsageError{"--seals: unknown seal '" + name + "' (seal, shrink, grow, write, future_write, exec)"};
    pos = comma + 1;
  }
  return bits;
}

/// F_SEAL_* bits as "grow,write" ("none" for 0; unknown bits as a number).
std::string SealNames(uint32_t bits) {
  std::string out;
  for (const auto& [n, b] : kSeals) {
    if (!(bits & b)) continue;
    out += (out.empty() ? "" : ",") + std::string(n);
    bits &= ~b;
  }
  if (bits) out += (out.empty() ? "" : ",") + std::to_string(bits);
  return out.empty() ? "none" : out;
}

/// Prints the id of a new file (open, create-shmem).
int PrintFileId(Ctx& c, const client::Result<uint64_t>& r) {
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"file_id", r.value()}}.dump() << "\n";
  else c.out << r.value() << "\n";
  return kExitOk;
}

/// Prints the outcome of a call that returns nothing on file `id` (close, truncate, fsync).
int PrintFileOk(Ctx& c, const client::Result<client::Unit>& r, uint64_t id) {
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"ok", true}, {"file_id", id}}.dump() << "\n";
  else c.out << "ok\n";
  return kExitOk;
}

}  // namespace

int CmdFileOpen(Ctx& c) {
  if (!c.args.Has("path")) throw UsageError{"a path is required (--path PATH or first argument)"};
  v1::OpenFileRequest req;
  req.set_path(c.args.Get("path"));
  req.set_write(c.args.Flag("write"));
  req.set_create(c.args.Flag("create"));
  req.set_exclusive(c.args.Flag("exclusive"));
  req.set_truncate(c.args.Flag("truncate"));
  if (c.args.Has("mode")) req.set_access(AccessMode(c.args.Get("mode")));
  Client cl(c.client);
  return PrintFileId(c, cl.OpenFile(req, c.U64("near", 0)));
}

int CmdFileCreateShmem(Ctx& c) {
  Client cl(c.client);
  return PrintFileId(c, cl.CreateShmemFile(c.args.Get("name"), c.U64("size", 0), c.U64("near", 0),
                                           c.args.Flag("allow-sealing")));
}

int CmdFileSeal(Ctx& c) {
  const uint64_t id = FileId(c);
  if (!c.args.Has("seals")) throw UsageError{"--seals is required (write,shrink,grow,future_write,seal,exec)"};
  const uint32_t seals = ParseSeals(c.args.Get("seals"));
  Client cl(c.client);
  return PrintFileOk(c, cl.AddFileSeals(id, seals), id);
}

int CmdFileSeals(Ctx& c) {
  const uint64_t id = FileId(c);
  Client cl(c.client);
  auto r = cl.GetFileSeals(id);
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"file_id", id}, {"seals", r.value()}, {"names", SealNames(r.value())}}.dump() << "\n";
  else c.out << SealNames(r.value()) << "\n";
  return kExitOk;
}

int CmdFileReopen(Ctx& c) {
  const uint64_t id = FileId(c);
  const v1::FileAccessMode mode = AccessMode(c.args.Get("mode", "ro"));
  Client cl(c.client);
  return PrintFileId(c, cl.ReopenFile(id, mode));
}

int CmdFileClose(Ctx& c) {
  const uint64_t id = FileId(c);
  Client cl(c.client);
  return PrintFileOk(c, cl.CloseFile(id), id);
}

int CmdFileTruncate(Ctx& c) {
  const uint64_t id = FileId(c);
  const uint64_t size = c.U64("size");
  Client cl(c.client);
  return PrintFileOk(c, cl.TruncateFile(id, size), id);
}

int CmdFileFsync(Ctx& c) {
  const uint64_t id = FileId(c);
  Client cl(c.client);
  return PrintFileOk(c, cl.FsyncFile(id), id);
}

int CmdFileStat(Ctx& c) {
  const uint64_t id = FileId(c);
  Client cl(c.client);
  auto r = cl.StatFile(id);
  if (!r.ok()) return Fail(c, r.error());
  const v1::FileInfo& f = r.value();
  if (c.json) {
    c.out << FileJson(f).dump() << "\n";
    return kExitOk;
  }
  c.out << "file " << f.file_id() << ": " << FileName(f) << (f.writable() ? " (read-write)" : " (read-only)") << "\n"
        << "  size " << f.size() << " (" << HumanBytes(f.size()) << "), inode " << f.inode() << ", dev " << f.dev()
        << "\n"
        << "  page cache " << f.cached_pages() << " pages, " << f.dirty_pages() << " dirty; " << f.mapped_vmas()
        << " VMAs map it; " << f.open_handles() << " open ids\n";
  return kExitOk;
}

int CmdFileList(Ctx& c) {
  Client cl(c.client);
  auto r = cl.ListFiles();
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) {
    Json arr = Json::array();
    for (const v1::FileInfo& f : r.value()) arr.push_back(FileJson(f));
    c.out << Json{{"files", arr}}.dump() << "\n";
    return kExitOk;
  }
  char line[512];
  snprintf(line, sizeof line, "%16s %2s %12s %10s %10s %6s %10s  %s\n", "ID", "RW", "SIZE", "CACHED", "DIRTY", "VMAS",
           "INODE", "PATH");
  c.out << line;
  for (const v1::FileInfo& f : r.value()) {
    snprintf(line, sizeof line, "%16llu %2s %12s %10llu %10llu %6llu %10llu  %s\n",
             static_cast<unsigned long long>(f.file_id()), f.writable() ? "rw" : "r",
             HumanBytes(f.size()).c_str(), static_cast<unsigned long long>(f.cached_pages()),
             static_cast<unsigned long long>(f.dirty_pages()), static_cast<unsigned long long>(f.mapped_vmas()),
             static_cast<unsigned long long>(f.inode()), FileName(f).c_str());
    c.out << line;
  }
  return kExitOk;
}

int CmdFileRead(Ctx& c) {
  const uint64_t id = FileId(c);
  const uint64_t offset = c.U64("offset", 0);
  const uint64_t len = c.U64("len");
  Client cl(c.client);
  auto r = cl.ReadFile(id, offset, len);
  if (!r.ok()) return Fail(c, r.error());
  const std::string& data = r.value();
  if (c.json) {
    c.out << Json{{"file_id", id}, {"offset", offset}, {"len", data.size()}, {"data_hex", client::HexBytes(data)}}.dump()
          << "\n";
  } else if (c.args.Flag("raw")) {
    c.out.write(data.data(), static_cast<std::streamsize>(data.size()));
  } else {
    HexDump(c.out, offset, data);
  }
  return kExitOk;
}

int CmdFileWrite(Ctx& c) {
  const uint64_t id = FileId(c);
  const uint64_t offset = c.U64("offset", 0);
  const std::string data = DataArg(c, "from");
  Client cl(c.client);
  auto r = cl.WriteFile(id, offset, data);
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"bytes_written", r.value()}}.dump() << "\n";
  else c.out << "wrote " << r.value() << " of " << data.size() << " bytes\n";
  return kExitOk;
}

}  // namespace vmspace::cli
