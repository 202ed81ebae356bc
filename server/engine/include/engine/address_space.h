// SPDX-License-Identifier: Apache-2.0
// AddressSpace: one virtual address space, the engine's analogue of Linux's mm_struct.
//
// It owns the VMA tree, the page tables, and mmap_lock. Its public calls are the
// syscalls (Mmap, Munmap, Mprotect), a simulated CPU access (Fault, Access) and
// process_vm_readv/writev-style copies (ReadMemory, WriteMemory), plus Maps() for
// /proc/PID/maps. Every public call is thread-safe and takes the locks it needs
// (see LOCKING.md); none may be called with an engine lock held.
//
// Behaviour (argument checks and their order, errno, chosen addresses, VMA merge and
// split, fault outcomes and counters) follows Linux 6.18 on x86-64; each function
// names the kernel code it mirrors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/file.h"
#include "engine/frame_allocator.h"
#include "engine/profile.h"
#include "engine/types.h"
#include "engine/per_thread.h"

namespace vmspace {

/// How a shared write fault that dirtied a page ends after it dropped its lock to
/// throttle (fault_dirty_shared_page, mm/memory.c): kRetry returns VM_FAULT_RETRY and
/// handle_mm_fault runs again (Linux < 5.19: vmstat pgfault counts 2 per page);
/// kCompleted returns VM_FAULT_COMPLETED (Linux 5.19+, commit "mm: avoid unnecessary
/// page fault retires on shared memory types": 1 per page).
enum class SharedFaultCompletion : uint8_t { kRetry, kCompleted };
/// "retry", "completed".
const char* SharedFaultCompletionName(SharedFaultCompletion c);
/// Parses "retry" | "completed"; false if neither.
bool ParseSharedFaultCompletion(const std::string& s, SharedFaultCompletion* out);

/// How mmap of a file links its new VMA (mm/vma.c __mmap_region, vma_link_file):
/// kWide holds the file's i_mmap_rwsem for write across the VMA-tree insert and the
/// i_mmap insert, as Linux does (since 2002: vma_link()); kNarrow stores the VMA in
/// the tree first and takes the lock only for the i_mmap insert (Yu Ma's 2023
/// proposal, "mm/mmap: move vma operations to mm_struct out of the critical section
/// of file mapping lock", rejected as unsafe: an rmap walk such as truncate's
/// unmap_mapping_range can run between the two inserts and miss a VMA that a fault
/// can already reach, leaving a page beyond EOF mapped).
enum class IMmapScope : uint8_t { kWide, kNarrow };
/// "wide", "narrow".
const char* IMmapScopeName(IMmapScope s);
/// Parses "wide" | "narrow"; false if neither.
bool ParseIMmapScope(const std::string& s, IMmapScope* out);

/// Per-space settings. Defaults are this machine's kernel settings for a root process
/// started with `setarch -R` (ASLR off) and an 8 MiB stack rlimit.
struct SpaceOptions {
  /// vm.max_map_count. mmap fails when map_count > this; splits fail at >= this.
  uint64_t max_map_count = kDefaultMaxMapCount;
  /// Effective mmap_min_addr (max of the sysctl and CONFIG_LSM_MMAP_MIN_ADDR = 65536):
  /// hints are raised to it and the top-down search never goes below it.
  uint64_t mmap_min_addr = 65536;
  /// vm.mmap_min_addr sysctl (dac_mmap_min_addr): MAP_FIXED below it is EPERM unless
  /// cap_sys_rawio.
  uint64_t dac_mmap_min_addr = 4096;
  /// The caller has CAP_SYS_RAWIO (root): MAP_FIXED below dac_mmap_min_addr allowed.
  bool cap_sys_rawio = false;
  /// Top of the top-down mmap area (mm->mmap_base). See kDefaultMmapBase.
  uint64_t mmap_base = kDefaultMmapBase;
  /// Heuristic overcommit (vm.overcommit_memory = 0): a single accountable request
  /// (private writable, not MAP_NORESERVE; or shared anonymous) larger than this many
  /// bytes fails with ENOMEM. 0 = the host's RAM + swap, read when the space is created.
  uint64_t overcommit_limit_bytes = 0;
  /// Anonymous THP alignment (Linux 6.7+, restricted in 6.12/6.13): a private
  /// anonymous request whose length is a multiple of 2 MiB, without a hint, is placed
  /// 2 MiB aligned.
  bool thp_align_anon = true;
  /// Anonymous read faults map the shared zero page (upstream Linux). Some kernel
  /// builds (seen: a paravirtualised 6.18 guest) allocate a page instead; set false to
  /// model those (the oracle tests do so when the kernel they run on does).
  bool zero_page = true;
  /// Fault-around window (mm/memory.c fault_around_bytes, debugfs default 64 KiB): a
  /// read fault on a file VMA also maps the neighbouring pages already in the page
  /// cache, within this naturally aligned window, the VMA and one page table. A power
  /// of two in [4096, 2 MiB]; 4096 turns fault-around off.
  uint64_t fault_around_bytes = 65536;
  /// How a shared write fault that dirtied a page completes (see SharedFaultCompletion);
  /// default completed, as this machine's kernel.
  SharedFaultCompletion shared_fault_completion = SharedFaultCompletion::kCompleted;
  /// The i_mmap_rwsem scope of mmap's VMA link (see IMmapScope); default wide (Linux).
  IMmapScope i_mmap_scope = IMmapScope::kWide;
  /// RLIMIT_MEMLOCK in bytes (soft limit; this machine's `ulimit -l` for root: 8 MiB):
  /// mlock, mlockall(MCL_CURRENT) and VM_LOCKED mappings beyond it fail (ENOMEM, EAGAIN)
  /// unless cap_ipc_lock; 0 with cap_ipc_lock false makes mlock EPERM (can_do_mlock).
  /// ~0 = RLIM_INFINITY. Changeable later (AddressSpace::SetRlimitMemlock).
  uint64_t rlimit_memlock = 8ull << 20;
  /// The caller has CAP_IPC_LOCK (root has it): RLIMIT_MEMLOCK does not apply. Off by
  /// default, as cap_sys_rawio; the oracle tests set it from the child's capabilities.
  bool cap_ipc_lock = false;
  /// Locking design (VMA index, per-VMA lock use in faults).
  LockingProfile profile;
  /// mm->start_brk, bytes, page aligned: where the heap (brk area) begins; the break
  /// starts there. Default: a small static binary (gcc -static, glibc 2.36) run with
  /// `setarch -R` on the reference machine (Linux 6.18, x86-64): its kernel start_brk,
  /// the [heap] start in /proc/self/maps, is 0x4ac000 (sbrk(0) printed 0x4ce000 after
  /// glibc's static start-up took 0x22000 of it), the page after its .bss.
  uint64_t start_brk = kDefaultStartBrk;
  /// RLIMIT_DATA (bytes; ~0 = RLIM_INFINITY): brk refuses a break more than this above
  /// start_brk (check_data_rlimit, with no data segment), and growing mremap refuses
  /// private writable growth past it (may_expand_vm's data_vm check).
  uint64_t rlimit_data = ~0ull;
};

/// One VMA as reported by Maps(): the data behind a /proc/PID/maps line and the
/// VmFlags line of /proc/PID/smaps.
struct VmaInfo {
  uint64_t start = 0;   // vm_start, bytes
  uint64_t end = 0;     // vm_end, bytes, exclusive
  uint64_t flags = 0;   // vm_flags (VM_* bits)
  uint64_t pgoff = 0;   // vm_pgoff, pages (for private anon: start >> 12 at creation)
  uint64_t offset = 0;  // the maps "offset" column in bytes (0 for anonymous VMAs)
  uint32_t dev_major = 0, dev_minor = 0;
  uint64_t inode = 0;
  std::string name;     // e.g. "/dev/zero (deleted)" for shared anonymous; "" for anon
  bool anonymous = true;   // private anonymous (vma_is_anonymous)
  bool shmem = false;      // a shmem file: shared anonymous memory or a memfd
  uint64_t rss_pages = 0;  // present PTEs in the VMA
  uint64_t anon_vma_id = 0;  // 0 = no anon_vma yet; unique within the space
};

/// Space-wide figures (mm_struct counters), read without any of the space's locks
/// (each is an atomic or a per-thread-sharded counter; the set is not one snapshot).
struct SpaceCounters {
  uint64_t map_count = 0;       // number of VMAs (mm->map_count)
  uint64_t total_vm_pages = 0;  // mapped pages (mm->total_vm)
  uint64_t anon_pages = 0;      // MM_ANONPAGES: private anonymous frames mapped (not the zero page)
  uint64_t shmem_pages = 0;     // MM_SHMEMPAGES: PTEs mapping shmem pages
  uint64_t file_pages = 0;      // MM_FILEPAGES: PTEs mapping page-cache pages of host files
  uint64_t rss_pages = 0;       // anon_pages + shmem_pages + file_pages (get_mm_rss)
  uint64_t pgtable_bytes = 0;   // page-table pages, 4 KiB each (like VmPTE + VmPMD)
  uint64_t locked_vm_pages = 0; // pages of VM_LOCKED VMAs (mm->locked_vm, VmLck)
  uint64_t sealed_pages = 0;    // pages of VM_SEALED VMAs (they can never be unmapped)
  uint64_t sealed_vmas = 0;     // VMAs with VM_SEALED (mseal)
};

/// Result of Access(): how many faults were taken and, if the walk stopped on a
/// signal or OOM, which fault ended it.
struct AccessResult {
  uint64_t faults = 0;        // minor + major faults handled
  uint64_t major_faults = 0;
  uint64_t accesses = 0;      // bytes touched (one per stride)
  FaultResult stop;           // outcome kNone unless the walk ended early
  bool ok() const { return !stop.failed(); }
};

/// Result of ReadMemory/WriteMemory.
struct CopyResult {
  uint64_t bytes = 0;   // bytes copied before stopping
  uint64_t faults = 0;  // faults handled on the way
  FaultResult stop;     // outcome kNone if all bytes were copied
  bool ok() const { return !stop.failed(); }
};

/// Waits until every deferred free queued so far (frames, page tables, VMAs and index
/// nodes retired after an RCU grace period) has run (rcu_barrier). For tests and
/// accounting: after DestroySpace and RcuBarrier a FrameAllocator's in-use bytes are
/// back to what other spaces use. Must not be called with an engine lock held.
void RcuBarrier();

/// The engine's call_rcu worker since the process started (sync/rcu.cc): grace periods
/// it waited for, callbacks it ran, callbacks queued and not yet run, and the CallRcus
/// that had to wake it (it had stopped polling its queue: kRcuIdlePolls). Takes only the
/// worker's queue lock (a metrics scrape takes no space's locks).
/// Threads that may be inside the engine at once: its RCU reader slots (sync/rcu.h
/// kMaxRcuThreads; a thread keeps its slot from its first engine call to its exit). One
/// more aborts the process, so a service keeps its thread pools well below it.
inline constexpr int kMaxEngineThreads = 4096;

struct RcuStats {
  uint64_t grace_periods = 0;
  uint64_t callbacks_invoked = 0;
  uint64_t callbacks_pending = 0;
  uint64_t worker_wakeups = 0;
};
RcuStats ReadRcuStats();

struct ExecImage;  // engine/exec.h: what AddressSpace::Exec loads

/// One address space (a process's mm). Cache-line aligned, as its MmStruct: spaces
/// used by different threads share no cache line (mm_struct's slab cache is
/// SLAB_HWCACHE_ALIGN, kernel/fork.c proc_caches_init).
class alignas(kDestructiveInterferenceBytes) AddressSpace {
 public:
  /// Creates an empty space. `frames` must outlive the space. The destructor unmaps
  /// everything; no other call may be running on the space then.
  AddressSpace(FrameAllocator& frames, const SpaceOptions& opts = {});
  ~AddressSpace();
  AddressSpace(const AddressSpace&) = delete;
  AddressSpace& operator=(const AddressSpace&) = delete;

