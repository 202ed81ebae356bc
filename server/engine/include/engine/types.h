// SPDX-License-Identifier: Apache-2.0
// Basic constants and small result types of the vmspace engine.
//
// The engine mirrors Linux's memory manager (x86-64, 4 KiB pages, 4-level paging).
// All addresses and lengths are in bytes unless a name says "pages". Ranges are
// half-open: [start, end). Protection and mmap flag values are Linux's own numbers
// (<sys/mman.h>), so a caller can pass what it would pass to mmap(2).
#pragma once

#include <cstdint>
#include <string>
#include <fcntl.h>
#include <sys/mman.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef PROT_SEM
#define PROT_SEM 0x8
#endif
#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif
#ifndef MAP_DROPPABLE
#define MAP_DROPPABLE 0x08
#endif
// madvise advices newer than this C library's <sys/mman.h> (include/uapi/asm-generic/mman-common.h).
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef MADV_SOFT_OFFLINE
#define MADV_SOFT_OFFLINE 101
#endif
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#ifndef MADV_GUARD_REMOVE
#define MADV_GUARD_REMOVE 103
#endif
#ifndef MLOCK_ONFAULT
#define MLOCK_ONFAULT 0x01
#endif
#ifndef MCL_ONFAULT
#define MCL_ONFAULT 4
#endif
// memfd seals (include/uapi/linux/fcntl.h) and memfd_create flags (uapi/linux/memfd.h).
#ifndef F_SEAL_SEAL
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#define F_SEAL_WRITE 0x0008
#endif
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
#ifndef F_SEAL_EXEC
#define F_SEAL_EXEC 0x0020
#endif
#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif
#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif

