// SPDX-License-Identifier: Apache-2.0
/* vmspace-execl-true: the program `vmspace bench execl` spawns (vfork + exec) on
 * this machine's kernel, the native counterpart of the engine's exec loop (UnixBench's
 * execl measures exec of a small static binary). It exits 0 at once. Linked -static
 * (client/CMakeLists.txt), so an exec maps only this file: no ld.so, no libc.so. */
int main(void) { return 0; }
