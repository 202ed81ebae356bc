// SPDX-License-Identifier: Apache-2.0
// SVG bar charts of benchmark results, drawn by gnuplot run as a subprocess
// (`set terminal svg`). gnuplot is Debian's gnuplot-nox (deploy/install-deps.sh).
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

/// Writes `spec` as an SVG file at `svg_path` by running gnuplot. Returns "" or an error
/// (gnuplot missing, its exit status and stderr, or no SVG written).
std::string WriteSvgBarChart(const PlotSpec& spec, const std::string& svg_path);

}  // namespace vmspace::bench
