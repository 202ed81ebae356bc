// SPDX-License-Identifier: Apache-2.0
// Runs every scripted case in tests/oracle/cases/ against the live kernel child and
// the engine; each case file is one test (OracleCases/Case.Run/<file name>).
#include "oracle_session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#ifndef VMSPACE_ORACLE_CASES_DIR
#define VMSPACE_ORACLE_CASES_DIR "cases"
#endif

namespace vmspace::oracle {
namespace {

// VMSPACE_ORACLE_CASES=DIR runs the case files of another directory (e.g. a
// reproducer printed by the random test).
std::vector<std::string> CaseFiles() {
  std::vector<std::string> out;
  std::error_code ec;
  const char* dir = getenv("VMSPACE_ORACLE_CASES");
  if (!dir || !*dir) dir = VMSPACE_ORACLE_CASES_DIR;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".case") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string TestName(const testing::TestParamInfo<std::string>& info) {
  std::string n = std::filesystem::path(info.param).stem().string();
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

std::string Indent(const std::string& text, const std::string& pad) {
  std::string out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    out += pad + text.substr(pos, nl - pos) + "\n";
    pos = nl + 1;
  }
  return out;
}

// Runs one case file against the kernel child with the engine space in `profile`
// (every profile must give the kernel's answers; locking never changes them).
void RunCase(const std::string& path, const char* profile) {
  CaseFile cf;
  std::string err;
  ASSERT_TRUE(LoadCase(path, &cf, &err)) << err;
  if (!cf.skip.empty()) GTEST_SKIP() << cf.skip;
  SpaceOptions opts;
  ASSERT_TRUE(LockingProfile::Parse(profile, &opts.profile, &err)) << err;
  OracleSession s(cf.region_size, opts);
  ASSERT_EQ(s.setup_error(), "");
  std::string transcript;
  int mismatches = 0;
  for (const auto& [lineno, op] : cf.ops) {
    StepResult r = s.Run(op);
    std::string where = std::filesystem::path(path).filename().string() + ":" +
                        std::to_string(lineno);
    transcript += (r.match ? "   " : "!! ") + where + ": " + op + "\n";
    if (r.match) {
      transcript += Indent(r.kernel, "      ");
    } else {
      transcript += "      kernel:\n" + Indent(r.kernel, "        ") + "      engine:\n" +
                    Indent(r.engine, "        ");
    }
    if (!r.match) {
      mismatches++;
      ADD_FAILURE() << where << ": " << op << "\n--- kernel:\n"
                    << r.kernel << "\n--- engine:\n"
                    << r.engine;
    }
  }
  // The engine's own invariant check (slow: once per case).
  std::string v = s.Validate();
  if (!v.empty()) {
    mismatches++;
    ADD_FAILURE() << "at the end: engine Validate(): " << v;
  }
  const char* verbose = getenv("VMSPACE_ORACLE_VERBOSE");
  if (mismatches || (verbose && *verbose == '1'))
    std::cerr << "transcript (!! = disagreement):\n" << transcript;
}

class Case : public testing::TestWithParam<std::string> {};
TEST_P(Case, Run) { RunCase(GetParam(), "linux-6.6"); }  // the default profile

// The same cases with the other VMA index (rbtree, mmap_lock-only faults).
class CaseLinux60 : public testing::TestWithParam<std::string> {};
TEST_P(CaseLinux60, Run) { RunCase(GetParam(), "linux-6.0"); }

INSTANTIATE_TEST_SUITE_P(OracleCases, Case, testing::ValuesIn(CaseFiles()), TestName);
INSTANTIATE_TEST_SUITE_P(OracleCases, CaseLinux60, testing::ValuesIn(CaseFiles()), TestName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Case);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CaseLinux60);

}  // namespace
}  // namespace vmspace::oracle
