// SPDX-License-Identifier: Apache-2.0
#include "cli/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "cli/command.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "vmspace_version.h"

namespace vmspace::cli {

namespace {

const std::vector<OptionSpec>& GlobalOptions() {
  static const std::vector<OptionSpec> opts = {
      {"target", "HOST:PORT", "vmspaced address (default $VMSPACE_TARGET, else 127.0.0.1:50051); several daemons "
                              "(shards): A,B,C or shards:NAME:PORT (every address of NAME); calls go to the daemon "
                              "of their space id"},
      {"timeout", "SECONDS", "deadline of each call (default 10)"},
      {"token", "TOKEN", "bearer token of vmspaced --token-file (default $VMSPACE_TOKEN)"},
      {"tls-ca", "PEM", "connect with TLS: the CA file that signed the daemon's certificate (default $VMSPACE_TLS_CA)"},
      {"tls-cert", "PEM", "client certificate for mutual TLS (its subject CN is the tenant; with --tls-key; default "
                          "$VMSPACE_TLS_CERT)"},
      {"tls-key", "PEM", "private key of --tls-cert (default $VMSPACE_TLS_KEY)"},
      {"json", "", "print one JSON object instead of text"},
  };
  return opts;
}

/// Options of `bench page_fault1 | mmap1 | mixed` and the file workloads.
std::vector<OptionSpec> BenchOptions() {
  return {
      {"mode", "M", "threads: all clients in one space (default); processes: one space each"},
      {"clients", "C", "concurrent clients (default 1; mixed: default 2 = 1 faulter + 1 churner)"},
      {"duration", "D", "timed phase per profile, e.g. 5s, 500ms, 1.5s (default 5s)"},
      {"profile", "P", "locking profile linux-6.0|6.1|6.4|6.6|6.7|6.15[,switch=v] (default linux-6.15); the base of --compare SWITCH=.."},
      {"locking-profile", "P", "same as --profile"},
      {"compare", "LIST", "run each profile in turn: linux-6.0,linux-6.6 | vma_lock=off,anon,all | SPEC;SPEC"},
      {"transport", "T", "inprocess (engine threads in this process, default), unary or stream (vmspaced)"},
      {"plot", "FILE", "write a bar chart per profile with gnuplot (ops/s, contentions per 1000 faults; --sweep: ops/s per task count): FILE.svg SVG, FILE.png PNG"},
      {"pin", "", "pin client c to CPU c mod ncpus, as will-it-scale (default: on for inprocess; --pin=false)"},
      {"sweep", "1..N", "will-it-scale's runtest: run at each task count 1..N (or a list 1,2,4), every profile and the "
                        "kernel; ops/s and per-task scaling per count (with --csv FILE, --plot FILE)"},
      {"csv", "FILE", "with --sweep: write tasks,series,ops_per_s,per_task_scaling"},
      {"quiet", "", "no progress lines on stderr"},
  };
}

/// Options of the file workloads: BenchOptions() and --skip-native.
std::vector<OptionSpec> FileBenchOptions() {
  std::vector<OptionSpec> o = BenchOptions();
  o.push_back({"skip-native", "", "do not run the same loops on this machine's kernel"});
  return o;
}

/// Options of the space-setting benchmarks (shmem-dirty, execl): `own`, then the
/// profile, --skip-native and --quiet.
std::vector<OptionSpec> SettingBenchOptions(std::vector<OptionSpec> own) {
  own.push_back({"profile", "P", "locking profile of the spaces (default linux-6.15)"});
  own.push_back({"locking-profile", "P", "same as --profile"});
  own.push_back({"skip-native", "", "do not run the loop on this machine's kernel"});
  own.push_back({"quiet", "", "no progress lines on stderr"});
  return own;
}

const std::vector<Command>& Commands() {
  static const std::vector<Command> cmds = {
      {"create", "[options]", "create an empty address space; prints its id",
       {{"label", "TEXT", "free text shown by list (<= 64 bytes)"},
        {"max-map-count", "N", "vm.max_map_count (default 65530)"},
        {"mmap-base", "ADDR", "top of the mmap area (default 0x7ffff7fff000)"},
        {"mmap-min-addr", "ADDR", "effective mmap_min_addr (default 65536)"},
        {"dac-mmap-min-addr", "ADDR", "MAP_FIXED minimum without CAP_SYS_RAWIO (default 4096)"},
        {"cap-sys-rawio", "", "the caller has CAP_SYS_RAWIO"},
        {"rlimit-memlock", "BYTES", "RLIMIT_MEMLOCK for mlock, mlockall and MAP_LOCKED (default 8 MiB)"},
        {"cap-ipc-lock", "", "the caller has CAP_IPC_LOCK (RLIMIT_MEMLOCK does not apply)"},
        {"locking-profile", "NAME", "locking profile (\"\" = daemon default)"},
        {"shared-fault-completion", "MODE", "retry | completed (default completed): how a shared write fault that dirtied a page ends"},
        {"i-mmap-scope", "SCOPE", "wide | narrow (default wide): i_mmap_rwsem across mmap's tree and i_mmap inserts, or the i_mmap insert only"},
        {"start-brk", "ADDR", "where the heap (brk area) starts, page aligned (default 0x4ac000)"},
        {"rlimit-data", "BYTES", "RLIMIT_DATA for brk and growing mremap (default unlimited)"},
        {"placement-key", "KEY", "several daemons: place by hash of KEY (default: the daemon with the fewest spaces)"}},
       CmdCreate},
      {"destroy", "SPACE", "destroy a space and free its frames", {{"space", "ID", "the space"}}, CmdDestroy},
      {"fork", "SPACE [--profile P] [--label L]",
       "fork(2) a space (copy-on-write, as kernel/fork.c dup_mmap); prints the child's id",
       {{"space", "ID", "the parent space"},
        {"profile", "P", "the child's locking profile (default: the parent's)"},
        {"label", "TEXT", "the child's label (default: the parent's)"}},
       CmdFork},
      {"exec", "SPACE --path P [--argv \"A B\"] [--env \"K=V\"] [--interpreter I]",
       "execve(2) in a space: its mappings become the ELF program's initial layout (fs/binfmt_elf.c, ASLR off)",
       {{"space", "ID", "the space"},
        {"path", "P", "the program, relative to the daemon's --data-dir"},
        {"argv", "WORDS", "its arguments, space-separated (default: the path)"},
        {"env", "WORDS", "its environment, space-separated K=V words (default: none)"},
        {"interpreter", "I", "the interpreter's path in --data-dir (default: the program's PT_INTERP there)"}},
       CmdExec},
      {"list", "", "list spaces with their counters", {}, CmdList},
      {"mmap", "SPACE --len LEN [options]", "mmap(2) anonymous memory or a file (--file); prints the address",
       {{"space", "ID", "the space (or first argument)"},
        {"addr", "ADDR", "hint, or the address with fixed/fixed_noreplace (default 0)"},
        {"len", "LEN", "length in bytes (rounded up to pages)"},
        {"prot", "PROT", "rw, r-x, none, read,write or a number (default rw)"},
        {"flags", "FLAGS", "private,anonymous,fixed,... or a number (default private,anonymous)"},
        {"offset", "OFF", "file offset (page aligned; ignored for anonymous)"},
        {"file", "ID", "map this open file (vmspace file open); flags default to private"}},
       CmdMmap},
      {"msync", "SPACE --addr ADDR --len LEN [--flags sync|async|invalidate]",
       "msync(2): write back the dirty pages of shared file mappings in a range",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start (page aligned)"},
        {"len", "LEN", "length in bytes"}, {"flags", "FLAGS", "sync (default), async, invalidate, or a number"}},
       CmdMsync},
      {"mlock", "SPACE --addr ADDR --len LEN [--onfault]", "mlock2(2): lock a range (and fault it in)",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start"}, {"len", "LEN", "length in bytes"},
        {"onfault", "", "MLOCK_ONFAULT: lock pages as they are faulted in, do not populate"}},
       CmdMlock},
      {"munlock", "SPACE --addr ADDR --len LEN", "munlock(2)",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start"}, {"len", "LEN", "length in bytes"}},
       CmdMunlock},
      {"mlockall", "SPACE [--flags current,future,onfault]", "mlockall(2)",
       {{"space", "ID", "the space (or first argument)"},
        {"flags", "FLAGS", "current (default), future, onfault joined by ',', or a number"}},
       CmdMlockall},
      {"munlockall", "SPACE", "munlockall(2)", {{"space", "ID", "the space (or first argument)"}}, CmdMunlockall},
      {"mseal", "SPACE --addr ADDR --len LEN", "mseal(2): munmap, mprotect, MAP_FIXED over the range fail EPERM for good",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start (page aligned)"},
        {"len", "LEN", "length in bytes"}, {"flags", "N", "must be 0 (default)"}},
       CmdMseal},
      {"madvise", "SPACE ADDR LEN ADVICE", "madvise(2) a range with one advice",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start, page aligned (or second argument)"},
        {"len", "LEN", "length in bytes (or third argument)"},
        {"advice", "ADVICE", "dontneed, free, willneed, remove, cold, pageout, populate_read, populate_write, "
                             "guard_install, guard_remove, ... (any MADV_* name) or a number (or fourth argument)"}},
       CmdMadvise},
      {"mincore", "SPACE ADDR LEN", "mincore(2): which pages of a range are resident, one 0/1 per page",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start, page aligned (or second argument)"},
        {"len", "LEN", "length in bytes (or third argument)"}},
       CmdMincore},
      {"file open", "PATH [--write] [--create] [--exclusive] [--truncate]",
       "open(2) a file under vmspaced's --data-dir; prints its file id",
       {{"path", "PATH", "relative to --data-dir (or first argument)"},
        {"write", "", "open read-write (O_RDWR; default read-only)"},
        {"create", "", "create it if missing (O_CREAT)"},
        {"exclusive", "", "with --create: fail EEXIST if it exists (O_EXCL)"},
        {"truncate", "", "truncate to 0 (O_TRUNC; needs --write)"},
        {"mode", "MODE", "ro | wo | rw: O_RDONLY, O_WRONLY or O_RDWR (instead of --write)"},
        {"near", "SPACE", "several daemons: open on the daemon of this space (default: shard 0's)"}},
       CmdFileOpen},
      {"file create-shmem", "[--name NAME] [--size SIZE]",
       "memfd_create(2): a memory-only file, opened read-write; prints its file id",
       {{"name", "NAME", "shown in maps as /memfd:NAME (deleted)"}, {"size", "SIZE", "bytes (default 0)"},
        {"allow-sealing", "", "MFD_ALLOW_SEALING: seals may be added (vmspace file seal)"},
        {"near", "SPACE", "several daemons: create on the daemon of this space (default: shard 0's)"}},
       CmdFileCreateShmem},
      {"file seal", "FILE --seals SEALS", "fcntl(F_ADD_SEALS) of a shmem file",
       {{"file", "ID", "the file id (or first argument)"},
        {"seals", "SEALS", "seal, shrink, grow, write, future_write, exec joined by ',', or a number"}},
       CmdFileSeal},
      {"file seals", "FILE", "fcntl(F_GET_SEALS): the seals of a shmem file", {{"file", "ID", "the file id"}},
       CmdFileSeals},
      {"file reopen", "FILE [--mode ro|wo|rw]",
       "open(\"/proc/self/fd/N\"): a new file id of the same file with its own access mode; prints it",
       {{"file", "ID", "the file id (or first argument)"}, {"mode", "MODE", "ro (default), wo or rw"}},
       CmdFileReopen},
      {"file close", "FILE", "close(2) a file id (its mappings stay)", {{"file", "ID", "the file id"}}, CmdFileClose},
      {"file truncate", "FILE --size SIZE", "ftruncate(2); shrinking unmaps the pages beyond from every space",
       {{"file", "ID", "the file id (or first argument)"}, {"size", "SIZE", "the new size in bytes"}}, CmdFileTruncate},
      {"file stat", "FILE", "size, inode, page-cache and dirty pages, mappings of an open file",
       {{"file", "ID", "the file id"}}, CmdFileStat},
      {"file ls", "", "list the daemon's open files", {}, CmdFileList},
      {"file read", "FILE --len LEN [--offset OFF] [--raw]", "pread(2) through the page cache (hex dump, or raw)",
       {{"file", "ID", "the file id (or first argument)"}, {"offset", "OFF", "file offset (default 0)"},
        {"len", "LEN", "bytes (fewer at end of file)"}, {"raw", "", "write the bytes as they are to stdout"}},
       CmdFileRead},
      {"file write", "FILE [--offset OFF] (--data TEXT | --hex HEX | --from PATH)", "pwrite(2) through the page cache",
       {{"file", "ID", "the file id (or first argument)"}, {"offset", "OFF", "file offset (default 0)"},
        {"data", "TEXT", "the bytes of TEXT"}, {"hex", "HEX", "bytes in hex, e.g. 00ff10"},
        {"from", "PATH", "the bytes of a local file"}},
       CmdFileWrite},
      {"file fsync", "FILE", "fsync(2): write the file's dirty pages back to its host file",
       {{"file", "ID", "the file id"}}, CmdFileFsync},
      {"munmap", "SPACE --addr ADDR --len LEN", "munmap(2)",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start (page aligned)"},
        {"len", "LEN", "length in bytes"}},
       CmdMunmap},
      {"brk", "SPACE --addr ADDR", "brk(2): move the break; prints the break after the call (the old one if refused)",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "the new break (0: print the current one)"}},
       CmdBrk},
      {"mremap", "SPACE --addr OLD --old-len LEN --new-len LEN [--maymove] [--fixed ADDR] [--dontunmap]",
       "mremap(2): resize and/or move a mapping; prints its address after the call",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "OLD", "the old address (page aligned)"},
        {"old-len", "LEN", "bytes of the old range (0: duplicate a shared mapping)"},
        {"new-len", "LEN", "the new length in bytes"}, {"maymove", "", "MREMAP_MAYMOVE: move if it cannot grow in place"},
        {"fixed", "ADDR", "MREMAP_FIXED: move to ADDR (implies --maymove)"},
        {"dontunmap", "", "MREMAP_DONTUNMAP: leave the old range mapped, empty (implies --maymove)"}},
       CmdMremap},
      {"mprotect", "SPACE --addr ADDR --len LEN --prot PROT", "mprotect(2)",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start (page aligned)"},
        {"len", "LEN", "length in bytes"}, {"prot", "PROT", "rw, r-x, none, ... or a number"}},
       CmdMprotect},
      {"fault", "SPACE --addr ADDR [--access read|write|exec]", "one simulated CPU access of one byte",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "byte address"},
        {"access", "TYPE", "read (default), write or exec"}},
       CmdFault},
      {"access", "SPACE --addr ADDR --len LEN [--stride N] [--access TYPE]",
       "touch one byte every STRIDE bytes of a range",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start"}, {"len", "LEN", "length"},
        {"stride", "N", "bytes between touches (default 1)"}, {"access", "TYPE", "read (default), write or exec"}},
       CmdAccess},
      {"read", "SPACE --addr ADDR --len LEN [--raw]", "read memory (hex dump, or raw bytes with --raw)",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start"}, {"len", "LEN", "bytes"},
        {"raw", "", "write the bytes as they are to stdout"}},
       CmdRead},
      {"write", "SPACE --addr ADDR (--data TEXT | --hex HEX | --file PATH)", "write memory",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start"},
        {"data", "TEXT", "the bytes of TEXT"}, {"hex", "HEX", "bytes in hex, e.g. 00ff10"},
        {"file", "PATH", "the bytes of a file"}},
       CmdWrite},
      {"maps", "SPACE [--start ADDR] [--end ADDR] [--flags]", "print /proc/PID/maps of a space",
       {{"space", "ID", "the space (or first argument)"}, {"start", "ADDR", "only VMAs overlapping [start, end)"},
        {"end", "ADDR", "0 = no limit"}, {"count", "", "also print the space's map_count"},
        {"flags", "", "after each line, its VmFlags as /proc/PID/smaps shows them"}},
       CmdMaps},
      {"ping", "", "check that the daemon answers", {}, CmdPing},
      {"stats", "", "each daemon's spaces and memory budget by kind (GetServerInfo)", {}, CmdStats},
      {"health", "[--service NAME]",
       "gRPC health check (grpc.health.v1.Health/Check); exit 0 only if SERVING (container HEALTHCHECK)",
       {{"service", "NAME", "service to check (default vmspace.v1.VmSpace; \"\" = the whole server)"}},
       CmdHealth},
      {"bench stress", "[options]",
       "the seed-004 mmap/munmap stress, compared with the kernel (native run in a forked child)",
       {{"rounds", "N", "rounds per client (default 100000)"},
        {"clients", "C", "concurrent clients, each in its own space (default 1)"},
        {"shared-space", "", "all clients in one space (native: threads of one process)"},
        {"page-fault", "", "write every 128th byte of a mapping before unmapping it"},
        {"seed", "N", "srand() seed; client c uses seed + c (default 1, as the C program)"},
        {"stride", "N", "bytes between writes with --page-fault (default 128)"},
        {"transport", "T", "inprocess (engine linked in, default), unary or stream"},
        {"batch", "N", "stream: ops per Batch message (default 1024)"},
        {"inflight", "N", "stream: messages in flight per client (default 4)"},
        {"locking-profile", "P", "engine locking profile of the spaces: linux-6.0|6.1|6.4|6.6|6.7|6.15[,switch=v] (default: the engine's/daemon's)"},
        {"profile", "P", "same as --locking-profile (the base of --compare SWITCH=..)"},
        {"compare", "LIST", "run once per profile: linux-6.0,linux-6.6 | vma_lock=off,anon,all | SPEC;SPEC (table; native once)"},
        {"plot", "FILE", "with --compare: bar chart (rounds/s, contentions); with --sweep: rounds/s per task count; with --scaling: the ratio per repetition and "
                         "the median, ours, the kernel's and the map control; drawn by gnuplot: FILE.svg SVG, FILE.png PNG"},
        {"skip-native", "", "do not run the native comparison"},
        {"repeat", "N", "with --compare: N repetitions of every profile, then the kernel; x native = the median of the per-repetition ratios; with --scaling: N repetitions (default 1)"},
        {"scaling", "", "with --clients C: each repetition runs 1 client, then C, then the kernel's 1 and C processes; prints C-client aggregate / 1-client per repetition and the medians, beside two controls in 1 and C threads that share nothing (alu: integer-unit-bound registers; map: a std::map each) and ours over the map's"},
        {"seed-table", "", "with --compare: seed 004's table beside ours (always when it names linux-6.0/6.1/6.7)"},
        {"sweep", "1..N", "will-it-scale's runtest: run at each client count 1..N (or a list 1,2,4), every profile "
                          "(--compare) and the kernel; rounds/s and per-task scaling per count (--csv FILE, --plot FILE)"},
        {"csv", "FILE", "with --sweep: write tasks,series,ops_per_s,per_task_scaling"},
        {"quiet", "", "no progress lines on stderr"}},
       CmdBenchStress},
      {"bench page_fault1", "[options]",
       "will-it-scale page_fault1: mmap 128 MiB, write each page, munmap; ops = pages/s", BenchOptions(),
       CmdBenchWorkload},
      {"bench mmap1", "[options]", "will-it-scale mmap1: mmap+munmap 128 MiB; ops = pairs/s", BenchOptions(),
       CmdBenchWorkload},
      {"bench mixed", "[options]",
       "C-1 clients fault their own regions of ONE space while one client mmaps/munmaps in it",
       BenchOptions(), CmdBenchWorkload},
      {"bench page_fault2", "[options]",
       "will-it-scale page_fault2: MAP_PRIVATE 128 MiB file, write each page (COW), munmap; beside the kernel",
       FileBenchOptions(), CmdBenchWorkload},
      {"bench page_fault3", "[options]",
       "will-it-scale page_fault3: MAP_SHARED 128 MiB file, write each page, munmap; beside the kernel",
       FileBenchOptions(), CmdBenchWorkload},
      {"bench page_fault4", "[options]",
       "will-it-scale page_fault4: MAP_PRIVATE 128 MiB file, read each page (fault-around), munmap; beside the kernel",
       FileBenchOptions(), CmdBenchWorkload},
      {"bench mmap2", "[options]", "will-it-scale mmap2: mmap+munmap of a 128 MiB file (MAP_PRIVATE); beside the kernel",
       FileBenchOptions(), CmdBenchWorkload},
      {"bench shmem-dirty", "[--size 400M] [--compare shared_fault_completion=retry,completed]",
       "seed 002: write each page of a MAP_SHARED shmem mapping; pgfault per page retry vs completed, beside the kernel",
       SettingBenchOptions({{"size", "BYTES", "mapping size (default 400M)"},
                            {"runs", "N", "runs per mode, each a fresh space (default 5)"},
                            {"shared-fault-completion", "MODE", "retry | completed (default completed; --compare runs several)"},
                            {"compare", "LIST", "shared_fault_completion=retry,completed"}}),
       CmdBenchShmemDirty},
      {"bench execl", "[--clients C] [--duration 2s] [--compare i_mmap_scope=wide,narrow] [--transport unary --program P]",
       "seed 003: UnixBench execl as fork + exec (CloneSpace, ExecSpace, DestroySpace) of one static program; i_mmap_rwsem per scope, beside the kernel",
       SettingBenchOptions({{"clients", "C", "concurrent clients (default 2)"},
                            {"transport", "T", "inprocess (the engine in this process, default) | unary (the daemon at --target)"},
                            {"program", "P", "the static ELF program exec'd: a host path (inprocess; default: the native binary) "
                                             "or a path in the daemon's --data-dir (unary)"},
                            {"duration", "D", "per scope (default 2s)"},
                            {"compare", "LIST", "i_mmap_scope=wide,narrow (default)"},
                            {"native-binary", "PATH",
                             "static program the kernel loop forks and execve's (default: vmspace-execl-true "
                             "next to this executable)"}}),
       CmdBenchExecl},
      {"reproduce", "SEED [--quick] [--out DIR] [--repeat N] [--plot FILE.svg|FILE.png]",
       "reproduce one result (seed-000, seed-002, seed-003, seed-004) or all, beside this machine's kernel, into a "
       "results folder: JSON with provenance, CSV, chart, and the thread's figures beside ours with a verdict",
       {{"seed", "SEED", "seed-000 | seed-002 | seed-003 | seed-004 | all"},
        {"quick", "", "smaller runs and 3 repetitions: about a minute for all on 2 cores"},
        {"out", "DIR", "the results folder (default vmspace-reproduce-DATE-TIME; made if missing)"},
        {"repeat", "N", "repetitions of each comparison (default 5, --quick 3)"},
        {"scale", "X", "multiply the run sizes and durations by X (e.g. 0.1 for a smoke test; default 1)"},
        {"plot", "FILE", "the chart's name in the folder: .svg SVG (default ratios.svg), .png PNG"},
        {"quiet", "", "no progress lines on stderr"}},
       CmdReproduce},
      {"bench fork", "[--size S] [--vmas N] [--touch F] [--parent-threads M] [--compare PROFILES]",
       "fork a space of N VMAs (fraction F of S bytes present), the child writes them and exits; per profile, beside the kernel",
       {{"size", "BYTES", "bytes over all VMAs (default 64M)"},
        {"vmas", "N", "private anonymous VMAs (default 16)"},
        {"touch", "F", "fraction of the pages present before each fork, 0..1 (default 1)"},
        {"parent-threads", "M", "parent threads writing during the forks; runs each per-VMA-lock profile with fork_vma_lock on "
                                "and off and reports race hits (default 0)"},
        {"duration", "D", "per profile (default 2s)"},
        {"compare", "LIST", "profiles (linux-6.0,linux-6.4,linux-6.15) or SWITCH=V1,V2"},
        {"profile", "P", "locking profile (default linux-6.15)"},
        {"locking-profile", "P", "same as --profile"},
        {"skip-native", "", "do not run the loop on this machine's kernel"},
        {"quiet", "", "no progress lines on stderr"}},
       CmdBenchFork},
      {"record", "[--out TRACE] [--capture-files [--capture-limit BYTES]] -- CMD ARGS...",
       "run CMD under ptrace (ASLR off, threads and children followed) and write its memory calls as a trace",
       {{"out", "TRACE", "the trace file (default vmspace.trace; JSON lines, docs/replay.md)"},
        {"capture-files", "", "copy the files the program maps or opens into TRACE.files/N"},
        {"capture-limit", "BYTES", "with --capture-files: the first BYTES of each file (default 16M)"}},
       CmdRecord},
      {"replay", "TRACE [--check] [--compare P1,P2,...] [--speed asrecorded|max]",
       "issue a recorded trace's calls in new spaces through gRPC, one client thread per recorded thread",
       {{"trace", "TRACE", "the trace file of vmspace record (or first argument)"},
        {"check", "", "compare every result and each space's final maps with the kernel's; exit 1 on a difference"},
        {"compare", "LIST", "replay once per locking profile (linux-6.0,linux-6.15): wall time, calls/s, faults, lock contention"},
        {"speed", "S", "max (default): each thread issues its next call at once; asrecorded: at the recorded times"},
        {"profile", "P", "locking profile of the spaces (default: the daemon's)"},
        {"context", "N", "with --check: calls shown before a difference (default 5)"},
        {"files", "KIND", "memfd (default): the trace's files as memory-only files; host: files vmspace-replay-* under vmspaced's --data-dir (kept)"},
        {"timeline", "FILE", "trace the daemon's lock waits and holds, faults and calls during the replay into FILE (a Chrome trace, as trace-locks)"}},
       CmdReplay},
      {"trace-locks", "--space ID|--all [--seconds S] [--out FILE.json]",
       "a sampled timeline of lock waits and holds, faults and calls per daemon thread, as a Chrome trace (Perfetto)",
       {{"space", "ID", "the space to trace"},
        {"all", "", "every space of yours (an admin: everything the daemon does)"},
        {"seconds", "S", "how long to trace (default 5, at most 600)"},
        {"max-events", "N", "at most N events (default: the daemon's cap, 200000)"},
        {"out", "FILE", "the Chrome trace file (default vmspace-timeline.json)"}},
       CmdTraceLocks},
      {"lockstat", "[--profile P]", "the daemon's lock statistics, like /proc/lock_stat (GetLockStats)",
       {{"profile", "P", "one locking profile's spaces (linux-6.0..linux-6.15, custom); default all"}},
       CmdLockstat},
  };
  return cmds;
}

