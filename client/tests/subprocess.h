// SPDX-License-Identifier: Apache-2.0
// Test helper: run a program with arguments, capture stdout/stderr and the exit code.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

namespace vmspace::testing {

/// What a finished program left.
struct ProcResult {
  int exit_code = -1;  // -1 if killed by a signal
  std::string out;
  std::string err;
};

/// Runs `path args...` to completion (no stdin) and captures its output. If `pid` is
/// given, the child's pid is stored there once it runs (so another thread can kill it).
inline ProcResult RunProgram(const std::string& path, const std::vector<std::string>& args,
                             std::atomic<pid_t>* pid_out = nullptr) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(path.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  if (pid_out) pid_out->store(pid);
  close(out_pipe[1]);
  close(err_pipe[1]);
  ProcResult r;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  int st = 0;
  waitpid(pid, &st, 0);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace vmspace::testing
