// Accuracy and macro-F1 of a classifier's predictions: F1 per label (2 precision recall /
// (precision + recall), 0 when the label has no true positive) averaged over the labels that
// occur among the true labels or the predictions (scikit-learn's f1_score(average="macro")).
#pragma once

#include <vector>

namespace trireme::train {

struct ClassificationMetrics {
  double accuracy = 0, macro_f1 = 0;
};

// truth and predicted: label indices in [0, n_labels), the same length (> 0).
ClassificationMetrics classification_metrics(const std::vector<int>& truth, const std::vector<int>& predicted,
                                             int n_labels);

}  // namespace trireme::train