  /// mmap(2) for anonymous memory (MAP_ANONYMOUS with MAP_PRIVATE or MAP_SHARED).
  /// `addr`, `len`, `offset` in bytes. Returns the mapped address, or an errno with
  /// the check order of arch/x86 sys_mmap -> ksys_mmap_pgoff -> do_mmap ->
  /// __get_unmapped_area -> __mmap_region (mm/mmap.c, mm/vma.c, Linux 6.18):
  /// EINVAL (offset unaligned, len 0, MAP_FIXED addr unaligned, bad mapping type,
  /// anon MAP_SHARED_VALIDATE, GROWSDOWN|SHARED), EBADF (not MAP_ANONYMOUS: no file
  /// given; see the overload below), EOVERFLOW (offset + len wraps in pages), ENOMEM (len overflow, map_count > max, no room,
  /// FIXED beyond TASK_SIZE, overcommit), EPERM (FIXED below dac_mmap_min_addr),
  /// EEXIST (MAP_FIXED_NOREPLACE overlap), EPERM (MAP_LOCKED with can_do_mlock false;
  /// MAP_FIXED over a sealed VMA), EAGAIN (a VM_LOCKED mapping, MAP_LOCKED or after
  /// mlockall(MCL_FUTURE), beyond RLIMIT_MEMLOCK). VM_LOCKED mappings are populated
  /// (not with VM_LOCKONFAULT). Takes mmap_lock for write.
  SysResult Mmap(uint64_t addr, uint64_t len, int prot, int flags, uint64_t offset = 0);

