// SPDX-License-Identifier: Apache-2.0
// vmspace_oracle_child: the "kernel side" of the oracle differential tests.
//
// The test driver starts this program with ASLR disabled (personality
// ADDR_NO_RANDOMIZE) and an 8 MiB stack rlimit, writes one operation per line to its
// stdin, and reads one response per operation from its stdout. Every operation is
// performed with raw system calls on this process's own address space, so the
// answers are the running kernel's.
//
// The program never allocates memory dynamically after it has started (no malloc,
// no stdio, no C++ containers): every buffer is static, so the only mappings that
// change while it runs are the ones the driver asks for.
//
// Protocol (numbers in hexadecimal without "0x"; every response ends with a line "."):
//   start-up            -> "P <personality> <rlimit_stack>", "Z <zero_page>",
//                          "T <thp_align>", "L <mmap_min_addr>", "K <cap_sys_rawio>",
//                          the whole maps as "M <line>" lines, "C <map_count>", "."
//                          (zero_page: 1 if a read fault on untouched private anonymous
//                          memory maps the shared zero page, i.e. a later write to the
//                          page faults again; 0 if the read already allocated a page;
//                          thp_align: bit 0 if a non-hinted private anonymous mmap of
//                          2 MiB is placed 2 MiB aligned, bit 1 the same for 2 MiB + 4
//                          KiB (Linux 6.7-6.11 aligned every length >= 2 MiB);
//                          mmap_min_addr: where a hint of 0x1000 is raised to (the
//                          effective mmap_min_addr, at least 0x1000); cap_sys_rawio: 1
//                          if the child has CAP_SYS_RAWIO in its effective set),
//                          then "I <cap_ipc_lock> <RLIMIT_MEMLOCK soft limit>" 
//                          Or "X <reason>" if the start-up layout is not usable.
//   mmap A L P F O [FD] -> "R <ret>" or "E <errno>"      (fd -1 unless FD is given)
//   open PATH FLAGS     -> "R <fd>" or "E <errno>"       (PATH without spaces; mode 0644)
//   memfd NAME SIZE [F] -> "R <fd>" or "E <errno>"       (memfd_create(NAME, F), SIZE
//                          bytes, byte (k+1)&0xff in page k, like the test files)
//   reopen FD FLAGS     -> "R <fd>" or "E <errno>"       (open("/proc/self/fd/FD", FLAGS))
//   fcntl FD CMD ARG    -> "R <ret>" or "E <errno>"      (F_ADD_SEALS, F_GET_SEALS)
//   mlock A L F         -> "R <ret>" or "E <errno>"      (mlock2)
//   munlock A L         -> "R <ret>" or "E <errno>"
//   mlockall F          -> "R <ret>" or "E <errno>"
//   munlockall          -> "R <ret>" or "E <errno>"
//   mseal A L F         -> "R <ret>" or "E <errno>"
//   rlimit RES N        -> "R <ret>" or "E <errno>"      (setrlimit: soft and hard N)
//   capipc ON           -> "R <ret>" or "E <errno>"      (CAP_IPC_LOCK in the effective
//                          set on or off: capset; the permitted set keeps it)
//   pread FD OFF LEN    -> "R <ret> <first byte> <fnv1a-64 of the bytes>" or "E <errno>"
//                          (LEN at most 64 KiB)
//   pwrite FD OFF LEN V -> "R <ret>" or "E <errno>"      (LEN bytes of value V)
//   ftruncate FD SIZE   -> "R <ret>" or "E <errno>"
//   fstat FD            -> "R <st_size>" or "E <errno>"
//   msync A L F         -> "R <ret>" or "E <errno>"
//   madvise A L ADV     -> "R <ret>" or "E <errno>"
//   mincore A L         -> "C <errno or 0> <vector as 0/1 characters, '-' if empty>"
//                          (the entries the kernel wrote, also before an error; L at
//                          most 64 Ki pages)
//   munmap A L          -> "R <ret>" or "E <errno>"
//   mprotect A L P      -> "R <ret>" or "E <errno>"
//   brk A               -> "R <ret>"  (the break brk(2) returns; it has no errno)
//   mremap A OL NL F NA -> "R <ret>" or "E <errno>"
//   read A              -> "V <byte> <faults>" or "S <signo> <si_code> <si_addr> <faults>"
//   write A V           -> "OK <faults>" or "S ..."
//   exec A              -> "OK <faults>" or "S ..." (only instruction-fetch faults are
//                          reported as signals; see the exec probe below)
//   fill A L V          -> "OK <faults>" or "S ..."  (writes V to every byte, in order)
//   touch A L STRIDE W  -> "OK <faults>" or "S ..."  (one access every STRIDE bytes:
//                          W=0 reads, W=1 writes (uint8_t)i at A+i, like the engine's
//                          AddressSpace::Access)
//   mmapn A N STEP L P F-> "N <done> <errno>"  (N mmaps at A + i*STEP; stops at the
//                          first failure; errno 0 if all succeeded)
//   maps LO HI WITHFLAGS-> for each VMA overlapping [LO,HI): "M <maps line>" and, if
//                          WITHFLAGS is 1, "F <VmFlags>"; then "C <map_count>"
//   count               -> "C <map_count>"
//   vmlck               -> "R <kB>"  (VmLck of /proc/self/status: mm->locked_vm)
//   fork OUT IN         -> "R <pid>" or "E <errno>"      (fork(2); the new process opens
//                          the FIFO IN for reading, then OUT for writing, makes them its
//                          stdin and stdout, and answers there on its own: "F <pid>",
//                          "."; from then on it serves the same protocol)
//   quit                -> exits
// <faults> is the number of page faults the access took (minor + major, from
// getrusage(RUSAGE_THREAD)); the code paths involved are warmed up at start so that
// only faults on the target pages are counted.
// map_count is the number of lines of /proc/self/maps without [vsyscall], which is
// not a VMA (it equals mm->map_count).
//
// The top-down plug: before the start-up report the child fills every free address
// in [kPlugFloor, kMmapBase) with PROT_NONE MAP_SHARED|MAP_ANONYMOUS placeholders, so
// that the top-down search of every non-fixed mmap starts at kPlugFloor, below a
// layout that is the same on every machine: the child's own mappings near mmap_base
// (its binary, .bss, vvar, vdso) differ in size and number between builds and
// kernels, and placements among them would differ too. The lowest placeholder is
// [kPlugFloor, kPlugFloor + 1 MiB) on every machine (so a MAP_FIXED just above the
// highest placement splits a VMA of a fixed size); the rest are MAP_NORESERVE (not
// charged to overcommit). Nothing of the child may lie in the kTopDownWindow below
// kPlugFloor.
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>

