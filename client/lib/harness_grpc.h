// SPDX-License-Identifier: Apache-2.0
// The daemon backends of the workload harness (harness.h): spaces made with CreateSpace
// (settings.locking_profile) and destroyed afterwards, lock figures from GetLockStats
// (daemon-wide deltas for the profile's name: other clients of the same profile count).
//
// unary: one RPC per op, each session on its own connection.
//
// stream: each session keeps one Batch stream on its own connection and packs its ops
// into messages of up to `batch` ops in the compact form (BatchRequest.packed, answered
// with PackedResults: only addresses, errors and access sums come back), with up to
// `inflight` messages unanswered. The
// client thread writes; a reader thread per session reads the answers and completes the
// ops in order (the daemon applies them in order, so the space sees exactly the
// sequential sequence). Wait(op) sends the message under construction and blocks until
// op's answer is back. An op given Addr::Of(mmap op) names that op's result in
// Op.addr_of (CanRefer: any of the last BATCH_REF_WINDOW ops), so it is sent without
// waiting for the mmap's answer. At most one Write and one Read are outstanding on the call at
// any time (gRPC allows no more); a failure on either side (a write refused, a read
// that ends early, a malformed answer, an op's error) cancels the call, which wakes the
// other side, and the first failure is the session's error; Close() then joins the
// reader and calls Finish() exactly once.
#pragma once

#include <memory>

#include "lib/client.h"
#include "lib/harness.h"

namespace vmspace::harness {

/// Ops per Batch message of the bench stream sessions (will-it-scale's and seed-004's
/// `--batch` default; the daemon's default --max-batch is 4096), and messages in flight
/// of will-it-scale's (seed-004's `--inflight` default is 4).
inline constexpr int kDefaultBatch = 1024;
inline constexpr int kDefaultInflight = 1;

/// A backend talking to the daemon at `opts.target`; `stream` picks Batch streams of
/// `batch` ops per message and `inflight` messages unanswered over unary calls. Each
/// session has its own connection.
std::unique_ptr<Backend> MakeDaemonBackend(const client::ClientOptions& opts, bool stream,
                                           int batch = kDefaultBatch, int inflight = kDefaultInflight);

/// Converts a GetLockStats answer into LockFigures (times to ns, events by name).
LockFigures FromLockStats(const v1::GetLockStatsResponse& r);

}  // namespace vmspace::harness
