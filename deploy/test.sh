#!/usr/bin/env bash
# Builds vmspace and runs every test: the Release build's ctest suite (engine, kernel
# oracle, daemon/service, client), then the engine and its tests again under
# AddressSanitizer+UBSan and under ThreadSanitizer.
# Usage: bash deploy/test.sh            (as root on Debian 12; installs missing packages)
#        SKIP_SANITIZERS=1 bash deploy/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
bash deploy/install-deps.sh

echo "== Release build and tests" >&2
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$JOBS"
ctest --test-dir build --output-on-failure --timeout 600

if [ -z "${SKIP_SANITIZERS:-}" ]; then
  echo "== Engine under AddressSanitizer + UBSan" >&2
  cmake -S . -B build-asan -DVMSPACE_ENGINE_ONLY=ON -DVMSPACE_LOCKDEP=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  cmake --build build-asan -j"$JOBS" --target engine_test
  ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -R '^(Profiles|PageTable|FrameAllocator|MapsFormat|VmaIndex|Lockdep)'

  echo "== Engine under ThreadSanitizer" >&2
  cmake -S . -B build-tsan -DVMSPACE_ENGINE_ONLY=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
  cmake --build build-tsan -j"$JOBS" --target engine_test
  TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1 suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir build-tsan --output-on-failure -R '^(Profiles|PageTable|FrameAllocator|VmaIndex)'
fi
