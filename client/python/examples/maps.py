#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Creates a space, maps 16 KiB, faults its first page for write, prints the maps.

    python3 client/python/examples/maps.py [HOST:PORT]     (after pip install ./client/python)
"""
import sys

from vmspace_client import PROT_READ, PROT_WRITE, Client, VmspaceError


def main(target):
    with Client(target) as vm:
        space = vm.create_space(label="python-example")
        try:
            addr = vm.mmap(space, 16 * 1024, PROT_READ | PROT_WRITE)
            print(f"space {space}: mapped 16 KiB at {addr:#x}")
            print("write fault:", vm.fault(space, addr, "write"))
            print("read beyond the mapping:", vm.fault(space, addr + 16 * 1024, "read"))
            try:
                vm.munmap(space, addr + 1, 4096)
            except VmspaceError as e:
                print(f"unaligned munmap: {e.name} (errno {e.errno})")
            print(vm.maps(space), end="")
        finally:
            vm.destroy_space(space)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051")