  /// mmap(2) of an open file (`file` non-null, MAP_ANONYMOUS clear), with `offset` in
  /// bytes (page aligned). Checks in the kernel's order on top of the anonymous ones:
  /// EBADF (file null), EINVAL (MAP_HUGETLB; GROWSDOWN), EOVERFLOW (offset + len wraps
  /// in pages, or beyond MAX_LFS_FILESIZE), EOPNOTSUPP (MAP_SHARED_VALIDATE with an
  /// unknown flag; MAP_SYNC, refused after a MAP_FIXED replacement as the kernel's fs
  /// hook does, leaving the range unmapped), EACCES (MAP_SHARED with PROT_WRITE on a
  /// handle not opened for write; any mapping of a handle not opened for read), EPERM
  /// (MAP_SHARED with PROT_WRITE of a memfd with F_SEAL_WRITE or F_SEAL_FUTURE_WRITE; a
  /// shared read-only one loses VM_MAYWRITE); no
  /// ENODEV (every File can be mapped). A shared mapping of a read-only handle gets
  /// VM_MAYSHARE without VM_SHARED and VM_MAYWRITE. A range beyond EOF maps; its
  /// accesses are SIGBUS. With MAP_ANONYMOUS `file` is ignored. MAP_PRIVATE pages are
  /// read from the page cache until written (copy-on-write); MAP_SHARED writes go to
  /// the page cache. The VMA joins the file's i_mmap. Takes mmap_lock for write, then
  /// i_mmap_rwsem for write (mm/vma.c __mmap_region, vma_link_file).
  SysResult Mmap(uint64_t addr, uint64_t len, int prot, int flags, uint64_t offset,
                 std::shared_ptr<OpenFile> file);