namespace {

// ---- exec probe ----------------------------------------------------------------
// Executing an arbitrary byte of a test page is not safe, so ExecProbe jumps to the
// target with IRETQ, which loads RIP and RFLAGS (with the trap flag TF set) at once:
// the CPU fetches the instruction at the target (this is the access under test; a
// non-executable or missing page faults here with PF_INSTR), executes exactly one
// instruction with every general register pointing into a private scratch mapping
// (nothing else is mapped within 2 GiB of it, so memory operands relative to a
// register either hit the scratch area or fault), and then raises a single-step trap
// (SIGTRAP). Any signal other than an
// instruction-fetch page fault therefore means "the fetch succeeded".
constexpr uint64_t kScratchBase = 0x100000000000ull;  // 16 TiB: free with ASLR off
constexpr uint64_t kScratchSize = 2ull << 20;
constexpr uint64_t kScratchRegs = kScratchBase + (1ull << 20) + 0x800;
constexpr uint64_t kScratchStack = kScratchBase + (2ull << 20) - 0x10000;

// ---- top-down plug (see the header comment) ------------------------------------
constexpr uint64_t kMmapBase = 0x7ffff7fff000ull;   // ASLR off, 8 MiB stack rlimit
constexpr uint64_t kPlugFloor = 0x7fffe0000000ull;  // 2 MiB aligned, ~384 MiB below
constexpr uint64_t kPlugFloorSize = 1ull << 20;
constexpr uint64_t kTopDownWindow = 16ull << 30;

extern "C" void oracle_exec_probe_jump(uint64_t target, uint64_t regs, uint64_t rsp);
asm(R"(
  .text
  .globl oracle_exec_probe_jump
  .type oracle_exec_probe_jump,@function
oracle_exec_probe_jump:
  mov %ss, %eax
  push %rax
  push %rdx
  pushfq
  orq $0x100, (%rsp)
  mov %cs, %eax
  push %rax
  push %rdi
  mov %rsi, %rax
  mov %rsi, %rbx
  mov %rsi, %rcx
  mov %rsi, %rdx
  mov %rsi, %rdi
  mov %rsi, %rbp
  mov %rsi, %r8
  mov %rsi, %r9
  mov %rsi, %r10
  mov %rsi, %r11
  mov %rsi, %r12
  mov %rsi, %r13
  mov %rsi, %r14
  mov %rsi, %r15
  iretq
  .size oracle_exec_probe_jump, .-oracle_exec_probe_jump
)");

// ---- signal catching -----------------------------------------------------------
sigjmp_buf g_jmp;
volatile sig_atomic_t g_sig;
volatile int g_code;
volatile uint64_t g_addr;
volatile uint64_t g_trapno;
volatile uint64_t g_err;
alignas(64) char g_altstack[256 * 1024];

void Handler(int sig, siginfo_t* si, void* ucv) {
  auto* uc = static_cast<ucontext_t*>(ucv);
  g_sig = sig;
  g_code = si->si_code;
  g_addr = reinterpret_cast<uint64_t>(si->si_addr);
  g_trapno = static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_TRAPNO]);
  g_err = static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_ERR]);
  siglongjmp(g_jmp, 1);
}

// ---- output --------------------------------------------------------------------
char g_out[1 << 20];
size_t g_outlen;

