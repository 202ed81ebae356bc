// SPDX-License-Identifier: Apache-2.0
// The will-it-scale workloads (willitscale.h) against a running vmspaced: the harness's
// daemon backends (harness_grpc.h). unary: one RPC per op (one Access per chunk of page
// writes); stream: one Batch stream per client, a loop pass's ops in one message.
#pragma once

#include "lib/harness_grpc.h"
#include "lib/willitscale.h"

namespace vmspace::bench {

using harness::FromLockStats;
using harness::MakeDaemonBackend;

}  // namespace vmspace::bench
