// SPDX-License-Identifier: Apache-2.0
// Test helpers for the service tests: run the real vmspaced binary on port 0, talk to it
// with the generated stub, scrape /metrics over plain HTTP, parse the text format.
#pragma once

// First: glibc's <signal.h> (pulled in by <sys/wait.h>) defines si_addr as a macro,
// which breaks the generated FaultInfo::si_addr() accessor if it comes earlier.
#include "vmspace/v1/vmspace.grpc.pb.h"
#include "google/rpc/status.pb.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/error_details.h>
#include <gtest/gtest.h>

#include <signal.h>
// The tests never use siginfo_t; free the name for FaultInfo::si_addr().
#undef si_addr

namespace vmspace::service_test {

#ifndef VMSPACED_PATH
#error "VMSPACED_PATH must name the vmspaced binary"
#endif

/// One vmspaced child process ($VMSPACED, else the build's VMSPACED_PATH). Start() waits for its "listening" line; the destructor
/// kills it if still running. Its stderr is collected (and echoed with a prefix).
class Daemon {
 public:
  Daemon() = default;
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int st;
      waitpid(pid_, &st, 0);
    }
    if (reader_.joinable()) reader_.join();
  }

  /// Starts vmspaced with `args` (defaults: --listen=127.0.0.1:0 --metrics-listen=off,
  /// both overridable). Returns true once the listening line was printed; false if the
  /// process exited first or nothing came within `timeout_ms`.
  bool Start(std::vector<std::string> args, int timeout_ms = 15000) {
    // $VMSPACED overrides the binary (e.g. a sanitizer build of the daemon).
    const char* env = getenv("VMSPACED");
    std::vector<std::string> full = {env && *env ? env : VMSPACED_PATH, "--listen=127.0.0.1:0",
                                     "--metrics-listen=off", "--shutdown-grace-ms=1000"};
    full.insert(full.end(), args.begin(), args.end());
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return false;
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
      if (getppid() != parent) _exit(126);
      dup2(p[1], 2);
      std::vector<char*> argv;
      for (std::string& a : full) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(p[1]);
    reader_ = std::thread([this, fd = p[0]] { ReadStderr(fd); });
    std::unique_lock<std::mutex> l(mu_);
    const std::regex re(R"(vmspaced: listening grpc=(\S+):(\d+) metrics=(\S+))");
    bool ok = cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] {
      return eof_ || std::regex_search(err_, re);
    });
    std::smatch m;
    if (!ok || !std::regex_search(err_, m, re)) return false;
    grpc_addr_ = m[1].str() + ":" + m[2].str();
    grpc_port_ = std::stoi(m[2].str());
    const std::string metrics = m[3].str();
    const size_t colon = metrics.rfind(':');
    if (metrics != "off" && colon != std::string::npos)
      metrics_port_ = std::stoi(metrics.substr(colon + 1));
    return true;
  }

  /// Sends `sig` and waits up to `timeout_ms` for the exit. Returns the exit status, or
  /// 128 + signal if killed by one, or -1 on timeout (the process is then killed).
  int Stop(int sig = SIGTERM, int timeout_ms = 10000) {
    if (pid_ <= 0) return exit_status_;
    kill(pid_, sig);
    return WaitExit(timeout_ms);
  }

  /// Waits up to `timeout_ms` for the process to exit by itself (see Stop for values).
  int WaitExit(int timeout_ms) {
    if (pid_ <= 0) return exit_status_;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    int st = 0;
    for (;;) {
      pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) break;
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
        pid_ = -1;
        exit_status_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    exit_status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return exit_status_;
  }

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& grpc_addr() const { return grpc_addr_; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  /// Everything the daemon wrote on stderr so far.
  std::string stderr_text() {
    std::lock_guard<std::mutex> l(mu_);
    return err_;
  }
  /// Everything the daemon wrote on stderr, once it has closed it (after it exited):
  /// waits up to `timeout_ms` for the end of the pipe.
  std::string stderr_at_exit(int timeout_ms = 10000) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return eof_; });
    return err_;
  }

  /// A stub on its own channel (own TCP connection unless `shared` is given).
  std::unique_ptr<v1::VmSpace::Stub> NewStub() const {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    auto channel = grpc::CreateCustomChannel(grpc_addr_, grpc::InsecureChannelCredentials(), args);
    // Connect before the first call: on a loaded machine a first connect attempt can fail
    // (seen in CI as "failed to connect to all addresses"), and an RPC without
    // wait_for_ready fails at once instead of retrying. Bounded: a dead daemon still
    // yields a stub whose calls fail UNAVAILABLE.
    channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return v1::VmSpace::NewStub(channel);
  }

 private:
  void ReadStderr(int fd) {
    char buf[4096];
    for (;;) {
      ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) break;
      std::lock_guard<std::mutex> l(mu_);
      err_.append(buf, static_cast<size_t>(n));
      // Echo complete lines for debugging.
      size_t nl;
      while ((nl = err_.find('\n', echoed_)) != std::string::npos) {
        fprintf(stderr, "  [vmspaced %d] %s\n", static_cast<int>(pid_),
                err_.substr(echoed_, nl - echoed_).c_str());
        echoed_ = nl + 1;
      }
      cv_.notify_all();
    }
    close(fd);
    std::lock_guard<std::mutex> l(mu_);
    eof_ = true;
    cv_.notify_all();
  }

  pid_t pid_ = -1;
  int exit_status_ = -1;
  std::string grpc_addr_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string err_;  // guarded by mu_
  size_t echoed_ = 0;
  bool eof_ = false;
};

/// A client context with a deadline (tests never wait forever).
inline std::unique_ptr<grpc::ClientContext> Ctx(int timeout_ms = 10000) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  return c;
}

