// A small Prometheus metrics core: a registry of counter, gauge and histogram
// families with labels, serialized in the text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/). Split like
// prometheus-cpp: this file knows nothing of HTTP; common/metrics_exposer.h serves it.
//
// Thread-safety: everything here is thread-safe. Metric objects returned by
// Family::Add stay valid as long as the registry, unless removed with Family::Remove.
// Registering an invalid name, or adding with the wrong number of label values, is a
// programmer error and aborts with a message (names are constants in the code).
#ifndef OMNILEARN_COMMON_METRICS_H_
#define OMNILEARN_COMMON_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace omnilearn {
namespace metrics {

// A value that only goes up (resets only when the process restarts).
class Counter {
 public:
  // Adds delta; a negative or NaN delta is ignored (a counter never goes down).
  void Increment(double delta = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Increment(double delta = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations into cumulative buckets with the given upper bounds
// (strictly increasing; +Inf is implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Data {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Data Collect() const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket, not cumulative
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

// `count` bounds start, start*factor, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// What every family has, whatever its metric type; the registry serializes through it.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }

 protected:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names)
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}

  const std::string name_, help_;
  const std::vector<std::string> label_names_;

 private:
  friend class Registry;
  // Appends HELP, TYPE and one line (or, for histograms, one block) per child.
  virtual void AppendTo(std::string& out) const = 0;
};

// A named metric with fixed label names; one child per distinct label-value tuple.
template <typename T>
class Family final : public FamilyBase {
 public:
  // The child for these label values (created on first use). Values are in the order
  // of the family's label names.
  T& Add(const std::vector<std::string>& label_values);
  // Drops the child (its series disappears from the next scrape); no-op when absent.
  void Remove(const std::vector<std::string>& label_values);
  // Drops every child whose first label value is `value` (all series of one worker).
  void RemoveFirstLabel(const std::string& value);

 private:
  friend class Registry;
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::function<std::unique_ptr<T>()> make)
      : FamilyBase(std::move(name), std::move(help), std::move(label_names)), make_(std::move(make)) {}

  void AppendTo(std::string& out) const override;

  const std::function<std::unique_ptr<T>()> make_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Names: [a-zA-Z_:][a-zA-Z0-9_:]*, unique in the registry. Label names:
  // [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__", and not "le" for histograms.
  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help, std::vector<std::string> label_names = {});
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names, std::vector<double> bounds);

  // Called before each Serialize, in order, to bring values up to date (gauges read
  // from a snapshot, process figures read from /proc). Hooks must not call Serialize.
  void AddCollectHook(std::function<void()> hook);

  // The whole registry in text format 0.0.4, families in registration order.
  std::string Serialize() const;

 private:
  // Validates the names (aborting on a bad one) and registers a new family.
  template <typename T>
  Family<T>& AddFamily(const std::string& name, const std::string& help, std::vector<std::string> label_names,
                       std::function<std::unique_ptr<T>()> make);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);  // in registration order
  mutable absl::Mutex hooks_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // serializes scrapes, so hooks run one at a time
  std::vector<std::function<void()>> hooks_ ABSL_GUARDED_BY(hooks_mu_);
};

// Text-format escaping: label values escape \ " and newline; HELP escapes \ and newline.
std::string EscapeLabelValue(const std::string& value);
std::string EscapeHelp(const std::string& help);
// A sample value as the format wants it: NaN, +Inf, -Inf, or the shortest exact decimal.
std::string FormatValue(double value);

// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_start_time_seconds, process_open_fds and process_max_fds, read from /proc at
// each scrape (as the Go and Java clients do).
void AddProcessMetrics(Registry& registry);

}  // namespace metrics
}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_METRICS_H_
