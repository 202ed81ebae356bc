// SPDX-License-Identifier: Apache-2.0
// Files: an inode with a page cache (Linux's struct inode + struct address_space), the
// open-file handles that mmap takes (struct file), and the daemon's table of them.
//
// A File's page cache holds 4 KiB frames indexed by page offset. Lookups take no lock
// (RCU-readable, like the i_pages xarray: filemap_get_entry / filemap_map_pages);
// inserts and removals take the i_pages lock. Each File keeps the VMAs that map it in
// its reverse map (i_mmap, under i_mmap_rwsem), which truncate walks to unmap the
// pages beyond the new size from every space (unmap_mapping_range).
//
// Backing stores: a host file under the table's data directory (read on a page-cache
// miss: a major fault; written back by fsync/msync/munmap/close/shutdown), or memory
// only (shmem: memfd/tmpfs; also the object behind MAP_SHARED|MAP_ANONYMOUS).
//
// Sizes and offsets are in bytes unless a name says pages. Errors are positive Linux
// errnos, as the syscall of the same name returns them (fs/open.c, mm/filemap.c,
// mm/truncate.c, fs/sync.c; Linux 6.18). All calls are thread-safe and take the locks
// they need; none may be called with an engine lock held.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/frame_allocator.h"
#include "engine/memcontrol.h"
#include "engine/types.h"

namespace vmspace {

class FileTable;
struct File;  // engine-internal (server/engine/filemap.h): inode, page cache, i_mmap

/// stat(2)-like figures of a file, read without blocking faults.
struct FileStat {
  uint64_t file_id = 0;
  std::string path;            // relative to the data directory; "" for unnamed shmem
  bool shmem = false;          // memory only (no host file)
  uint64_t size_bytes = 0;     // i_size
  uint64_t inode = 0;          // i_ino, as the maps line shows it
  uint32_t dev_major = 0, dev_minor = 0;
  uint64_t cached_pages = 0;   // pages in the page cache (nrpages)
  uint64_t dirty_pages = 0;    // pages dirty and not yet written back
  uint64_t mapped_vmas = 0;    // VMAs in i_mmap
  uint64_t open_handles = 0;   // OpenFile handles not yet closed
  uint64_t nlink = 0;          // st_nlink: the host file's links; 0 for a memfd (unlinked)
};

/// Page-cache figures summed over every file a FileTable knows (FileTable::Totals).
struct PageCacheTotals {
  uint64_t files = 0;         // live Files (host inodes and memfds), open or only mapped
  uint64_t cached_pages = 0;  // nrpages summed
  uint64_t dirty_pages = 0;   // nrdirty summed
};

/// How Open() opens a file (the O_* flags that matter here).
struct OpenFlags {
  bool write = false;      // O_RDWR (else O_RDONLY), when `access` is -1
  /// The access mode: O_RDONLY, O_WRONLY or O_RDWR; -1 takes it from `write`.
  int access = -1;
  bool create = false;     // O_CREAT
  bool exclusive = false;  // O_EXCL (with create: EEXIST if it exists)
  bool truncate = false;   // O_TRUNC (needs write)
};

/// An open file (struct file): the File plus the access mode it was opened with.
/// mmap checks the mode (EACCES for MAP_SHARED+PROT_WRITE on a read-only open, and
/// for any mapping of a file not opened for read). Shared by every VMA created from
/// it; the File lives while any handle or VMA refers to it.
struct OpenFile {
  std::shared_ptr<File> file;
  bool readable = true;
  bool writable = false;
  /// The file's writeback-error count this handle has reported (struct file's
  /// f_wb_err): fsync/msync report EIO once per new failure. Sampled at open.
  std::atomic<uint64_t> wb_err_seen{0};
  /// The cgroup of the tenant whose call opened it (the active one at FileTable's
  /// install), or null; set before the handle is shared, never changed.
  std::shared_ptr<MemCgroup> memcg;
};

/// The daemon's files: a namespace of host files under one data directory plus
/// unnamed shmem objects, and the open handles by id (a file descriptor table shared
/// by all spaces). Ids are never reused while the table lives.
class FileTable {
 public:
  /// `data_dir`: directory holding the host files ("" = none: Open() of a host file
  /// fails with EACCES; shmem still works). Page-cache frames come from `frames`.
  FileTable(FrameAllocator& frames, std::string data_dir);
  /// Writes back every dirty page (as SyncAll) and drops the page caches. No other call
  /// may run meanwhile; spaces mapping these files must be destroyed first.
  ~FileTable();
  FileTable(const FileTable&) = delete;
  FileTable& operator=(const FileTable&) = delete;

