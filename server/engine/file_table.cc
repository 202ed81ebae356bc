// SPDX-License-Identifier: Apache-2.0
// The daemon's open files: open/close, ftruncate, pread/pwrite through the page cache,
// fsync, stat (fs/open.c do_sys_openat2, fs/file_table.c, fs/read_write.c,
// mm/filemap.c filemap_read / generic_perform_write, fs/sync.c; Linux 6.18).
//
// Host files are opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) relative
// to the data directory: the kernel resolves the whole path, symlinks included, and
// refuses any step that would leave the directory (EXDEV, reported as EACCES), an
// absolute symlink's jump to "/" included, even when it names a file inside. This is
// neither realpath + a prefix check (racy against renames) nor a hand-written
// O_NOFOLLOW walk per component (which would refuse symlinks that stay inside).
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <map>

#include "filemap.h"
#include "memfd.h"
#include "mm.h"
#include "sync/mutex.h"

namespace vmspace {

struct FileTable::State {
  State(FrameAllocator& f, std::string dir) : frames(f), data_dir(std::move(dir)) {}
  FrameAllocator& frames;
  std::string data_dir;  // absolute (realpath), "" = none
  int dir_fd = -1;
  /// files_struct->file_lock: the table only (never held while calling into a File).
  mutable Mutex mu{LockRank::kFileTable};
  std::map<uint64_t, std::shared_ptr<OpenFile>> handles ABSL_GUARDED_BY(mu);
  /// The inode cache: one File per host inode, so every open of it shares the page cache.
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<File>> inodes ABSL_GUARDED_BY(mu);
  /// memfds created here (Totals counts them while they live).
  std::vector<std::weak_ptr<File>> memfds ABSL_GUARDED_BY(mu);
  size_t memfds_live ABSL_GUARDED_BY(mu) = 16;  // memfds' size after its last sweep (at least 16)
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  std::atomic<uint64_t> ra_pages{(128 << 10) >> kPageShift};  // VM_READAHEAD_PAGES
  /// SetMaxHandles (0 = no limit).
  std::atomic<uint64_t> max_handles{0};

  /// fd_install(): the handle's id, or an error (ENFILE: max_handles handles are open).
  SysResult Install(std::shared_ptr<OpenFile> h) {
    MutexLock l(mu);
    const uint64_t max = max_handles.load(std::memory_order_relaxed);
    if (max != 0 && handles.size() >= max) return SysResult::Err(ENFILE);
    const uint64_t id = next_id++;
    if (!h->memcg && ActiveMemcg()) h->memcg = ActiveMemcg()->shared_from_this();
    h->file->open_handles.fetch_add(1, std::memory_order_relaxed);
    handles.emplace(id, std::move(h));
    return SysResult::Ok(id);
  }
};

namespace {

/// The checks on a table-relative path (EINVAL / ENAMETOOLONG), before any lookup.
int CheckPath(const std::string& path) {
  if (path.empty() || path.find('\0') != std::string::npos || path[0] == '/') return EINVAL;
  if (path.size() >= PATH_MAX) return ENAMETOOLONG;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    const std::string comp = path.substr(pos, slash - pos);
    if (comp == "..") return EINVAL;
    if (comp.size() > NAME_MAX) return ENAMETOOLONG;
    pos = slash + 1;
  }
  return 0;
}

int Openat2(int dir_fd, const std::string& path, uint64_t flags) {
  struct open_how how = {};
  how.flags = flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  how.mode = (flags & O_CREAT) ? 0644 : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const long fd = syscall(SYS_openat2, dir_fd, path.c_str(), &how, sizeof how);
  if (fd < 0) return errno == EXDEV ? -EACCES : -errno;  // a step out of the data directory
  return static_cast<int>(fd);
}

}  // namespace

