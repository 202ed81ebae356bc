#!/usr/bin/python3
"""Tests of vmspace_client against a real vmspaced on 127.0.0.1 (ctest client.python).

    VMSPACED=build/server/vmspaced VMSPACE_PY_PROTO=build/client/python/_proto \
      /usr/bin/python3 client/python/tests/test_client.py
"""
import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import grpc  # noqa: E402

from vmspace_client import (MAP_ANONYMOUS, MAP_FIXED_NOREPLACE, MAP_PRIVATE, MAP_SHARED, MS_SYNC,  # noqa: E402
                            PROT_READ, PROT_WRITE, Client, VmspaceError)

PAGE = 4096


class Daemon:
    def __init__(self, *extra):
        self.p = subprocess.Popen([os.environ["VMSPACED"], "--listen=127.0.0.1:0", "--metrics-listen=off",
                                   "--max-frame-bytes=1048576", "--shutdown-grace-ms=1000", *extra],
                                  stderr=subprocess.PIPE, text=True)
        line = self.p.stderr.readline()  # the first line is the listening line
        m = re.search(r"listening grpc=(\S+)", line)
        if not m:
            self.p.kill()
            raise RuntimeError(f"vmspaced did not start: {line}{self.p.stderr.read()}")
        self.target = m.group(1)

    def stop(self):
        self.p.terminate()
        try:
            return self.p.wait(15)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()


