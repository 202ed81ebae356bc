# SPDX-License-Identifier: Apache-2.0
"""Which daemon serves which id, as the C++ client (client/lib/client.cc) routes calls
over several daemons (shards)."""
import socket

# Space and file ids carry their daemon's shard in bits 40..52: id = shard << 40 | n
# (vmspaced --shard; client/lib/client.h kSpaceIdShardShift).
SHARD_SHIFT = 40


def shard_of(id_):
    """The shard (daemon) a space or file id belongs to."""
    return id_ >> SHARD_SHIFT


def parse_targets(target):
    """The daemons a target names: "host:port" (or any gRPC target, "unix:/path") is one;
    "a,b,c" or a list is several; "shards:NAME:PORT" is every address NAME resolves to
    (getaddrinfo, as gRPC targets "ipv4:..." / "ipv6:[...]:..."). ValueError if empty,
    OSError (socket.gaierror) if NAME does not resolve."""
    if isinstance(target, (list, tuple)):
        out = [t.strip() for t in target]
    elif target.startswith("shards:"):
        host, sep, port = target[len("shards:"):].rpartition(":")
        if not sep or not host:
            raise ValueError(f"target {target!r}: want shards:NAME:PORT")
        out = []
        for family, _, _, _, addr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            t = f"ipv6:[{addr[0]}]:{port}" if family == socket.AF_INET6 else f"ipv4:{addr[0]}:{port}"
            if t not in out:
                out.append(t)
    else:
        out = [t.strip() for t in target.split(",")]
    if not out or any(not t for t in out):
        raise ValueError(f"target {target!r}: empty target in the list" if out else f"target {target!r}: no daemon")
    return out


def fnv1a64(key):
    """64-bit FNV-1a of `key` (str or bytes): the placement hash of CreateSpace's
    placement_key, the same as the C++ client's."""
    h = 14695981039346656037
    for c in key.encode() if isinstance(key, str) else key:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h
