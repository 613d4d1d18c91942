// Loss curves as SVG: training loss (and validation loss where measured) against step.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trireme::train {

// Renders rows of metrics (as read_metrics returns them) into a standalone SVG document.
std::string loss_curve_svg(const std::vector<nlohmann::json>& rows, const std::string& title);
// Reads metrics_path and writes svg_path.
void plot_metrics_file(const std::string& metrics_path, const std::string& svg_path);

}  // namespace trireme::train
