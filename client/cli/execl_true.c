// SPDX-License-Identifier: Apache-2.0
/* vmspace-execl-true: the program `vmspace bench execl` runs on this machine's kernel,
 * the native counterpart of the engine's fork + exec loop (UnixBench's execl measures
 * exec of a small static binary). Without arguments it exits 0 at once. With "loop N NS"
 * it is a client of the bench: N times, or until NS nanoseconds have passed, fork(), the
 * child execve()s this same program (argv[0], a path) without arguments, the parent
 * waits for it; then it writes "ITERATIONS NANOSECONDS\n" (the loops that succeeded,
 * CLOCK_MONOTONIC time of all of them) to stdout and exits 0, or 1 if a fork, exec or
 * child failed. Linked -static
 * (client/CMakeLists.txt), so an exec maps only this file: no ld.so, no libc.so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

static unsigned long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc != 4 || strcmp(argv[1], "loop") != 0) return 0;
  const unsigned long long n = strtoull(argv[2], NULL, 10);
  const unsigned long long limit_ns = strtoull(argv[3], NULL, 10);
  char* child_argv[] = {argv[0], NULL};
  const unsigned long long t0 = now_ns();
  unsigned long long i;
  int failed = 0;
  for (i = 0; i < n && now_ns() - t0 < limit_ns; i++) {
    const pid_t pid = fork();
    if (pid == 0) {
      execve(argv[0], child_argv, environ);
      _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      failed = 1;
      break;
    }
  }
  printf("%llu %llu\n", i, now_ns() - t0);
  return failed;
}
