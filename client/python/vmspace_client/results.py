# SPDX-License-Identifier: Apache-2.0
"""Typed results of the calls that answer more than one number: Access, GetLockStats,
GetServerInfo. Plain dataclasses built from the response messages."""
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .fault import Fault


@dataclass
class AccessResult:
    """Access: `faults` handled (minor + major), `major_faults`, `accesses` (bytes touched);
    `stop` is the Fault (SIGSEGV / SIGBUS) that ended the walk early, else None."""
    faults: int
    major_faults: int
    accesses: int
    stop: Optional[Fault] = None

    @classmethod
    def from_pb(cls, r):
        return cls(r.faults, r.major_faults, r.accesses, Fault(r.stop) if r.HasField("stop") else None)


@dataclass
class LockStat:
    """One lock class and mode (/proc/lock_stat row). Times in seconds. wait_buckets and
    hold_buckets: counts per histogram bucket (not cumulative), bucket i for times <=
    LockStats.bucket_upper_seconds[i]; the last one is +Inf."""
    lock: str
    mode: str
    acquisitions: int
    contentions: int
    wait_seconds_total: float
    wait_seconds_max: float
    hold_seconds_total: float
    hold_seconds_max: float
    wait_buckets: List[int] = field(default_factory=list)
    hold_buckets: List[int] = field(default_factory=list)

    @classmethod
    def from_pb(cls, s):
        return cls(s.lock, s.mode, s.acquisitions, s.contentions, s.wait_seconds_total, s.wait_seconds_max,
                   s.hold_seconds_total, s.hold_seconds_max, list(s.wait_buckets), list(s.hold_buckets))


@dataclass
class LockStats:
    """GetLockStats: `locks` (LockStat per lock class and mode), `events` (pgfault,
    vma_lock_success, vma_lock_abort, ...: counts), `text` (the /proc/lock_stat-like
    table), `lock_stats_enabled` (--lock-stats: timing recorded; counts always are),
    `bucket_upper_seconds` (the histogram bounds, without +Inf)."""
    locks: List[LockStat]
    events: Dict[str, int]
    text: str
    lock_stats_enabled: bool
    bucket_upper_seconds: List[float]

    @classmethod
    def from_pb(cls, r):
        return cls([LockStat.from_pb(s) for s in r.locks], dict(r.events), r.text, r.lock_stats_enabled,
                   list(r.bucket_upper_seconds))

    def get(self, lock, mode):
        """The LockStat of `lock` ("mmap_lock") in `mode` ("read" / "write"), or None."""
        return next((s for s in self.locks if (s.lock, s.mode) == (lock, mode)), None)

    def add(self, other):
        """Sums `other` (another daemon's stats) into this one: counts and totals add up,
        maxima take the larger, texts are joined."""
        for s in other.locks:
            mine = self.get(s.lock, s.mode)
            if mine is None:
                self.locks.append(LockStat(**{k: (list(v) if isinstance(v, list) else v) for k, v in vars(s).items()}))
                continue
            mine.acquisitions += s.acquisitions
            mine.contentions += s.contentions
            mine.wait_seconds_total += s.wait_seconds_total
            mine.wait_seconds_max = max(mine.wait_seconds_max, s.wait_seconds_max)
            mine.hold_seconds_total += s.hold_seconds_total
            mine.hold_seconds_max = max(mine.hold_seconds_max, s.hold_seconds_max)
            mine.wait_buckets = [a + b for a, b in zip(mine.wait_buckets, s.wait_buckets)] or s.wait_buckets
            mine.hold_buckets = [a + b for a, b in zip(mine.hold_buckets, s.hold_buckets)] or s.hold_buckets
        for name, n in other.events.items():
            self.events[name] = self.events.get(name, 0) + n
        self.text += other.text
        self.lock_stats_enabled = self.lock_stats_enabled and other.lock_stats_enabled
        self.bucket_upper_seconds = self.bucket_upper_seconds or other.bucket_upper_seconds


@dataclass
class ServerInfo:
    """GetServerInfo of one daemon: its `target`, `shard` (the high bits of its space
    ids), `spaces` live of `max_spaces`, `version`, `memory` (bytes charged to the
    --max-memory-bytes budget by kind: frames, page_tables, vmas, index_nodes,
    page_cache, buffers) and `memory_limit_bytes` (--max-memory-bytes; 0 = unlimited)."""
    target: str
    shard: int
    spaces: int
    max_spaces: int
    version: str
    memory: Dict[str, int]
    memory_limit_bytes: int

    @classmethod
    def from_pb(cls, target, r):
        return cls(target, r.shard, r.spaces, r.max_spaces, r.version, {m.kind: m.bytes for m in r.memory},
                   r.memory_limit_bytes)
