// SPDX-License-Identifier: Apache-2.0
// The corpus's own program (client/tests/corpus_test.py): every memory syscall vmspace
// serves, on this machine's kernel, with results that depend on the kernel's state
// (placements, errnos, mincore vectors), so that a replay that differs shows. brk;
// mremap in place, MREMAP_MAYMOVE, MREMAP_FIXED and MREMAP_DONTUNMAP; every madvise
// advice; mincore; mlock, mlock2, munlock, mlockall, munlockall; mseal; memfd_create
// with seals; msync; then a fork whose child maps, remaps and unmaps in its copy.
// Locked amounts stay far below the default 8 MiB RLIMIT_MEMLOCK. Exits 0 when every
// call answered as Linux 6.10+ does (mseal); prints what it did.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif
#ifndef MADV_COLD
#define MADV_COLD 20
#endif
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#ifndef MADV_GUARD_REMOVE
#define MADV_GUARD_REMOVE 103
#endif
#ifndef MLOCK_ONFAULT
#define MLOCK_ONFAULT 1
#endif
#ifndef MCL_ONFAULT
#define MCL_ONFAULT 4
#endif
#ifndef SYS_mseal
#define SYS_mseal 462
#endif

enum { kPage = 4096 };

static int failures;

/// Checks that `ok` holds; prints the call otherwise.
static void Expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "corpus_syscalls: %s (errno %d %s)\n", what, errno, strerror(errno));
    failures++;
  }
}

