// SPDX-License-Identifier: Apache-2.0
#include "lib/plot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace vmspace::bench {
namespace {

/// A gnuplot double-quoted string literal.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n' || c == '\t') c = ' ';
    out += c;
  }
  return out + "\"";
}

/// A data-file label: tabs and newlines would break the tab-separated columns.
std::string Label(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '"') c = ' ';
  return s;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// A new empty temporary file named after `tag`; "" on failure.
std::string TempFile(const char* tag) {
  const char* dir = getenv("TMPDIR");
  std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/vmspace-plot-" + tag + "-XXXXXX";
  int fd = mkstemp(tmpl.data());
  if (fd < 0) return "";
  close(fd);
  return tmpl;
}

}  // namespace

std::string FindGnuplot() {
  if (const char* env = getenv("VMSPACE_GNUPLOT"); env && *env) {
    return access(env, X_OK) == 0 ? std::string(env) : std::string();
  }
  const char* path = getenv("PATH");
  std::stringstream ss(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    std::string p = (dir.empty() ? std::string(".") : dir) + "/gnuplot";
    struct stat st;
    if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string GnuplotMissingMessage() {
  return "--plot needs gnuplot, which was not found in PATH (or $VMSPACE_GNUPLOT); install it with "
         "`apt-get install -y gnuplot-nox` (deploy/install-deps.sh does)";
}

std::string PlotFormat(const std::string& path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || path.find('/', dot) != std::string::npos) return "";
  std::string ext = path.substr(dot + 1);
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext == "svg" || ext == "png" ? ext : "";
}

std::string WriteBarChart(const PlotSpec& spec, const std::string& path) {
  const std::string format = PlotFormat(path);
  if (format.empty()) return "cannot tell the chart format of " + path + ": want FILE.svg or FILE.png";
  std::string gnuplot = FindGnuplot();
  if (gnuplot.empty()) return GnuplotMissingMessage();
  if (spec.labels.empty() || spec.panels.empty()) return "nothing to plot";
  std::string data = TempFile("data"), script = TempFile("script"), log = TempFile("log");
  if (data.empty() || script.empty() || log.empty()) return std::string("cannot create temporary files: ") + strerror(errno);
  struct Cleanup {
    std::vector<std::string> files;
    ~Cleanup() {
      for (const std::string& f : files) unlink(f.c_str());
    }
  } cleanup{{data, script, log}};

  // Labels that all start with the same "BASE," (a --compare SWITCH=.. list) lose the
  // prefix, which moves to the title.
  std::vector<std::string> labels = spec.labels;
  std::string title = spec.title;
  size_t comma = labels[0].find(',');
  if (labels.size() > 1 && comma != std::string::npos) {
    std::string prefix = labels[0].substr(0, comma + 1);
    if (std::all_of(labels.begin(), labels.end(),
                    [&](const std::string& l) { return l.size() > prefix.size() && l.rfind(prefix, 0) == 0; })) {
      for (std::string& l : labels) l = l.substr(prefix.size());
      title += " (base " + prefix.substr(0, comma) + ")";
    }
  }
  // x labels as explicit tics, one line per ','-separated part of a profile.
  std::string xtics;
  for (size_t i = 0; i < labels.size(); ++i) {
    std::string l = Quote(labels[i]);
    std::string multi;
    for (char ch : l) multi += ch == ',' ? std::string("\\n") : std::string(1, ch);
    xtics += (i ? ", " : "") + multi + " " + std::to_string(i);
  }
  {
    std::ofstream d(data);
    char num[64];
    for (size_t i = 0; i < labels.size(); ++i) {
      d << Label(labels[i]);
      for (const PlotPanel& p : spec.panels) {
        std::optional<double> v = i < p.values.size() ? p.values[i] : std::nullopt;
        if (v) snprintf(num, sizeof num, "%.9g", *v);
        d << '\t' << (v ? num : "?");
      }
      d << '\n';
    }
    if (!d) return "cannot write " + data;
  }
  static const char* const kColors[] = {"#4477aa", "#cc6677", "#228833", "#ccbb44", "#66ccee", "#aa3377"};
  std::ostringstream g;
  int width = std::max<int>(480, static_cast<int>(spec.panels.size()) *
                                      std::max<int>(360, 90 * static_cast<int>(spec.labels.size())));
  if (format == "svg")
    g << "set terminal svg size " << width << ",480 dynamic noenhanced font \"sans,11\" background \"white\"\n";
  else
    g << "set terminal pngcairo size " << width << ",480 noenhanced font \"sans,11\" background \"white\"\n";
  g << "set output " << Quote(path) << "\n"
    << "set datafile separator \"\\t\"\n"
    << "set datafile missing \"?\"\n"
    << "set style data histograms\n"
    << "set style histogram clustered gap 1\n"
    << "set style fill solid 0.85 border -1\n"
    << "set boxwidth 0.8\n"
    << "set grid ytics\n"
    << "set yrange [0:*]\n"
    << "set format y \"%.3g\"\n"
    << "set xtics nomirror (" << xtics << ")\n"
    << "set bmargin 5\n"
    << "set offsets 0.5, 0.5, 0, 0\n"
    << "set multiplot layout 1," << spec.panels.size() << " title " << Quote(title) << "\n";
  for (size_t p = 0; p < spec.panels.size(); ++p) {
    size_t col = p + 2;
    g << "set title " << Quote(spec.panels[p].title) << "\n"
      << "plot " << Quote(data) << " using " << col << " notitle linecolor rgb \""
      << kColors[p % (sizeof kColors / sizeof kColors[0])] << "\", \"\" using 0:" << col << ":(sprintf(\"%.3g\", $"
      << col << ")) with labels offset 0,0.8 notitle\n";
  }
  g << "unset multiplot\n";
  {
    std::ofstream s(script);
    s << g.str();
    if (!s) return "cannot write " + script;
  }
  unlink(path.c_str());
  pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + strerror(errno);
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_TRUNC);
    int devnull = open("/dev/null", O_RDONLY);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    if (devnull >= 0) dup2(devnull, 0);
    execl(gnuplot.c_str(), gnuplot.c_str(), script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  std::string out = ReadFile(log);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    return "gnuplot (" + gnuplot + ") failed with status " + std::to_string(st) + (out.empty() ? "" : ": " + out);
  }
  const std::string chart = ReadFile(path);
  const bool written = format == "svg" ? chart.find("<svg") != std::string::npos : chart.rfind("\x89PNG", 0) == 0;
  if (!written) return std::string("gnuplot wrote no ") + (format == "svg" ? "SVG" : "PNG") + " to " + path + (out.empty() ? "" : ": " + out);
  return "";
}

}  // namespace vmspace::bench
