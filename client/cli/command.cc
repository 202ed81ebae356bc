// SPDX-License-Identifier: Apache-2.0
// DataArg: the bytes a write command is given (--data, --hex or a file).
#include "cli/command.h"

#include <fstream>
#include <sstream>

namespace vmspace::cli {

std::string DataArg(const Ctx& c, const std::string& path_option) {
  int sources = c.args.Has("data") + c.args.Has("hex") + c.args.Has(path_option);
  if (sources != 1) throw UsageError{"give exactly one of --data, --hex, --" + path_option};
  if (c.args.Has("data")) return c.args.Get("data");
  if (c.args.Has("hex")) {
    auto d = client::ParseHexBytes(c.args.Get("hex"));
    if (!d) throw UsageError{"--hex: not an even-length hex string"};
    return *d;
  }
  std::ifstream f(c.args.Get(path_option), std::ios::binary);
  if (!f) throw UsageError{"--" + path_option + ": cannot open '" + c.args.Get(path_option) + "'"};
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace vmspace::cli