  /// open(2) of `path` relative to the data directory. Returns the new handle's id.
  /// EINVAL: empty path, an absolute path, a ".." component, or a NUL byte; EACCES: no
  /// data directory, or a symlink that leads out of it; ENOENT: missing without
  /// create; EEXIST: create+exclusive and it exists; EISDIR: a directory;
  /// ENAMETOOLONG; EINVAL: truncate without write; ENODEV: not a regular file (it
  /// could not be mapped); EACCES: write asked and the host file is read-only; ENFILE:
  /// SetMaxHandles handles are open. Paths
  /// resolve with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS): symlinks that stay
  /// inside the data directory work. Every open of one host inode shares one File.
  SysResult Open(const std::string& path, const OpenFlags& flags);
  /// memfd_create(2) + ftruncate: an unnamed shmem file of `size_bytes`, opened
  /// read-write. `name` appears in maps as "/memfd:NAME (deleted)". EINVAL: name
  /// longer than 249 bytes; EFBIG: size beyond 2^44 bytes; ENFILE: as Open.
  /// `flags`: MFD_ALLOW_SEALING (else the file starts with F_SEAL_SEAL: no seal can be
  /// added), MFD_NOEXEC_SEAL (mode 0666 and F_SEAL_EXEC, sealing allowed) or MFD_EXEC
  /// (mode 0777, the default), MFD_CLOEXEC (no effect); EINVAL: other bits (MFD_HUGETLB
  /// included), or MFD_EXEC with MFD_NOEXEC_SEAL (mm/memfd.c memfd_create, Linux 6.18).
  SysResult CreateShmem(const std::string& name, uint64_t size_bytes, unsigned flags = 0);
  /// fcntl(F_ADD_SEALS) (mm/memfd.c memfd_add_seals): adds `seals` (F_SEAL_*) to a
  /// memfd, under its i_rwsem. EBADF: unknown id; EPERM: the handle is not open for
  /// write; EINVAL: unknown bits, or not a memfd (a host file has no seals); EPERM:
  /// F_SEAL_SEAL is set; EBUSY: F_SEAL_WRITE while a writable shared mapping exists
  /// (i_mmap_writable). F_SEAL_EXEC on an executable memfd also adds F_SEAL_SHRINK,
  /// GROW, WRITE and FUTURE_WRITE (so it is EBUSY in the same case). Seals then
  /// refuse: SHRINK/GROW a truncate that shrinks/grows (EPERM) and a write past EOF
  /// (GROW: up to the last whole page chunk below EOF, EPERM if none); WRITE and
  /// FUTURE_WRITE every write (EPERM) and a new MAP_SHARED PROT_WRITE mmap (EPERM),
  /// and make a shared read-only mapping unable to become writable (EACCES).
  int AddSeals(uint64_t id, uint32_t seals);
  /// fcntl(F_GET_SEALS): the seals in `value`. EBADF; EINVAL: not a memfd.
  SysResult GetSeals(uint64_t id) const;
  /// open("/proc/self/fd/N", access): a new handle of the file of handle `id` with its
  /// own access mode (O_RDONLY, O_WRONLY or O_RDWR), sharing the inode and page cache.
  /// EBADF: unknown id; EINVAL: another mode; EACCES: write asked of a host file that
  /// is read-only on the host.
  SysResult Reopen(uint64_t id, int access);
  /// close(2). EBADF: unknown id. Mappings made from the handle stay valid.
  int Close(uint64_t id);
  /// The handle `id`, or nullptr (EBADF) if unknown.
  std::shared_ptr<OpenFile> Get(uint64_t id) const;

