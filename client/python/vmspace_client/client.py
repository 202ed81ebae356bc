# SPDX-License-Identifier: Apache-2.0
"""Client: calls to one vmspaced, or to several (shards) routed by id as the C++ client
(client/lib/client.cc) routes them."""
import itertools
import os
import threading

import grpc

from ._pb import pb, pb_grpc
from .batch import ACCESS as _ACCESS
from .batch import space_of
from .constants import (MADV_BY_NAME, MADV_DONTNEED, MAP_ANONYMOUS, MAP_PRIVATE, MCL_CURRENT, MS_SYNC, O_RDONLY, O_RDWR, O_WRONLY,
                        PROT_READ, PROT_WRITE)

# open(2) access mode -> vmspace.v1.FileAccessMode.
_ACCESS_MODE = {O_RDONLY: pb.FILE_ACCESS_RDONLY, O_WRONLY: pb.FILE_ACCESS_WRONLY, O_RDWR: pb.FILE_ACCESS_RDWR}
from .errors import VmspaceError
from .fault import Fault
from .results import AccessResult, LockStats, ServerInfo
from .routing import fnv1a64, parse_targets, shard_of

# Ties of the least-spaces placement, shared by every Client of the process.
_placement_round_robin = itertools.count()


class _Backend:
    """One daemon: its target, channel, stub and (once known) shard."""

    def __init__(self, target, channel):
        self.target = target
        self.channel = channel
        self.stub = pb_grpc.VmSpaceStub(channel)
        self.shard = None  # from GetServerInfo