/// Checks that `s` failed with `code`, that its message starts with "<errno_name>: " and
/// that its details are a google.rpc.Status with the same code and message whose only
/// detail is a packed SyscallError {errno, errno_name}.
inline ::testing::AssertionResult HasErrno(const grpc::Status& s, grpc::StatusCode code,
                                           const std::string& errno_name, int err) {
  if (s.error_code() != code)
    return ::testing::AssertionFailure() << "code " << s.error_code() << " (" << s.error_message()
                                         << "), want " << code;
  if (s.error_message().rfind(errno_name + ": ", 0) != 0)
    return ::testing::AssertionFailure()
           << "message \"" << s.error_message() << "\" does not start with " << errno_name;
  google::rpc::Status st;
  if (!grpc::ExtractErrorDetails(s, &st).ok())
    return ::testing::AssertionFailure() << "error_details is not a google.rpc.Status";
  if (st.code() != static_cast<int>(code) || st.message() != s.error_message())
    return ::testing::AssertionFailure() << "google.rpc.Status {" << st.code() << ", " << st.message()
                                         << "} differs from the status";
  v1::SyscallError se;
  if (st.details_size() != 1 || !st.details(0).UnpackTo(&se))
    return ::testing::AssertionFailure() << "details are not one SyscallError: " << st.ShortDebugString();
  if (se.errno_() != err || se.errno_name() != errno_name)
    return ::testing::AssertionFailure()
           << "SyscallError {" << se.errno_() << ", " << se.errno_name() << "}, want {" << err
           << ", " << errno_name << "}";
  return ::testing::AssertionSuccess();
}

/// GET http://127.0.0.1:port/path with HTTP/1.0; returns the body ("" on failure) and
/// the status code in *status.
inline std::string HttpGet(int port, const std::string& path, int* status = nullptr) {
  if (status) *status = 0;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string resp;
  char buf[8192];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    resp.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t hdr_end = resp.find("\r\n\r\n");
  if (hdr_end == std::string::npos) return "";
  if (status && resp.size() > 12) *status = std::atoi(resp.c_str() + 9);  // "HTTP/1.x NNN"
  return resp.substr(hdr_end + 4);
}

/// Samples of a text-format scrape keyed by `name{k="v",...}` with labels sorted.
using Samples = std::map<std::string, double>;

/// Key for a sample: SeriesKey("vmspace_ops_total", {{"op","mmap"},{"errno","OK"}}).
inline std::string SeriesKey(const std::string& name,
                             std::vector<std::pair<std::string, std::string>> labels = {}) {
  std::sort(labels.begin(), labels.end());
  std::string k = name;
  if (!labels.empty()) {
    k += '{';
    for (size_t i = 0; i < labels.size(); i++) {
      if (i) k += ',';
      k += labels[i].first + "=\"" + labels[i].second + "\"";
    }
    k += '}';
  }
  return k;
}

/// Parses the Prometheus text format (no escapes inside label values expected).
inline Samples ParseMetrics(const std::string& text) {
  Samples out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line[0] == '#') continue;
    std::string name;
    std::vector<std::pair<std::string, std::string>> labels;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') name += line[i++];
    if (i < line.size() && line[i] == '{') {
      i++;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        std::string k = line.substr(i, eq - i);
        size_t q1 = eq + 2;  // after ="
        size_t q2 = line.find('"', q1);
        labels.emplace_back(k, line.substr(q1, q2 - q1));
        i = q2 + 1;
        if (i < line.size() && line[i] == ',') i++;
      }
      i++;  // '}'
    }
    const std::string value = line.substr(line.find_first_not_of(' ', i));
    out[SeriesKey(name, labels)] = std::strtod(value.c_str(), nullptr);
  }
  return out;
}

/// Value of a series, or -1 if absent (all our series are >= 0).
inline double Get(const Samples& s, const std::string& key) {
  auto it = s.find(key);
  return it == s.end() ? -1 : it->second;
}

/// Value of a counter series, 0 if absent (the exporter adds a series once it can move).
inline double Count(const Samples& s, const std::string& key) {
  auto it = s.find(key);
  return it == s.end() ? 0 : it->second;
}

/// Path of an executable named `name` found on PATH, or "".
inline std::string FindOnPath(const std::string& name) {
  const char* path = getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string cand = p.substr(start, end - start) + "/" + name;
    if (access(cand.c_str(), X_OK) == 0) return cand;
    start = end + 1;
  }
  return "";
}

// Batch streams answered once each (so their handlers run, each holding a thread and
// a place in the daemon's limits), open until CloseAll().
class OpenStreams {
 public:
  /// Opens one more stream (with `token` as its bearer token, if not ""); true if it was
  /// answered (kept open), else false with its final status in *refused.
  bool Open(v1::VmSpace::Stub& stub, grpc::Status* refused, const std::string& token = "") {
    ctxs_.push_back(Ctx());
    if (!token.empty()) ctxs_.back()->AddMetadata("authorization", "Bearer " + token);
    auto s = stub.Batch(ctxs_.back().get());
    v1::BatchRequest msg;
    v1::BatchResponse resp;
    if (s->Write(msg) && s->Read(&resp)) {
      streams_.push_back(std::move(s));
      return true;
    }
    *refused = s->Finish();
    return false;
  }
  size_t size() const { return streams_.size(); }
  void CloseAll() {
    for (auto& s : streams_) {
      s->WritesDone();
      EXPECT_TRUE(s->Finish().ok());
    }
    streams_.clear();
  }

 private:
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs_;
  std::vector<std::unique_ptr<grpc::ClientReaderWriter<v1::BatchRequest, v1::BatchResponse>>> streams_;
};

}  // namespace vmspace::service_test