  /// msync(2) (mm/msync.c): with MS_SYNC or MS_ASYNC writes back the dirty page-cache
  /// pages that shared file VMAs of [addr, addr+len) map. EINVAL: addr unaligned, bad
  /// flags, MS_SYNC|MS_ASYNC; ENOMEM: the range has unmapped holes (after doing the
  /// mapped parts); EBUSY: MS_INVALIDATE on a VM_LOCKED VMA; EIO: the backing store
  /// refused a write. Takes mmap_lock for read.
  SysResult Msync(uint64_t addr, uint64_t len, int flags);

  /// munmap(2) (mm/vma.c do_vmi_munmap). EINVAL: addr unaligned, len 0, range beyond
  /// TASK_SIZE; ENOMEM: would split a VMA in the middle at map_count >= max.
  /// A range with no VMA is a successful no-op. EPERM: a VMA of the range is sealed
  /// (nothing is unmapped; a split at the start stays, as Linux). Frees frames and empty
  /// page tables. Takes mmap_lock for write.
  SysResult Munmap(uint64_t addr, uint64_t len);

  /// mprotect(2) (mm/mprotect.c do_mprotect_pkey, mprotect_fixup). EINVAL: addr
  /// unaligned, unknown prot bits, bad PROT_GROWSDOWN; ENOMEM: range not fully mapped
  /// (parts before the hole stay changed, as Linux) or a split at max_map_count;
  /// EACCES: a permission the VMA's VM_MAYxxx lacks; EPERM: a sealed VMA (the VMAs
  /// before it keep their change). len 0 succeeds.
  /// Takes mmap_lock for write.
  SysResult Mprotect(uint64_t addr, uint64_t len, int prot);