FileTable::FileTable(FrameAllocator& frames, std::string data_dir) : s_(std::make_unique<State>(frames, "")) {
  if (data_dir.empty()) return;
  char* real = realpath(data_dir.c_str(), nullptr);
  s_->data_dir = real ? real : data_dir;
  free(real);
  s_->dir_fd = open(s_->data_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (s_->dir_fd < 0) s_->data_dir.clear();
}

FileTable::~FileTable() {
  SyncAll();
  std::map<uint64_t, std::shared_ptr<OpenFile>> handles;  // released after the table lock
  {
    MutexLock l(s_->mu);
    handles.swap(s_->handles);
  }
  handles.clear();
  if (s_->dir_fd >= 0) close(s_->dir_fd);
}

FrameAllocator& FileTable::frames() const { return s_->frames; }

void FileTable::SetMaxHandles(uint64_t n) { s_->max_handles.store(n, std::memory_order_relaxed); }

uint64_t FileTable::HandleCount() const {
  MutexLock l(s_->mu);
  return s_->handles.size();
}

void FileTable::SetReadAheadBytes(uint64_t bytes) { s_->ra_pages.store(bytes >> kPageShift); }

SysResult FileTable::Open(const std::string& path, const OpenFlags& flags) {
  if (int e = CheckPath(path)) return SysResult::Err(e);
  const int access = flags.access >= 0 ? flags.access : flags.write ? O_RDWR : O_RDONLY;
  if (access != O_RDONLY && access != O_WRONLY && access != O_RDWR) return SysResult::Err(EINVAL);
  const bool want_write = access != O_RDONLY;
  if (flags.truncate && !want_write) return SysResult::Err(EINVAL);
  if (s_->dir_fd < 0) return SysResult::Err(EACCES);
  // alloc_empty_file() comes before the lookup (Install checks again, under the lock).
  if (const uint64_t max = s_->max_handles.load(std::memory_order_relaxed); max != 0 && HandleCount() >= max)
    return SysResult::Err(ENFILE);
  uint64_t o = (flags.create ? O_CREAT : 0) | (flags.exclusive && flags.create ? O_EXCL : 0);
  // The host file is opened read-write when it can be, whatever this handle asks: the
  // File is shared by later opens and must be able to write back their pages.
  int fd = Openat2(s_->dir_fd, path, o | O_RDWR);
  bool host_writable = fd >= 0;
  if (fd == -EACCES || fd == -EROFS || fd == -EISDIR || fd == -ETXTBSY) {
    if (want_write && fd != -EISDIR) return SysResult::Err(-fd);
    const int e = fd;
    fd = Openat2(s_->dir_fd, path, o & ~static_cast<uint64_t>(O_EXCL));
    if (fd < 0) return SysResult::Err(-(fd == -EACCES ? e : fd));
    host_writable = false;
  }
  if (fd < 0) return SysResult::Err(-fd);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return SysResult::Err(e);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return SysResult::Err(S_ISDIR(st.st_mode) ? EISDIR : ENODEV);  // only regular files can be mapped
  }
  std::shared_ptr<File> file;
  {
    MutexLock l(s_->mu);
    auto key = std::make_pair(st.st_dev, st.st_ino);
    file = s_->inodes[key].lock();
    if (!file) {
      file = std::make_shared<File>(s_->frames, st.st_ino, major(st.st_dev), minor(st.st_dev), path,
                                    s_->data_dir + "/" + path, fd, host_writable, st.st_size,
                                    s_->ra_pages.load());
      s_->inodes[key] = file;
      fd = -1;
    }
  }
  if (fd >= 0) close(fd);  // the inode was open already: its File keeps its own fd
  if (want_write && !file->host_writable) return SysResult::Err(EACCES);
  if (flags.truncate) {
    MutexLock l(file->i_rwsem);
    if (file->SetSizeLocked(0)) return SysResult::Err(EIO);
  }
  auto h = std::make_shared<OpenFile>();
  h->file = file;
  h->readable = access != O_WRONLY;
  h->writable = want_write;
  h->wb_err_seen.store(file->wb_err.load(std::memory_order_acquire), std::memory_order_relaxed);
  return s_->Install(std::move(h));
}

