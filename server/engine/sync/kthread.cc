// SPDX-License-Identifier: Apache-2.0
#include "sync/kthread.h"

#include <pthread.h>
#include <sched.h>

namespace vmspace {

namespace {
// The affinity of the main thread during static initialization, before any code of
// the program could pin it; false if it could not be read.
struct ProcessAffinity {
  cpu_set_t set;
  bool ok;
  ProcessAffinity() { ok = sched_getaffinity(0, sizeof set, &set) == 0; }
};
const ProcessAffinity g_process_affinity;
}  // namespace

void KthreadAffinity() {
  if (g_process_affinity.ok)
    (void)pthread_setaffinity_np(pthread_self(), sizeof g_process_affinity.set, &g_process_affinity.set);
}

}  // namespace vmspace