  /// madvise(2) (mm/madvise.c, Linux 6.18), every advice this machine's kernel takes
  /// (KSM and THP built in, no CONFIG_MEMORY_FAILURE), checked in the kernel's order:
  /// EINVAL (unknown advice, HWPOISON/SOFT_OFFLINE included; addr unaligned; len
  /// rounding to 0 or wrapping), len 0 succeeds, then each VMA part of the range in
  /// turn; a hole makes the answer ENOMEM while the advice still applies to the mapped
  /// parts; the first per-VMA error ends the walk:
  ///  - NORMAL/RANDOM/SEQUENTIAL (VM_RAND_READ, VM_SEQ_READ), DONTFORK/DOFORK
  ///    (VM_DONTCOPY), WIPEONFORK/KEEPONFORK (VM_WIPEONFORK; EINVAL for file or shared
  ///    VMAs / VM_DROPPABLE), DONTDUMP/DODUMP (VM_DONTDUMP; DODUMP EINVAL on VM_SPECIAL
  ///    or VM_DROPPABLE), MERGEABLE/UNMERGEABLE (VM_MERGEABLE, only on VMAs KSM can
  ///    merge: others ignore it), HUGEPAGE/NOHUGEPAGE: the flags change, splitting and
  ///    merging VMAs as mprotect does (EAGAIN: a split at max_map_count);
  ///  - DONTNEED (EINVAL on VM_LOCKED), DONTNEED_LOCKED: zap the PTEs (guard markers
  ///    stay); FREE (private anonymous VMAs only, else EINVAL; EINVAL on VM_LOCKED):
  ///    the frames stay mapped until reclaim (ReclaimLazyFree, or an access that found
  ///    no frame) drops those not written since; a read then finds zeros;
  ///  - WILLNEED: reads the host file's pages of the range below EOF into the page
  ///    cache (anonymous and shmem: nothing, no swap); COLD: nothing but its EINVAL on
  ///    VM_LOCKED; PAGEOUT (EINVAL on VM_LOCKED): unmaps the file pages of the range and
  ///    drops the clean host-file ones no other mapping maps from the page cache
  ///    (anonymous pages stay: no swap);
  ///  - REMOVE: EINVAL (VM_LOCKED, no file), EACCES (not shared writable-capable);
  ///    punches the file's pages out of the page cache and the host file (File::PunchHole);
  ///  - POPULATE_READ/WRITE: fault the range in; ENOMEM (a hole: stops there), EINVAL
  ///    (a VMA that does not allow the access), EFAULT (SIGSEGV/SIGBUS: a guard page,
  ///    beyond EOF), ENOMEM (out of frames);
  ///  - COLLAPSE: EINVAL unless the VMA is anonymous, holds an aligned 2 MiB range and
  ///    each whole 2 MiB block of the range has a page; the blocks are then faulted in
  ///    (no huge pages in the engine);
  ///  - GUARD_INSTALL (EINVAL on VM_SPECIAL, VM_HUGETLB, VM_LOCKED): zaps the range and
  ///    marks each PTE as a guard page (an access: SIGSEGV, SEGV_MAPERR); GUARD_REMOVE
  ///    (EINVAL on VM_SPECIAL, VM_HUGETLB) clears the marks.
  /// EPERM: a discarding advice (DONTNEED, FREE, REMOVE, DONTFORK, WIPEONFORK,
  /// GUARD_INSTALL...) on a sealed read-only private anonymous VMA (can_madvise_modify).
  /// Takes mmap_lock for write for the flag advices and the guard advices, else for
  /// read (POPULATE: per VMA, then each fault takes its own lock); REMOVE's punch and
  /// WILLNEED's reads run after it is dropped.
  SysResult Madvise(uint64_t addr, uint64_t len, int advice);