SysResult FileTable::CreateShmem(const std::string& name, uint64_t size_bytes, unsigned flags) {
  // memfd_create(): the flags first, then the name.
  if (flags & ~(MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL | MFD_EXEC)) return SysResult::Err(EINVAL);
  if ((flags & MFD_EXEC) && (flags & MFD_NOEXEC_SEAL)) return SysResult::Err(EINVAL);
  if (name.size() > 249 || name.find('\0') != std::string::npos) return SysResult::Err(EINVAL);  // MFD_NAME_MAX_LEN
  if (size_bytes > kMaxFileSize) return SysResult::Err(EFBIG);
  std::shared_ptr<OpenFile> h = NewShmemFile(s_->frames, "/memfd:" + name + " (deleted)", size_bytes);
  if (flags & MFD_NOEXEC_SEAL) {  // mode &= ~0111, F_SEAL_EXEC in place of F_SEAL_SEAL
    h->file->mode_exec = false;
    h->file->seals.store(F_SEAL_EXEC, std::memory_order_relaxed);
  } else if (flags & MFD_ALLOW_SEALING) {
    h->file->seals.store(0, std::memory_order_relaxed);
  }
  std::shared_ptr<File> file = h->file;
  const SysResult r = s_->Install(std::move(h));
  if (!r.ok()) return r;
  MutexLock l(s_->mu);
  // Expired entries are dropped once the list has doubled since the last sweep: a
  // create costs O(1) amortised, not a scan of every memfd ever made.
  if (s_->memfds.size() >= 2 * s_->memfds_live) {
    std::erase_if(s_->memfds, [](const std::weak_ptr<File>& w) { return w.expired(); });
    s_->memfds_live = std::max<size_t>(s_->memfds.size(), 16);
  }
  s_->memfds.push_back(std::move(file));
  return r;
}

int FileTable::Close(uint64_t id) {
  std::shared_ptr<OpenFile> h;  // released after the table lock: may be the last reference
  MutexLock l(s_->mu);
  auto it = s_->handles.find(id);
  if (it == s_->handles.end()) return EBADF;
  h = std::move(it->second);
  s_->handles.erase(it);
  h->file->open_handles.fetch_sub(1, std::memory_order_relaxed);
  return 0;
}

SysResult FileTable::Reopen(uint64_t id, int access) {
  std::shared_ptr<OpenFile> old = Get(id);
  if (!old) return SysResult::Err(EBADF);
  if (access != O_RDONLY && access != O_WRONLY && access != O_RDWR) return SysResult::Err(EINVAL);
  File& f = *old->file;
  if (access != O_RDONLY && !f.shmem() && !f.host_writable) return SysResult::Err(EACCES);
  auto h = std::make_shared<OpenFile>();
  h->file = old->file;
  h->readable = access != O_WRONLY;
  h->writable = access != O_RDONLY;
  h->wb_err_seen.store(f.wb_err.load(std::memory_order_acquire), std::memory_order_relaxed);
  return s_->Install(std::move(h));
}

std::shared_ptr<OpenFile> FileTable::Get(uint64_t id) const {
  MutexLock l(s_->mu);
  auto it = s_->handles.find(id);
  return it == s_->handles.end() ? nullptr : it->second;
}

int FileTable::Truncate(uint64_t id, uint64_t size_bytes) {
  std::shared_ptr<OpenFile> h = Get(id);
  if (!h) return EBADF;
  if (!h->writable) return EINVAL;  // do_sys_ftruncate: not open for writing
  if (size_bytes > kMaxFileSize) return EFBIG;  // inode_newsize_ok
  File& f = *h->file;
  MutexLock l(f.i_rwsem);
  if (f.sealable()) {  // shmem_setattr(): F_SEAL_SHRINK, F_SEAL_GROW
    const uint32_t seals = f.seals.load(std::memory_order_relaxed);
    const uint64_t old = f.i_size.load(std::memory_order_relaxed);
    if ((size_bytes < old && (seals & F_SEAL_SHRINK)) || (size_bytes > old && (seals & F_SEAL_GROW))) return EPERM;
  }
  return f.SetSizeLocked(size_bytes);
}

