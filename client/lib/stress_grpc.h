// SPDX-License-Identifier: Apache-2.0
// The seed-004 stress workload (seed004.h) against a running vmspaced over gRPC, on the
// harness's daemon backends (harness_grpc.h).
//
// unary: one call per operation (Access, Munmap, Mmap), each client on its own
// connection.
//
// stream: each client keeps one Batch stream and packs the rounds' operations into
// messages of `batch` ops, with up to `inflight` messages unanswered. A round's access
// and munmap need the address returned by the slot's previous mmap; while that mmap is
// unanswered they name its result (Op.addr_of), which the daemon fills in, so no round
// waits for a reply (StressStats::waits stays 0); the client only waits for room in the
// window. The daemon applies ops in order, so the space sees exactly the sequential
// sequence.
#pragma once

#include "lib/client.h"
#include "lib/seed004.h"

namespace vmspace::stress {

/// Runs the workload with one unary call per operation.
StressStats RunUnaryStress(const StressConfig& cfg, const client::ClientOptions& opts,
                           Progress* progress = nullptr);

/// Runs the workload over Batch streams (see the file comment).
StressStats RunStreamStress(const StressConfig& cfg, const client::ClientOptions& opts, int batch,
                            int inflight, Progress* progress = nullptr);

}  // namespace vmspace::stress
