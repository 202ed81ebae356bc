// SPDX-License-Identifier: Apache-2.0
// The trace format (lib/trace.h) and the ptrace recorder (lib/ptrace_tracer.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "lib/ptrace_tracer.h"
#include "lib/trace.h"

namespace vmspace::trace {
namespace {

TEST(TraceFormat, WriteReadRoundTrip) {
  Header h;
  h.vmspace_version = "v1.2-3-gabc";
  h.kernel = "Linux 6.18.0 #1 SMP x86_64";
  h.cpu = "AMD EPYC";
  h.cores = 2;
  h.date = "2026-12-05T18:00:00Z";
  h.command = {"/bin/true", "a b"};
  h.rlimit_stack = 8 << 20;
  File f{3, "/usr/lib/x86_64-linux-gnu/libc.so.6", "08:01", 1234, 1922136, false, "t.files/3", 4096};
  Event layout;
  layout.kind = Event::Kind::kLayout;
  layout.seq = 0;
  layout.tid = layout.tgid = 100;
  layout.mm = 1;
  layout.t_ns = 5;
  layout.snap.reason = "exec";
  layout.snap.start_brk = 0x555555559000;
  layout.snap.vmas.push_back({0x555555554000, 0x555555556000, "r-xp", 0x1000, "08:01", 1234, "/usr/bin/true",
                              "rd ex mr mw me sd", 3, {{0, 1, false}, {1, 1, true}}});
  layout.snap.vmas.push_back({0x7ffffffde000, 0x7ffffffff000, "rw-p", 0, "00:00", 0, "[stack]", "rd wr mr mw me gd ac",
                              std::nullopt, {}});
  Event call;
  call.seq = 1;
  call.tid = 101;
  call.tgid = 100;
  call.mm = 1;
  call.t_ns = 77;
  call.dur_ns = 9;
  call.sys = "mmap";
  call.args = {{"addr", 0}, {"len", 0x2000}, {"prot", 3}, {"flags", 0x22}, {"fd", -1}, {"off", 0}};
  call.has_ret = true;
  call.ret = -12;
  call.err = "ENOMEM";
  call.file = 3;
  call.info = {{"size", 4096}};
  call.touched = {{2, 5, true}};
  Event open;
  open.seq = 2;
  open.tid = open.tgid = 100;
  open.mm = 1;
  open.sys = "openat";
  open.sargs = {{"path", "/etc/ld.so.cache \"quoted\""}};
  open.args = {{"dirfd", -100}, {"flags", 0x80000}};
  open.has_ret = true;
  open.ret = 3;
  Event exit_group;
  exit_group.seq = 3;
  exit_group.tid = exit_group.tgid = 100;
  exit_group.mm = 1;
  exit_group.sys = "exit_group";
  exit_group.args = {{"status", 0}};
  Event exit = layout;
  exit.kind = Event::Kind::kExit;
  exit.seq = 4;
  exit.snap.reason = "exit_group";
  exit.snap.start_brk = 0;  // not written for exit records
  exit.snap.status = 7;

  std::stringstream s;
  Writer w(s);
  w.WriteHeader(h);
  w.WriteFile(f);
  for (const Event* e : {&layout, &call, &open, &exit_group, &exit}) w.WriteEvent(*e);
  std::string error;
  std::optional<Trace> t = Read(s, &error);
  ASSERT_TRUE(t) << error;
  EXPECT_EQ(t->header.vmspace_version, h.vmspace_version);
  EXPECT_EQ(t->header.command, h.command);
  EXPECT_EQ(t->header.rlimit_stack, uint64_t{8 << 20});
  EXPECT_EQ(t->header.cores, 2);
  ASSERT_EQ(t->files.count(3), 1u);
  EXPECT_EQ(t->files[3].path, f.path);
  EXPECT_EQ(t->files[3].size, f.size);
  EXPECT_EQ(t->files[3].captured, "t.files/3");
  EXPECT_EQ(t->files[3].captured_bytes, 4096u);
  ASSERT_EQ(t->events.size(), 5u);
  EXPECT_EQ(t->events[0], layout);
  EXPECT_EQ(t->events[1], call);
  EXPECT_EQ(t->events[2], open);
  EXPECT_FALSE(t->events[3].has_ret);
  EXPECT_EQ(t->events[3], exit_group);
  EXPECT_EQ(t->events[4], exit);
}

TEST(TraceFormat, RejectsWhatIsNotATrace) {
  std::string error;
  std::stringstream empty;
  EXPECT_FALSE(Read(empty, &error));
  std::stringstream other("{\"type\":\"call\"}\n");
  EXPECT_FALSE(Read(other, &error));
  EXPECT_NE(error.find("line 1"), std::string::npos) << error;
  std::stringstream newer("{\"type\":\"header\",\"format\":\"vmspace-trace\",\"format_version\":99}\n");
  EXPECT_FALSE(Read(newer, &error));
  EXPECT_NE(error.find("newer"), std::string::npos) << error;
  std::stringstream bad("{\"type\":\"header\",\"format\":\"vmspace-trace\",\"format_version\":1}\n{\"type\":\"call\"\n");
  EXPECT_FALSE(Read(bad, &error));
  EXPECT_NE(error.find("line 2"), std::string::npos) << error;
}

TEST(TraceFormat, ErrnoNames) {
  EXPECT_EQ(ErrnoName(-12), "ENOMEM");
  EXPECT_EQ(ErrnoName(0), "");
  EXPECT_EQ(ErrnoName(0x7ffff7fff000), "");
  EXPECT_EQ(ErrnoNumber("EINVAL"), 22);
  EXPECT_EQ(ErrnoNumber("ENOTANERRNO"), 0);
}

/// The first call record of `sys` by `tid` (0: any) matching `pred`, or null.
template <typename Pred>
const Event* Find(const Trace& t, const std::string& sys, Pred pred) {
  for (const Event& e : t.events) {
    if (e.kind == Event::Kind::kCall && e.sys == sys && pred(e)) return &e;
  }
  return nullptr;
}

TEST(TraceRecord, RecordsTheTargetsCallsWithTheKernelsResults) {
  std::string why;
  if (!PtraceAvailable(&why)) GTEST_SKIP() << why;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("vmspace-trace-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string mapped = (dir / "mapped").string();
  RecordOptions opt;
  opt.argv = {VMSPACE_TRACE_TARGET, mapped};
  opt.capture_files = true;
  opt.capture_limit = 4096;
  opt.files_dir = (dir / "t.files").string();
  opt.files_ref = "t.files";
  std::stringstream s;
  Writer w(s);
  RecordSummary sum;
  std::string error;
  ASSERT_TRUE(Record(opt, w, &sum, &error)) << error;
  EXPECT_EQ(sum.exit_status, 0);
  EXPECT_EQ(sum.spaces, 1u);
  EXPECT_EQ(sum.tasks, 2u);  // main thread + worker
  std::optional<Trace> t = Read(s, &error);
  ASSERT_TRUE(t) << error;
  EXPECT_EQ(t->header.command, opt.argv);
  EXPECT_FALSE(t->header.kernel.empty());
  EXPECT_TRUE(t->header.aslr_off);
  ASSERT_FALSE(t->events.empty());

  // The exec's layout comes first (after the execve), with the stack and the binary.
  const Event* layout = nullptr;
  for (const Event& e : t->events) {
    if (e.kind == Event::Kind::kLayout) {
      layout = &e;
      break;
    }
  }
  ASSERT_NE(layout, nullptr);
  EXPECT_EQ(layout->snap.reason, "exec");
  bool stack = false, binary = false;
  for (const Vma& v : layout->snap.vmas) {
    stack |= v.name == "[stack]" && !v.resident.empty();
    binary |= v.name == VMSPACE_TRACE_TARGET && v.file.has_value();
  }
  EXPECT_TRUE(stack);
  EXPECT_TRUE(binary);
  // ASLR off: the binary of a PIE at 0x555555554000.
  EXPECT_EQ(layout->snap.vmas.front().start, 0x555555554000u);

  const int main_tid = layout->tid;
  const Event* anon = Find(*t, "mmap", [&](const Event& e) { return e.args.at("len") == 16 * 4096 && e.tid == main_tid; });
  ASSERT_NE(anon, nullptr);
  ASSERT_TRUE(anon->err.empty());
  const int64_t a = anon->ret;
  EXPECT_GT(a, 0x7f0000000000);
  const Event* mprot = Find(*t, "mprotect", [&](const Event& e) { return e.args.at("addr") == a + 4 * 4096; });
  ASSERT_NE(mprot, nullptr);
  EXPECT_EQ(mprot->ret, 0);
  EXPECT_EQ(mprot->args.at("prot"), 1);
  // memset wrote all 16 pages before the mprotect: its 4 are anonymous and resident.
  ASSERT_EQ(mprot->touched.size(), 1u);
  EXPECT_EQ(mprot->touched[0], (ResidentRun{0, 4, true}));
  const Event* madv = Find(*t, "madvise", [&](const Event& e) { return e.args.at("addr") == a + 8 * 4096; });
  ASSERT_NE(madv, nullptr);
  EXPECT_EQ(madv->args.at("advice"), 4);
  EXPECT_EQ(madv->ret, 0);
  EXPECT_NE(Find(*t, "munmap", [&](const Event& e) { return e.args.at("addr") == a + 12 * 4096 && e.ret == 0; }), nullptr);
  const Event* bad = Find(*t, "munmap", [&](const Event& e) { return e.args.at("addr") == a + 1; });
  ASSERT_NE(bad, nullptr);
  EXPECT_EQ(bad->ret, -22);
  EXPECT_EQ(bad->err, "EINVAL");

  const Event* open = Find(*t, "openat", [&](const Event& e) { return e.sargs.count("path") && e.sargs.at("path") == mapped; });
  ASSERT_NE(open, nullptr);
  ASSERT_GE(open->ret, 0);
  ASSERT_TRUE(open->file);
  EXPECT_EQ(t->files.at(*open->file).path, mapped);
  const Event* trunc = Find(*t, "ftruncate", [&](const Event& e) { return e.file == open->file; });
  ASSERT_NE(trunc, nullptr);
  EXPECT_EQ(trunc->file, open->file);
  EXPECT_EQ(trunc->info.at("size"), 8 * 4096);
  const Event* fmap = Find(*t, "mmap", [&](const Event& e) { return e.file == open->file; });
  ASSERT_NE(fmap, nullptr);
  EXPECT_EQ(fmap->file, open->file);
  EXPECT_EQ(fmap->args.at("flags"), 1);  // MAP_SHARED
  EXPECT_GT(fmap->ret, 0);
  EXPECT_NE(Find(*t, "msync", [&](const Event& e) { return e.args.at("addr") == fmap->ret && e.ret == 0; }), nullptr);
  EXPECT_EQ(fmap->info.at("fd_flags") & 3, 2);  // O_RDWR
  EXPECT_NE(Find(*t, "close", [&](const Event& e) { return e.args.at("fd") == open->ret && e.seq > fmap->seq && e.ret == 0; }),
            nullptr);

  // The worker thread: four 3-page mmaps and munmaps, by a tid of the same process.
  int worker_maps = 0, worker_unmaps = 0;
  for (const Event& e : t->events) {
    if (e.kind != Event::Kind::kCall || e.tid == main_tid) continue;
    EXPECT_EQ(e.tgid, main_tid);
    EXPECT_EQ(e.mm, layout->mm);
    worker_maps += e.sys == "mmap" && e.args.at("len") == 3 * 4096 && e.ret > 0;
    worker_unmaps += e.sys == "munmap" && e.args.at("len") == 3 * 4096 && e.ret == 0;
  }
  EXPECT_EQ(worker_maps, 4);
  EXPECT_EQ(worker_unmaps, 4);
  const Event* clone = Find(*t, "clone3", [](const Event&) { return true; });
  if (clone == nullptr) clone = Find(*t, "clone", [](const Event&) { return true; });
  ASSERT_NE(clone, nullptr);
  EXPECT_EQ(clone->info.at("child_mm"), static_cast<int64_t>(layout->mm));

  // The exit: exit_group, then the final maps, which no longer hold the unmapped pages.
  ASSERT_EQ(t->events.back().kind, Event::Kind::kExit);
  EXPECT_EQ(t->events.back().snap.reason, "exit_group");
  for (const Vma& v : t->events.back().snap.vmas) {
    EXPECT_FALSE(v.start < static_cast<uint64_t>(a + 16 * 4096) && static_cast<uint64_t>(a + 12 * 4096) < v.end)
        << std::hex << v.start << "-" << v.end;
  }
  // The captured copy of the mapped file: its first 4096 bytes.
  EXPECT_EQ(t->files.at(*open->file).captured_bytes, 0u);  // captured when opened: still empty
  const File& exe = t->files.at(*std::find_if(layout->snap.vmas.begin(), layout->snap.vmas.end(), [](const Vma& v) {
                                     return v.file.has_value();
                                   })->file);
  EXPECT_EQ(exe.captured_bytes, 4096u);
  EXPECT_EQ(std::filesystem::file_size(dir / exe.captured), 4096u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vmspace::trace