namespace {
/// The page loop of filemap_read() / generic_perform_write(): for each page of
/// [offset, offset + len), its folio, locked and uptodate, is handed to
/// copy(folio, pos, in_page, done, n) which returns the bytes it copied (0 stops). A
/// read stops at i_size before it would bring a page beyond EOF into the cache. A read
/// of a shmem hole allocates nothing (shmem_file_read_iter's SGP_READ): the page goes
/// to hole(pos, done, n) instead, which returns the bytes it zeroed.
template <typename Copy, typename Hole>
SysResult ForEachFolio(File& f, uint64_t offset, uint64_t len, bool read, Copy&& copy, Hole&& hole) {
  uint64_t done = 0;
  while (done < len) {
    const uint64_t pos = offset + done;
    if (read && (pos < offset || pos >= f.i_size.load(std::memory_order_acquire))) break;
    if (read && f.shmem()) {
      bool present;
      {
        RcuReadGuard g;
        present = f.pages.Load(pos >> kPageShift) != nullptr;
      }
      if (!present) {
        const uint64_t in_page = pos & (kPageSize - 1);
        const uint64_t n = hole(pos, done, std::min(kPageSize - in_page, len - done));
        if (n == 0) break;
        done += n;
        continue;
      }
    }
    bool major;
    int err;
    Folio* folio = f.GetLockedFolio(pos >> kPageShift, &major, &err);
    if (!folio) {
      if (done) break;
      return SysResult::Err(err == ENOMEM ? ENOMEM : EIO);
    }
    const uint64_t in_page = pos & (kPageSize - 1);
    const uint64_t n = copy(folio, pos, in_page, done, std::min(kPageSize - in_page, len - done));
    folio->Unlock();
    if (n == 0) break;
    done += n;
  }
  return SysResult::Ok(done);
}
}  // namespace

SysResult FileTable::Read(uint64_t id, uint64_t offset, void* dst, uint64_t len) {
  std::shared_ptr<OpenFile> h = Get(id);
  if (!h || !h->readable) return SysResult::Err(EBADF);
  RcuEntry rcu;
  File& f = *h->file;
  auto* out = static_cast<uint8_t*>(dst);
  return ForEachFolio(f, offset, len, /*read=*/true,
                      [&](Folio* folio, uint64_t pos, uint64_t in_page, uint64_t done, uint64_t n) -> uint64_t {
                        const uint64_t size = f.i_size.load(std::memory_order_acquire);  // under the lock
                        if (folio->removed.load(std::memory_order_relaxed) || pos >= size) return 0;
                        n = std::min(n, size - pos);
                        memcpy(out + done, static_cast<uint8_t*>(folio->frame) + in_page, n);
                        return n;
                      },
                      [&](uint64_t pos, uint64_t done, uint64_t n) -> uint64_t {
                        const uint64_t size = f.i_size.load(std::memory_order_acquire);
                        if (pos >= size) return 0;
                        n = std::min(n, size - pos);
                        memset(out + done, 0, n);
                        return n;
                      });
}

SysResult FileTable::Write(uint64_t id, uint64_t offset, const void* src, uint64_t len) {
  std::shared_ptr<OpenFile> h = Get(id);
  if (!h || !h->writable) return SysResult::Err(EBADF);
  if (offset > kMaxFileSize || len > kMaxFileSize - offset) return SysResult::Err(EFBIG);
  RcuEntry rcu;
  File& f = *h->file;
  const auto* in = static_cast<const uint8_t*>(src);
  bool dirtied = false;
  SysResult r;
  {
    MutexLock l(f.i_rwsem);  // generic_perform_write under inode_lock
    if (f.sealable()) {
      // shmem_write_begin() per page chunk: no write at all under a write seal; under
      // F_SEAL_GROW the first chunk that ends beyond EOF stops the write.
      const uint32_t seals = f.seals.load(std::memory_order_relaxed);
      if (IsWriteSealed(seals)) return SysResult::Err(EPERM);
      if (seals & F_SEAL_GROW) {
        const uint64_t size = f.i_size.load(std::memory_order_relaxed);
        uint64_t ok = 0;
        while (ok < len) {
          const uint64_t pos = offset + ok, n = std::min(kPageSize - (pos & (kPageSize - 1)), len - ok);
          if (pos + n > size) break;
          ok += n;
        }
        if (ok == 0) return SysResult::Err(EPERM);
        len = ok;
      }
    }
    if (len) f.ZeroPostEofLocked(f.i_size.load(std::memory_order_relaxed), offset);
    r = ForEachFolio(f, offset, len, /*read=*/false,
                     [&](Folio* folio, uint64_t pos, uint64_t in_page, uint64_t done, uint64_t n) -> uint64_t {
                       memcpy(static_cast<uint8_t*>(folio->frame) + in_page, in + done, n);
                       dirtied |= f.MarkDirty(folio);
                       if (pos + n > f.i_size.load(std::memory_order_relaxed))
                         f.i_size.store(pos + n, std::memory_order_release);
                       return n;
                     },
                     [](uint64_t, uint64_t, uint64_t) -> uint64_t { return 0; });  // writes see no holes
  }
  // generic_perform_write throttles per page under i_rwsem; the engine does it once per
  // call after dropping it, so that a throttled writer holds no engine lock.
  if (dirtied) BalanceDirtyPagesRatelimited(f);
  return r;
}

