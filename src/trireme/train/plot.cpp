// SVG loss-curve rendering: linear axes with "nice" ticks, one polyline per series.
#include "trireme/train/plot.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "trireme/core/error.h"
#include "trireme/io/file_write.h"
#include "trireme/train/metrics.h"

namespace trireme::train {
namespace {

struct Series {
  std::string name, color;
  std::vector<std::pair<double, double>> points;
};

// Tick spacing of 1, 2 or 5 times a power of ten giving about `target` ticks.
double nice_step(double span, int target) {
  double raw = span / std::max(target, 1);
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

std::string fmt_num(double v) {
  std::ostringstream os;
  os.precision(4);
  os << v;
  return os.str();
}

}  // namespace

std::string loss_curve_svg(const std::vector<nlohmann::json>& rows, const std::string& title) {
  Series train{"train loss", "#1f77b4", {}}, val{"validation loss", "#d62728", {}};
  for (const auto& r : rows) {
    double step = r.value("step", 0.0);
    if (r.contains("loss") && r["loss"].is_number()) train.points.emplace_back(step, r["loss"].get<double>());
    if (r.contains("val_loss") && r["val_loss"].is_number()) val.points.emplace_back(step, r["val_loss"].get<double>());
  }
  TRIREME_CHECK(!train.points.empty() || !val.points.empty(), "plot: the metrics have no loss values");
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series* s : {&train, &val}) {
    for (auto [x, y] : s->points) {
      if (!std::isfinite(y)) continue;
      x0 = std::min(x0, x); x1 = std::max(x1, x);
      y0 = std::min(y0, y); y1 = std::max(y1, y);
    }
  }
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  double ystep = nice_step(y1 - y0, 6), xstep = nice_step(x1 - x0, 8);
  y0 = std::floor(y0 / ystep) * ystep;
  y1 = std::ceil(y1 / ystep) * ystep;

  const double W = 800, H = 480, L = 70, R = 20, T = 40, B = 50;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << W / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">" << title << "</text>\n";
  for (double y = y0; y <= y1 + ystep / 2; y += ystep) {
    svg << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << py(y) << "\" y2=\"" << py(y)
        << "\" stroke=\"#ddd\"/><text x=\"" << L - 6 << "\" y=\"" << py(y) + 4 << "\" text-anchor=\"end\">"
        << fmt_num(y) << "</text>\n";
  }
  for (double x = std::ceil(x0 / xstep) * xstep; x <= x1 + xstep / 2; x += xstep) {
    svg << "<line x1=\"" << px(x) << "\" x2=\"" << px(x) << "\" y1=\"" << T << "\" y2=\"" << H - B
        << "\" stroke=\"#eee\"/><text x=\"" << px(x) << "\" y=\"" << H - B + 18 << "\" text-anchor=\"middle\">"
        << fmt_num(x) << "</text>\n";
  }
  svg << "<text x=\"" << W / 2 << "\" y=\"" << H - 10 << "\" text-anchor=\"middle\">step</text>\n";
  svg << "<text x=\"16\" y=\"" << H / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " << H / 2
      << ")\">loss (nats/token)</text>\n";
  int legend = 0;
  for (const Series* s : {&train, &val}) {
    if (s->points.empty()) continue;
    svg << "<polyline fill=\"none\" stroke=\"" << s->color << "\" stroke-width=\"1.5\" points=\"";
    for (auto [x, y] : s->points) {
      if (std::isfinite(y)) svg << px(x) << ',' << py(y) << ' ';
    }
    svg << "\"/>\n";
    double ly = T + 10 + 18 * legend++;
    svg << "<line x1=\"" << W - R - 150 << "\" x2=\"" << W - R - 130 << "\" y1=\"" << ly << "\" y2=\"" << ly
        << "\" stroke=\"" << s->color << "\" stroke-width=\"2\"/><text x=\"" << W - R - 125 << "\" y=\"" << ly + 4
        << "\">" << s->name << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

void plot_metrics_file(const std::string& metrics_path, const std::string& svg_path) {
  std::string svg = loss_curve_svg(read_metrics(metrics_path), "trireme: " + metrics_path);
  io::write_file_atomic(svg_path, svg);
}

}  // namespace trireme::train
