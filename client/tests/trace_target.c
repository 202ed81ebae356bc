// SPDX-License-Identifier: Apache-2.0
// The program the trace tests record (client/tests/trace_test.cc, daemon_test.cc): a
// known sequence of memory calls on the kernel. argv[1] names a file it creates and
// maps. Prints the addresses it got, "anon=0x... file=0x...", and exits 0.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { kPage = 4096 };

/// The second thread: four 3-page anonymous mappings, each touched and unmapped.
static void* Worker(void* arg) {
  (void)arg;
  for (int i = 0; i < 4; i++) {
    char* p = mmap(NULL, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return (void*)1;
    p[0] = 1;
    munmap(p, 3 * kPage);
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  char* a = mmap(NULL, 16 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a == MAP_FAILED) return 1;
  memset(a, 1, 16 * kPage);
  if (mprotect(a + 4 * kPage, 4 * kPage, PROT_READ) != 0) return 1;
  if (madvise(a + 8 * kPage, 4 * kPage, MADV_DONTNEED) != 0) return 1;
  if (munmap(a + 12 * kPage, 4 * kPage) != 0) return 1;
  if (munmap(a + 1, kPage) == 0) return 1;  // EINVAL: not page aligned

  int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, 8 * kPage) != 0) return 1;
  char* f = mmap(NULL, 8 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (f == MAP_FAILED) return 1;
  f[0] = 'x';
  if (msync(f, 8 * kPage, MS_SYNC) != 0) return 1;
  if (munmap(f, 8 * kPage) != 0) return 1;
  close(fd);

  pthread_t th;
  void* ret = NULL;
  if (pthread_create(&th, NULL, Worker, NULL) != 0 || pthread_join(th, &ret) != 0 || ret != NULL) return 1;
  printf("anon=%p file=%p\n", (void*)a, (void*)f);
  return 0;
}