constexpr const char* kFooter =
    "Numbers take 0x hex and K/M/G suffixes; global options may come anywhere on the line.\n"
    "`vmspace COMMAND --help` lists a command's options.\n"
    "Environment (when the option is not given; empty = unset): VMSPACE_TARGET (--target), VMSPACE_TOKEN (--token),\n"
    "VMSPACE_TLS_CA, VMSPACE_TLS_CERT, VMSPACE_TLS_KEY (--tls-ca, --tls-cert, --tls-key).\n"
    "Exit status: 0 ok, 1 the call failed (the errno name is printed), 2 usage error, 3 partial: of several\n"
    "daemons (--target A,B) some answered and some could not be reached (list, ping, health, lockstat, stats\n"
    "answer for the others and name those on stderr; --json: \"unreachable\"); none answered: 1.";

/// CLI11's help layout with two changes: a command's usage line is its synopsis
/// ("vmspace mmap SPACE --len LEN [options]"), and a command group such as `bench` is
/// listed by its members ("bench stress", "bench mmap1", ...) in the list of commands.
class HelpFormatter : public CLI::Formatter {
 public:
  std::map<const CLI::App*, std::string> synopsis;

  std::string make_usage(const CLI::App* app, std::string name) const override {
    auto it = synopsis.find(app);
    if (it == synopsis.end()) return CLI::Formatter::make_usage(app, std::move(name));
    return get_label("Usage") + ": " + name + (it->second.empty() ? "" : " " + it->second) + "\n";
  }
  std::string make_subcommand(const CLI::App* sub) const override {
    std::vector<const CLI::App*> members = sub->get_subcommands({});
    if (members.empty()) return CLI::Formatter::make_subcommand(sub);
    std::ostringstream o;
    for (const CLI::App* m : members)
      CLI::detail::format_help(o, sub->get_name() + " " + m->get_name(), m->get_description(), get_column_width());
    return o.str();
  }
};

