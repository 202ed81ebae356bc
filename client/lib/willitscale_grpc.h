// The will-it-scale workloads (willitscale.h) against a running vmspaced.
//
// unary: one RPC per operation; page writes go as one Access call per chunk
// (BenchConfig::chunk_bytes), so the stop flag is checked between chunks.
// stream: one Batch stream per client; a loop iteration's page writes (one Access op
// per chunk) and the munmap/madvise after them travel in one message, mmaps in their
// own message (the next op needs the address). Spaces are made with CreateSpace
// (settings.locking_profile) and destroyed afterwards; lock figures are GetLockStats
// deltas for the profile's name (daemon-wide: other clients of the same profile count).
#pragma once

#include "lib/client.h"
#include "lib/willitscale.h"

namespace vmspace::bench {

/// A backend talking to the daemon at `opts.target`; `stream` picks Batch streams
/// over unary calls. Each session has its own connection.
std::unique_ptr<Backend> MakeDaemonBackend(const client::ClientOptions& opts, bool stream);

/// Converts a GetLockStats answer into LockFigures.
LockFigures FromLockStats(const v1::GetLockStatsResponse& r);

}  // namespace vmspace::bench
