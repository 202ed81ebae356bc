// SPDX-License-Identifier: Apache-2.0
// The lock timeline as a Chrome trace event file (the JSON object format with
// "traceEvents" of ph "X" complete events), which Perfetto (ui.perfetto.dev) and
// chrome://tracing open: written by `vmspace trace-locks` and `vmspace replay
// --timeline`. Internal to the CLI (cli/).
#pragma once

#include <string>
#include <vector>

#include "cli/output.h"
#include "vmspace/v1/vmspace.pb.h"

namespace vmspace::cli {

/// The Chrome trace of TraceLocks answers, one per daemon (pid = its index + 1, tid =
/// the daemon thread): ts and dur in microseconds since the trace began, each event's
/// args (space, lock, mode, range, holder, ...).
Json ChromeTrace(const std::vector<v1::TraceLocksResponse>& daemons);
/// Writes ChromeTrace(daemons) to `path`; false (with *error) if it cannot.
bool WriteChromeTrace(const std::vector<v1::TraceLocksResponse>& daemons, const std::string& path,
                      std::string* error);

}  // namespace vmspace::cli