void Flush() {
  size_t off = 0;
  while (off < g_outlen) {
    ssize_t n = write(1, g_out + off, g_outlen - off);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      _exit(3);
    }
    off += static_cast<size_t>(n);
  }
  g_outlen = 0;
}
void Put(const char* s, size_t n) {
  if (g_outlen + n > sizeof g_out) Flush();
  if (n > sizeof g_out) n = sizeof g_out;
  memcpy(g_out + g_outlen, s, n);
  g_outlen += n;
}
void Puts(const char* s) { Put(s, strlen(s)); }
void PutHex(uint64_t v) {
  char b[17];
  int i = 16;
  b[i] = 0;
  do {
    b[--i] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v);
  Puts(b + i);
}
void End() {
  Puts(".\n");
  Flush();
}
uint64_t Faults() {
  struct rusage ru {};
  getrusage(RUSAGE_THREAD, &ru);
  return static_cast<uint64_t>(ru.ru_minflt) + static_cast<uint64_t>(ru.ru_majflt);
}
void PutSignal(uint64_t faults) {
  Puts("S ");
  PutHex(static_cast<uint64_t>(g_sig));
  Puts(" ");
  PutHex(static_cast<uint64_t>(static_cast<uint32_t>(g_code)));
  Puts(" ");
  PutHex(g_addr);
  Puts(" ");
  PutHex(faults);
  Puts("\n");
}
void PutOk(uint64_t faults) {
  Puts("OK ");
  PutHex(faults);
  Puts("\n");
}

// ---- file I/O buffers (static: no allocation) ----------------------------------
char g_io[4096];
char g_big[1 << 16];

// ---- input ---------------------------------------------------------------------
char g_in[1 << 16];
size_t g_inlen, g_inpos;

// Reads one line (without '\n') into `line`; false at EOF.
bool ReadLine(char* line, size_t cap) {
  size_t n = 0;
  for (;;) {
    if (g_inpos == g_inlen) {
      ssize_t r = read(0, g_in, sizeof g_in);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      g_inlen = static_cast<size_t>(r);
      g_inpos = 0;
    }
    char c = g_in[g_inpos++];
    if (c == '\n') break;
    if (n + 1 < cap) line[n++] = c;
  }
  line[n] = 0;
  return true;
}

const char* SkipSpaces(const char* p) {
  while (*p == ' ' || *p == '\t') p++;
  return p;
}
// Parses a hex number; advances *p.
uint64_t Hex(const char** p) {
  const char* s = SkipSpaces(*p);
  uint64_t v = 0;
  for (;; s++) {
    char c = *s;
    if (c >= '0' && c <= '9') v = v * 16 + static_cast<uint64_t>(c - '0');
    else if (c >= 'a' && c <= 'f') v = v * 16 + static_cast<uint64_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v = v * 16 + static_cast<uint64_t>(c - 'A' + 10);
    else break;
  }
  *p = s;
  return v;
}
// Copies the next space-delimited word into buf (truncated to cap - 1); advances *p.
void Token(const char** p, char* buf, size_t cap) {
  const char* s = SkipSpaces(*p);
  size_t n = 0;
  while (*s && *s != ' ' && n + 1 < cap) buf[n++] = *s++;
  buf[n] = 0;
  *p = s;
}
bool Word(const char** p, const char* w) {
  const char* s = SkipSpaces(*p);
  size_t n = strlen(w);
  if (strncmp(s, w, n) == 0 && (s[n] == ' ' || s[n] == 0)) {
    *p = s + n;
    return true;
  }
  return false;
}

// ---- /proc/self/maps and smaps -------------------------------------------------
char g_rd[1 << 16];
char g_line[4096];

// Streams the lines of a /proc file through `fn(line)`.
template <typename Fn>
void ForEachLine(const char* path, Fn fn) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  size_t ln = 0;
  for (;;) {
    ssize_t r = read(fd, g_rd, sizeof g_rd);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    for (ssize_t i = 0; i < r; i++) {
      char c = g_rd[i];
      if (c == '\n') {
        g_line[ln] = 0;
        fn(g_line);
        ln = 0;
      } else if (ln + 1 < sizeof g_line) {
        g_line[ln++] = c;
      }
    }
  }
  if (ln) {
    g_line[ln] = 0;
    fn(g_line);
  }
  close(fd);
}

bool IsHeader(const char* l) {
  return (l[0] >= '0' && l[0] <= '9') || (l[0] >= 'a' && l[0] <= 'f');
}
bool IsVsyscall(const char* l) { return strstr(l, "[vsyscall]") != nullptr; }

