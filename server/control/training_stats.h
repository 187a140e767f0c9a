// What the server counts about a job: rounds (sync) or applied pushes, samples trained
// (the epoch position), the last loss and test accuracy (with the version it was
// measured on), pushes by result, and the async staleness histogram. Thread-compatible:
// the core calls it under its mutex.
#ifndef OMNILEARN_SERVER_CONTROL_TRAINING_STATS_H_
#define OMNILEARN_SERVER_CONTROL_TRAINING_STATS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace omnilearn {
namespace server {

class TrainingStats {
 public:
  static constexpr size_t kStalenessBuckets = 64;  // the last one counts everything staler

  // A push was applied (or summed into a round): its samples and loss.
  void Trained(int64_t batch, double loss) {
    global_samples_ += static_cast<uint64_t>(batch);
    last_loss_ = loss;
  }
  void Round() { ++rounds_; }
  // `validation`: measured on validation data (a Keras program's), not on a test set.
  void Accuracy(double accuracy, uint64_t version, bool validation) {
    test_accuracy_ = accuracy;
    test_accuracy_version_ = version;
    accuracy_is_validation_ = validation;
  }
  void CountPush(const std::string& result) { ++pushes_by_result_[result]; }
  void CountStaleness(uint64_t versions) {
    ++staleness_counts_[versions < kStalenessBuckets ? versions : kStalenessBuckets - 1];
  }
  // From a checkpoint.
  void Restore(uint64_t global_samples, uint64_t rounds) {
    global_samples_ = global_samples;
    rounds_ = rounds;
  }

  uint64_t rounds() const { return rounds_; }
  uint64_t global_samples() const { return global_samples_; }
  double last_loss() const { return last_loss_; }
  const std::optional<double>& test_accuracy() const { return test_accuracy_; }
  uint64_t test_accuracy_version() const { return test_accuracy_version_; }
  bool accuracy_is_validation() const { return accuracy_is_validation_; }
  const std::map<std::string, uint64_t>& pushes_by_result() const { return pushes_by_result_; }
  const std::vector<uint64_t>& staleness_counts() const { return staleness_counts_; }

 private:
  uint64_t rounds_ = 0;
  uint64_t global_samples_ = 0;
  double last_loss_ = 0;
  std::optional<double> test_accuracy_;
  uint64_t test_accuracy_version_ = 0;
  bool accuracy_is_validation_ = false;
  std::map<std::string, uint64_t> pushes_by_result_;
  std::vector<uint64_t> staleness_counts_ = std::vector<uint64_t>(kStalenessBuckets, 0);
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_TRAINING_STATS_H_