  /// Memory pressure on MADV_FREE pages: frees every page of the space that MADV_FREE
  /// marked and that was not written since (the lazyfree case of shrink_folio_list).
  /// Returns the pages freed. Takes mmap_lock for read.
  uint64_t ReclaimLazyFree();

  /// mincore(2) (mm/mincore.c, Linux 6.18): sets *vec to one byte per page of
  /// [addr, addr+len) (len rounded up to pages), 1 if resident: a present PTE (the zero
  /// page included), or for a file VMA (shmem, private file) a page of the file in the
  /// page cache even if not mapped here; 0 otherwise (also a guard page of an
  /// anonymous VMA; a guard page of a file VMA answers for the page cache). EINVAL:
  /// addr unaligned; ENOMEM: the range goes beyond TASK_SIZE, or has a hole (*vec
  /// then holds the entries of the VMAs before it, as the kernel copies them out).
  /// len 0 succeeds with an empty vector. Takes mmap_lock for read.
  SysResult Mincore(uint64_t addr, uint64_t len, std::vector<uint8_t>* vec);

  /// brk(2) (mm/mmap.c SYSCALL brk, do_brk_flags; Linux 6.18): moves the break to
  /// `new_brk` (bytes). Returns the new break, or the old one if the call fails (brk
  /// never returns an errno): below start_brk (brk(0) asks for the break), above
  /// RLIMIT_DATA, the grown range (plus a page and a neighbour's stack guard gap)
  /// reaching the next VMA, beyond TASK_SIZE, max_map_count or the overcommit limit.
  /// Growth extends the brk VMA ([heap] in Maps) or maps a new private anonymous
  /// VM_ACCOUNT one; shrinking unmaps. Takes mmap_lock for write.
  uint64_t Brk(uint64_t new_brk);

  /// mremap(2) (mm/mremap.c; Linux 6.18): resizes and/or moves [old_addr,
  /// old_addr+old_len) of one VMA. flags: MREMAP_MAYMOVE (1), MREMAP_FIXED (2, with
  /// new_addr), MREMAP_DONTUNMAP (4). Returns the (new) address. A move moves the page
  /// table entries (no data is copied) under both PTE locks and the rmap locks.
  /// Errors in the kernel's order, first before any lock (check_mremap_params, on the
  /// page-aligned lengths): EINVAL (unknown flags, old_addr unaligned, new_len 0 or
  /// beyond TASK_SIZE; with FIXED or DONTUNMAP: new range beyond TASK_SIZE, new_addr
  /// unaligned, no MAYMOVE, DONTUNMAP with a resize, overlapping ranges), ENOMEM
  /// (map_count near the limit); then EFAULT (no VMA at old_addr), and per step EINVAL
  /// (old_len 0 of a private mapping, a shrink's tail past TASK_SIZE, pgoff wrap),
  /// EFAULT (the range not inside its VMA), ENOMEM (growth blocked without MAYMOVE, no
  /// room, overcommit, RLIMIT_DATA; EAGAIN past RLIMIT_MEMLOCK), EPERM (FIXED below
  /// dac_mmap_min_addr; a sealed VMA). A MREMAP_FIXED move without a resize moves
  /// every VMA of the range, keeping the gaps between them (remap_move, Linux 6.17+;
  /// a gap at the start: EFAULT). Takes mmap_lock for write.
  SysResult Mremap(uint64_t old_addr, uint64_t old_len, uint64_t new_len, uint64_t flags, uint64_t new_addr = 0);

