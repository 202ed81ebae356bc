"""Client: calls to vmspaced."""
import os

import grpc

from ._pb import pb, pb_grpc
from .constants import MADV_DONTNEED, MAP_ANONYMOUS, MAP_PRIVATE, MS_SYNC, PROT_READ, PROT_WRITE
from .errors import VmspaceError
from .fault import Fault

_ACCESS = {"read": pb.ACCESS_READ, "write": pb.ACCESS_WRITE, "exec": pb.ACCESS_EXEC}


class Client:
    """Calls to one vmspaced at `target` ("host:port"). A context manager (closes the channel).

    `token` (default $VMSPACE_TOKEN): bearer token of vmspaced --token-file, sent with every
    call as "authorization: Bearer <token>". `tls_ca` (PEM bytes of the CA that signed the
    daemon's certificate): connect with TLS; `tls_cert` and `tls_key` (PEM bytes): a client
    certificate for mutual TLS (its subject CN is the tenant)."""

    def __init__(self, target="127.0.0.1:50051", timeout=10.0, token=None, tls_ca=None, tls_cert=None,
                 tls_key=None):
        self.timeout = timeout
        token = os.environ.get("VMSPACE_TOKEN", "") if token is None else token
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
        if tls_ca:
            creds = grpc.ssl_channel_credentials(root_certificates=tls_ca, private_key=tls_key,
                                                 certificate_chain=tls_cert)
            self._channel = grpc.secure_channel(target, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._stub = pb_grpc.VmSpaceStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request):
        try:
            return getattr(self._stub, method)(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise VmspaceError.from_rpc_error(e) from None

    def create_space(self, label="", locking_profile="", **settings):
        """Creates a space; returns its id. `settings`: max_map_count, mmap_base, ..."""
        s = pb.SpaceSettings(locking_profile=locking_profile, **settings)
        return self._call("CreateSpace", pb.CreateSpaceRequest(settings=s, label=label)).space_id

    def destroy_space(self, space_id):
        self._call("DestroySpace", pb.DestroySpaceRequest(space_id=space_id))

    def list_spaces(self):
        return list(self._call("ListSpaces", pb.ListSpacesRequest()).spaces)

    def mmap(self, space_id, length, prot=PROT_READ | PROT_WRITE, flags=MAP_PRIVATE | MAP_ANONYMOUS, addr=0,
             offset=0, file_id=0):
        """mmap(2); returns the address. With file_id (and MAP_ANONYMOUS clear) maps that open file."""
        return self._call("Mmap", pb.MmapRequest(space_id=space_id, addr=addr, len=length, prot=prot, flags=flags,
                                                 offset=offset, file_id=file_id)).addr

    def msync(self, space_id, addr, length, flags=MS_SYNC):
        self._call("Msync", pb.MsyncRequest(space_id=space_id, addr=addr, len=length, flags=flags))

    # Files: one table of open files per daemon, shared by all its spaces.

    def open_file(self, path, write=False, create=False, exclusive=False, truncate=False):
        """open(2) of `path` under vmspaced's --data-dir; returns the file id."""
        return self._call("OpenFile", pb.OpenFileRequest(path=path, write=write, create=create, exclusive=exclusive,
                                                         truncate=truncate)).file_id

    def create_shmem_file(self, name="", size=0):
        """memfd_create(2) + ftruncate(2); returns the file id."""
        return self._call("CreateShmemFile", pb.CreateShmemFileRequest(name=name, size=size)).file_id

    def close_file(self, file_id):
        self._call("CloseFile", pb.CloseFileRequest(file_id=file_id))

    def truncate_file(self, file_id, size):
        self._call("TruncateFile", pb.TruncateFileRequest(file_id=file_id, size=size))

    def stat_file(self, file_id):
        """FileInfo: .size, .inode, .dev, .cached_pages, .dirty_pages, .mapped_vmas, ..."""
        return self._call("StatFile", pb.StatFileRequest(file_id=file_id)).file

    def list_files(self):
        return list(self._call("ListFiles", pb.ListFilesRequest()).files)

    def read_file(self, file_id, offset, length):
        """pread(2): bytes (fewer at end of file)."""
        return self._call("ReadFile", pb.ReadFileRequest(file_id=file_id, offset=offset, len=length)).data

    def write_file(self, file_id, offset, data):
        """pwrite(2): bytes written."""
        return self._call("WriteFile", pb.WriteFileRequest(file_id=file_id, offset=offset, data=data)).bytes_written

    def fsync_file(self, file_id):
        self._call("FsyncFile", pb.FsyncFileRequest(file_id=file_id))

    def munmap(self, space_id, addr, length):
        self._call("Munmap", pb.MunmapRequest(space_id=space_id, addr=addr, len=length))

    def mprotect(self, space_id, addr, length, prot):
        self._call("Mprotect", pb.MprotectRequest(space_id=space_id, addr=addr, len=length, prot=prot))

    def madvise(self, space_id, addr, length, advice=MADV_DONTNEED):
        self._call("Madvise", pb.MadviseRequest(space_id=space_id, addr=addr, len=length, advice=advice))

    def fault(self, space_id, addr, access="read"):
        """One simulated access ("read", "write", "exec"); returns a Fault."""
        return Fault(self._call("Fault", pb.FaultRequest(space_id=space_id, addr=addr, access=_ACCESS[access])).fault)

    def read(self, space_id, addr, length):
        """Bytes read (shorter if a fault stopped the copy)."""
        return self._call("ReadMemory", pb.ReadMemoryRequest(space_id=space_id, addr=addr, len=length)).data

    def write(self, space_id, addr, data):
        """Bytes written (fewer if a fault stopped the copy)."""
        return self._call("WriteMemory", pb.WriteMemoryRequest(space_id=space_id, addr=addr,
                                                               data=data)).bytes_written

    def get_maps(self, space_id):
        """GetMapsResponse: .vmas, .maps_text, .map_count."""
        return self._call("GetMaps", pb.GetMapsRequest(space_id=space_id))

    def maps(self, space_id):
        """The space's /proc/PID/maps text."""
        return self.get_maps(space_id).maps_text

    def ping(self):
        self._call("Ping", pb.PingRequest())
