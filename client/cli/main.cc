// SPDX-License-Identifier: Apache-2.0
// vmspace: command-line client of vmspaced (see cli.h).
#include <iostream>
#include <string>
#include <vector>

#include "cli/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return vmspace::cli::RunCli(args, std::cout, std::cerr);
}
