// What the C++ worker tells its user: one line per event, "[name] ...", to a sink
// (stdout, flushed, by default; tests collect the lines). The formats live here, so the
// training loop says what happened and not how it reads. Torch-free.
#ifndef OMNILEARN_WORKER_TRAINER_PROGRESS_REPORTER_H_
#define OMNILEARN_WORKER_TRAINER_PROGRESS_REPORTER_H_

#include <cstdint>
#include <functional>
#include <string>

namespace omnilearn {
namespace worker {

class ProgressReporter {
 public:
  using Sink = std::function<void(const std::string&)>;
  // An iteration line every `log_every` iterations (0: none). `sink` null: stdout.
  ProgressReporter(std::string name, int log_every, Sink sink = nullptr);

  // An event in the worker's own words.
  void Note(const std::string& text) const;
  // Iteration `it` (from 0) when it is one of every log_every.
  void Iteration(int64_t it, int64_t batch, double loss, double compute_seconds, uint64_t version) const;
  // A test accuracy at global epoch `epoch`: whole epochs as "epoch 3", evaluations
  // within one (`every_epochs` < 1) as "epoch 2.25".
  void Evaluation(double epoch, double every_epochs, double accuracy, uint64_t version) const;

 private:
  const std::string name_;
  const int log_every_;
  const Sink sink_;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_PROGRESS_REPORTER_H_
