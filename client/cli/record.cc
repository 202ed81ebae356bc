// SPDX-License-Identifier: Apache-2.0
// `vmspace record -- CMD ARGS...`: runs a program under ptrace on this machine's kernel
// and writes its memory calls as a trace (lib/ptrace_tracer.h, docs/replay.md).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "cli/output.h"
#include "lib/ptrace_tracer.h"
#include "vmspace_version.h"

namespace vmspace::cli {

int CmdRecord(Ctx& c) {
  if (c.rest.empty()) throw UsageError{"the program to record goes after --: vmspace record -- CMD ARGS..."};
  trace::RecordOptions opt;
  opt.argv = c.rest;
  opt.vmspace_version = VMSPACE_VERSION;
  const std::string out_path = c.args.Get("out", "vmspace.trace");
  opt.capture_files = c.args.Flag("capture-files");
  if (c.args.Has("capture-limit") && !opt.capture_files) throw UsageError{"--capture-limit goes with --capture-files"};
  opt.capture_limit = c.U64("capture-limit", opt.capture_limit);
  const std::filesystem::path tp(out_path);
  opt.files_dir = out_path + ".files";
  opt.files_ref = tp.filename().string() + ".files";
  std::ofstream out(out_path, std::ios::trunc);
  if (!out) {
    c.err << "vmspace record: cannot write " << out_path << "\n";
    return kExitFailed;
  }
  trace::Writer w(out);
  trace::RecordSummary sum;
  std::string error;
  if (!trace::Record(opt, w, &sum, &error)) {
    c.err << "vmspace record: " << error << "\n";
    return kExitFailed;
  }
  out.close();
  if (c.json) {
    Json j{{"trace", out_path}, {"exit_status", sum.exit_status}, {"calls", sum.calls},
           {"tasks", sum.tasks}, {"spaces", sum.spaces}, {"by_syscall", sum.by_sys}};
    c.out << j.dump() << "\n";
  } else {
    c.out << out_path << ": " << sum.calls << " calls, " << sum.tasks << " tasks, " << sum.spaces
          << " address spaces; the program exited " << sum.exit_status << "\n";
    std::string sep;
    for (const auto& [name, n] : sum.by_sys) {
      c.out << sep << name << " " << n;
      sep = ", ";
    }
    if (!sum.by_sys.empty()) c.out << "\n";
  }
  return kExitOk;
}

}  // namespace vmspace::cli