// Prints the VMAs overlapping [lo, hi) and the map count.
void DoMaps(uint64_t lo, uint64_t hi, bool with_flags) {
  uint64_t count = 0;
  bool in = false;
  auto header = [&](const char* l) -> bool {
    const char* p = l;
    uint64_t s = Hex(&p);
    if (*p == '-') p++;
    uint64_t e = Hex(&p);
    if (IsVsyscall(l)) return false;
    count++;
    return e > lo && s < hi;
  };
  if (with_flags) {
    ForEachLine("/proc/self/smaps", [&](const char* l) {
      if (IsHeader(l)) {
        in = header(l);
        if (in) {
          Puts("M ");
          Puts(l);
          Puts("\n");
        }
      } else if (in && strncmp(l, "VmFlags:", 8) == 0) {
        const char* f = SkipSpaces(l + 8);
        size_t n = strlen(f);
        while (n && f[n - 1] == ' ') n--;
        Puts("F ");
        Put(f, n);
        Puts("\n");
      }
    });
  } else {
    ForEachLine("/proc/self/maps", [&](const char* l) {
      if (header(l)) {
        Puts("M ");
        Puts(l);
        Puts("\n");
      }
    });
  }
  Puts("C ");
  PutHex(count);
  Puts("\n");
}

uint64_t CountMaps() {
  uint64_t count = 0;
  ForEachLine("/proc/self/maps", [&](const char* l) {
    if (IsHeader(l) && !IsVsyscall(l)) count++;
  });
  return count;
}

void PutSys(long r) {
  if (r == -1) {
    Puts("E ");
    PutHex(static_cast<uint64_t>(errno));
  } else {
    Puts("R ");
    PutHex(static_cast<uint64_t>(r));
  }
  Puts("\n");
}

// Grows the main-thread stack once, before the initial maps dump, so that later
// deeper calls never change the [stack] VMA.
__attribute__((noinline)) void GrowStack() {
  volatile char buf[512 * 1024];
  for (size_t i = sizeof buf; i > 0; i -= 4096) buf[i - 1] = 0;
  buf[0] = 0;
}

// ---- accesses ------------------------------------------------------------------
// Each access op prints its result; `quiet` runs it without output (warm-up).
// sigsetjmp/siglongjmp: the handler jumps back here with the signal recorded.

void DoRead(uint64_t a, bool quiet) {
  uint64_t f0 = Faults();
  g_sig = 0;
  if (sigsetjmp(g_jmp, 1) == 0) {
    uint8_t v = *reinterpret_cast<volatile uint8_t*>(a);
    uint64_t f = Faults() - f0;
    if (quiet) return;
    Puts("V ");
    PutHex(v);
    Puts(" ");
    PutHex(f);
    Puts("\n");
  } else if (!quiet) {
    PutSignal(Faults() - f0);
  }
}

void DoWrite(uint64_t a, uint64_t v, bool quiet) {
  uint64_t f0 = Faults();
  g_sig = 0;
  if (sigsetjmp(g_jmp, 1) == 0) {
    *reinterpret_cast<volatile uint8_t*>(a) = static_cast<uint8_t>(v);
    uint64_t f = Faults() - f0;
    if (!quiet) PutOk(f);
  } else if (!quiet) {
    PutSignal(Faults() - f0);
  }
}

void DoExec(uint64_t a, bool quiet) {
  uint64_t f0 = Faults();
  g_sig = 0;
  if (sigsetjmp(g_jmp, 1) == 0) {
    oracle_exec_probe_jump(a, kScratchRegs, kScratchStack);
    __builtin_unreachable();
  }
  uint64_t f = Faults() - f0;
  if (quiet) return;
  // A page fault (trap 14) with PF_INSTR (0x10) in the error code: the fetch failed.
  // Anything else (the single-step SIGTRAP, or a signal raised by the one
  // instruction that ran) means the fetch succeeded.
  if ((g_sig == SIGSEGV || g_sig == SIGBUS) && g_trapno == 14 && (g_err & 0x10)) PutSignal(f);
  else PutOk(f);
}

void DoFill(uint64_t a, uint64_t l, uint64_t v, bool quiet) {
  uint64_t f0 = Faults();
  g_sig = 0;
  if (sigsetjmp(g_jmp, 1) == 0) {
    for (uint64_t i = 0; i < l; i++)
      *reinterpret_cast<volatile uint8_t*>(a + i) = static_cast<uint8_t>(v);
    uint64_t f = Faults() - f0;
    if (!quiet) PutOk(f);
  } else if (!quiet) {
    PutSignal(Faults() - f0);
  }
}

void DoTouch(uint64_t a, uint64_t l, uint64_t stride, bool write_access, bool quiet) {
  if (stride == 0) stride = 1;
  uint64_t f0 = Faults();
  g_sig = 0;
  if (sigsetjmp(g_jmp, 1) == 0) {
    for (uint64_t i = 0; i < l; i += stride) {
      if (write_access) *reinterpret_cast<volatile uint8_t*>(a + i) = static_cast<uint8_t>(i);
      else (void)*reinterpret_cast<volatile uint8_t*>(a + i);
    }
    uint64_t f = Faults() - f0;
    if (!quiet) PutOk(f);
  } else if (!quiet) {
    PutSignal(Faults() - f0);
  }
}

