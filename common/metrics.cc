#include "common/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace omnilearn {
namespace metrics {
namespace {

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "metrics: %s\n", message.c_str());
  std::abort();
}

void AtomicAdd(std::atomic<double>& a, double delta) {
  double current = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(current, current + delta, std::memory_order_relaxed)) {
  }
}

bool ValidName(const std::string& s, bool allow_colon) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok =
        absl::ascii_isalpha(c) || c == '_' || (allow_colon && c == ':') || (i > 0 && absl::ascii_isdigit(c));
    if (!ok) return false;
  }
  return true;
}

std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&out, out.empty() ? "" : ",", names[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  if (!extra_name.empty()) absl::StrAppend(&out, out.empty() ? "" : ",", extra_name, "=\"", extra_value, "\"");
  return out.empty() ? "" : absl::StrCat("{", out, "}");
}

void Header(std::string& out, const std::string& name, const std::string& help, const char* type) {
  absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(help), "\n# TYPE ", name, " ", type, "\n");
}

}  // namespace

void Counter::Increment(double delta) {
  if (!(delta >= 0)) return;
  AtomicAdd(value_, delta);
}

void Gauge::Increment(double delta) { AtomicAdd(value_, delta); }

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && !(bounds_[i] > bounds_[i - 1]))) {
      Die("histogram bounds must be finite and strictly increasing");
    }
  }
}

void Histogram::Observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[bucket];
  sum_ += value;
}

Histogram::Data Histogram::Collect() const {
  Data d;
  d.bounds = bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    d.cumulative.push_back(running);
  }
  d.sum = sum_;
  d.count = running;
  return d;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

template <typename T>
T& Family<T>::Add(const std::vector<std::string>& label_values) {
  if (label_values.size() != label_names_.size()) {
    Die(absl::StrCat(name_, ": ", label_values.size(), " label values for ", label_names_.size(), " label names"));
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<T>& child = children_[label_values];
  if (!child) child = make_();
  return *child;
}

template <typename T>
void Family<T>::Remove(const std::vector<std::string>& label_values) {
  absl::MutexLock lock(&mu_);
  children_.erase(label_values);
}

template <typename T>
void Family<T>::RemoveFirstLabel(const std::string& value) {
  absl::MutexLock lock(&mu_);
  for (auto it = children_.begin(); it != children_.end();) {
    it = !it->first.empty() && it->first[0] == value ? children_.erase(it) : std::next(it);
  }
}

namespace {

template <typename T>
constexpr const char* TypeName();
template <>
constexpr const char* TypeName<Counter>() {
  return "counter";
}
template <>
constexpr const char* TypeName<Gauge>() {
  return "gauge";
}
template <>
constexpr const char* TypeName<Histogram>() {
  return "histogram";
}

// One child's sample lines: "name{labels} value" for counters and gauges.
template <typename T>
void AppendSamples(std::string& out, const std::string& name, const std::vector<std::string>& label_names,
                   const std::vector<std::string>& values, const T& metric) {
  absl::StrAppend(&out, name, LabelSet(label_names, values), " ", FormatValue(metric.Value()), "\n");
}

// Histograms: cumulative _bucket lines (le="+Inf" last), then _sum and _count.
template <>
void AppendSamples<Histogram>(std::string& out, const std::string& name, const std::vector<std::string>& label_names,
                              const std::vector<std::string>& values, const Histogram& h) {
  const Histogram::Data d = h.Collect();
  for (size_t i = 0; i <= d.bounds.size(); ++i) {
    const std::string le = i < d.bounds.size() ? FormatValue(d.bounds[i]) : "+Inf";
    absl::StrAppend(&out, name, "_bucket", LabelSet(label_names, values, "le", le), " ", d.cumulative[i], "\n");
  }
  absl::StrAppend(&out, name, "_sum", LabelSet(label_names, values), " ", FormatValue(d.sum), "\n");
  absl::StrAppend(&out, name, "_count", LabelSet(label_names, values), " ", d.count, "\n");
}

}  // namespace

template <typename T>
void Family<T>::AppendTo(std::string& out) const {
  Header(out, name_, help_, TypeName<T>());
  absl::MutexLock lock(&mu_);
  for (const auto& [values, child] : children_) AppendSamples(out, name_, label_names_, values, *child);
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

template <typename T>
Family<T>& Registry::AddFamily(const std::string& name, const std::string& help, std::vector<std::string> label_names,
                               std::function<std::unique_ptr<T>()> make) {
  if (!ValidName(name, /*allow_colon=*/true)) Die(absl::StrCat("invalid metric name '", name, "'"));
  for (const std::string& l : label_names) {
    const bool reserved = l.rfind("__", 0) == 0 || (std::is_same_v<T, Histogram> && l == "le");
    if (!ValidName(l, /*allow_colon=*/false) || reserved) Die(absl::StrCat(name, ": invalid label name '", l, "'"));
  }
  absl::MutexLock lock(&mu_);
  for (const auto& f : families_) {
    if (f->name() == name) Die(absl::StrCat("metric '", name, "' registered twice"));
  }
  auto* family = new Family<T>(name, help, std::move(label_names), std::move(make));
  families_.emplace_back(family);
  return *family;
}

Family<Counter>& Registry::AddCounter(const std::string& name, const std::string& help,
                                      std::vector<std::string> label_names) {
  return AddFamily<Counter>(name, help, std::move(label_names), [] { return std::make_unique<Counter>(); });
}

Family<Gauge>& Registry::AddGauge(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names) {
  return AddFamily<Gauge>(name, help, std::move(label_names), [] { return std::make_unique<Gauge>(); });
}

Family<Histogram>& Registry::AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<std::string> label_names, std::vector<double> bounds) {
  Histogram probe(bounds);  // validates the bounds now rather than at first use
  return AddFamily<Histogram>(name, help, std::move(label_names),
                              [bounds] { return std::make_unique<Histogram>(bounds); });
}

void Registry::AddCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&hooks_mu_);
  hooks_.push_back(std::move(hook));
}

