#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Tests of vmspace_client against real vmspaced daemons on 127.0.0.1 (ctest client.python
runs them with the package pip-installed into a venv: tests/run_installed.py). From the
source tree:

    PYTHONPATH=client/python VMSPACED=build/server/vmspaced /usr/bin/python3 client/python/tests/test_client.py
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

from vmspace_client import (F_SEAL_GROW, MADV_GUARD_INSTALL, F_SEAL_SEAL, F_SEAL_WRITE, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE, MAP_PRIVATE,
                            MAP_SHARED, MCL_ONFAULT, MLOCK_ONFAULT, MREMAP_FIXED, MREMAP_MAYMOVE, MS_SYNC, O_RDONLY, PROT_READ, PROT_WRITE,
                            AccessResult, Client, LockStats, ServerInfo, VmspaceError, batch)

HERE = os.path.dirname(os.path.abspath(__file__))

PAGE = 4096


class Daemon:
    def __init__(self, *extra, metrics=False):
        self.p = subprocess.Popen([os.environ["VMSPACED"], "--listen=127.0.0.1:0", "--metrics-listen=" + ("127.0.0.1:0" if metrics else "off"),
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


class TlsTest(unittest.TestCase):
    """A daemon with TLS and client certificates (mutual TLS): the certificate's CN is the
    tenant; no certificate, or no TLS, is refused. Certificates made here with openssl."""

    def test_mutual_tls(self):
        import shutil
        import tempfile
        d = tempfile.mkdtemp(prefix="vmspace-py-tls-")
        self.addCleanup(shutil.rmtree, d, True)

        def sh(*cmd):
            subprocess.run(cmd, cwd=d, check=True, capture_output=True, timeout=60)

        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        sh("openssl", "req", "-x509", *ec, "-days", "2", "-subj", "/CN=vmspace-py-test-ca", "-keyout", "ca.key",
           "-out", "ca.pem")
        for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
                          ("alice", "extendedKeyUsage=clientAuth\n"), ("bob", "extendedKeyUsage=clientAuth\n")):
            sh("openssl", "req", *ec, "-subj", "/CN=" + name, "-keyout", name + ".key", "-out", name + ".csr")
            with open(os.path.join(d, name + ".ext"), "w") as f:
                f.write(ext)
            sh("openssl", "x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
               "-CAcreateserial", "-days", "2", "-extfile", name + ".ext", "-out", name + ".pem")
        def pem(f):
            with open(os.path.join(d, f), "rb") as fh:
                return fh.read()

        daemon = Daemon("--tls-cert=" + os.path.join(d, "server.pem"), "--tls-key=" + os.path.join(d, "server.key"),
                        "--tls-client-ca=" + os.path.join(d, "ca.pem"))
        try:
            tls = lambda who: Client(daemon.target, timeout=5, token="", tls_ca=pem("ca.pem"),
                                     tls_cert=pem(who + ".pem"), tls_key=pem(who + ".key"))
            with tls("alice") as alice, tls("bob") as bob:
                sid = alice.create_space(label="alice's")
                self.assertEqual([s.space_id for s in alice.list_spaces()], [sid])
                self.assertEqual(bob.list_spaces(), [])  # the CN is the tenant
                alice.destroy_space(sid)
            with Client(daemon.target, timeout=5, token="", tls_ca=pem("ca.pem")) as no_cert, \
                    Client(daemon.target, timeout=5, token="") as plain:
                for c in (no_cert, plain):
                    with self.assertRaises(VmspaceError) as cm:
                        c.ping()
                    self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)
        finally:
            self.assertEqual(daemon.stop(), 0)


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
        self.assertEqual(e.errno_name, name if errno else "")
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

    def test_mlock_mseal_and_seals(self):
        addr = self.vm.mmap(self.space, 4 * PAGE)
        self.vm.mlock(self.space, addr, PAGE, MLOCK_ONFAULT)
        self.assertRaisesErrno(grpc.StatusCode.INVALID_ARGUMENT, "EINVAL", 22, self.vm.mlock, self.space, addr, PAGE, 2)
        self.assertRaisesErrno(grpc.StatusCode.INVALID_ARGUMENT, "EINVAL", 22, self.vm.mlockall, self.space,
                               MCL_ONFAULT)
        self.vm.munlockall(self.space)
        self.vm.mseal(self.space, addr + 2 * PAGE, 2 * PAGE)
        self.assertRaisesErrno(grpc.StatusCode.PERMISSION_DENIED, "EPERM", 1, self.vm.munmap, self.space, addr,
                               4 * PAGE)
        f = self.vm.create_shmem_file("sealed", PAGE, allow_sealing=True)
        self.addCleanup(self.vm.close_file, f)
        self.vm.add_file_seals(f, F_SEAL_GROW | F_SEAL_SEAL)
        self.assertEqual(self.vm.get_file_seals(f), F_SEAL_GROW | F_SEAL_SEAL)
        self.assertRaisesErrno(grpc.StatusCode.PERMISSION_DENIED, "EPERM", 1, self.vm.add_file_seals, f, F_SEAL_WRITE)
        ro = self.vm.reopen_file(f, O_RDONLY)
        self.addCleanup(self.vm.close_file, ro)
        self.assertRaisesErrno(grpc.StatusCode.PERMISSION_DENIED, "EACCES", 13, self.vm.mmap, self.space, PAGE,
                               flags=MAP_SHARED, file_id=ro)
        self.assertEqual(self.vm.stat_file(ro).st_nlink, 0)

    def test_file_errors(self):
        self.assertRaisesErrno(grpc.StatusCode.PERMISSION_DENIED, "EACCES", 13, self.vm.open_file, "a.bin",
                               create=True)  # no --data-dir
        self.assertRaisesErrno(grpc.StatusCode.INVALID_ARGUMENT, "EBADF", 9, self.vm.read_file, 999, 0, 1)
        self.assertRaisesErrno(grpc.StatusCode.INVALID_ARGUMENT, "EBADF", 9, self.vm.mmap, self.space, PAGE,
                               flags=MAP_SHARED, file_id=999)

    def test_list_spaces(self):
        spaces = {s.space_id: s for s in self.vm.list_spaces()}
        self.assertEqual((spaces[self.space].label, spaces[self.space].locking_profile), ("py-test", "linux-6.6"))

    def test_access_madvise(self):
        addr = self.vm.mmap(self.space, 4 * PAGE)
        r = self.vm.access(self.space, addr, 4 * PAGE, stride=PAGE, access="write")
        self.assertEqual(r, AccessResult(faults=4, major_faults=0, accesses=4, stop=None))
        self.assertEqual(self.vm.access(self.space, addr, 4 * PAGE, stride=PAGE, access="read").faults, 0)
        self.vm.madvise(self.space, addr, 2 * PAGE)  # MADV_DONTNEED: the next access faults again
        self.assertEqual(self.vm.access(self.space, addr, 4 * PAGE, stride=PAGE).faults, 2)
        stopped = self.vm.access(self.space, addr + 3 * PAGE, 2 * PAGE, stride=PAGE)
        self.assertEqual((stopped.accesses, stopped.stop.signal, stopped.stop.si_addr), (1, "SIGSEGV", addr + 4 * PAGE))
        self.assertRaisesErrno(grpc.StatusCode.INVALID_ARGUMENT, "EINVAL", 22, self.vm.madvise, self.space, addr,
                               PAGE, advice=999)

    def test_mincore_and_advice_names(self):
        addr = self.vm.mmap(self.space, 4 * PAGE)
        self.vm.access(self.space, addr + PAGE, 2 * PAGE, stride=PAGE, access="write")
        self.assertEqual(self.vm.mincore(self.space, addr, 4 * PAGE), b"\0\1\1\0")
        self.vm.madvise(self.space, addr + PAGE, PAGE, advice="dontneed")
        self.vm.madvise(self.space, addr + 3 * PAGE, PAGE, advice=MADV_GUARD_INSTALL)
        self.assertEqual(self.vm.mincore(self.space, addr, 4 * PAGE), b"\0\0\1\0")
        self.assertEqual(self.vm.fault(self.space, addr + 3 * PAGE).signal, "SIGSEGV")
        self.assertRaisesErrno(grpc.StatusCode.INVALID_ARGUMENT, "EINVAL", 22, self.vm.mincore, self.space, addr + 1,
                               PAGE)
        self.assertRaisesErrno(grpc.StatusCode.RESOURCE_EXHAUSTED, "ENOMEM", 12, self.vm.mincore, self.space,
                               addr, 1 << 30)
        ops = [batch.op("mincore", self.space, addr=addr, len=4 * PAGE), batch.op("mincore", self.space, addr=1, len=1)]
        (answer,) = list(self.vm.batch([ops]))
        self.assertEqual(answer.results[0].mincore.vec, b"\0\0\1\0")
        self.assertEqual(answer.results[1].errno_name, "EINVAL")

    def test_clone_space(self):
        addr = self.vm.mmap(self.space, PAGE)
        self.vm.write(self.space, addr, b"parent")
        child = self.vm.clone_space(self.space, label="py-child")
        self.addCleanup(self.vm.destroy_space, child)
        self.assertNotEqual(child, self.space)
        self.vm.write(child, addr, b"child!")
        self.assertEqual(self.vm.read(self.space, addr, 6), b"parent")  # copy-on-write
        self.assertEqual(self.vm.read(child, addr, 6), b"child!")
        info = {s.space_id: s for s in self.vm.list_spaces()}[child]
        self.assertEqual((info.label, info.locking_profile), ("py-child", "linux-6.6"))
        other = self.vm.clone_space(child, locking_profile="linux-6.0")
        self.addCleanup(self.vm.destroy_space, other)
        info = {s.space_id: s for s in self.vm.list_spaces()}[other]
        self.assertEqual((info.label, info.locking_profile), ("py-child", "linux-6.0"))
        self.assertRaisesErrno(grpc.StatusCode.INVALID_ARGUMENT, "EINVAL", 22, self.vm.clone_space, child,
                               locking_profile="bogus")
        with self.assertRaises(VmspaceError) as cm:
            self.vm.clone_space(0x7777777)
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_brk_mremap(self):
        start = self.vm.brk(self.space, 0)
        self.assertEqual(start, 0x4AC000)  # the default start_brk
        self.assertEqual(self.vm.brk(self.space, start + 3 * PAGE), start + 3 * PAGE)
        self.assertEqual(self.vm.get_maps(self.space).vmas[0].name, "[heap]")
        addr = self.vm.mmap(self.space, 2 * PAGE)
        self.vm.write(self.space, addr + PAGE, b"moved")
        new = self.vm.mremap(self.space, addr, 2 * PAGE, 2 * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, addr + 16 * PAGE)
        self.assertEqual(new, addr + 16 * PAGE)
        self.assertEqual(self.vm.read(self.space, new + PAGE, 5), b"moved")
        self.assertRaisesErrno(grpc.StatusCode.INVALID_ARGUMENT, "EINVAL", 22, self.vm.mremap, self.space, new,
                               PAGE, PAGE, 8)
        self.assertEqual(self.vm.brk(self.space, start), start)

    def test_batch_stream(self):
        """A generator sends "mmap, fault each page, munmap what op 0 mapped", then a
        second message after reading the first answer; a failed op does not stop it."""
        answers = []

        def requests():
            yield [batch.op("mmap", self.space, len=2 * PAGE, prot=PROT_READ | PROT_WRITE,
                            flags=MAP_PRIVATE | MAP_ANONYMOUS),
                   batch.op("fault", self.space, addr_of_back=1, access="write"),
                   batch.op("fault", self.space, addr_of_back=2, addr=PAGE, access="write"),
                   batch.op("munmap", self.space, addr=1, len=PAGE),  # unaligned: EINVAL
                   batch.op("munmap", self.space, addr_of_index=0, len=2 * PAGE)]
            while not answers:  # the stream is bidirectional: wait for the first answer
                time.sleep(0.01)
            yield batch.request([batch.op("access", self.space, addr=answers[0].results[0].mmap.addr, len=PAGE)], tag=7)

        for resp in self.vm.batch(requests()):
            answers.append(resp)
        self.assertEqual(len(answers), 2)
        r = answers[0].results
        addr = r[0].mmap.addr
        self.assertEqual(addr, 0x7FFFF7FFF000 - 2 * PAGE)
        self.assertEqual([x.fault.fault.outcome for x in r[1:3]], [batch.pb.FAULT_OUTCOME_MINOR] * 2)
        err = batch.op_error(r[3])
        self.assertEqual((err.code, err.errno, err.errno_name), (grpc.StatusCode.INVALID_ARGUMENT, 22, "EINVAL"))
        self.assertIsNone(batch.op_error(r[4]))
        self.assertEqual(answers[1].tag, 7)
        self.assertEqual(answers[1].results[0].access.stop.si_code, batch.pb.SEGV_MAPERR)  # unmapped by op 4
        self.assertEqual(self.vm.get_maps(self.space).map_count, 0)

    def test_batch_stream_error(self):
        too_many = [batch.op("fault", self.space, addr=0)] * 5000  # > --max-batch (4096)
        with self.assertRaises(VmspaceError) as cm:
            list(self.vm.batch(iter([too_many])))
        self.assertEqual((cm.exception.code, cm.exception.errno_name), (grpc.StatusCode.INVALID_ARGUMENT, "EINVAL"))

    def test_lock_stats(self):
        before = self.vm.get_lock_stats("linux-6.6")
        addr = self.vm.mmap(self.space, 3 * PAGE)
        self.vm.access(self.space, addr, 3 * PAGE, stride=PAGE, access="write")
        after = self.vm.get_lock_stats("linux-6.6")
        self.assertIsInstance(after, LockStats)
        self.assertEqual(after.events["pgfault"] - before.events.get("pgfault", 0), 3)
        w = after.get("mmap_lock", "write")
        self.assertGreaterEqual(w.acquisitions - before.get("mmap_lock", "write").acquisitions, 1)  # the mmap
        self.assertEqual(len(w.hold_buckets), len(after.bucket_upper_seconds) + 1)
        self.assertTrue(after.lock_stats_enabled)
        self.assertIn("mmap_lock", after.text)

    def test_server_info(self):
        (info,) = self.vm.server_info()
        self.assertIsInstance(info, ServerInfo)
        self.assertEqual((info.target, info.shard, info.max_spaces), (self.daemon.target, 0, 1024))
        self.assertGreaterEqual(info.spaces, 1)
        self.assertEqual(info.memory_limit_bytes, 8 << 30)  # the --max-memory-bytes default
        self.assertLessEqual({"frames", "page_tables", "vmas"}, set(info.memory))
        self.assertTrue(info.version)

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