// Runs every access path once (successful and signalling) on the scratch area and
// on an unmapped address, so that code, stack and signal-frame pages are present
// before the driver's first op and later fault counts see only the target pages.
void WarmUp() {
  for (uint64_t off = 0; off < kScratchSize; off += 4096)
    *reinterpret_cast<volatile uint8_t*>(kScratchBase + off) = 0;
  for (size_t off = 0; off < sizeof g_altstack; off += 4096) g_altstack[off] = 0;
  const uint64_t hole = kScratchBase + kScratchSize + 0x1000;  // never mapped
  for (int round = 0; round < 2; round++) {
    DoRead(kScratchBase, true);
    DoRead(hole, true);
    DoWrite(kScratchBase, 0, true);
    DoWrite(hole, 0, true);
    DoExec(kScratchBase, true);  // scratch is not executable: fetch fault
    DoExec(hole, true);
    DoFill(kScratchBase, 16, 0, true);
    DoFill(hole, 16, 0, true);
    DoTouch(kScratchBase, 8192, 4096, false, true);
    DoTouch(kScratchBase, 8192, 4096, true, true);
    DoTouch(hole, 16, 1, false, true);
  }
}

// Puts one-page PROT_NONE MAP_SHARED|MAP_ANONYMOUS guards directly below and above
// every private anonymous VMA of the child (.bss, heap, scratch; not the stack), so
// that no mapping made by a test can merge with them: the driver replicates the
// pre-existing VMAs in the engine as shared placeholders, which never merge.
void FenceAnonymousVmas() {
  static uint64_t ranges[128][2];
  size_t n = 0;
  ForEachLine("/proc/self/maps", [&](const char* l) {
    if (!IsHeader(l) || n == 128) return;
    const char* p = l;
    uint64_t s = Hex(&p);
    if (*p == '-') p++;
    uint64_t e = Hex(&p);
    // perms, offset, dev, inode, name
    p = SkipSpaces(p);
    bool priv = p[3] == 'p';
    while (*p && *p != ' ') p++;
    Hex(&p);  // offset
    p = SkipSpaces(p);
    bool dev0 = strncmp(p, "00:00", 5) == 0;
    while (*p && *p != ' ') p++;
    uint64_t ino = Hex(&p);
    p = SkipSpaces(p);
    bool anon_name = *p == 0 || strncmp(p, "[heap]", 6) == 0;
    if (priv && dev0 && ino == 0 && anon_name && e <= 0x7ffffffff000ull) {
      ranges[n][0] = s;
      ranges[n][1] = e;
      n++;
    }
  });
  for (size_t i = 0; i < n; i++) {
    const uint64_t guards[2] = {ranges[i][0] - 4096, ranges[i][1]};
    for (uint64_t g : guards)
      syscall(SYS_mmap, g, 4096, PROT_NONE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
              -1, 0);  // EEXIST: a neighbour is there already
  }
}

long Mmap(uint64_t a, uint64_t l, int prot, int flags) {
  return syscall(SYS_mmap, a, l, prot, flags, -1L, 0L);
}

// Maps the top-down plug; returns null, or why the layout is not usable.
const char* PlugTopDown() {
  static uint64_t ranges[128][2];
  size_t n = 0;
  ForEachLine("/proc/self/maps", [&](const char* l) {
    if (!IsHeader(l) || n == 128) return;
    const char* p = l;
    ranges[n][0] = Hex(&p);
    if (*p == '-') p++;
    ranges[n][1] = Hex(&p);
    n++;
  });
  if (n == 128) return "more than 127 VMAs at start-up";
  const uint64_t lo = kPlugFloor - kTopDownWindow, hi = kPlugFloor + kPlugFloorSize;
  for (size_t i = 0; i < n; i++)
    if (ranges[i][1] > lo && ranges[i][0] < hi)
      return "a VMA of the child lies in the top-down test window below the plug";
  const int none_shared = MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
  if (Mmap(kPlugFloor, kPlugFloorSize, PROT_NONE, none_shared) != static_cast<long>(kPlugFloor))
    return "cannot map the plug floor";
  uint64_t cursor = hi;
  for (size_t i = 0; i <= n && cursor < kMmapBase; i++) {
    uint64_t s = i < n ? ranges[i][0] : kMmapBase, e = i < n ? ranges[i][1] : kMmapBase;
    if (e <= cursor) continue;
    if (s > kMmapBase) s = kMmapBase;
    if (s > cursor &&
        Mmap(cursor, s - cursor, PROT_NONE, none_shared | MAP_NORESERVE) != static_cast<long>(cursor))
      return "cannot map the plug";
    if (e > cursor) cursor = e;
  }
  return nullptr;
}

// THP alignment of non-hinted private anonymous mmaps (see the protocol). Runs with
// the plug in place: the probes land just below kPlugFloor and are unmapped again.
uint64_t ThpAlignProbe() {
  const int priv = MAP_PRIVATE | MAP_ANONYMOUS;
  const uint64_t pmd = 2ull << 20;
  long a = Mmap(0, 4096, PROT_NONE, priv);  // so that an unaligned placement shows
  long b = Mmap(0, pmd, PROT_NONE, priv);
  long c = Mmap(0, pmd + 4096, PROT_NONE, priv);
  uint64_t r = 0;
  if (b != -1 && (static_cast<uint64_t>(b) & (pmd - 1)) == 0) r |= 1;
  if (c != -1 && (static_cast<uint64_t>(c) & (pmd - 1)) == 0) r |= 2;
  if (a != -1) syscall(SYS_munmap, a, 4096);
  if (b != -1) syscall(SYS_munmap, b, pmd);
  if (c != -1) syscall(SYS_munmap, c, pmd + 4096);
  return r;
}

