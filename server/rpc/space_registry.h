// SPDX-License-Identifier: Apache-2.0
// SpaceRegistry: the daemon's table of live address spaces, keyed by space id.
//
// Lookups are the request path: the table is split into kShards parts by id, each with
// its own reader-writer lock, so requests on different spaces do not share a lock word.
// (These table shards are not the daemon's shard, --shard, which names it among several
// daemons and is the high bits of its space ids.)
// The registry also owns the daemon's FileTable (engine/file.h): the files every space
// of the daemon shares. Its public file ids carry the shard like space ids.
// A lookup returns a shared_ptr: an operation in flight keeps its space alive, and a
// destroyed space is freed (frames returned) when its last in-flight operation ends.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>

#include "engine/address_space.h"
#include "engine/file.h"
#include "engine/frame_allocator.h"
#include "engine/memcontrol.h"
#include "engine/per_thread.h"
#include "rpc/id_cipher.h"

namespace vmspace::rpc {

/// One live space. Immutable except through `as`, whose calls are thread-safe.
struct Space {
  Space(uint64_t id, std::string tenant, std::string label, std::string locking_profile,
        FrameAllocator& frames, const SpaceOptions& opts)
      : Space(id, std::move(tenant), std::move(label), std::move(locking_profile),
              std::make_unique<AddressSpace>(frames, opts)) {}
  /// A space around an address space made elsewhere (AddressSpace::DupMmap's child).
  Space(uint64_t id, std::string tenant, std::string label, std::string locking_profile,
        std::unique_ptr<AddressSpace> space)
      : id(id), tenant(std::move(tenant)), label(std::move(label)),
        locking_profile(std::move(locking_profile)), owned_(std::move(space)), as(*owned_) {}
  const uint64_t id;
  const std::string tenant;           // the creator's (rpc/auth.h); "" without auth
  const std::string label;            // free text from CreateSpace, <= 64 bytes
  const std::string locking_profile;  // as reported by ListSpaces

 private:
  const std::unique_ptr<AddressSpace> owned_;  // never null; declared before `as`

 public:
  AddressSpace& as;
};

/// What a tenant's spaces use (SpaceRegistry::Usage).
struct TenantUsage {
  uint64_t spaces = 0;
  // anon_pages * 4096 + pgtable_bytes over its spaces, plus the file pages charged
  // to its cgroup (page_cache_bytes). Pages of files are counted once, where they are
  // charged (a memcg's file pages), not in each space that maps them.
  uint64_t memory_bytes = 0;
  uint64_t page_cache_bytes = 0;  // TenantMemcg(tenant)->usage(): its file pages
};

/// Sums over all live spaces (for the metrics gauges).
struct SpaceTotals {
  uint64_t page_cache_pages = 0;  // over the open files, each file once
  uint64_t page_cache_dirty_pages = 0;
  uint64_t spaces = 0;
  uint64_t vmas = 0;             // sum of map_count
  uint64_t resident_bytes = 0;   // sum of rss_pages * 4096
  uint64_t pagetable_bytes = 0;  // sum of pgtable_bytes
  uint64_t locked_bytes = 0;     // sum of locked_vm_pages * 4096
  uint64_t sealed_bytes = 0;     // sum of sealed_pages * 4096
  uint64_t sealed_vmas = 0;      // sum of sealed_vmas
};

/// Space ids name the daemon that created them: id = shard << kShardShift | n, with n
/// (never 0) the image under a keyed permutation of 40 bits (IdCipher, key drawn at
/// start-up) of this daemon's count of creates: ids are unguessable, and neither
/// their order nor their gaps tell one tenant how many spaces or files others made.
/// After a restart (a new key) a stale client's id names no live space unless a
/// 1-in-2^40 coincidence. Every id stays below 2^53 (exact as a JSON number); tests may
/// fix the key (SpaceRegistry's `id_key`).
inline constexpr unsigned kShardShift = 40;
inline constexpr uint32_t kMaxShard = (1u << (53 - kShardShift)) - 1;  // 8191
/// The shard a space id belongs to.
inline constexpr uint32_t ShardOfSpace(uint64_t id) { return static_cast<uint32_t>(id >> kShardShift); }
/// File ids seen by clients: shard << kShardShift | the permutation's image of
/// (kFileIdBit | the FileTable's id). Spaces count below kFileIdBit, so a file id and
/// a space id never coincide.
inline constexpr uint64_t kLocalIdMask = (uint64_t{1} << kShardShift) - 1;
inline constexpr uint64_t kFileIdBit = uint64_t{1} << (kShardShift - 1);

class SpaceRegistry {
 public:
  /// `frames` must outlive the registry. At most `max_spaces` spaces live at once. New
  /// ids carry `shard` (<= kMaxShard) in their high bits. `data_dir` is the FileTable's
  /// directory of host files ("" = none: opening a host file is EACCES). `id_key` 0
  /// draws the ids' permutation key at random (std::random_device).
  SpaceRegistry(FrameAllocator& frames, uint64_t max_spaces, uint32_t shard = 0,
                std::string data_dir = "", uint64_t id_key = 0);
  ~SpaceRegistry();
  SpaceRegistry(const SpaceRegistry&) = delete;
  SpaceRegistry& operator=(const SpaceRegistry&) = delete;