  /// mlock2(2) (mm/mlock.c do_mlock, apply_vma_lock_flags, mlock_fixup; Linux 6.18):
  /// sets VM_LOCKED (and VM_LOCKONFAULT with MLOCK_ONFAULT) on the pages of
  /// [addr & ~4095, addr + len rounded up), splitting and merging VMAs, counts them in
  /// locked_vm and faults them in (__mm_populate; not with MLOCK_ONFAULT). EINVAL:
  /// flags other than MLOCK_ONFAULT, range wraps; EPERM: RLIMIT_MEMLOCK 0 without
  /// CAP_IPC_LOCK; ENOMEM: beyond RLIMIT_MEMLOCK (pages already locked in the range not
  /// counted twice), the range starts in or has a hole (the VMAs before the hole stay
  /// locked, nothing is populated), or a page could not be faulted in (PROT_NONE: the
  /// VMA stays locked, as the kernel's EFAULT); a split at max_map_count. Takes
  /// mmap_lock for write, then for read to populate.
  SysResult Mlock(uint64_t addr, uint64_t len, int flags = 0);
  /// munlock(2): clears VM_LOCKED / VM_LOCKONFAULT on the range. ENOMEM: a hole.
  SysResult Munlock(uint64_t addr, uint64_t len);
  /// mlockall(2): MCL_CURRENT locks (and populates) every VMA, MCL_FUTURE makes new
  /// mappings locked (mm->def_flags), MCL_ONFAULT with either. EINVAL: 0, unknown bits,
  /// MCL_ONFAULT alone; EPERM: can_do_mlock fails; ENOMEM: MCL_CURRENT with total_vm
  /// beyond RLIMIT_MEMLOCK (without CAP_IPC_LOCK).
  SysResult Mlockall(int flags);
  /// munlockall(2): unlocks every VMA and clears def_flags' lock bits. Always 0.
  SysResult Munlockall();
  /// mseal(2) (mm/mseal.c do_mseal, Linux 6.18): sets VM_SEALED on [addr, addr + len):
  /// munmap, mprotect, mremap, MAP_FIXED over it and discarding madvise advice on
  /// read-only private anonymous memory then fail with EPERM, for good. EINVAL: flags
  /// not 0, addr unaligned, len rounds to 0 from near 2^64, range wraps; ENOMEM: the
  /// range has a hole (nothing sealed). Takes mmap_lock for write.
  SysResult Mseal(uint64_t addr, uint64_t len, uint64_t flags = 0);
  /// setrlimit(RLIMIT_MEMLOCK) in bytes (~0 = unlimited) and the CAP_IPC_LOCK bit of the
  /// space's process (capset); both start from SpaceOptions.
  void SetRlimitMemlock(uint64_t bytes);
  void SetCapIpcLock(bool cap);

  /// Simulates one CPU access of one byte at `addr`: if the PTE allows it nothing
  /// happens (kNone); otherwise runs the page-fault handler (arch/x86/mm/fault.c
  /// do_user_addr_fault -> handle_mm_fault) and re-executes the access, as the CPU
  /// does, until the PTE allows it or the fault ends in a signal. Outcomes: kMinor
  /// (zero page mapped, frame allocated, zero page COW, a cached file page mapped or
  /// copied), kMajor (the file page was read from the host file), kSigsegv with
  /// SEGV_MAPERR (no VMA) or SEGV_ACCERR (access_error), kSigbus with BUS_ADRERR (a file
  /// page wholly beyond EOF, or its read failed), kOom. The fault takes the VMA read
  /// lock (profiles with per-VMA locks) or mmap_lock for read; the access itself runs
  /// under RCU only.
  FaultResult Fault(uint64_t addr, AccessType access);

  /// Touches one byte every `stride` bytes of [addr, addr+len) with `access`
  /// (the seed-004 accessit(): a write stores (uint8_t)i at addr+i). Stops at the
  /// first access that ends in a signal or OOM, or where addr+i would pass 2^64.
  /// stride 0 is treated as 1.
  AccessResult Access(uint64_t addr, uint64_t len, uint64_t stride, AccessType access);

  /// Copies `len` bytes out of / into the space at `addr` as the process itself would
  /// (faulting pages in as needed; writes need VM_WRITE, reads any access bit).
  /// Stops at the first byte whose access ends in a signal or OOM.
  CopyResult ReadMemory(uint64_t addr, void* dst, uint64_t len);
  CopyResult WriteMemory(uint64_t addr, const void* src, uint64_t len);

  /// The VMAs overlapping [start, end), in address order. Takes mmap_lock for read.
  std::vector<VmaInfo> Maps(uint64_t start = 0, uint64_t end = ~0ull);
  /// How many VMAs overlap [start, end), counting no further than `max` (a walk of the
  /// index that stops there: a cheap bound before building an answer). Takes mmap_lock
  /// for read.
  uint64_t CountVmas(uint64_t start, uint64_t end, uint64_t max);
  /// /proc/PID/maps text of the VMAs overlapping [start, end) (one line per VMA).
  std::string RenderMaps(uint64_t start = 0, uint64_t end = ~0ull);
  /// The space's counters in O(1), taking none of its locks (safe from a metrics
  /// scrape while the space is busy).
  SpaceCounters Counters() const;

