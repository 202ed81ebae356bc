// SPDX-License-Identifier: Apache-2.0
// Bar charts of benchmark results, SVG or PNG by the file's extension, drawn by gnuplot
// run as a subprocess (`set terminal svg` / `pngcairo`). gnuplot is Debian's gnuplot-nox
// (deploy/install-deps.sh), whose cairo terminals include pngcairo.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace vmspace::bench {

/// One bar chart: one bar per label; a missing value draws no bar.
struct PlotPanel {
  std::string title;
  std::vector<std::optional<double>> values;  // one per PlotSpec::labels entry
};

/// Panels side by side under one title, sharing the x labels.
struct PlotSpec {
  std::string title;
  std::vector<std::string> labels;
  std::vector<PlotPanel> panels;
};

/// The gnuplot program: $VMSPACE_GNUPLOT if set (used as is), else "gnuplot" found in
/// $PATH. Returns "" if there is none.
std::string FindGnuplot();

/// The message for a missing gnuplot (what to install).
std::string GnuplotMissingMessage();

/// The chart format of a file name by its extension (case-insensitive): "svg" for .svg,
/// "png" for .png, "" for anything else.
std::string PlotFormat(const std::string& path);

/// Writes `spec` at `path` by running gnuplot, as SVG or PNG by PlotFormat(path). Returns
/// "" or an error (another extension, gnuplot missing, its exit status and stderr, or no
/// chart written).
std::string WriteBarChart(const PlotSpec& spec, const std::string& path);

}  // namespace vmspace::bench
