#include "rpc/space_registry.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <tuple>

namespace vmspace::rpc {

SpaceRegistry::SpaceRegistry(FrameAllocator& frames, uint64_t max_spaces, uint32_t shard,
                             std::string data_dir)
    : frames_(frames), data_dir_(std::move(data_dir)), files_(frames, data_dir_),
      max_spaces_(max_spaces), shard_(shard),
      next_id_((static_cast<uint64_t>(shard) << kShardShift) + 1) {}

SpaceRegistry::~SpaceRegistry() = default;

uint64_t SpaceRegistry::Create(const SpaceOptions& opts, std::string label,
                               std::string locking_profile) {
  // Reserve a slot first so concurrent creates cannot overshoot the limit.
  uint64_t n = count_.load(std::memory_order_relaxed);
  do {
    if (n >= max_spaces_) return 0;
  } while (!count_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  auto space =
      std::make_shared<Space>(id, std::move(label), std::move(locking_profile), frames_, opts);
  Shard& sh = ShardFor(id);
  std::unique_lock lock(sh.mu);
  sh.spaces.emplace(id, std::move(space));
  return id;
}

std::shared_ptr<Space> SpaceRegistry::Find(uint64_t id) const {
  const Shard& sh = ShardFor(id);
  std::shared_lock lock(sh.mu);
  auto it = sh.spaces.find(id);
  return it == sh.spaces.end() ? nullptr : it->second;
}

bool SpaceRegistry::Destroy(uint64_t id) {
  std::shared_ptr<Space> victim;
  {
    Shard& sh = ShardFor(id);
    std::unique_lock lock(sh.mu);
    auto it = sh.spaces.find(id);
    if (it == sh.spaces.end()) return false;
    victim = std::move(it->second);
    sh.spaces.erase(it);
  }
  count_.fetch_sub(1, std::memory_order_relaxed);
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
    std::shared_lock lock(sh.mu);
    for (const auto& [id, sp] : sh.spaces) out.push_back(sp);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->id < b->id; });
  return out;
}

SpaceTotals SpaceRegistry::Totals() const {
  SpaceTotals t;
  for (const std::shared_ptr<Space>& sp : List()) {
    const SpaceCounters c = sp->as.Counters();
    t.spaces++;
    t.vmas += c.map_count;
    t.resident_bytes += c.rss_pages * kPageSize;
    t.pagetable_bytes += c.pgtable_bytes;
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
