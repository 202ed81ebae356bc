// SPDX-License-Identifier: Apache-2.0
// Parsing and formatting of the values the vmspace CLI accepts: numbers (decimal or
// 0x hex, with optional K/M/G suffixes), protections, mmap flags and access types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vmspace::client {

/// Parses an unsigned 64-bit number: decimal, "0x" hex, "0o"/"0b" prefixes, '_' or '\''
/// separators, and an optional binary suffix K/M/G/T (KiB multiples: "4K" = 4096).
/// Rejects empty input, signs, junk and overflow.
std::optional<uint64_t> ParseU64(std::string_view s);

/// Parses a protection: "rwx"-style letters with '-' placeholders ("rw", "r-x", "---"),
/// "none", names joined by ',' or '|' ("read,write", "PROT_READ|PROT_EXEC"), or a number.
std::optional<int> ParseProt(std::string_view s);

/// Parses mmap flags: names joined by ',' or '|' ("private,anonymous,fixed"; the MAP_
/// prefix and case are optional; "anon" = anonymous), or a number.
std::optional<int> ParseMapFlags(std::string_view s);

/// Parses msync flags: "sync", "async", "invalidate" (MS_ prefix and case optional)
/// joined by ',' or '|', or a number.
std::optional<int> ParseMsyncFlags(std::string_view s);

/// Parses a madvise advice: the name of an MADV_* constant the daemon's engine knows
/// (include/uapi/asm-generic/mman-common.h, Linux 6.18: "dontneed", "free",
/// "guard_install", ...; the MADV_ prefix and case optional, '-' = '_'), or a number
/// (passed as it is, so the daemon answers an unknown one EINVAL).
std::optional<int> ParseMadvise(std::string_view s);

/// Parses an access type: "read"/"r", "write"/"w", "exec"/"x"/"execute". Returns the
/// vmspace.v1.AccessType number (0, 1, 2).
std::optional<int> ParseAccessType(std::string_view s);

/// Parses a duration in seconds with absl::ParseDuration: decimal numbers with a unit
/// "ns", "us", "ms", "s", "m" or "h" ("5s", "500ms", "1.5s", "2m", "1m30s"; any case);
/// a bare number is seconds. Rejects empty input, signs, junk, zero and durations over 24 h.
std::optional<double> ParseDurationSeconds(std::string_view s);

/// "rwx" letters for PROT_* bits, "---" for none; unknown bits appended as "+0x..".
std::string FormatProt(int prot);
/// "private|anonymous|fixed"-style names of MAP_* bits, unknown bits as "0x..".
std::string FormatMapFlags(int flags);
/// "0x" + lower-case hex.
std::string Hex(uint64_t v);
/// Lower-case hex of bytes, no separators.
std::string HexBytes(std::string_view bytes);
/// Decodes hex (optionally with spaces or a 0x prefix) into bytes.
std::optional<std::string> ParseHexBytes(std::string_view hex);

}  // namespace vmspace::client
