// Accuracy and macro-F1 (see classification_metrics.h).
#include "trireme/train/classification_metrics.h"

#include "trireme/core/error.h"

namespace trireme::train {

ClassificationMetrics classification_metrics(const std::vector<int>& truth, const std::vector<int>& predicted,
                                             int n_labels) {
  TRIREME_CHECK(!truth.empty() && truth.size() == predicted.size(), "classification metrics: ", truth.size(),
                " true labels and ", predicted.size(), " predictions");
  std::vector<double> tp(size_t(n_labels), 0), fp(size_t(n_labels), 0), fn(size_t(n_labels), 0);
  double correct = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    const int t = truth[i], p = predicted[i];
    TRIREME_CHECK(t >= 0 && t < n_labels && p >= 0 && p < n_labels, "classification metrics: label out of range");
    if (t == p) {
      ++correct, ++tp[size_t(t)];
    } else {
      ++fp[size_t(p)], ++fn[size_t(t)];
    }
  }
  ClassificationMetrics m;
  m.accuracy = correct / double(truth.size());
  int present = 0;
  double sum = 0;
  for (size_t l = 0; l < size_t(n_labels); ++l) {
    if (tp[l] + fp[l] + fn[l] == 0) continue;
    ++present;
    sum += 2 * tp[l] / (2 * tp[l] + fp[l] + fn[l]);  // = 2PR / (P + R), and 0 without true positives
  }
  m.macro_f1 = present ? sum / present : 0;
  return m;
}

}  // namespace trireme::train
