// SPDX-License-Identifier: Apache-2.0
#include "lib/stress_grpc.h"

#include "lib/harness_grpc.h"

namespace vmspace::stress {

StressStats RunUnaryStress(const StressConfig& cfg, const client::ClientOptions& opts, Progress* progress) {
  std::unique_ptr<harness::Backend> backend = harness::MakeDaemonBackend(opts, false);
  return RunStress(cfg, *backend, progress);
}

StressStats RunStreamStress(const StressConfig& cfg, const client::ClientOptions& opts, int batch, int inflight,
                            Progress* progress) {
  std::unique_ptr<harness::Backend> backend = harness::MakeDaemonBackend(opts, true, batch, inflight);
  return RunStress(cfg, *backend, progress);
}

}  // namespace vmspace::stress