class ExecTest(unittest.TestCase):
    """exec_space against a daemon with --data-dir holding /bin/true's and ld.so's ELF headers (the engine
    test's fixtures, padded to the files' sizes): the layout is the one the kernel built (true.maps)."""

    FIXTURES = os.path.join(HERE, "..", "..", "..", "tests", "engine", "exec")

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        for path, head, size in (("usr/bin/true", "true.elfhead", 35664),
                                 ("lib64/ld-linux-x86-64.so.2", "ld-linux-x86-64.so.2.elfhead", 215000)):
            dst = os.path.join(self.dir, path)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(os.path.join(self.FIXTURES, head), dst)
            os.truncate(dst, size)
        self.daemon = Daemon("--data-dir=" + self.dir)
        self.addCleanup(self.daemon.stop)
        self.vm = Client(self.daemon.target)
        self.addCleanup(self.vm.close)

    def test_exec_space(self):
        space = self.vm.create_space(label="py-exec")
        self.vm.mmap(space, PAGE)
        r = self.vm.exec_space(space, "usr/bin/true", argv=["/bin/true"])
        self.assertEqual((r.start_brk, r.interpreter), (0x55555555E000, "/lib64/ld-linux-x86-64.so.2"))
        want = []
        with open(os.path.join(self.FIXTURES, "true.maps")) as f:
            for line in f:
                field = line.split()
                if line.startswith("#") or field[-1] == "[vsyscall]":
                    continue
                want.append((field[0], field[1], field[2], os.path.basename(field[5]) if len(field) > 5 else ""))
        got = [(f"{v.start:08x}-{v.end:08x}", v.perms, f"{v.offset:08x}", os.path.basename(v.name))
               for v in self.vm.get_maps(space).vmas]
        self.assertEqual(got, want)
        self.assertEqual(r.map_count, len(want))
        # fork + exec: the child runs the program again; the parent keeps its layout.
        child = self.vm.clone_space(space)
        self.vm.exec_space(child, "usr/bin/true")
        self.assertEqual(len(self.vm.get_maps(child).vmas), len(want))
        self.vm.destroy_space(child)
        with open(os.path.join(self.dir, "script"), "w") as f:
            f.write("#!/bin/sh\n")
        for path, name, code in (("script", "ENOEXEC", grpc.StatusCode.INVALID_ARGUMENT),
                                 ("usr/bin/false", "ENOENT", grpc.StatusCode.NOT_FOUND)):
            with self.assertRaises(VmspaceError) as cm:
                self.vm.exec_space(space, path)
            self.assertEqual(cm.exception.errno_name, name)
            if code:
                self.assertEqual(cm.exception.code, code)
        self.assertEqual(len(self.vm.get_maps(space).vmas), len(want))  # a failed exec changes nothing
        self.vm.destroy_space(space)


