#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds vmspace and runs every test stage, even when an earlier one fails:
#   release        the Release build and its whole ctest suite (engine, kernel oracle,
#                  daemon/service, three-daemon sharding, client, Python client,
#                  benchmark smoke runs, deploy: promtool rule tests, compose/Dockerfile/
#                  Kubernetes validation, a real Prometheus scraping a real vmspaced)
#   asan           the engine and its tests under AddressSanitizer + UBSan, with the
#                  lock-order checker and the frame-state checker (VMSPACE_LOCKDEP)
#   tsan           the engine and its tests under ThreadSanitizer
#   thread-safety  the engine built with clang -Wthread-safety -Werror (lock rules
#                  checked at compile time), and a file that breaks them must not build;
#                  then the rpc layer (vmspace_rpc) with clang -Werror=thread-safety
# Prints one summary line per stage and exits non-zero if any stage failed.
# Usage: bash deploy/test.sh            (as root on Debian 12; installs missing packages)
#        STAGES="release tsan" bash deploy/test.sh
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
STAGES=${STAGES:-"release asan tsan thread-safety"}
bash deploy/install-deps.sh || exit 1
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

stage_release() {
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${LAUNCHER[@]}" >/dev/null &&
    cmake --build build -j"$JOBS" &&
    ctest --test-dir build --output-on-failure --timeout 600 -j"$JOBS"
}

engine_build() {  # dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -DVMSPACE_ENGINE_ONLY=ON "${LAUNCHER[@]}" "$@" >/dev/null &&
    cmake --build "$dir" -j"$JOBS" --target engine_test fork_stress_test
}

stage_asan() {
  engine_build build-asan -DVMSPACE_LOCKDEP=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" &&
    ASAN_OPTIONS=detect_leaks=1 build-asan/tests/engine/engine_test &&
    ASAN_OPTIONS=detect_leaks=1 build-asan/tests/engine/fork_stress_test
}

stage_tsan() {
  engine_build build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" &&
    TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1 suppressions=$PWD/tests/tsan.supp" \
      build-tsan/tests/engine/engine_test &&
    TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1 suppressions=$PWD/tests/tsan.supp" \
      build-tsan/tests/engine/fork_stress_test
}

stage_thread-safety() {
  CC=clang CXX=clang++ cmake -S . -B build-tsa -DVMSPACE_ENGINE_ONLY=ON -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS="-Werror" "${LAUNCHER[@]}" >/dev/null &&
    cmake --build build-tsa -j"$JOBS" --target vmspace_engine || return 1
  # The analysis must reject code that breaks a lock rule.
  local out
  if out=$(clang++ -std=c++20 -fsyntax-only -Wthread-safety -Werror -Iserver/engine -Iserver/engine/include \
      tests/engine/thread_safety_violation.cc 2>&1); then
    echo "thread-safety: tests/engine/thread_safety_violation.cc compiled; the analysis is not working" >&2
    return 1
  fi
  grep -q "requires holding mutex 'm.mmap_lock'" <<<"$out" || { echo "$out" >&2; return 1; }
  echo "thread-safety: the analysis rejects tests/engine/thread_safety_violation.cc as it should"
  # The rpc layer (vmspace_rpc: service, registry, auth) with clang too: a full
  # configuration (it needs gRPC and the generated protos), then a syntax-only pass over
  # its sources with their own compile commands (the analysis runs in the front end, so
  # no code is generated), lock warnings as errors and other warnings of gRPC's and
  # protobuf's headers left as warnings.
  CC=clang CXX=clang++ cmake -S . -B build-tsa-rpc -DCMAKE_BUILD_TYPE=Debug -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
    -DCMAKE_CXX_FLAGS="-Werror=thread-safety -Werror=thread-safety-beta" "${LAUNCHER[@]}" >/dev/null &&
    cmake --build build-tsa-rpc -j"$JOBS" --target vmspace_proto_headers >/dev/null || return 1
  grep -q -- "-Wthread-safety .*rpc/space_registry.cc" build-tsa-rpc/compile_commands.json || {
    echo "thread-safety: vmspace_rpc is not compiled with -Wthread-safety" >&2
    return 1
  }
  python3 - build-tsa-rpc/compile_commands.json "$JOBS" <<'PY' || return 1
import json, re, shlex, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
entries = [e for e in json.load(open(sys.argv[1])) if "/server/rpc/" in e["file"]]
def check(e):
    args = shlex.split(e["command"])
    i = args.index("-o")
    del args[i:i + 2]
    args = [a for a in args if a != "-c"] + ["-fsyntax-only"]
    r = subprocess.run(args, cwd=e["directory"], capture_output=True, text=True)
    return e["file"], r.returncode, r.stderr
failed = 0
with ThreadPoolExecutor(int(sys.argv[2])) as pool:
    for f, rc, err in pool.map(check, entries):
        if rc:
            failed += 1
            sys.stderr.write(err)
print(f"thread-safety: {len(entries)} files of server/rpc pass -Wthread-safety -Werror=thread-safety" if not failed
      else f"thread-safety: {failed} files of server/rpc fail", file=sys.stderr if failed else sys.stdout)
# The same flags must reject a file that breaks a lock rule.
bad = dict(entries[0])
root = bad["file"][:bad["file"].index("/server/rpc/")]
bad["command"] = bad["command"].replace(bad["file"], root + "/tests/service/thread_safety_violation.cc")
bad["file"] = root + "/tests/service/thread_safety_violation.cc"
_, rc, err = check(bad)
if rc == 0 or "requires holding mutex 'mu_'" not in err:
    print("thread-safety: tests/service/thread_safety_violation.cc was not rejected; the rpc flags do not check locks",
          file=sys.stderr)
    sys.stderr.write(err)
    failed += 1
else:
    print("thread-safety: the rpc flags reject tests/service/thread_safety_violation.cc as they should")
sys.exit(1 if failed else 0)
PY
}

declare -A result
failed=0
for s in $STAGES; do
  echo "== stage $s" >&2
  t0=$(date +%s)
  if "stage_$s"; then result[$s]="PASS"; else result[$s]="FAIL"; failed=1; fi
  result[$s]+=" ($(( $(date +%s) - t0 )) s)"
done
echo
echo "== summary"
for s in $STAGES; do echo "stage $s: ${result[$s]}"; done
exit $failed