class Client:
    """Calls to vmspaced at `target`. A context manager (closes the channels).

    `target`: "host:port" (or any gRPC target, "unix:/path") for one daemon; several
    daemons (shards, each with its own --shard): "a:1,b:2", a list of targets, or
    "shards:NAME:PORT" (every address NAME resolves to, as a headless Service). With
    several, a call on a space or file id goes to the daemon serving the id's shard
    (id >> 40, learnt from GetServerInfo); create_space places the space (see there);
    list_spaces, list_files, get_lock_stats (summed), server_info and ping ask every
    daemon; a failed call's message starts with the target that answered it.

    `timeout`: deadline of each unary call, seconds; `stream_timeout`: of a Batch stream.
    `token` (default $VMSPACE_TOKEN): bearer token of vmspaced --token-file, sent with every
    call as "authorization: Bearer <token>". `tls_ca` (PEM bytes of the CA that signed the
    daemon's certificate): connect with TLS; `tls_cert` and `tls_key` (PEM bytes): a client
    certificate for mutual TLS (its subject CN is the tenant)."""

    def __init__(self, target="127.0.0.1:50051", timeout=10.0, token=None, tls_ca=None, tls_cert=None,
                 tls_key=None, stream_timeout=3600.0):
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        token = os.environ.get("VMSPACE_TOKEN", "") if token is None else token
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
        targets = parse_targets(target)
        self._sharded = len(targets) > 1 or (isinstance(target, str) and target.startswith("shards:"))
        self._lock = threading.Lock()
        self._backends = []
        for t in targets:
            if tls_ca:
                creds = grpc.ssl_channel_credentials(root_certificates=tls_ca, private_key=tls_key,
                                                     certificate_chain=tls_cert)
                channel = grpc.secure_channel(t, creds, options=options)
            else:
                channel = grpc.insecure_channel(t, options=options)
            self._backends.append(_Backend(t, channel))

    @property
    def targets(self):
        """The daemons' targets, in the order given."""
        return [b.target for b in self._backends]

    def close(self):
        for b in self._backends:
            b.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _error(self, backend, e):
        err = VmspaceError.from_rpc_error(e)
        if self._sharded:
            err.message = f"{backend.target}: {err.message}"
            err.strerror = err.message
        return err

    def _call_on(self, backend, method, request):
        try:
            return getattr(backend.stub, method)(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise self._error(backend, e) from None

    def _info(self, backend):
        r = self._call_on(backend, "GetServerInfo", pb.GetServerInfoRequest())
        with self._lock:
            backend.shard = r.shard
        return r

    def _route(self, id_):
        """The daemon of the shard of `id_` (a space or file id)."""
        if not self._sharded:
            return self._backends[0]
        shard = shard_of(id_)
        for attempt in range(2):
            found = [b for b in self._backends if b.shard == shard]
            if len(found) > 1:
                raise VmspaceError(grpc.StatusCode.FAILED_PRECONDITION,
                                   f"{found[0].target} and {found[1].target} both serve shard {shard}: "
                                   "give every daemon its own --shard")
            if found:
                return found[0]
            if attempt == 0:  # learn the shards not known yet
                for b in self._backends:
                    if b.shard is None:
                        try:
                            self._info(b)
                        except VmspaceError:
                            pass
        raise VmspaceError(grpc.StatusCode.UNAVAILABLE, f"id {id_}: no daemon of shard {shard} answers "
                                                        f"(targets {','.join(self.targets)})")

    def _call(self, method, request, id_=0):
        """A unary call on the daemon of `id_` (the request's space or file id)."""
        return self._call_on(self._route(id_), method, request)

    def _placement(self, shard, placement_key):
        """The daemon of a new space: of `shard`; else the key's hash over the daemons
        answering, sorted by shard; else the one with the fewest spaces (with room),
        ties taken round-robin."""
        if not self._sharded:
            return self._backends[0]
        if shard is not None:
            return self._route(shard << 40)
        up, first_error = [], None
        for b in self._backends:
            try:
                up.append((b, self._info(b)))
            except VmspaceError as e:
                first_error = first_error or e
        if not up:
            raise VmspaceError(first_error.code, f"CreateSpace: no daemon answers ({first_error.message})")
        if placement_key:
            up.sort(key=lambda c: c[1].shard)
            return up[fnv1a64(placement_key) % len(up)][0]
        room = [c for c in up if c[1].spaces < c[1].max_spaces] or up  # all full: the daemon says so
        least = min(c[1].spaces for c in room)
        ties = [b for b, info in room if info.spaces == least]
        return ties[next(_placement_round_robin) % len(ties)]

    def _gather(self, method, request):
        return [(b, self._call_on(b, method, request)) for b in self._backends]

    def create_space(self, label="", locking_profile="", shard=None, placement_key="", **settings):
        """Creates a space; returns its id. `settings`: max_map_count, mmap_base, ...
        With several daemons: on the daemon of `shard` if given; else on the daemon the
        hash of `placement_key` picks (the same key, the same daemon, as the C++ client);
        else on the daemon with the fewest spaces, ties taken round-robin."""
        s = pb.SpaceSettings(locking_profile=locking_profile, **settings)
        b = self._placement(shard, placement_key)
        return self._call_on(b, "CreateSpace", pb.CreateSpaceRequest(settings=s, label=label)).space_id

    def clone_space(self, space_id, locking_profile="", label=""):
        """fork(2) of a space (CloneSpace, as kernel/fork.c dup_mmap): returns the child's
        id, a space of the parent's daemon. "" keeps the parent's profile / label."""
        return self._call("CloneSpace", pb.CloneSpaceRequest(space_id=space_id, locking_profile=locking_profile,
                                                             label=label), space_id).space_id

    def exec_space(self, space_id, path, argv=(), envp=(), interpreter_path=""):
        """execve(2) in a space (ExecSpace, as fs/binfmt_elf.c load_elf_binary with ASLR off): its mappings
        become the initial layout of the ELF program `path` (relative to the daemon's data directory; its
        PT_INTERP taken there too, or `interpreter_path`). Empty argv = [path]. Returns the ExecSpaceResponse
        (start_brk, map_count, interpreter)."""
        return self._call("ExecSpace", pb.ExecSpaceRequest(space_id=space_id, path=path, argv=list(argv),
                                                           envp=list(envp), interpreter_path=interpreter_path),
                          space_id)

    def destroy_space(self, space_id):
        self._call("DestroySpace", pb.DestroySpaceRequest(space_id=space_id), space_id)

    def list_spaces(self):
        """SpaceInfo of every space of every daemon, by id."""
        return sorted((s for _, r in self._gather("ListSpaces", pb.ListSpacesRequest()) for s in r.spaces),
                      key=lambda s: s.space_id)

    def mmap(self, space_id, length, prot=PROT_READ | PROT_WRITE, flags=MAP_PRIVATE | MAP_ANONYMOUS, addr=0,
             offset=0, file_id=0):
        """mmap(2); returns the address. With file_id (and MAP_ANONYMOUS clear) maps that open file."""
        return self._call("Mmap", pb.MmapRequest(space_id=space_id, addr=addr, len=length, prot=prot, flags=flags,
                                                 offset=offset, file_id=file_id), space_id).addr

    def msync(self, space_id, addr, length, flags=MS_SYNC):
        """msync(2): MS_SYNC writes back the dirty pages of the range's shared file mappings."""
        self._call("Msync", pb.MsyncRequest(space_id=space_id, addr=addr, len=length, flags=flags), space_id)

    # Files: one table of open files per daemon, shared by all its spaces. File ids name
    # their daemon like space ids; a new file is opened on the daemon of `near_space`
    # (the space that will map it; 0: the daemon of shard 0).

    def open_file(self, path, write=False, create=False, exclusive=False, truncate=False, near_space=0, mode=None):
        """open(2) of `path` under vmspaced's --data-dir; returns the file id. `mode`: O_RDONLY,
        O_WRONLY or O_RDWR (None: O_RDWR with `write`, else O_RDONLY)."""
        req = pb.OpenFileRequest(path=path, write=write, create=create, exclusive=exclusive, truncate=truncate)
        if mode is not None:
            req.access = _ACCESS_MODE[mode]
        return self._call("OpenFile", req, near_space).file_id

    def create_shmem_file(self, name="", size=0, near_space=0, allow_sealing=False):
        """memfd_create(2) + ftruncate(2); returns the file id. `allow_sealing`: MFD_ALLOW_SEALING."""
        return self._call("CreateShmemFile", pb.CreateShmemFileRequest(name=name, size=size,
                                                                       allow_sealing=allow_sealing),
                          near_space).file_id

    def add_file_seals(self, file_id, seals):
        """fcntl(F_ADD_SEALS): F_SEAL_* bits on a shmem file."""
        self._call("AddFileSeals", pb.AddFileSealsRequest(file_id=file_id, seals=seals), file_id)

    def get_file_seals(self, file_id):
        """fcntl(F_GET_SEALS): the F_SEAL_* bits."""
        return self._call("GetFileSeals", pb.GetFileSealsRequest(file_id=file_id), file_id).seals

    def reopen_file(self, file_id, mode=O_RDONLY):
        """open("/proc/self/fd/N") with access mode `mode`: a new file id of the same file."""
        return self._call("ReopenFile", pb.ReopenFileRequest(file_id=file_id, access=_ACCESS_MODE[mode]),
                          file_id).file_id

    def close_file(self, file_id):
        self._call("CloseFile", pb.CloseFileRequest(file_id=file_id), file_id)

    def truncate_file(self, file_id, size):
        self._call("TruncateFile", pb.TruncateFileRequest(file_id=file_id, size=size), file_id)

    def stat_file(self, file_id):
        """FileInfo: .size, .inode, .dev, .cached_pages, .dirty_pages, .mapped_vmas, ..."""
        return self._call("StatFile", pb.StatFileRequest(file_id=file_id), file_id).file

    def list_files(self):
        """FileInfo of every open file of every daemon, by id."""
        files = []
        for b in self._backends:
            token = 0
            while True:  # every page (ListFiles answers up to 1000 handles a call)
                r = self._call_on(b, "ListFiles", pb.ListFilesRequest(page_token=token))
                files.extend(r.files)
                token = r.next_page_token
                if not token:
                    break
        return sorted(files, key=lambda f: f.file_id)

    def read_file(self, file_id, offset, length):
        """pread(2): bytes (fewer at end of file)."""
        return self._call("ReadFile", pb.ReadFileRequest(file_id=file_id, offset=offset, len=length), file_id).data

    def write_file(self, file_id, offset, data):
        """pwrite(2): bytes written."""
        return self._call("WriteFile", pb.WriteFileRequest(file_id=file_id, offset=offset, data=data),
                          file_id).bytes_written

    def fsync_file(self, file_id):
        """fsync(2): the file's dirty pages to its host file, then fdatasync(2)."""
        self._call("FsyncFile", pb.FsyncFileRequest(file_id=file_id), file_id)

    def munmap(self, space_id, addr, length):
        self._call("Munmap", pb.MunmapRequest(space_id=space_id, addr=addr, len=length), space_id)

    def mprotect(self, space_id, addr, length, prot):
        self._call("Mprotect", pb.MprotectRequest(space_id=space_id, addr=addr, len=length, prot=prot), space_id)

    def mlock(self, space_id, addr, length, flags=0):
        """mlock2(2): flags 0 or MLOCK_ONFAULT."""
        self._call("Mlock", pb.MlockRequest(space_id=space_id, addr=addr, len=length, flags=flags), space_id)

    def munlock(self, space_id, addr, length):
        self._call("Munlock", pb.MunlockRequest(space_id=space_id, addr=addr, len=length), space_id)

    def mlockall(self, space_id, flags=MCL_CURRENT):
        """mlockall(2): MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT."""
        self._call("Mlockall", pb.MlockallRequest(space_id=space_id, flags=flags), space_id)

    def munlockall(self, space_id):
        self._call("Munlockall", pb.MunlockallRequest(space_id=space_id), space_id)

    def mseal(self, space_id, addr, length, flags=0):
        """mseal(2): munmap, mprotect and MAP_FIXED over the range fail EPERM from then on."""
        self._call("Mseal", pb.MsealRequest(space_id=space_id, addr=addr, len=length, flags=flags), space_id)

    def madvise(self, space_id, addr, length, advice=MADV_DONTNEED):
        """madvise(2): `advice` is a MADV_* number or its name ("free", "guard_install")."""
        if isinstance(advice, str):
            advice = MADV_BY_NAME[advice]
        self._call("Madvise", pb.MadviseRequest(space_id=space_id, addr=addr, len=length, advice=advice), space_id)

    def brk(self, space_id, brk):
        """brk(2); returns the break after the call (the old one if the change was refused:
        brk has no errno; brk=0 asks for the current break)."""
        return self._call("Brk", pb.BrkRequest(space_id=space_id, brk=brk), space_id).brk

    def mremap(self, space_id, old_addr, old_len, new_len, flags=0, new_addr=0):
        """mremap(2); returns the mapping's address after the call. flags: MREMAP_MAYMOVE,
        MREMAP_FIXED, MREMAP_DONTUNMAP (constants); new_addr with FIXED or DONTUNMAP."""
        return self._call("Mremap", pb.MremapRequest(space_id=space_id, old_addr=old_addr, old_len=old_len,
                                                     new_len=new_len, flags=flags, new_addr=new_addr), space_id).addr

    def mincore(self, space_id, addr, length):
        """mincore(2): bytes, one per page of [addr, addr + length), bit 0 set if resident.
        EINVAL: addr unaligned or more pages than the daemon's --max-io-bytes; ENOMEM: a hole."""
        return self._call("Mincore", pb.MincoreRequest(space_id=space_id, addr=addr, len=length), space_id).vec

    def fault(self, space_id, addr, access="read"):
        """One simulated access ("read", "write", "exec"); returns a Fault."""
        return Fault(self._call("Fault", pb.FaultRequest(space_id=space_id, addr=addr, access=_ACCESS[access]),
                                space_id).fault)

    def access(self, space_id, addr, length, stride=1, access="read"):
        """Touches one byte every `stride` bytes of [addr, addr+length) (a write stores
        (uint8)i at addr+i); returns an AccessResult (.faults, .major_faults, .accesses,
        .stop: the Fault that ended the walk early, else None)."""
        return AccessResult.from_pb(self._call("Access", pb.AccessRequest(
            space_id=space_id, addr=addr, len=length, stride=stride, access=_ACCESS[access]), space_id))

    def read(self, space_id, addr, length):
        """Bytes read (shorter if a fault stopped the copy)."""
        return self._call("ReadMemory", pb.ReadMemoryRequest(space_id=space_id, addr=addr, len=length), space_id).data

    def write(self, space_id, addr, data):
        """Bytes written (fewer if a fault stopped the copy)."""
        return self._call("WriteMemory", pb.WriteMemoryRequest(space_id=space_id, addr=addr, data=data),
                          space_id).bytes_written

    def get_maps(self, space_id, start=0, end=0):
        """GetMapsResponse: .vmas, .maps_text, .map_count; only the VMAs overlapping
        [start, end) (end 0: no limit)."""
        return self._call("GetMaps", pb.GetMapsRequest(space_id=space_id, start=start, end=end), space_id)

    def maps(self, space_id):
        """The space's /proc/PID/maps text."""
        return self.get_maps(space_id).maps_text

    def get_lock_stats(self, locking_profile=""):
        """LockStats (lock_stat-like figures per lock class and mode, and the fault and
        VMA-lock event counts) of `locking_profile` ("" = all profiles summed); with
        several daemons, their sum (texts joined under "== TARGET" lines)."""
        total = None
        for b, r in self._gather("GetLockStats", pb.GetLockStatsRequest(locking_profile=locking_profile)):
            stats = LockStats.from_pb(r)
            if self._sharded:
                stats.text = f"== {b.target}\n{stats.text}"
            if total is None:
                total = stats
            else:
                total.add(stats)
        return total

    def server_info(self):
        """A ServerInfo per daemon, in target order: shard, spaces, max_spaces, version,
        memory by kind, memory_limit_bytes."""
        return [ServerInfo.from_pb(b.target, self._info(b)) for b in self._backends]

    def ping(self):
        """Ping every daemon (VmspaceError UNAVAILABLE if one does not answer)."""
        self._gather("Ping", pb.PingRequest())

    def batch(self, requests, space_id=None):
        """A Batch stream: sends each item of `requests` (an iterable, typically a
        generator, of BatchRequest or of lists of Op: see vmspace_client.batch.op) as it
        is produced and yields each BatchResponse in order; the generator may wait for
        earlier answers before it yields the next request. A failed op does not end the
        stream: its OpResult carries the error (vmspace_client.batch.op_error); a
        stream-level failure (more than --max-batch ops in a message, ...) raises
        VmspaceError after the answers already sent. With several daemons the stream
        goes to the daemon of `space_id`, or else of the first request's first op; every
        op of a stream must be on that daemon's spaces."""
        items = (r if isinstance(r, pb.BatchRequest) else pb.BatchRequest(ops=list(r)) for r in requests)
        if self._sharded and space_id is None:
            first = next(items, None)
            if first is None:
                return
            backend = self._route(space_of(first))
            items = itertools.chain([first], items)
        else:
            backend = self._route(space_id or 0)
        try:
            for resp in backend.stub.Batch(items, timeout=self.stream_timeout, metadata=self._metadata):
                yield resp
        except grpc.RpcError as e:
            raise self._error(backend, e) from None
