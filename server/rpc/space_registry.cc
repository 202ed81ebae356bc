// SPDX-License-Identifier: Apache-2.0
#include "rpc/space_registry.h"

#include <algorithm>
#include <utility>
#include <cerrno>
#include <set>
#include <tuple>

namespace vmspace::rpc {

SpaceRegistry::SpaceRegistry(FrameAllocator& frames, uint64_t max_spaces, uint32_t shard,
                             std::string data_dir, uint64_t id_key)
    : frames_(frames), data_dir_(std::move(data_dir)), files_(frames, data_dir_),
      max_spaces_(max_spaces), shard_(shard), ids_(id_key) {}

uint64_t SpaceRegistry::NextSpaceId() {
  uint64_t local = 0;
  while (local == 0) local = ids_.Encrypt(next_id_.fetch_add(1, std::memory_order_relaxed) & (kFileIdBit - 1));
  return (static_cast<uint64_t>(shard_) << kShardShift) | local;
}

uint64_t SpaceRegistry::TableIdOf(uint64_t public_id) const {
  const uint64_t n = public_id & kLocalIdMask;
  if (ShardOfSpace(public_id) != shard_ || n == 0) return 0;
  const uint64_t seq = ids_.Decrypt(n);
  return (seq & kFileIdBit) != 0 ? seq & (kFileIdBit - 1) : 0;
}

SpaceRegistry::~SpaceRegistry() = default;

bool SpaceRegistry::ReserveSpace(const std::string& tenant, uint64_t tenant_max_spaces,
                                 bool* tenant_full) {
  // Reserve a slot first so concurrent creates cannot overshoot the limit.
  uint64_t n = count_.load(std::memory_order_relaxed);
  do {
    if (n >= max_spaces_) return false;
  } while (!count_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
  {
    absl::MutexLock lock(&tenant_mu_);
    uint64_t& mine = tenant_spaces_[tenant];
    if (tenant_max_spaces != 0 && mine >= tenant_max_spaces) {
      count_.fetch_sub(1, std::memory_order_relaxed);
      if (tenant_full) *tenant_full = true;
      return false;
    }
    mine++;
  }
  return true;
}

void SpaceRegistry::UnreserveSpace(const std::string& tenant) {
  count_.fetch_sub(1, std::memory_order_relaxed);
  absl::MutexLock lock(&tenant_mu_);
  if (auto it = tenant_spaces_.find(tenant); it != tenant_spaces_.end() && --it->second == 0)
    tenant_spaces_.erase(it);
}

void SpaceRegistry::Insert(std::shared_ptr<Space> space) {
  Shard& sh = ShardFor(space->id);
  absl::MutexLock lock(&sh.mu);
  const uint64_t id = space->id;
  sh.spaces.emplace(id, std::move(space));
}

uint64_t SpaceRegistry::Create(const SpaceOptions& opts, std::string tenant, std::string label,
                               std::string locking_profile, uint64_t tenant_max_spaces,
                               bool* tenant_full) {
  if (!ReserveSpace(tenant, tenant_max_spaces, tenant_full)) return 0;
  const uint64_t id = NextSpaceId();
  Insert(std::make_shared<Space>(id, std::move(tenant), std::move(label),
                                 std::move(locking_profile), frames_, opts));
  return id;
}

uint64_t SpaceRegistry::Fork(Space& parent, std::string tenant, std::string label,
                             std::string locking_profile, const LockingProfile* profile,
                             uint64_t tenant_max_spaces, bool* tenant_full, int* error) {
  if (!ReserveSpace(tenant, tenant_max_spaces, tenant_full)) {
    if (error) *error = EAGAIN;
    return 0;
  }
  int err = 0;
  std::unique_ptr<AddressSpace> child = parent.as.DupMmap(&err, profile);
  if (!child) {
    UnreserveSpace(tenant);
    if (error) *error = err != 0 ? err : ENOMEM;
    return 0;
  }
  const uint64_t id = NextSpaceId();
  Insert(std::make_shared<Space>(id, std::move(tenant), std::move(label),
                                 std::move(locking_profile), std::move(child)));
  return id;
}

bool SpaceRegistry::Exec(const Space& sp, std::unique_ptr<AddressSpace> mm) {
  auto fresh = std::make_shared<Space>(sp.id, sp.tenant, sp.label, sp.locking_profile, std::move(mm));
  std::shared_ptr<Space> old;
  {
    Shard& sh = ShardFor(sp.id);
    absl::MutexLock lock(&sh.mu);
    auto it = sh.spaces.find(sp.id);
    if (it == sh.spaces.end() || it->second.get() != &sp) return false;
    old = std::exchange(it->second, std::move(fresh));
  }
  old.reset();  // the old mm goes outside the shard lock (unless in use)
  return true;
}

std::shared_ptr<Space> SpaceRegistry::Find(uint64_t id) const {
  const Shard& sh = ShardFor(id);
  absl::ReaderMutexLock lock(&sh.mu);
  auto it = sh.spaces.find(id);
  return it == sh.spaces.end() ? nullptr : it->second;
}

bool SpaceRegistry::Destroy(uint64_t id) {
  std::shared_ptr<Space> victim;
  {
    Shard& sh = ShardFor(id);
    absl::MutexLock lock(&sh.mu);
    auto it = sh.spaces.find(id);
    if (it == sh.spaces.end()) return false;
    victim = std::move(it->second);
    sh.spaces.erase(it);
  }
  UnreserveSpace(victim->tenant);
  victim.reset();  // tears the space down outside the shard lock (unless in use)
  return true;
}

uint64_t SpaceRegistry::DestroyAll() {
  uint64_t n = 0;
  for (const std::shared_ptr<Space>& sp : List()) n += Destroy(sp->id) ? 1 : 0;
  return n;
}

std::vector<std::shared_ptr<Space>> SpaceRegistry::List() const {
  std::vector<std::shared_ptr<Space>> out;
  for (const Shard& sh : shards_) {
    absl::ReaderMutexLock lock(&sh.mu);
    for (const auto& [id, sp] : sh.spaces) out.push_back(sp);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->id < b->id; });
  return out;
}

TenantUsage SpaceRegistry::Usage(const std::string& tenant) const {
  TenantUsage u;
  for (const std::shared_ptr<Space>& sp : List()) {
    if (sp->tenant != tenant) continue;
    const SpaceCounters c = sp->as.Counters();
    u.spaces++;
    u.memory_bytes += c.anon_pages * kPageSize + c.pgtable_bytes;
  }
  {
    absl::ReaderMutexLock lock(&memcg_mu_);
    if (auto it = memcgs_.find(tenant); it != memcgs_.end()) u.page_cache_bytes = it->second->usage();
  }
  u.memory_bytes += u.page_cache_bytes;
  return u;
}

std::shared_ptr<MemCgroup> SpaceRegistry::TenantMemcg(const std::string& tenant, uint64_t limit_bytes) const {
  {
    absl::ReaderMutexLock lock(&memcg_mu_);
    if (auto it = memcgs_.find(tenant); it != memcgs_.end()) return it->second;
  }
  absl::MutexLock lock(&memcg_mu_);
  std::shared_ptr<MemCgroup>& cg = memcgs_[tenant];
  if (!cg) cg = std::make_shared<MemCgroup>(tenant, limit_bytes);
  return cg;
}

void SpaceRegistry::SetFileOwner(uint64_t table_id, const std::string& tenant) {
  absl::MutexLock lock(&file_mu_);
  file_owner_[table_id] = tenant;
}

bool SpaceRegistry::ReserveFile(const std::string& tenant, uint64_t tenant_max) {
  absl::MutexLock lock(&file_mu_);
  uint64_t& n = tenant_files_[tenant];
  if (tenant_max != 0 && n >= tenant_max) return false;
  n++;
  return true;
}

void SpaceRegistry::UnreserveFile(const std::string& tenant) {
  absl::MutexLock lock(&file_mu_);
  auto it = tenant_files_.find(tenant);
  if (it != tenant_files_.end() && --it->second == 0) tenant_files_.erase(it);
}

void SpaceRegistry::ForgetFile(uint64_t table_id) {
  absl::MutexLock lock(&file_mu_);
  auto owner = file_owner_.find(table_id);
  if (owner == file_owner_.end()) return;
  auto it = tenant_files_.find(owner->second);
  if (it != tenant_files_.end() && --it->second == 0) tenant_files_.erase(it);
  file_owner_.erase(owner);
}

uint64_t SpaceRegistry::TenantFiles(const std::string& tenant) const {
  absl::ReaderMutexLock lock(&file_mu_);
  auto it = tenant_files_.find(tenant);
  return it == tenant_files_.end() ? 0 : it->second;
}

uint64_t SpaceRegistry::TableFileId(uint64_t public_id, const std::string& tenant,
                                    bool any_tenant) const {
  const uint64_t table_id = TableIdOf(public_id);
  if (table_id == 0) return 0;
  absl::ReaderMutexLock lock(&file_mu_);
  auto it = file_owner_.find(table_id);
  if (it == file_owner_.end() || (!any_tenant && it->second != tenant)) return 0;
  return table_id;
}

SpaceTotals SpaceRegistry::Totals() const {
  SpaceTotals t;
  for (const std::shared_ptr<Space>& sp : List()) {
    const SpaceCounters c = sp->as.Counters();
    t.spaces++;
    t.vmas += c.map_count;
    t.resident_bytes += c.rss_pages * kPageSize;
    t.pagetable_bytes += c.pgtable_bytes;
    t.locked_bytes += c.locked_vm_pages * kPageSize;
    t.sealed_bytes += c.sealed_pages * kPageSize;
    t.sealed_vmas += c.sealed_vmas;
  }
  std::set<std::tuple<uint32_t, uint32_t, uint64_t>> seen;  // (dev major, minor, inode)
  for (const FileStat& st : files_.List()) {
    if (!seen.insert({st.dev_major, st.dev_minor, st.inode}).second) continue;
    t.page_cache_pages += st.cached_pages;
    t.page_cache_dirty_pages += st.dirty_pages;
  }
  return t;
}

}  // namespace vmspace::rpc