  /// fork(2)'s copy of the space (dup_mmap, mm/mmap.c; copy_page_range, mm/memory.c;
  /// anon_vma_fork, mm/rmap.c; Linux 6.18): a new space on the same FrameAllocator with
  /// this one's options (the locking profile replaced by `profile` if given), the same
  /// VMAs and flags except VM_DONTCOPY VMAs (left out) and VM_LOCKED (cleared);
  /// VM_WIPEONFORK VMAs start empty. Private anonymous pages (and private copies of
  /// file pages) are shared copy-on-write: both sides' PTEs write-protected, the first
  /// write copies the page unless no other space maps it any more (do_wp_page). Shared
  /// mappings stay shared (file VMAs join their File's i_mmap); pages of VMAs without
  /// an anon_vma are faulted in again by the child. The child's page tables and VMAs are
  /// charged to the budget now, COW copies when they happen. Returns the child, or null
  /// with *error = ENOMEM (the budget, the frame limit, or a VM_ACCOUNT VMA larger than
  /// the overcommit limit, as dup_mmap's security_vm_enough_memory_mm: nothing of the
  /// child is left).
  /// Takes this space's mmap_lock for write (then the child's); with the profile's
  /// fork_vma_lock also each VMA's write lock as it is copied.
  std::unique_ptr<AddressSpace> DupMmap(int* error = nullptr, const LockingProfile* profile = nullptr);

  /// execve(2)'s new address space (fs/exec.c exec_mmap, fs/binfmt_elf.c
  /// load_elf_binary, Linux 6.18, ASLR off as under `setarch -R`): a new space with
  /// this one's options (not its mappings, locks or mlockall(MCL_FUTURE)) holding the
  /// program's initial layout: the [stack] VMA below STACK_TOP (the argument pages
  /// with `image`'s strings written in, expanded by 128 KiB), the PT_LOAD segments
  /// mapped privately from the file (an ET_DYN program with an interpreter at
  /// 0x555555554000, ET_EXEC at its addresses), padzero's write to the end of the
  /// last file page of a segment with bss and the bss beyond as anonymous memory, the
  /// interpreter's segments top-down below mmap_base, then [vvar], [vvar_vclock] and
  /// [vdso] placeholders (special mappings: their flags, no pages) below those; brk
  /// starts at the page after the program's bss. Returns the space, or null with
  /// *error: E2BIG (strings beyond a quarter of the 8 MiB stack limit), ENOEXEC (no
  /// PT_LOAD), ENOENT (PT_INTERP without an interpreter in `image`), EINVAL, EEXIST,
  /// ENOMEM, EFAULT (as the mappings fail). This space is not changed (the caller
  /// replaces it, as exec_mmap does). Defined in exec.cc.
  std::unique_ptr<AddressSpace> Exec(const ExecImage& image, int* error = nullptr) const;

  /// Checks the space's invariants (validate_mm): VMAs sorted, non-overlapping, page
  /// aligned, found by the index, attached; map_count and total_vm consistent; every
  /// present PTE inside a VMA; MM_ANONPAGES / MM_SHMEMPAGES equal to the frames the
  /// page tables map; no private frame mapped twice. Returns "" if all hold, else a
  /// description. Takes mmap_lock for write and write-locks every VMA, so no fault
  /// runs meanwhile.
  std::string Validate();

  const SpaceOptions& options() const;

  /// One maps line (fs/proc/task_mmu.c show_map_vma format) without the newline.
  static std::string FormatMapsLine(const VmaInfo& v);
  /// The VmFlags mnemonics of /proc/PID/smaps (show_smap_vma_flags), e.g. "rd wr mr mw me ac".
  static std::string VmFlagsString(uint64_t flags);

 private:
  friend struct AddressSpaceTestAccess;  // engine tests: the MmStruct behind a space
  std::unique_ptr<struct MmStruct> mm_;  // engine-internal state (server/engine/mm.h)
};

}  // namespace vmspace