  /// Creates a space owned by `tenant`; returns its id (see kShardShift; never reused),
  /// or 0 if `max_spaces` spaces already exist, or (with *tenant_full set) if `tenant`
  /// already owns `tenant_max_spaces` (0 = no limit). Takes tenant_mu_ and one
  /// table-shard lock for write.
  uint64_t Create(const SpaceOptions& opts, std::string tenant, std::string label,
                  std::string locking_profile, uint64_t tenant_max_spaces = 0,
                  bool* tenant_full = nullptr);

  /// fork(2)'s new process, as kernel/fork.c copy_process and dup_mmap (Linux 6.18):
  /// a new space owned by `tenant` holding parent->as.DupMmap(profile) (null `profile`:
  /// the parent's locking profile); `locking_profile` is what ListSpaces reports. Returns
  /// its id, or 0 with *error set: EAGAIN if `max_spaces` spaces exist or (with
  /// *tenant_full set) `tenant` owns `tenant_max_spaces` already (0 = no limit; fork's
  /// EAGAIN at RLIMIT_NPROC), checked before anything is copied; ENOMEM if DupMmap
  /// refuses (the budget or the frame limit; nothing of the child is left). Takes
  /// tenant_mu_, the parent's mmap_lock for write (DupMmap), then one table-shard lock
  /// for write.
  uint64_t Fork(Space& parent, std::string tenant, std::string label,
                std::string locking_profile, const LockingProfile* profile,
                uint64_t tenant_max_spaces, bool* tenant_full, int* error);

  /// execve(2)'s exec_mmap (fs/exec.c, Linux 6.18): `sp`'s entry is replaced by a space
  /// of the same id, owner, label and locking profile around `mm` (AddressSpace::Exec's
  /// new space); operations in flight finish on the old one, which is freed after them.
  /// False (mm dropped) if `sp` is no longer registered (destroyed, or replaced by
  /// another exec meanwhile). Takes the id's shard lock for write.
  bool Exec(const Space& sp, std::unique_ptr<AddressSpace> mm);

  /// The space with this id, or null. Takes the id's shard lock for read.
  std::shared_ptr<Space> Find(uint64_t id) const;

  /// Removes the space; false if unknown. Its memory is freed when no operation uses it
  /// any more (here, unless an operation is in flight). Takes one shard lock for write.
  bool Destroy(uint64_t id);

  /// Destroys every space (clean shutdown, before FileTable::SyncAll); returns how many.
  uint64_t DestroyAll();

  /// All live spaces, ordered by id. Takes each shard lock for read in turn.
  std::vector<std::shared_ptr<Space>> List() const;

  /// The spaces of `tenant` and the memory it uses (Counters() of each: a sum of
  /// per-CPU counters, not a snapshot; plus its TenantMemcg's charge). O(live spaces).
  /// Takes memcg_mu_ for read.
  TenantUsage Usage(const std::string& tenant) const;

  /// Totals over List(): calls AddressSpace::Counters() on every space; and the page
  /// caches of the open files (FileTable::List, each inode once).
  SpaceTotals Totals() const;