// The effective mmap_min_addr: a non-fixed hint below it is raised to it
// (round_hint_to_min); low memory is free in this static PIE.
uint64_t MmapMinAddrProbe() {
  long r = Mmap(0x1000, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS);
  if (r == -1) return 0;
  syscall(SYS_munmap, r, 4096);
  return static_cast<uint64_t>(r);
}

// The capability sets (capget), 0 on failure.
struct CapData {
  uint32_t effective, permitted, inheritable;
};
bool GetCaps(CapData data[2]) {
  struct {
    uint32_t version;
    int pid;
  } hdr = {0x20080522, 0};  // _LINUX_CAPABILITY_VERSION_3
  return syscall(SYS_capget, &hdr, data) == 0;
}
// 1 if CAP_SYS_RAWIO is in the effective set (MAP_FIXED below vm.mmap_min_addr).
uint64_t CapSysRawio() {
  CapData data[2] = {};
  return GetCaps(data) ? (data[0].effective >> 17) & 1 : 0;  // CAP_SYS_RAWIO
}
// 1 if CAP_IPC_LOCK (14) is in the effective set (RLIMIT_MEMLOCK does not apply).
uint64_t CapIpcLock() {
  CapData data[2] = {};
  return GetCaps(data) ? (data[0].effective >> 14) & 1 : 0;
}
// Turns CAP_IPC_LOCK in the effective set on or off (it stays permitted).
long SetCapIpcLock(bool on) {
  CapData data[2] = {};
  if (!GetCaps(data)) return -1;
  if (on) data[0].effective |= 1u << 14;
  else data[0].effective &= ~(1u << 14);
  struct {
    uint32_t version;
    int pid;
  } hdr = {0x20080522, 0};
  return syscall(SYS_capset, &hdr, data);
}

// 1 if this kernel maps the zero page for anonymous read faults (see the protocol).
uint64_t ZeroPageProbe() {
  const uint64_t a = kScratchBase + 0x1000000;
  long r = syscall(SYS_mmap, a, 4096, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (r != static_cast<long>(a)) return 2;
  (void)*reinterpret_cast<volatile uint8_t*>(a);
  uint64_t f0 = Faults();
  *reinterpret_cast<volatile uint8_t*>(a) = 1;
  uint64_t f = Faults() - f0;
  syscall(SYS_munmap, a, 4096);
  return f ? 1 : 0;
}

}  // namespace