std::string Registry::Serialize() const {
  absl::MutexLock hooks_lock(&hooks_mu_);
  for (const auto& hook : hooks_) hook();
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& f : families_) f->AppendTo(out);
  return out;
}

namespace {

// Backslash and newline are escaped in HELP text and label values; the double quote
// in label values only.
std::string Escape(const std::string& in, bool quote) {
  std::string out;
  for (char c : in) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) { return Escape(value, /*quote=*/true); }

std::string EscapeHelp(const std::string& help) { return Escape(help, /*quote=*/false); }

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) return absl::StrCat(static_cast<int64_t>(value));
  char buf[32];
  for (int precision = 6; precision <= 17; ++precision) {  // the shortest form that reads back exactly
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

namespace {

// Fields of /proc/self/stat after the command name: state is field 3, utime 14, stime 15,
// starttime 22, vsize 23, rss 24 (proc(5)).
std::vector<std::string> ProcSelfStat() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return {};
  return absl::StrSplit(line.substr(close + 2), ' ', absl::SkipEmpty());
}

double BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime") {
      in >> value;
      return value;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

double Field(const std::vector<std::string>& f, size_t field_number) {
  const size_t i = field_number - 3;  // the vector starts at field 3
  double v = 0;
  if (i < f.size() && absl::SimpleAtod(f[i], &v)) return v;
  return 0;
}

}  // namespace

void AddProcessMetrics(Registry& registry) {
  Counter& cpu =
      registry.AddCounter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.").Add({});
  Gauge& rss = registry.AddGauge("process_resident_memory_bytes", "Resident memory size in bytes.").Add({});
  Gauge& vsize = registry.AddGauge("process_virtual_memory_bytes", "Virtual memory size in bytes.").Add({});
  Gauge& start =
      registry.AddGauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.").Add({});
  Gauge& fds = registry.AddGauge("process_open_fds", "Number of open file descriptors.").Add({});
  Gauge& max_fds = registry.AddGauge("process_max_fds", "Maximum number of open file descriptors.").Add({});
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const std::vector<std::string> stat = ProcSelfStat();
  start.Set(BootTimeSeconds() + Field(stat, 22) / ticks);
  registry.AddCollectHook([&cpu, &rss, &vsize, &fds, &max_fds, ticks, page] {
    const std::vector<std::string> f = ProcSelfStat();
    const double cpu_now = (Field(f, 14) + Field(f, 15)) / ticks;
    cpu.Increment(cpu_now - cpu.Value());
    rss.Set(Field(f, 24) * page);
    vsize.Set(Field(f, 23));
    std::error_code ec;
    size_t open = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      ++open;
    }
    fds.Set(static_cast<double>(open));
    max_fds.Set(static_cast<double>(sysconf(_SC_OPEN_MAX)));
  });
}

}  // namespace metrics
}  // namespace omnilearn