class ShardedTest(unittest.TestCase):
    """Two daemons (--shard 1 and 2) behind one Client: ids route to their shard."""

    @classmethod
    def setUpClass(cls):
        cls.daemons = [Daemon("--shard=1"), Daemon("--shard=2")]
        cls.vm = Client(",".join(d.target for d in cls.daemons), timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.vm.close()
        for d in cls.daemons:
            assert d.stop() == 0

    def single(self, i):
        c = Client(self.daemons[i].target, timeout=10)
        self.addCleanup(c.close)
        return c

    def test_routing(self):
        a = self.vm.create_space(label="a")
        b = self.vm.create_space(label="b")  # the fewest spaces: the other daemon
        c = self.vm.create_space(label="c", shard=2)
        for s in (a, b, c):
            self.addCleanup(self.vm.destroy_space, s)
        self.assertEqual(sorted([a >> 40, b >> 40]), [1, 2])
        self.assertEqual(c >> 40, 2)
        self.assertEqual([s.space_id for s in self.vm.list_spaces()], sorted([a, b, c]))
        self.assertEqual([s.space_id for s in self.single(0).list_spaces()], [min(a, b)])  # shard 1
        for s in (a, b, c):  # each call goes to the daemon of its space
            addr = self.vm.mmap(s, PAGE)
            self.assertEqual(self.vm.fault(s, addr, "write").outcome_name, "minor")
        infos = self.vm.server_info()
        self.assertEqual([(i.target, i.shard, i.spaces) for i in infos],
                         [(self.daemons[0].target, 1, 1), (self.daemons[1].target, 2, 2)])
        self.assertEqual(self.vm.get_lock_stats().events["pgfault"],
                         sum(self.single(i).get_lock_stats().events["pgfault"] for i in (0, 1)))
        f = self.vm.create_shmem_file("near-c", PAGE, near_space=c)
        self.addCleanup(self.vm.close_file, f)
        self.assertEqual(f >> 40, 2)
        self.assertEqual(self.vm.write_file(f, 0, b"x"), 1)
        resp = list(self.vm.batch([[batch.op("mmap", c, len=PAGE, prot=PROT_READ, flags=MAP_PRIVATE | MAP_ANONYMOUS)]]))
        self.assertEqual(batch.op_error(resp[0].results[0]), None)  # the stream went to shard 2's daemon
        self.vm.ping()

    def test_placement_key(self):
        ids = [self.vm.create_space(placement_key="tenant-x") for _ in range(3)]
        for s in ids:
            self.addCleanup(self.vm.destroy_space, s)
        self.assertEqual(len({s >> 40 for s in ids}), 1)  # the same key, the same daemon

    def test_errors_name_the_daemon(self):
        with self.assertRaises(VmspaceError) as cm:
            self.vm.destroy_space((2 << 40) | 999999)
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertTrue(cm.exception.message.startswith(self.daemons[1].target + ": "), cm.exception.message)
        with self.assertRaises(VmspaceError) as cm:
            self.vm.fault((5 << 40) | 1, 0)
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)  # no daemon of shard 5
        with Client([self.daemons[0].target, self.daemons[0].target]) as twice:
            with self.assertRaises(VmspaceError) as cm:
                twice.fault((1 << 40) | 1, 0)
            self.assertEqual(cm.exception.code, grpc.StatusCode.FAILED_PRECONDITION)


if __name__ == "__main__":
    unittest.main(verbosity=2)