class TokenTest(unittest.TestCase):
    """A daemon with --token-file: the token selects the tenant, none or a wrong one is refused."""

    def test_tokens(self):
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".tokens") as f:
            f.write("# test tokens\npy-a alice\npy-b bob\n")
            f.flush()
            d = Daemon("--token-file=" + f.name)
            try:
                with Client(d.target, token="py-a") as a, Client(d.target, token="py-b") as b, \
                        Client(d.target, token="") as none, Client(d.target, token="wrong") as wrong:
                    sid = a.create_space(label="alice's")
                    self.assertEqual([s.space_id for s in a.list_spaces()], [sid])
                    self.assertEqual(b.list_spaces(), [])
                    with self.assertRaises(VmspaceError) as cm:
                        b.destroy_space(sid)
                    self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
                    self.assertEqual(cm.exception.message, f"space {sid} not found")
                    for c in (none, wrong):
                        with self.assertRaises(VmspaceError) as cm:
                            c.list_spaces()
                        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAUTHENTICATED)
                    a.destroy_space(sid)
            finally:
                self.assertEqual(d.stop(), 0)


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon()
        cls.vm = Client(cls.daemon.target, timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.vm.close()
        assert cls.daemon.stop() == 0

    def setUp(self):
        self.space = self.vm.create_space(label="py-test", locking_profile="linux-6.6")
        self.addCleanup(self.vm.destroy_space, self.space)

    def assertRaisesErrno(self, code, name, errno, fn, *args, **kw):
        with self.assertRaises(VmspaceError) as cm:
            fn(*args, **kw)
        e = cm.exception
        self.assertEqual((e.code, e.name, e.errno), (code, name, errno), str(e))
        self.assertTrue(e.message.startswith(f"{name}: ") if errno else True, e.message)
        self.assertIsInstance(e, OSError)
        return e

    def test_mmap_fault_maps(self):
        addr = self.vm.mmap(self.space, 4 * PAGE)
        self.assertEqual(addr, 0x7FFFF7FFF000 - 4 * PAGE)  # top-down from mmap_base, ASLR off
        f = self.vm.fault(self.space, addr, "write")
        self.assertEqual((f.outcome_name, f.signal), ("minor", None))
        self.assertEqual(self.vm.fault(self.space, addr, "write").outcome_name, "none")
        seg = self.vm.fault(self.space, addr + 4 * PAGE, "read")  # past the mapping
        self.assertEqual((seg.signal, seg.si_code, seg.si_addr), ("SIGSEGV", "SEGV_MAPERR", addr + 4 * PAGE))
        self.assertEqual(self.vm.maps(self.space), f"{addr:x}-{addr + 4 * PAGE:x} rw-p 00000000 00:00 0 \n")
        self.vm.mprotect(self.space, addr, PAGE, PROT_READ)
        acc = self.vm.fault(self.space, addr, "write")
        self.assertEqual((acc.signal, acc.si_code), ("SIGSEGV", "SEGV_ACCERR"))
        self.assertEqual(self.vm.get_maps(self.space).map_count, 2)  # mprotect split the VMA

    def test_read_write(self):
        addr = self.vm.mmap(self.space, 2 * PAGE)
        self.assertEqual(self.vm.write(self.space, addr + PAGE - 2, b"hello"), 5)
        self.assertEqual(self.vm.read(self.space, addr + PAGE - 2, 5), b"hello")
        self.assertEqual(self.vm.read(self.space, addr + 2 * PAGE - 1, 8), b"\0")  # stops at the end

    def test_errno_from_status_details(self):
        addr = self.vm.mmap(self.space, 4 * PAGE)
        self.assertRaisesErrno(grpc.StatusCode.INVALID_ARGUMENT, "EINVAL", 22, self.vm.munmap, self.space, addr + 1,
                               PAGE)
        self.assertRaisesErrno(grpc.StatusCode.INVALID_ARGUMENT, "EINVAL", 22, self.vm.mmap, self.space, 0)
        self.assertRaisesErrno(grpc.StatusCode.ALREADY_EXISTS, "EEXIST", 17, self.vm.mmap, self.space, PAGE,
                               flags=MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, addr=addr)
        self.assertRaisesErrno(grpc.StatusCode.RESOURCE_EXHAUSTED, "ENOMEM", 12, self.vm.mmap, self.space, 1 << 46)
        # The errno comes from the details, not the text: a fault past --max-frame-bytes
        # (1 MiB) is ENOMEM too.
        big = self.vm.mmap(self.space, 2 << 20, PROT_READ | PROT_WRITE)
        with self.assertRaises(VmspaceError) as cm:
            for off in range(0, 2 << 20, PAGE):
                self.vm.fault(self.space, big + off, "write")
        self.assertEqual((cm.exception.name, cm.exception.errno), ("ENOMEM", 12))

    def test_errors_without_errno(self):
        e = self.assertRaisesErrno(grpc.StatusCode.NOT_FOUND, "NOT_FOUND", None, self.vm.fault, 999999, 0)
        self.assertIn("999999", e.message)
        with Client("127.0.0.1:1", timeout=2) as dead:  # nothing listens on port 1
            self.assertRaisesErrno(grpc.StatusCode.UNAVAILABLE, "UNAVAILABLE", None, dead.ping)

    def test_shmem_file_shared_mapping(self):
        f = self.vm.create_shmem_file("py", 2 * PAGE)
        self.addCleanup(self.vm.close_file, f)
        self.assertEqual(self.vm.write_file(f, PAGE, b"from pwrite"), 11)
        addr = self.vm.mmap(self.space, 2 * PAGE, flags=MAP_SHARED, file_id=f)
        self.assertEqual(self.vm.read(self.space, addr + PAGE, 11), b"from pwrite")  # the page cache's page
        self.assertEqual(self.vm.write(self.space, addr, b"from memory"), 11)
        self.vm.msync(self.space, addr, 2 * PAGE, MS_SYNC)
        self.assertEqual(self.vm.read_file(f, 0, 11), b"from memory")
        self.assertEqual(self.vm.read_file(f, 2 * PAGE - 3, 100), b"\0\0\0")  # stops at EOF
        st = self.vm.stat_file(f)
        self.assertEqual((st.size, st.shmem, st.cached_pages, st.mapped_vmas, st.writable), (2 * PAGE, True, 2, 1, True))
        self.assertIn(f, [x.file_id for x in self.vm.list_files()])
        self.assertIn("/memfd:py (deleted)", self.vm.maps(self.space))

    def test_file_errors(self):
        self.assertRaisesErrno(grpc.StatusCode.PERMISSION_DENIED, "EACCES", 13, self.vm.open_file, "a.bin",
                               create=True)  # no --data-dir
        self.assertRaisesErrno(grpc.StatusCode.INVALID_ARGUMENT, "EBADF", 9, self.vm.read_file, 999, 0, 1)
        self.assertRaisesErrno(grpc.StatusCode.INVALID_ARGUMENT, "EBADF", 9, self.vm.mmap, self.space, PAGE,
                               flags=MAP_SHARED, file_id=999)

    def test_list_spaces(self):
        spaces = {s.space_id: s for s in self.vm.list_spaces()}
        self.assertEqual((spaces[self.space].label, spaces[self.space].locking_profile), ("py-test", "linux-6.6"))

    def test_example(self):
        out = subprocess.run([sys.executable, os.path.join(HERE, "..", "examples", "maps.py"), self.daemon.target],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertRegex(lines[0], r"^space \d+: mapped 16 KiB at 0x7ffff7ffb000$")
        self.assertEqual(lines[1:], [
            "write fault: Fault(minor, lock_path=mmap_lock, si_code=None)",
            "read beyond the mapping: Fault(sigsegv, lock_path=mmap_lock, si_code=SEGV_MAPERR)",
            "unaligned munmap: EINVAL (errno 22)",
            "7ffff7ffb000-7ffff7fff000 rw-p 00000000 00:00 0 "])


if __name__ == "__main__":
    unittest.main(verbosity=2)
