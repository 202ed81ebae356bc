// SPDX-License-Identifier: Apache-2.0
// The entry points of the `vmspace` subcommands, which the command table (cli.cc)
// names. Each runs one command with its parsed options: it prints its result on
// Ctx::out (text, or one JSON object with --json), diagnostics and progress on Ctx::err,
// and returns the exit code (kExitOk, kExitFailed); a bad option throws UsageError.
// Internal to the CLI (cli/).
#pragma once

#include "cli/command.h"

namespace vmspace::cli {

// Address spaces and their memory (space_cmds.cc): one VmSpace RPC each.
int CmdCreate(Ctx& c);    // CreateSpace: prints the new space id
int CmdDestroy(Ctx& c);   // DestroySpace
int CmdFork(Ctx& c);      // CloneSpace: prints the child's space id
int CmdExec(Ctx& c);      // ExecSpace: the program's initial layout replaces the space's
int CmdList(Ctx& c);      // ListSpaces: one row per space
int CmdMmap(Ctx& c);      // Mmap: prints the address
int CmdMunmap(Ctx& c);    // Munmap
int CmdMprotect(Ctx& c);  // Mprotect
int CmdFault(Ctx& c);     // Fault: the outcome of one simulated access
int CmdAccess(Ctx& c);    // Access: a strided walk over a range
int CmdRead(Ctx& c);      // ReadMemory: hex dump or raw bytes
int CmdWrite(Ctx& c);     // WriteMemory
int CmdMaps(Ctx& c);      // GetMaps: /proc/PID/maps text
int CmdMsync(Ctx& c);     // Msync
int CmdBrk(Ctx& c);       // Brk
int CmdMremap(Ctx& c);    // Mremap
int CmdMlock(Ctx& c);       // Mlock (mlock2)
int CmdMunlock(Ctx& c);     // Munlock
int CmdMlockall(Ctx& c);    // Mlockall
int CmdMunlockall(Ctx& c);  // Munlockall
int CmdMseal(Ctx& c);       // Mseal
int CmdMadvise(Ctx& c);   // Madvise: ADVICE by name or number
int CmdMincore(Ctx& c);   // Mincore: one 0/1 per page

// The daemon's files (file_cmds.cc): `vmspace file COMMAND`.
int CmdFileOpen(Ctx& c);         // OpenFile: prints the file id
int CmdFileCreateShmem(Ctx& c);  // CreateShmemFile: prints the file id
int CmdFileClose(Ctx& c);        // CloseFile
int CmdFileTruncate(Ctx& c);     // TruncateFile
int CmdFileFsync(Ctx& c);        // FsyncFile
int CmdFileStat(Ctx& c);         // StatFile
int CmdFileList(Ctx& c);         // ListFiles: one row per open file
int CmdFileRead(Ctx& c);         // ReadFile: hex dump or raw bytes
int CmdFileWrite(Ctx& c);        // WriteFile
int CmdFileSeal(Ctx& c);         // AddFileSeals
int CmdFileSeals(Ctx& c);        // GetFileSeals
int CmdFileReopen(Ctx& c);       // ReopenFile: prints the new file id

// The daemon itself (stats_cmds.cc).
int CmdPing(Ctx& c);      // Ping: prints the round-trip time
int CmdStats(Ctx& c);     // GetServerInfo of every daemon: spaces, memory by kind
int CmdHealth(Ctx& c);    // grpc.health.v1 Check; exit 0 only if SERVING
int CmdLockstat(Ctx& c);  // GetLockStats: the lock_stat table and the event counts

// The benchmarks: `vmspace bench WORKLOAD`.
int CmdBenchStress(Ctx& c);      // bench stress (bench_stress.cc): seed 004, beside the kernel
int CmdBenchWorkload(Ctx& c);    // bench page_fault1..4 | mmap1 | mmap2 | mixed (bench_willitscale.cc)
int CmdBenchShmemDirty(Ctx& c);  // bench shmem-dirty (bench_shmem_dirty.cc): seed 002
int CmdBenchExecl(Ctx& c);       // bench execl (bench_execl.cc): seed 003
int CmdBenchFork(Ctx& c);        // bench fork (bench_fork.cc): dup_mmap per profile, the 6.4 fork race

// One command per reproduced result (reproduce.cc): the seed's comparison over
// alternating repetitions beside the kernel, into a results folder with provenance.
int CmdReproduce(Ctx& c);  // reproduce SEED|all [--quick] [--out DIR]

// A program's memory calls on the kernel, and their replay into spaces (docs/replay.md).
int CmdRecord(Ctx& c);  // record (record.cc): run CMD under ptrace, write its trace
int CmdReplay(Ctx& c);  // replay (replay.cc): issue a trace's calls through gRPC, --check them
int CmdTraceLocks(Ctx& c);  // trace-locks (trace_locks.cc): the lock timeline as a Chrome trace

}  // namespace vmspace::cli
