#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Installs the client as a user would, then runs the example and the tests with it
(ctest client.python):

1. python3 -m venv --system-site-packages (Debian's python3-grpcio and python3-protobuf
   are the dependencies; nothing is downloaded);
2. pip install --no-deps --no-build-isolation of a copy of client/python (an in-tree
   build writes build/ and *.egg-info next to the sources: the copy keeps them out);
3. the installed package is the one imported (not the source tree), the example's
   output is checked by test_client.py's test_example, and every test of
   test_client.py runs with the venv's python against real daemons ($VMSPACED).

    VMSPACED=build/server/vmspaced /usr/bin/python3 client/python/tests/run_installed.py
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.dirname(HERE)


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, timeout=120, **kw)


def main():
    with tempfile.TemporaryDirectory(prefix="vmspace-py-venv-") as tmp:
        venv, src = os.path.join(tmp, "venv"), os.path.join(tmp, "python")
        shutil.copytree(PY, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv])
        py = os.path.join(venv, "bin", "python")
        env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        env.pop("VMSPACE_PY_PROTO", None)
        env.pop("PYTHONPATH", None)
        run([py, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--quiet", src], env=env)
        where = subprocess.run([py, "-c", "import vmspace_client; print(vmspace_client.__file__)"], env=env,
                               capture_output=True, text=True, check=True, cwd=tmp).stdout.strip()
        if not where.startswith(os.path.join(venv, "lib")):
            print(f"vmspace_client imported from {where}, not from the venv")
            return 1
        print("installed:", where, flush=True)
        # The tests from the source tree, run from outside it so only the venv's package is found.
        r = subprocess.run([py, os.path.join(HERE, "test_client.py")], env=env, cwd=tmp, timeout=120)
        return r.returncode


if __name__ == "__main__":
    sys.exit(main())