static char* Anon(size_t pages, int prot) {
  char* p = mmap(NULL, pages * kPage, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  Expect(p != MAP_FAILED, "mmap anonymous");
  return p;
}

static void Brk(void) {
  char* b0 = sbrk(0);
  Expect(sbrk(5 * kPage) == b0, "sbrk grow");
  memset(b0, 1, 5 * kPage);
  Expect(sbrk(-2 * kPage) == b0 + 5 * kPage, "sbrk shrink");
  Expect(brk(b0 + 8 * kPage) == 0, "brk grow");
  b0[7 * kPage] = 2;
}

static void Mremap(void) {
  char* a = Anon(4, PROT_READ | PROT_WRITE);
  memset(a, 3, 4 * kPage);
  Expect(munmap(a + 4 * kPage, 0) != 0 && errno == EINVAL, "munmap of 0 bytes is EINVAL");
  // In place: shrink, then grow back into the freed range.
  Expect(mremap(a, 4 * kPage, 2 * kPage, 0) == a, "mremap shrink");
  char* g = mremap(a, 2 * kPage, 3 * kPage, 0);
  Expect(g == a || errno == ENOMEM, "mremap grow in place");
  // MAYMOVE: a blocker right after forces a move.
  char* b = Anon(8, PROT_READ | PROT_WRITE);
  b[0] = 4;
  char* wall = mmap(b + 8 * kPage, kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  char* m = mremap(b, 8 * kPage, 32 * kPage, MREMAP_MAYMOVE);
  Expect(m != MAP_FAILED, "mremap MAYMOVE");
  if (m != MAP_FAILED) m[31 * kPage] = 5;
  // FIXED onto a reserved range.
  char* dst = Anon(16, PROT_NONE);
  char* f = mremap(m, 32 * kPage, 16 * kPage, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
  Expect(f == dst, "mremap FIXED");
  // DONTUNMAP: the source stays mapped, empty.
  char* src = Anon(4, PROT_READ | PROT_WRITE);
  memset(src, 5, 4 * kPage);
  char* d = mremap(src, 4 * kPage, 4 * kPage, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);  // new_addr: a hint
  Expect(d != MAP_FAILED, "mremap DONTUNMAP");
  Expect(mremap(src, kPage, 2 * kPage, MREMAP_DONTUNMAP) == MAP_FAILED && errno == EINVAL, "DONTUNMAP without MAYMOVE");
  Expect(mremap(f, 16 * kPage, 16 * kPage, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, (void*)1) == MAP_FAILED && errno == EINVAL,
         "DONTUNMAP with an unaligned new_addr is EINVAL");
  if (wall != MAP_FAILED) munmap(wall, kPage);
  if (d != MAP_FAILED) munmap(d, 4 * kPage);
}

static void Madvise(void) {
  static const int advices[] = {MADV_NORMAL,        MADV_RANDOM,         MADV_SEQUENTIAL,     MADV_WILLNEED,
                                MADV_DONTNEED,      MADV_FREE,           MADV_COLD,           MADV_PAGEOUT,
                                MADV_POPULATE_READ, MADV_POPULATE_WRITE, MADV_DONTNEED_LOCKED, MADV_DONTFORK,
                                MADV_DOFORK,        MADV_WIPEONFORK,     MADV_KEEPONFORK,     MADV_DONTDUMP,
                                MADV_DODUMP,        MADV_MERGEABLE,      MADV_UNMERGEABLE,    MADV_HUGEPAGE,
                                MADV_NOHUGEPAGE,    MADV_GUARD_INSTALL,  MADV_GUARD_REMOVE};
  char* a = Anon(64, PROT_READ | PROT_WRITE);
  for (size_t i = 0; i < sizeof advices / sizeof advices[0]; i++) {
    char* r = a + (i % 8) * 8 * kPage;
    memset(r, 6, 4 * kPage);
    (void)madvise(r + kPage, 2 * kPage, advices[i]);  // the replay compares the errno too
  }
  Expect(madvise(a + 1, kPage, MADV_DONTNEED) != 0 && errno == EINVAL, "madvise unaligned is EINVAL");
  Expect(madvise(a, kPage, 999) != 0 && errno == EINVAL, "madvise unknown advice is EINVAL");
  // MADV_REMOVE on a shared anonymous mapping (shmem).
  char* s = mmap(NULL, 8 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  Expect(s != MAP_FAILED, "mmap shared anonymous");
  memset(s, 7, 8 * kPage);
  Expect(madvise(s + 2 * kPage, 2 * kPage, MADV_REMOVE) == 0, "madvise REMOVE");
  unsigned char vec[64];
  Expect(mincore(a, 64 * kPage, vec) == 0, "mincore");
  Expect(mincore(s, 8 * kPage, vec) == 0, "mincore shared");
  Expect(mincore(a + 1, kPage, vec) != 0 && errno == EINVAL, "mincore unaligned is EINVAL");
  munmap(s, 8 * kPage);
}

static void Mlock(void) {
  char* a = Anon(32, PROT_READ | PROT_WRITE);
  Expect(mlock(a, 4 * kPage) == 0, "mlock");
  Expect(syscall(SYS_mlock2, a + 8 * kPage, 4 * kPage, MLOCK_ONFAULT) == 0, "mlock2 ONFAULT");
  Expect(syscall(SYS_mlock2, a, kPage, 8) != 0 && errno == EINVAL, "mlock2 bad flags is EINVAL");
  Expect(munlock(a + 2 * kPage, 8 * kPage) == 0, "munlock");
  Expect(mlockall(MCL_CURRENT | MCL_ONFAULT) == 0, "mlockall CURRENT|ONFAULT");
  char* b = Anon(4, PROT_READ | PROT_WRITE);
  Expect(munlockall() == 0, "munlockall");
  Expect(mlockall(0) != 0 && errno == EINVAL, "mlockall(0) is EINVAL");
  munmap(b, 4 * kPage);
}

static void Mseal(void) {
  char* a = Anon(8, PROT_READ);
  Expect(syscall(SYS_mseal, a + 2 * kPage, 2 * kPage, 0) == 0, "mseal");
  Expect(munmap(a + 2 * kPage, kPage) != 0 && errno == EPERM, "munmap of a sealed VMA is EPERM");
  Expect(mprotect(a, 8 * kPage, PROT_READ | PROT_WRITE) != 0 && errno == EPERM, "mprotect over a sealed VMA is EPERM");
  Expect(syscall(SYS_mseal, a, kPage, 1) != 0 && errno == EINVAL, "mseal flags is EINVAL");
  Expect(munmap(a + 5 * kPage, 3 * kPage) == 0, "munmap beside a sealed VMA");
}

static void Memfd(void) {
  int fd = memfd_create("corpus", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  Expect(fd >= 0, "memfd_create");
  Expect(ftruncate(fd, 16 * kPage) == 0, "ftruncate");
  char* w = mmap(NULL, 16 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  Expect(w != MAP_FAILED, "mmap memfd shared");
  memset(w, 8, 16 * kPage);
  Expect(msync(w, 16 * kPage, MS_SYNC) == 0, "msync");
  Expect(msync(w + 1, kPage, MS_SYNC) != 0 && errno == EINVAL, "msync unaligned is EINVAL");
  Expect(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0, "F_ADD_SEALS shrink|grow");
  Expect(ftruncate(fd, 8 * kPage) != 0 && errno == EPERM, "ftruncate of a sealed memfd is EPERM");
  // F_SEAL_WRITE while a writable shared mapping exists: EBUSY.
  Expect(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) != 0 && errno == EBUSY, "F_SEAL_WRITE with a writable mapping is EBUSY");
  munmap(w, 16 * kPage);
  Expect(fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0, "F_ADD_SEALS future-write");
  Expect(mmap(NULL, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED && errno == EPERM,
         "a writable shared mmap after F_SEAL_FUTURE_WRITE is EPERM");
  char* r = mmap(NULL, 4 * kPage, PROT_READ, MAP_PRIVATE, fd, 0);
  Expect(r != MAP_FAILED, "mmap sealed memfd private read");
  Expect(fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) == 0, "F_ADD_SEALS seal");
  Expect(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) != 0 && errno == EPERM, "F_ADD_SEALS after F_SEAL_SEAL is EPERM");
  Expect(fcntl(fd, F_GET_SEALS) == (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL), "F_GET_SEALS");
  int nos = memfd_create("corpus-nosealing", MFD_CLOEXEC);
  Expect(fcntl(nos, F_GET_SEALS) == F_SEAL_SEAL, "F_GET_SEALS without MFD_ALLOW_SEALING");
  Expect(fcntl(nos, F_ADD_SEALS, F_SEAL_GROW) != 0 && errno == EPERM, "F_ADD_SEALS without MFD_ALLOW_SEALING is EPERM");
  close(nos);
  close(fd);
}

/// A child in a copy of the address space: maps, remaps, unmaps, exits.
static int Child(void) {
  char* a = Anon(8, PROT_READ | PROT_WRITE);
  memset(a, 9, 8 * kPage);
  char* m = mremap(a, 8 * kPage, 64 * kPage, MREMAP_MAYMOVE);
  if (m == MAP_FAILED) return 1;
  munmap(m + 16 * kPage, 16 * kPage);
  char* b0 = sbrk(0);
  if (sbrk(3 * kPage) != b0) return 1;
  return 0;
}

int main(void) {
  Brk();
  Mremap();
  Madvise();
  Mlock();
  Mseal();
  Memfd();
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) _exit(Child());
  int st = 0;
  Expect(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork child");
  char* after = Anon(4, PROT_READ | PROT_WRITE);
  after[0] = 1;
  printf("corpus_syscalls: %d failures\n", failures);
  return failures ? 1 : 0;
}
