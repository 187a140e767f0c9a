#include "worker/trainer/trainer_metrics.h"

#include <vector>

namespace omnilearn {
namespace worker {

TrainerMetrics::TrainerMetrics(metrics::Registry* r, const std::string& name) : name_(name) {
  if (r == nullptr) return;
  const std::vector<double> seconds = metrics::ExponentialBuckets(0.001, 2, 16);
  step_ = &r->AddHistogram("omnilearn_trainer_step_seconds",
                           "Forward + loss + backward seconds per iteration, as reported (slowdown included).",
                           {"worker"}, seconds)
               .Add({name});
  comm_ =
      &r->AddHistogram("omnilearn_trainer_communication_seconds",
                       "Seconds per iteration spent pushing and pulling (barrier waits included).", {"worker"}, seconds)
           .Add({name});
  iterations_ = &r->AddCounter("omnilearn_trainer_iterations_total", "Iterations pushed.", {"worker"}).Add({name});
  samples_ = &r->AddCounter("omnilearn_trainer_samples_total", "Samples trained on.", {"worker"}).Add({name});
  oom_ =
      &r->AddCounter("omnilearn_trainer_out_of_memory_total", "Iterations that ran out of device memory.", {"worker"})
           .Add({name});
  overruns_ = &r->AddCounter("omnilearn_trainer_emulation_overruns_total",
                             "Emulated steps whose real compute took longer than their emulated time.", {"worker"})
                   .Add({name});
  rejoins_ = &r->AddCounter("omnilearn_trainer_rejoins_total", "Sessions joined again.", {"worker"}).Add({name});
  // Their series exist once a value does: absent before, not 0.
  batch_ = &r->AddGauge("omnilearn_trainer_batch_size", "Mini-batch size in use.", {"worker"});
  loss_ = &r->AddGauge("omnilearn_trainer_train_loss", "Loss of the last mini-batch.", {"worker"});
  accuracy_ = &r->AddGauge("omnilearn_trainer_test_accuracy", "Last test accuracy (0..1).", {"worker"});
}

void TrainerMetrics::Step(double compute_seconds, double loss) {
  if (step_ == nullptr) return;
  step_->Observe(compute_seconds);
  loss_->Add({name_}).Set(loss);
}

void TrainerMetrics::Communication(double seconds) {
  if (comm_ != nullptr) comm_->Observe(seconds);
}

void TrainerMetrics::Pushed(int64_t batch, bool out_of_memory) {
  if (iterations_ == nullptr) return;
  batch_->Add({name_}).Set(static_cast<double>(batch));
  iterations_->Increment();
  if (out_of_memory) {
    oom_->Increment();
  } else {
    samples_->Increment(static_cast<double>(batch));
  }
}

void TrainerMetrics::Iteration(int64_t batch, double step_seconds, double comm_seconds, double loss,
                               bool out_of_memory) {
  Pushed(batch, out_of_memory);
  Communication(comm_seconds);
  if (!out_of_memory) Step(step_seconds, loss);
}

void TrainerMetrics::Accuracy(double accuracy) {
  if (accuracy_ != nullptr) accuracy_->Add({name_}).Set(accuracy);
}

void TrainerMetrics::RaiseTo(metrics::Counter* c, uint64_t total) {
  if (c != nullptr && static_cast<double>(total) > c->Value()) c->Increment(static_cast<double>(total) - c->Value());
}

void TrainerMetrics::EmulationOverruns(uint64_t total) { RaiseTo(overruns_, total); }

void TrainerMetrics::Rejoins(uint64_t total) { RaiseTo(rejoins_, total); }

}  // namespace worker
}  // namespace omnilearn