/// The whole command line as a CLI11 app: one subcommand per Command ("bench stress" is
/// `stress` under `bench`), each with its own options plus the global ones (which the
/// root has too, for "vmspace --json list"). Unknown options and arguments are kept as
/// extras, which RunCli reports in its own words.
struct CommandLine {
  CLI::App app{"vmspace: command-line client of vmspaced", "vmspace"};
  std::shared_ptr<HelpFormatter> help = std::make_shared<HelpFormatter>();
  std::map<const CLI::App*, const Command*> commands;
  std::deque<bool> flag_values;                     // what the boolean flags parse into
  std::map<const CLI::Option*, const bool*> flags;  // flag option -> its value

  CommandLine() {
    help->column_width(26);
    // Inherited by every subcommand added below.
    app.formatter(help);
    app.set_help_flag("-h,--help", "show this help");
    app.set_version_flag("--version", std::string("vmspace ") + VMSPACE_VERSION, "print the version of this build and exit");
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.allow_extras();
    app.require_subcommand(1);
    app.footer(kFooter);
    help->synopsis[&app] =
        "[--target HOST:PORT] [--timeout SECONDS] [--token TOKEN] [--tls-ca PEM [--tls-cert PEM --tls-key PEM]] "
        "[--json] COMMAND [options] | --version";
    AddGlobal(&app);
    std::map<std::string, CLI::App*> groups;  // "bench"
    for (const Command& c : Commands()) {
      CLI::App* parent = &app;
      std::string leaf = c.name;
      if (size_t sp = c.name.find(' '); sp != std::string::npos) {
        std::string group = c.name.substr(0, sp);
        leaf = c.name.substr(sp + 1);
        CLI::App*& g = groups[group];
        if (g == nullptr) {
          const bool bench = group == "bench";
          g = app.add_subcommand(group, bench ? "the benchmarks (`vmspace bench WORKLOAD --help`)"
                                              : "the daemon's files (`vmspace " + group + " COMMAND --help`)");
          g->require_subcommand(1);
          g->group("Commands");
          help->synopsis[g] = bench ? "WORKLOAD [options]" : "COMMAND [options]";
          AddGlobal(g);
        }
        parent = g;
      }
      CLI::App* sub = parent->add_subcommand(leaf, c.summary);
      sub->group("Commands");
      help->synopsis[sub] = c.synopsis;
      commands[sub] = &c;
      // The synopsis's leading words (up to the first option or bracket) name the
      // options that are also the positional arguments, in order ("SPACE --len LEN":
      // --space; "SPACE ADDR LEN ADVICE": --space, --addr, --len, --advice).
      std::vector<std::string> leading;
      std::istringstream words(c.synopsis);
      for (std::string w; words >> w && w[0] != '-' && w[0] != '[' && w[0] != '(';) leading.push_back(w);
      for (const OptionSpec& o : c.options)
        Add(sub, o, std::find(leading.begin(), leading.end(), Upper(o.name)) != leading.end());
      AddGlobal(sub);
    }
  }

