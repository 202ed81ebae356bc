// SPDX-License-Identifier: Apache-2.0
// PercpuCounter's cell choice (lib/percpu_counter.c: here a cell per thread, not per CPU).
#include "percpu_counter.h"

#include <atomic>

namespace vmspace {

namespace {
std::atomic<unsigned> g_next_counter_cell{0};
thread_local int tls_counter_cell = -1;
}  // namespace

int PercpuCounter::Cell() {
  if (tls_counter_cell < 0)
    tls_counter_cell = static_cast<int>(g_next_counter_cell.fetch_add(1, std::memory_order_relaxed) % kCells);
  return tls_counter_cell;
}

}  // namespace vmspace
