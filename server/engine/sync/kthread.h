// SPDX-License-Identifier: Apache-2.0
// The engine's own background threads (the call_rcu worker, the writeback flusher)
// are started from whichever engine thread first needs them. As kernel threads are
// forked by kthreadd and not by the task that asked for them (kernel/kthread.c
// kthread_create_on_node, Linux 6.18), they must not inherit that thread's CPU
// affinity: a client pinned to CPU 0 would otherwise pin the call_rcu worker there
// for the life of the process.
#pragma once

namespace vmspace {

/// Gives the calling thread the CPU affinity the process started with (read before
/// main(): what `taskset` or a container's cpuset gave it), whatever the thread that
/// created it was pinned to. Call first thing in an engine background thread. Best
/// effort: on failure the thread keeps its inherited affinity.
void KthreadAffinity();

}  // namespace vmspace