  /// Adds one option; `positional`: also the command's first positional argument.
  CLI::Option* Add(CLI::App* a, const OptionSpec& o, bool positional = false) {
    if (o.arg.empty()) {
      bool& v = flag_values.emplace_back(false);
      CLI::Option* opt = a->add_flag("--" + o.name, v, o.help);
      flags[opt] = &v;
      return opt;
    }
    return a->add_option((positional ? Upper(o.name) + ",--" : "--") + o.name, o.help)->type_name(o.arg);
  }
  void AddGlobal(CLI::App* a) {
    for (const OptionSpec& o : GlobalOptions()) Add(a, o)->group("Global options");
  }
};

}  // namespace

int RunCli(const std::vector<std::string>& all_args, std::ostream& out, std::ostream& err) {
  // `record -- CMD ARGS...`: the words after the first "--" are the program to run, not
  // the command's arguments.
  std::vector<std::string> args = all_args, rest;
  if (auto dd = std::find(all_args.begin(), all_args.end(), "--");
      dd != all_args.end() && std::find(all_args.begin(), dd, "record") != dd) {
    args.assign(all_args.begin(), dd);
    rest.assign(dd + 1, all_args.end());
  }
  CommandLine cl;
  CLI::App& app = cl.app;
  // The command that was given: the deepest subcommand CLI11 selected (or null).
  auto selected = [&]() -> CLI::App* {
    CLI::App* a = nullptr;
    for (CLI::App* p = &app;;) {
      std::vector<CLI::App*> subs = p->get_subcommands();
      if (subs.empty()) return a;
      a = p = subs[0];
    }
  };
  auto name_of = [](const CLI::App* a) {
    std::string n;
    for (; a != nullptr && a->get_parent() != nullptr; a = a->get_parent()) n = a->get_name() + (n.empty() ? "" : " " + n);
    return n;
  };
  // A usage error: the error, the command's one-line usage and where its full help is
  // (`vmspace COMMAND --help`), on stderr; exit 2.
  auto usage_error = [&](const CLI::App* a, const std::string& what) {
    std::string n = name_of(a);
    const std::string prog = "vmspace" + (n.empty() ? "" : " " + n);
    auto syn = cl.help->synopsis.find(a != nullptr ? a : &app);
    err << prog << ": " << what << "\n"
        << "Usage: " << prog << (syn == cl.help->synopsis.end() || syn->second.empty() ? "" : " " + syn->second)
        << "\n"
        << "Run '" << prog << " --help' for "
        << (n.empty() ? "the commands and options" : a->get_subcommands({}).empty() ? "its options" : "the list") << ".\n";
    return kExitUsage;
  };
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes the last argument first
    if (!reversed.empty() && reversed.back() == "help") reversed.back() = "--help";
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitOk;
  } catch (const CLI::CallForVersion& v) {
    out << v.what() << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    CLI::App* a = selected();
    if (a == nullptr || cl.commands.count(a) == 0) {
      // A missing or unknown command (or benchmark): CLI11 asks for one and keeps an
      // unknown word as an extra.
      std::vector<std::string> extra = app.remaining(true);
      auto word = std::find_if(extra.begin(), extra.end(), [](const std::string& x) { return x.rfind('-', 0) != 0; });
      if (word != extra.end()) {
        return usage_error(a, "unknown command '" + name_of(a) + (a ? " " : "") + *word + "'");
      }
      if (args.empty()) {
        err << app.help();
        return kExitUsage;
      }
      if (dynamic_cast<const CLI::RequiredError*>(&e))
        return usage_error(a, a && a->get_name() == "bench" ? "a workload is required" : "a command is required");
    }
    return usage_error(a, e.what());
  }
  CLI::App* a = selected();
  const Command& cmd = *cl.commands.at(a);
  std::vector<std::string> extra = app.remaining(true);
  extra.erase(std::remove(extra.begin(), extra.end(), "--"), extra.end());  // CLI11 keeps the marker
  if (!extra.empty()) {
    const std::string& x = extra[0];
    return usage_error(a, x.rfind('-', 0) == 0 ? "unknown option " + x : "unexpected argument '" + x + "'");
  }
  Ctx ctx(cmd.name, Args(a, &cl.flags), out, err);
  ctx.json = ctx.args.Flag("json");
  ctx.rest = rest;
  ctx.argv = all_args;
  // An option not given takes its environment variable, if set and not empty.
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr ? v : "");
  };
  const std::string env_target = env("VMSPACE_TARGET");
  ctx.client.target = ctx.args.Get("target", env_target.empty() ? "127.0.0.1:50051" : env_target);
  if (ctx.args.Has("timeout")) {
    std::string t = ctx.args.Get("timeout");
    char* end = nullptr;
    double s = std::strtod(t.c_str(), &end);
    if (t.empty() || end != t.c_str() + t.size() || !(s > 0) || s > 1e6)
      return usage_error(a, "--timeout: want seconds > 0, got '" + t + "'");
    ctx.client.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(s * 1000)));
  }
  ctx.client.token = ctx.args.Get("token", env("VMSPACE_TOKEN"));
  struct TlsFile {
    const char* flag;
    const char* env;
    std::string* pem;
  };
  for (const TlsFile& f : {TlsFile{"tls-ca", "VMSPACE_TLS_CA", &ctx.client.tls_ca_pem},
                           TlsFile{"tls-cert", "VMSPACE_TLS_CERT", &ctx.client.tls_cert_pem},
                           TlsFile{"tls-key", "VMSPACE_TLS_KEY", &ctx.client.tls_key_pem}}) {
    const std::string path = ctx.args.Get(f.flag, env(f.env));
    if (path.empty()) continue;
    std::string* pem = f.pem;
    std::ifstream in(path);
    if (!in) {
      return usage_error(a, (ctx.args.Has(f.flag) ? std::string("--") + f.flag : std::string("$") + f.env) +
                                ": cannot read " + path);
    }
    std::stringstream text;
    text << in.rdbuf();
    *pem = text.str();
  }
  if (ctx.client.tls_cert_pem.empty() != ctx.client.tls_key_pem.empty())
    return usage_error(a, "--tls-cert and --tls-key go together");
  if (!ctx.client.tls_cert_pem.empty() && ctx.client.tls_ca_pem.empty())
    return usage_error(a, "--tls-cert needs --tls-ca");
  try {
    return cmd.run(ctx);
  } catch (const UsageError& e) {
    return usage_error(a, e.what);
  }
}

}  // namespace vmspace::cli
