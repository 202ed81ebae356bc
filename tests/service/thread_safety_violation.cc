// SPDX-License-Identifier: Apache-2.0
// Must NOT compile with the rpc layer's flags: deploy/test.sh's thread-safety stage
// compiles it with the compile command of a server/rpc file and expects clang to reject
// the unguarded write below, which proves that those flags make a broken lock rule an
// error (as tests/engine/thread_safety_violation.cc does for the engine).
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace {
class Counter {
 public:
  void Bump() { n_++; }  // writes n_ without mu_: the analysis must reject it

 private:
  absl::Mutex mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};
}  // namespace

int main() {
  Counter c;
  c.Bump();
}
