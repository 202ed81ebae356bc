// SPDX-License-Identifier: Apache-2.0
// `vmspace bench execl --transport unary`: the seed-003 fork + exec loop (lib/execl.h)
// against a daemon. Each client, on its own connection, creates a space with the
// scope's i_mmap_scope and the profile, ExecSpace's the program once, then loops:
// CloneSpace, ExecSpace of the child, DestroySpace of the child. The i_mmap_rwsem
// figures are the daemon's GetLockStats deltas for the profile (other clients of the
// profile count too); no rmap checker runs (race_hits stay 0).
#pragma once

#include <string>

#include "lib/client.h"
#include "lib/execl.h"

namespace vmspace::bench {

/// The loop against the daemon at `opts.target`, `clients` threads for `seconds`;
/// `program` is a path in the daemon's --data-dir.
ExeclResult RunExeclDaemon(const client::ClientOptions& opts, IMmapScope scope, const std::string& profile,
                           int clients, double seconds, const std::string& program);

}  // namespace vmspace::bench