int main() {
  GrowStack();
  stack_t ss{};
  ss.ss_sp = g_altstack;
  ss.ss_size = sizeof g_altstack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = Handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE};
  for (int s : sigs) sigaction(s, &sa, nullptr);
  // Processes made by the fork op are reaped by the kernel when they quit.
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGCHLD, &ign, nullptr);

  // Scratch area for ExecProbe's registers and stack (part of the initial layout).
  long sr = syscall(SYS_mmap, kScratchBase, kScratchSize, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (sr != static_cast<long>(kScratchBase)) {
    Puts("X scratch mapping failed\n");
    End();
    return 2;
  }

  WarmUp();
  // Flush() and the line reader run before every op; warm their pages too.
  Puts("");
  g_outlen = 0;

  FenceAnonymousVmas();
  if (const char* why = PlugTopDown()) {
    Puts("X ");
    Puts(why);
    Puts("\n");
    End();
    return 2;
  }
  struct rlimit rl {};
  getrlimit(RLIMIT_STACK, &rl);
  Puts("P ");
  PutHex(static_cast<uint64_t>(personality(0xffffffff)));
  Puts(" ");
  PutHex(rl.rlim_cur);
  Puts("\n");
  const char* tags[] = {"Z ", "T ", "L ", "K "};
  const uint64_t probes[] = {ZeroPageProbe(), ThpAlignProbe(), MmapMinAddrProbe(), CapSysRawio()};
  for (int i = 0; i < 4; i++) {
    Puts(tags[i]);
    PutHex(probes[i]);
    Puts("\n");
  }
  {
    struct rlimit ml {};
    getrlimit(RLIMIT_MEMLOCK, &ml);
    Puts("I ");
    PutHex(CapIpcLock());
    Puts(" ");
    PutHex(ml.rlim_cur);
    Puts("\n");
  }
  DoMaps(0, ~0ull, false);
  End();

  static char line[4096];
  while (ReadLine(line, sizeof line)) {
    const char* p = line;
    if (Word(&p, "mmap")) {
      uint64_t a = Hex(&p), l = Hex(&p), pr = Hex(&p), f = Hex(&p), o = Hex(&p);
      p = SkipSpaces(p);
      const long fd = *p ? static_cast<long>(Hex(&p)) : -1L;
      PutSys(syscall(SYS_mmap, a, l, pr, f, fd, o));
    } else if (Word(&p, "open")) {
      static char path[4096];
      Token(&p, path, sizeof path);
      uint64_t fl = Hex(&p);
      PutSys(syscall(SYS_openat, AT_FDCWD, path, static_cast<long>(fl), 0644L));
    } else if (Word(&p, "memfd")) {
      static char name[256];
      Token(&p, name, sizeof name);
      uint64_t size = Hex(&p);
      p = SkipSpaces(p);
      const long mfd_flags = *p ? static_cast<long>(Hex(&p)) : 0L;
      long fd = syscall(SYS_memfd_create, name, mfd_flags);
      if (fd >= 0 && syscall(SYS_ftruncate, fd, size) == 0) {
        for (uint64_t off = 0; off < size; off += sizeof g_io) {
          memset(g_io, static_cast<int>(((off >> 12) + 1) & 0xff), sizeof g_io);
          const uint64_t len = size - off < sizeof g_io ? size - off : sizeof g_io;
          syscall(SYS_pwrite64, fd, g_io, len, off);
        }
      }
      PutSys(fd);
    } else if (Word(&p, "reopen")) {
      uint64_t fd = Hex(&p), fl = Hex(&p);
      static char path[64] = "/proc/self/fd/";
      char digits[24];
      int n = 0;
      do {
        digits[n++] = static_cast<char>('0' + fd % 10);
        fd /= 10;
      } while (fd);
      int k = 14;
      while (n) path[k++] = digits[--n];
      path[k] = 0;
      PutSys(syscall(SYS_openat, AT_FDCWD, path, static_cast<long>(fl), 0L));
    } else if (Word(&p, "fcntl")) {
      uint64_t fd = Hex(&p), cmd = Hex(&p), arg = Hex(&p);
      PutSys(syscall(SYS_fcntl, fd, cmd, arg));
    } else if (Word(&p, "mlock")) {
      uint64_t a = Hex(&p), l = Hex(&p), f = Hex(&p);
      PutSys(syscall(SYS_mlock2, a, l, f));
    } else if (Word(&p, "munlock")) {
      uint64_t a = Hex(&p), l = Hex(&p);
      PutSys(syscall(SYS_munlock, a, l));
    } else if (Word(&p, "mlockall")) {
      uint64_t f = Hex(&p);
      PutSys(syscall(SYS_mlockall, f));
    } else if (Word(&p, "munlockall")) {
      PutSys(syscall(SYS_munlockall));
    } else if (Word(&p, "mseal")) {
      uint64_t a = Hex(&p), l = Hex(&p), f = Hex(&p);
      PutSys(syscall(462 /* SYS_mseal */, a, l, f));
    } else if (Word(&p, "rlimit")) {
      uint64_t res = Hex(&p), n = Hex(&p);
      struct rlimit rl {};
      rl.rlim_cur = rl.rlim_max = n;
      PutSys(syscall(SYS_setrlimit, res, &rl));
    } else if (Word(&p, "capipc")) {
      PutSys(SetCapIpcLock(Hex(&p) != 0));
    } else if (Word(&p, "pread")) {
      uint64_t fd = Hex(&p), off = Hex(&p), len = Hex(&p);
      if (len > sizeof g_big) len = sizeof g_big;
      long r = syscall(SYS_pread64, fd, g_big, len, off);
      if (r < 0) {
        PutSys(r);
      } else {
        uint64_t h = 0xcbf29ce484222325ull;
        for (long i = 0; i < r; i++) h = (h ^ static_cast<uint8_t>(g_big[i])) * 0x100000001b3ull;
        Puts("R ");
        PutHex(static_cast<uint64_t>(r));
        Puts(" ");
        PutHex(r > 0 ? static_cast<uint8_t>(g_big[0]) : 0);
        Puts(" ");
        PutHex(h);
        Puts("\n");
      }
    } else if (Word(&p, "pwrite")) {
      uint64_t fd = Hex(&p), off = Hex(&p), len = Hex(&p), v = Hex(&p);
      if (len > sizeof g_big) len = sizeof g_big;
      memset(g_big, static_cast<int>(v & 0xff), len);
      PutSys(syscall(SYS_pwrite64, fd, g_big, len, off));
    } else if (Word(&p, "ftruncate")) {
      uint64_t fd = Hex(&p), size = Hex(&p);
      PutSys(syscall(SYS_ftruncate, fd, size));
    } else if (Word(&p, "fstat")) {
      uint64_t fd = Hex(&p);
      struct stat st {};
      long r = syscall(SYS_fstat, fd, &st);
      PutSys(r < 0 ? r : static_cast<long>(st.st_size));
    } else if (Word(&p, "msync")) {
      uint64_t a = Hex(&p), l = Hex(&p), f = Hex(&p);
      PutSys(syscall(SYS_msync, a, l, f));
    } else if (Word(&p, "madvise")) {
      uint64_t a = Hex(&p), l = Hex(&p), adv = Hex(&p);
      PutSys(syscall(SYS_madvise, a, l, adv));
    } else if (Word(&p, "mincore")) {
      uint64_t a = Hex(&p), l = Hex(&p);
      const uint64_t pages = (l + 4095) / 4096;
      if (pages > sizeof g_big) {
        Puts("X mincore length\n");
      } else {
        memset(g_big, 0xff, pages);
        long r = syscall(SYS_mincore, a, l, g_big);
        Puts("C ");
        PutHex(r == -1 ? static_cast<uint64_t>(errno) : 0);
        Puts(" ");
        uint64_t n = 0;
        for (; n < pages && static_cast<uint8_t>(g_big[n]) != 0xff; n++) Put(g_big[n] & 1 ? "1" : "0", 1);
        if (n == 0) Puts("-");
        Puts("\n");
      }
    } else if (Word(&p, "munmap")) {
      uint64_t a = Hex(&p), l = Hex(&p);
      PutSys(syscall(SYS_munmap, a, l));
    } else if (Word(&p, "mprotect")) {
      uint64_t a = Hex(&p), l = Hex(&p), pr = Hex(&p);
      PutSys(syscall(SYS_mprotect, a, l, pr));
    } else if (Word(&p, "brk")) {
      uint64_t a = Hex(&p);
      PutSys(syscall(SYS_brk, a));
    } else if (Word(&p, "mremap")) {
      uint64_t a = Hex(&p), ol = Hex(&p), nl = Hex(&p), f = Hex(&p), na = Hex(&p);
      PutSys(syscall(SYS_mremap, a, ol, nl, f, na));
    } else if (Word(&p, "read")) {
      uint64_t a = Hex(&p);
      DoRead(a, false);
    } else if (Word(&p, "write")) {
      uint64_t a = Hex(&p), v = Hex(&p);
      DoWrite(a, v, false);
    } else if (Word(&p, "exec")) {
      uint64_t a = Hex(&p);
      DoExec(a, false);
    } else if (Word(&p, "fill")) {
      uint64_t a = Hex(&p), l = Hex(&p), v = Hex(&p);
      DoFill(a, l, v, false);
    } else if (Word(&p, "touch")) {
      uint64_t a = Hex(&p), l = Hex(&p), st = Hex(&p), w = Hex(&p);
      DoTouch(a, l, st, w != 0, false);
    } else if (Word(&p, "mmapn")) {
      uint64_t a = Hex(&p), n = Hex(&p), step = Hex(&p), l = Hex(&p), pr = Hex(&p),
               f = Hex(&p);
      uint64_t done = 0;
      int err = 0;
      for (; done < n; done++) {
        long r = syscall(SYS_mmap, a + done * step, l, pr, f, -1L, 0L);
        if (r == -1) {
          err = errno;
          break;
        }
      }
      Puts("N ");
      PutHex(done);
      Puts(" ");
      PutHex(static_cast<uint64_t>(err));
      Puts("\n");
    } else if (Word(&p, "maps")) {
      uint64_t lo = Hex(&p), hi = Hex(&p), wf = Hex(&p);
      DoMaps(lo, hi, wf != 0);
    } else if (Word(&p, "count")) {
      Puts("C ");
      PutHex(CountMaps());
      Puts("\n");
    } else if (Word(&p, "vmlck")) {
      uint64_t kb = 0;
      ForEachLine("/proc/self/status", [&](const char* l) {
        if (strncmp(l, "VmLck:", 6) != 0) return;
        for (const char* d = SkipSpaces(l + 6); *d >= '0' && *d <= '9'; d++) kb = kb * 10 + static_cast<uint64_t>(*d - '0');
      });
      Puts("R ");
      PutHex(kb);
      Puts("\n");
    } else if (Word(&p, "fork")) {
      static char out_path[4096], in_path[4096];
      Token(&p, out_path, sizeof out_path);
      Token(&p, in_path, sizeof in_path);
      // The raw system call: no atfork handlers, nothing allocated.
      const long pid = syscall(SYS_fork);
      if (pid == 0) {
        // The forked process: its own channel to the driver. fork write-protected every
        // private page of both processes (copy-on-write): WarmUp writes the pages the
        // access paths use again, so later fault counts see only the target pages.
        const long in = syscall(SYS_openat, AT_FDCWD, in_path, O_RDONLY | O_CLOEXEC, 0L);
        const long out = in < 0 ? -1 : syscall(SYS_openat, AT_FDCWD, out_path, O_WRONLY | O_CLOEXEC, 0L);
        if (in < 0 || out < 0) _exit(4);
        dup2(static_cast<int>(in), 0);
        dup2(static_cast<int>(out), 1);
        close(static_cast<int>(in));
        close(static_cast<int>(out));
        g_inlen = g_inpos = 0;
        g_outlen = 0;
        WarmUp();
        Puts("F ");
        PutHex(static_cast<uint64_t>(syscall(SYS_getpid)));
        Puts("\n");
      } else {
        if (pid > 0) WarmUp();
        PutSys(pid);
      }
    } else if (Word(&p, "quit")) {
      End();
      return 0;
    } else {
      Puts("X unknown op\n");
    }
    End();
  }
  return 0;
}