namespace vmspace {

inline constexpr uint64_t kPageShift = 12;
inline constexpr uint64_t kPageSize = 1ull << kPageShift;
inline constexpr uint64_t kPageMask = ~(kPageSize - 1);
inline constexpr uint64_t kPmdSize = 2ull << 20;  // one PTE table maps 2 MiB
/// x86-64 4-level TASK_SIZE: 47 bits minus one page (arch/x86/include/asm/page_64_types.h).
inline constexpr uint64_t kTaskSize = 0x7ffffffff000ull;
/// stack_guard_gap default: 256 pages (mm/mmap.c).
inline constexpr uint64_t kStackGuardGap = 256 * kPageSize;
/// mmap_base for RLIMIT_STACK = 8 MiB and ASLR off: TASK_SIZE - 128 MiB (the gap is
/// clamped to at least 128 MiB; arch/x86/mm/mmap.c mmap_base()).
inline constexpr uint64_t kDefaultMmapBase = 0x7ffff7fff000ull;
/// Default mm->start_brk (SpaceOptions::start_brk): a small static binary's under
/// `setarch -R` on the reference machine (see there).
inline constexpr uint64_t kDefaultStartBrk = 0x4ac000ull;
/// DEFAULT_MAX_MAP_COUNT (include/linux/mm.h): 65535 - 5.
inline constexpr uint64_t kDefaultMaxMapCount = 65530;

inline constexpr bool PageAligned(uint64_t x) { return (x & (kPageSize - 1)) == 0; }

// ---- vm_flags bits (include/linux/mm.h). Numeric values are Linux's. ----
enum VmFlag : uint64_t {
  VM_NONE = 0,
  VM_READ = 0x1,
  VM_WRITE = 0x2,
  VM_EXEC = 0x4,
  VM_SHARED = 0x8,
  VM_MAYREAD = 0x10,
  VM_MAYWRITE = 0x20,
  VM_MAYEXEC = 0x40,
  VM_MAYSHARE = 0x80,
  VM_GROWSDOWN = 0x100,
  VM_PFNMAP = 0x400,
  /// Guard markers may be in the VMA (set by MADV_GUARD_INSTALL on the whole VMA, never
  /// cleared; sticky: ignored when VMAs merge, kept by the merged one). smaps "gu".
  VM_MAYBE_GUARD = 0x800,
  VM_LOCKED = 0x2000,
  VM_IO = 0x4000,
  VM_SEQ_READ = 0x8000,    // MADV_SEQUENTIAL
  VM_RAND_READ = 0x10000,  // MADV_RANDOM
  VM_DONTCOPY = 0x20000,
  VM_DONTEXPAND = 0x40000,
  VM_LOCKONFAULT = 0x80000,  // mlock2(MLOCK_ONFAULT), mlockall(MCL_ONFAULT): lock pages as they fault
  VM_ACCOUNT = 0x100000,
  VM_NORESERVE = 0x200000,
  VM_HUGETLB = 0x400000,
  VM_SYNC = 0x800000,
  VM_WIPEONFORK = 0x2000000,
  VM_DONTDUMP = 0x4000000,
  VM_MIXEDMAP = 0x10000000,
  VM_HUGEPAGE = 0x20000000,    // MADV_HUGEPAGE
  VM_NOHUGEPAGE = 0x40000000,
  VM_MERGEABLE = 0x80000000,   // MADV_MERGEABLE (KSM)
  VM_DROPPABLE = 1ull << 36,  // VM_HIGH_ARCH_4 on x86-64 (Linux 6.11+)
  VM_SEALED = 1ull << 63,     // mseal(2) (Linux 6.10+; bit 63 on 64-bit through 6.18)
};
/// VM_LOCKED_MASK (include/linux/mm.h): the bits mlock and munlock set and clear.
inline constexpr uint64_t VM_LOCKED_MASK = VM_LOCKED | VM_LOCKONFAULT;
inline constexpr uint64_t VM_ACCESS_FLAGS = VM_READ | VM_WRITE | VM_EXEC;
inline constexpr uint64_t VM_SPECIAL = VM_IO | VM_DONTEXPAND | VM_PFNMAP | VM_MIXEDMAP;

/// Result of a syscall-like engine call: `error` is 0 on success or a positive Linux
/// errno (EINVAL, ENOMEM, ...); `value` is the result (an address for mmap, 0 otherwise).
struct SysResult {
  int error = 0;
  uint64_t value = 0;
  bool ok() const { return error == 0; }
  static SysResult Ok(uint64_t v = 0) { return {0, v}; }
  static SysResult Err(int e) { return {e, 0}; }
};

/// The kind of memory access that causes a fault (FAULT_FLAG_WRITE / INSTRUCTION).
enum class AccessType : uint8_t { kRead = 0, kWrite = 1, kExec = 2 };

/// How a simulated access ended. kNone: the PTE already allowed the access (no fault).
/// kMinor/kMajor: a fault was handled and the access then succeeded. kSigsegv/kSigbus:
/// the access ends in that signal (sig_code says why). kOom: no frame could be allocated
/// (daemon-wide frame limit, Linux's VM_FAULT_OOM). kInterrupted: the access was not
/// done because the caller asked to stop (CancelScope, engine/cancel.h) or the fault was
/// re-executed kMaxFaultRetries times without the PTE allowing the access (an endless
/// race with zaps); no signal, the caller decides (the service: CANCELLED,
/// DEADLINE_EXCEEDED or ABORTED).
enum class FaultOutcome : uint8_t { kNone = 0, kMinor, kMajor, kSigsegv, kSigbus, kOom, kInterrupted };

/// Most times one access is re-executed after a fault before it ends kInterrupted.
inline constexpr int kMaxFaultRetries = 1 << 16;

/// vm_fault_t bits (include/linux/mm_types.h, Linux's values) that a fault returned
/// inside the engine; FaultResult::vm_fault carries those of the access's last fault.
enum VmFaultBits : uint32_t {
  VM_FAULT_OOM = 0x000001,
  VM_FAULT_SIGBUS = 0x000002,
  VM_FAULT_MAJOR = 0x000004,
  VM_FAULT_SIGSEGV = 0x000040,
  VM_FAULT_NOPAGE = 0x000100,
  VM_FAULT_LOCKED = 0x000200,
  VM_FAULT_RETRY = 0x000400,  // the fault dropped its lock; handle_mm_fault ran again
  VM_FAULT_COMPLETED = 0x004000,  // the fault is done and dropped its lock (Linux 5.19+)
};

/// Which lock a fault was finally handled under.
enum class LockPath : uint8_t { kNone = 0, kVmaLock, kMmapLock };

/// sig_code values as in <signal.h>.
inline constexpr int kSegvMaperr = 1;  // SEGV_MAPERR
inline constexpr int kSegvAccerr = 2;  // SEGV_ACCERR
inline constexpr int kBusAdrerr = 2;   // BUS_ADRERR

/// Result of one simulated access (Fault()).
struct FaultResult {
  FaultOutcome outcome = FaultOutcome::kNone;
  int sig_code = 0;        // for kSigsegv/kSigbus
  uint64_t sig_addr = 0;   // faulting byte address for signals
  LockPath path = LockPath::kNone;  // the lock the last fault was handled under
  /// Page faults handled for this access, as getrusage's min_flt counts them: 1 per
  /// fault that reached handle_mm_fault and installed or fixed a PTE (kMinor/kMajor),
  /// also for an instruction fetch from a readable, non-executable page that was not
  /// present (faulted in as a read, then SEGV_ACCERR). More than 1 when the access was
  /// re-executed after a racing change (e.g. a concurrent read installed the zero page
  /// before this write's PTE: the write then takes the zero-page copy-on-write fault).
  uint32_t faults = 0;
  /// VmFaultBits of the last fault: MAJOR, NOPAGE, SIGSEGV, SIGBUS, OOM, and RETRY or
  /// COMPLETED when a shared write fault dropped its lock to throttle for dirty pages
  /// (RETRY: the fault was handled a second time; `faults` still counts it once, as
  /// min_flt).
  uint32_t vm_fault = 0;
  /// A per-VMA-lock attempt of the last fault answered VM_FAULT_RETRY and the fault was
  /// redone under mmap_lock (events vma_lock_retry_file, vma_lock_retry_anon_vma).
  bool vma_lock_retry = false;
  bool signal() const {
    return outcome == FaultOutcome::kSigsegv || outcome == FaultOutcome::kSigbus;
  }
  bool failed() const {
    return signal() || outcome == FaultOutcome::kOom || outcome == FaultOutcome::kInterrupted;
  }
};

/// Which VMA index a space uses (see vma_index.h): "rbtree" (valid only under
/// mmap_lock, Linux <= 6.0) or "maple" (RCU-readable B-tree, Linux >= 6.1).
enum class VmaIndexKind : uint8_t { kRbtree, kMaple };
const char* VmaIndexKindName(VmaIndexKind k);

/// Which faults the per-VMA lock path handles (lock_vma_under_rcu; docs/profiles.md
/// "Switches"): none (every fault takes mmap_lock, Linux < 6.4); anonymous faults, file
/// faults answering VM_FAULT_RETRY (kAnon, 6.4/6.5); anonymous faults and the file read
/// faults that fault-around serves from the page cache, every other file fault
/// VM_FAULT_RETRY (kAround, 6.6: "mm: run the fault-around code under the VMA lock");
/// or every fault, file read misses, COW and shared write faults included (kAll, 6.7:
/// "mm: handle read/shared/COW faults under the VMA lock").
enum class VmaLockMode : uint8_t { kOff, kAnon, kAround, kAll };
const char* VmaLockModeName(VmaLockMode m);

/// Name of an errno value ("EINVAL", glibc's strerrorname_np), "OK" for 0, or
/// "errno<N>" for a number glibc does not know. The one errno-name table of the project.
const char* ErrnoName(int err);
/// "none", "minor", "major", "sigsegv", "sigbus", "oom", "interrupted".
const char* FaultOutcomeName(FaultOutcome o);
/// "none", "vma_lock", "mmap_lock".
const char* LockPathName(LockPath p);

}  // namespace vmspace