  /// ftruncate(2) (mm/truncate.c truncate_setsize + truncate_pagecache): sets i_size;
  /// shrinking unmaps the pages beyond the new size from every VMA that maps the file
  /// (through i_mmap), drops them from the page cache and the host file, and drops
  /// private COW pages beyond it (as unmap_mapping_range with even_cows). EBADF;
  /// EINVAL: not opened for write; EFBIG: size beyond the file-size limit (2^44
  /// bytes; inode_newsize_ok); EIO: the host file could not be resized.
  int Truncate(uint64_t id, uint64_t size_bytes);
  /// pread(2)/pwrite(2) through the page cache. Returns bytes copied (a read stops at
  /// EOF; a write extends the file). EBADF: unknown id or wrong access mode; EIO: the
  /// backing store failed; EFBIG: a write past the file-size limit; ENOMEM: no frame.
  SysResult Read(uint64_t id, uint64_t offset, void* dst, uint64_t len);
  SysResult Write(uint64_t id, uint64_t offset, const void* src, uint64_t len);
  /// fsync(2): writes back the file's dirty pages. EBADF; EIO when the backing store
  /// refused a write (reported once per failure, like errseq_t).
  int Fsync(uint64_t id);
  /// The rmap checker of seed 003: with the file's i_mmap_rwsem held for read (as
  /// truncate's unmap_mapping_range walks i_mmap), how many VMAs of the file are in a
  /// space's VMA tree but not in i_mmap (only a narrow-scope mmap between its two
  /// inserts makes this nonzero; an rmap walk now would miss them). EBADF in `error`.
  SysResult CheckRmap(uint64_t id);
  /// The file's figures. EBADF in `error` if unknown. With `scope` (a tenant's
  /// cgroup), mapped_vmas and open_handles count only that tenant's: the VMAs of its
  /// spaces (MmStruct::memcg) and its handles of the same file (OpenFile::memcg);
  /// null: every space's and handle's. Takes the table lock (with `scope`) and the
  /// file's i_mmap_rwsem for read.
  SysResult Stat(uint64_t id, FileStat* out, const MemCgroup* scope = nullptr) const;
  /// The Stat of the open handles with ids above `after`, by id, at most `max` of them
  /// (a handle closed meanwhile is left out). `*more` (if given): the last id returned
  /// when more handles follow (the next call's `after`), else 0. Takes the table lock
  /// once, for a walk of at most `max` entries.
  /// `scope`: as Stat's.
  std::vector<FileStat> List(uint64_t after = 0, size_t max = SIZE_MAX, uint64_t* more = nullptr,
                             const MemCgroup* scope = nullptr) const;
  /// The most handles that may be open at once (fs.file-max): Open and CreateShmem
  /// answer ENFILE beyond it. 0 = no limit (the default).
  void SetMaxHandles(uint64_t n);
  /// Handles open now.
  uint64_t HandleCount() const;
  /// The page cache of every File the table opened or created that is still alive
  /// (open, or closed but still mapped), each counted once. Takes the table lock only
  /// (the counts are atomics: cheap enough for every metrics scrape).
  PageCacheTotals Totals() const;
  /// Writes back every dirty page of every file and fdatasyncs each host file (sync(2));
  /// returns 0 or EIO if any write or sync failed (the others are still done).
  int SyncAll();

  FrameAllocator& frames() const;
  /// The read-ahead window of host files opened from now on (the backing device's
  /// read_ahead_kb; default 128 KiB, VM_READAHEAD_PAGES): a page-cache miss in a fault
  /// reads this much around the page (mmap read-around). 0 reads only the page.
  void SetReadAheadBytes(uint64_t bytes);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace vmspace
