// SPDX-License-Identifier: Apache-2.0
// Dirty page-cache limits and the background writeback thread, daemon-wide (Linux's
// global_wb_domain, vm.dirty_bytes / vm.dirty_background_bytes, the flusher thread;
// mm/page-writeback.c, fs/fs-writeback.c).
//
// Pages of host files dirtied through MAP_SHARED write faults and pwrite count in one
// daemon-wide dirty figure (NR_FILE_DIRTY). Above the background threshold the
// writeback thread writes dirty files back (File::WriteRange: page_mkclean, then
// pwrite to the host file); above the dirty limit a writer waits in
// balance_dirty_pages until writeback brings the figure back under it. A fault
// throttles only after its PTE is installed and its lock dropped
// (fault_dirty_shared_page); the throttled writer holds no engine lock.
//
// shmem (memfd, MAP_SHARED|MAP_ANONYMOUS) is modelled as Linux does: its pages are
// marked dirty (the first write fault of a page drops its lock and ends
// VM_FAULT_RETRY / VM_FAULT_COMPLETED), but its mapping has no writeback capability
// (no BDI_CAP_WRITEBACK), so they are not counted and never throttle.
#pragma once

#include <cstdint>

namespace vmspace {

/// Daemon-wide dirty limits in bytes (vm.dirty_bytes, vm.dirty_background_bytes).
/// Defaults throttle nothing below 512 MiB of dirty file pages.
struct DirtyLimits {
  uint64_t dirty_bytes = 512ull << 20;             // writers wait above this
  uint64_t dirty_background_bytes = 256ull << 20;  // writeback starts above this
};

/// Sets the limits (background is clamped below dirty, as domain_dirty_limits does;
/// at least one page each). Wakes the writeback thread and throttled writers to
/// re-check. Thread-safe.
void SetDirtyLimits(const DirtyLimits& l);
DirtyLimits GetDirtyLimits();

/// Daemon-wide writeback figures.
struct WritebackStats {
  uint64_t dirty_pages = 0;      // dirty host-file pages now (NR_FILE_DIRTY)
  uint64_t writeback_pages = 0;  // host-file pages being written back now (NR_WRITEBACK)
  uint64_t passes = 0;           // writeback passes run by the thread
  uint64_t throttled_now = 0;    // writers waiting in balance_dirty_pages now
};
WritebackStats ReadWritebackStats();

/// Stops the writeback thread (joins it) if it runs; it restarts on the next need.
/// For orderly shutdown before the FileTable is destroyed.
void StopWriteback();

}  // namespace vmspace