int FileTable::Fsync(uint64_t id) {
  std::shared_ptr<OpenFile> h = Get(id);
  if (!h) return EBADF;
  RcuEntry rcu;
  return VfsFsyncRange(*h, 0, ~0ull);
}

SysResult FileTable::CheckRmap(uint64_t id) {
  std::shared_ptr<OpenFile> h = Get(id);
  if (!h) return SysResult::Err(EBADF);
  File& f = *h->file;
  ReadGuard l(f.i_mmap_rwsem);
  return SysResult::Ok(f.unlinked_visible.load(std::memory_order_seq_cst));
}

SysResult FileTable::Stat(uint64_t id, FileStat* out, const MemCgroup* scope) const {
  std::shared_ptr<OpenFile> h = Get(id);
  if (!h) return SysResult::Err(EBADF);
  const File& f = *h->file;
  FileStat st;
  st.file_id = id;
  st.path = f.path;
  st.shmem = f.shmem();
  st.size_bytes = f.i_size.load(std::memory_order_acquire);
  st.inode = f.ino;
  st.dev_major = f.dev_major;
  st.dev_minor = f.dev_minor;
  st.cached_pages = f.nrpages.load(std::memory_order_relaxed);
  st.dirty_pages = f.nrdirty.load(std::memory_order_relaxed);
  if (struct stat hs; f.fd >= 0 && fstat(f.fd, &hs) == 0) st.nlink = hs.st_nlink;  // a memfd has none
  {
    ReadGuard l(const_cast<File&>(f).i_mmap_rwsem);
    if (scope == nullptr) {
      st.mapped_vmas = f.i_mmap.size();
    } else {
      for (const auto& [pgoff, v] : f.i_mmap) st.mapped_vmas += v->vm_mm->memcg.get() == scope;
    }
  }
  if (scope == nullptr) {
    st.open_handles = f.open_handles.load(std::memory_order_relaxed);
  } else {
    MutexLock l(s_->mu);
    for (const auto& [hid, oh] : s_->handles) st.open_handles += oh->file.get() == &f && oh->memcg.get() == scope;
  }
  *out = st;
  return SysResult::Ok();
}

std::vector<FileStat> FileTable::List(uint64_t after, size_t max, uint64_t* more,
                                     const MemCgroup* scope) const {
  std::vector<uint64_t> ids;
  if (more) *more = 0;
  {
    MutexLock l(s_->mu);
    for (auto it = s_->handles.upper_bound(after); it != s_->handles.end(); ++it) {
      if (ids.size() == max) {
        if (more) *more = ids.back();
        break;
      }
      ids.push_back(it->first);
    }
  }
  std::vector<FileStat> out;
  out.reserve(ids.size());
  for (uint64_t id : ids) {
    FileStat st;
    if (Stat(id, &st, scope).ok()) out.push_back(st);
  }
  return out;
}

PageCacheTotals FileTable::Totals() const {
  PageCacheTotals t;
  std::vector<std::shared_ptr<File>> live;
  {
    MutexLock l(s_->mu);
    for (const auto& [key, w] : s_->inodes)
      if (auto f = w.lock()) live.push_back(std::move(f));
    for (const auto& w : s_->memfds)
      if (auto f = w.lock()) live.push_back(std::move(f));
  }
  for (const auto& f : live) {  // released outside the table lock (may be the last reference)
    t.files++;
    t.cached_pages += f->nrpages.load(std::memory_order_relaxed);
    t.dirty_pages += f->nrdirty.load(std::memory_order_relaxed);
  }
  return t;
}

int FileTable::SyncAll() {
  std::vector<std::shared_ptr<File>> files;
  {
    MutexLock l(s_->mu);
    for (const auto& [key, w] : s_->inodes)
      if (auto f = w.lock()) files.push_back(f);
  }
  RcuEntry rcu;
  int ret = 0;
  for (auto& f : files)
    if (f->WriteAndWait(0, ~0ull) | HostDataSync(*f)) ret = EIO;
  return ret;
}

}  // namespace vmspace