  /// Number of live spaces (exact between Create/Destroy calls).
  uint64_t size() const { return count_.load(std::memory_order_relaxed); }
  uint64_t max_spaces() const { return max_spaces_; }
  /// The daemon's shard number (--shard).
  uint32_t shard() const { return shard_; }
  /// The daemon's files, shared by all spaces (thread-safe).
  FileTable& files() { return files_; }
  const std::string& data_dir() const { return data_dir_; }
  /// A FileTable id as clients see it (the shard in the high bits, see kFileIdBit).
  uint64_t PublicFileId(uint64_t table_id) const {
    return (static_cast<uint64_t>(shard_) << kShardShift) | ids_.Encrypt(kFileIdBit | table_id);
  }
  /// The FileTable id a PublicFileId came from whoever owns it; 0 if `public_id` is
  /// not a file id of this daemon's boot.
  uint64_t TableIdOf(uint64_t public_id) const;
  /// Takes one of `tenant`'s open-file slots before an OpenFile or CreateShmemFile:
  /// false if it holds `tenant_max` already (0 = no limit; RLIMIT_NOFILE's EMFILE).
  /// Every true is matched by SetFileOwner (the file opened) or UnreserveFile (it was
  /// not). Takes file_mu_.
  bool ReserveFile(const std::string& tenant, uint64_t tenant_max);
  void UnreserveFile(const std::string& tenant);
  /// Records that `tenant` opened FileTable id `table_id` (OpenFile, CreateShmemFile)
  /// with the slot ReserveFile took.
  void SetFileOwner(uint64_t table_id, const std::string& tenant);
  /// Forgets the owner of a closed file and gives its tenant's slot back.
  void ForgetFile(uint64_t table_id);
  /// Files `tenant` has open.
  uint64_t TenantFiles(const std::string& tenant) const;
  /// The memory cgroup of `tenant` (made at its first call, with `limit_bytes`; kept
  /// while the registry lives, as tenants come back after a token reload): the file
  /// pages its calls add are charged to it (engine/memcontrol.h). Takes memcg_mu_
  /// (for write only the first time).
  std::shared_ptr<MemCgroup> TenantMemcg(const std::string& tenant, uint64_t limit_bytes) const;
  /// The FileTable id of a client's file id; 0 (no such file: EBADF, as an unknown id)
  /// if it names another shard or boot, or a file another tenant opened (unless
  /// `any_tenant`). Takes file_mu_ for read.
  uint64_t TableFileId(uint64_t public_id, const std::string& tenant,
                       bool any_tenant = false) const;

  static constexpr size_t kShards = 64;
  /// The frame allocator (and its memory budget, which service buffers charge).
  FrameAllocator& frames() const { return frames_; }

 private:
  struct alignas(kDestructiveInterferenceBytes) Shard {
    mutable absl::Mutex mu;
    std::unordered_map<uint64_t, std::shared_ptr<Space>> spaces ABSL_GUARDED_BY(mu);
  };
  Shard& ShardFor(uint64_t id) { return shards_[id % kShards]; }
  // Takes a slot of max_spaces_ and one of `tenant`'s (tenant_max_spaces, 0 = no limit)
  // so concurrent creates cannot overshoot; false (*tenant_full set if it was the
  // tenant's limit) if either is full. Takes tenant_mu_.
  bool ReserveSpace(const std::string& tenant, uint64_t tenant_max_spaces, bool* tenant_full);
  // Gives back a ReserveSpace's slots (its space destroyed, or never made). Takes tenant_mu_.
  void UnreserveSpace(const std::string& tenant);
  // Registers `space` under its id. Takes one table-shard lock for write.
  void Insert(std::shared_ptr<Space> space);
  const Shard& ShardFor(uint64_t id) const { return shards_[id % kShards]; }

  FrameAllocator& frames_;
  const std::string data_dir_;
  // Declared before the spaces: destroyed after them (~FileTable needs no space left).
  FileTable files_;
  const uint64_t max_spaces_;
  const uint32_t shard_;
  const IdCipher ids_;
  std::atomic<uint64_t> next_id_{1};  // spaces created, +1: the permutation's input
  // A new space's id: the next count's image (skipping the one whose image is 0).
  uint64_t NextSpaceId();
  mutable absl::Mutex tenant_mu_;
  std::unordered_map<std::string, uint64_t> tenant_spaces_ ABSL_GUARDED_BY(tenant_mu_);
  mutable absl::Mutex memcg_mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<MemCgroup>> memcgs_ ABSL_GUARDED_BY(memcg_mu_);
  mutable absl::Mutex file_mu_;
  // table id -> tenant
  std::unordered_map<uint64_t, std::string> file_owner_ ABSL_GUARDED_BY(file_mu_);
  // tenant -> open files (and slots reserved for opens under way)
  std::unordered_map<std::string, uint64_t> tenant_files_ ABSL_GUARDED_BY(file_mu_);
  std::atomic<uint64_t> count_{0};
  std::array<Shard, kShards> shards_;
};

}  // namespace vmspace::rpc
