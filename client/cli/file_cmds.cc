// SPDX-License-Identifier: Apache-2.0
// `vmspace file COMMAND`: open, create-shmem, close, truncate, fsync, stat, ls, read,
// write on the daemon's files (its --data-dir, or memory-only shmem files).
#include "cli/commands.h"

#include "cli/output.h"

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
          {"writable", f.writable()}};
}

std::string FileName(const v1::FileInfo& f) { return f.shmem() ? "(shmem)" : f.path(); }

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
  Client cl(c.client);
  return PrintFileId(c, cl.OpenFile(req, c.U64("near", 0)));
}

int CmdFileCreateShmem(Ctx& c) {
  Client cl(c.client);
  return PrintFileId(c, cl.CreateShmemFile(c.args.Get("name"), c.U64("size", 0), c.U64("near", 0)));
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
