// omnilearn._core: the C++ worker core (worker/client/session, the gRPC client with its
// zero-copy chunks, heartbeats and reconnects) for Python workers. The Python side hands
// it flat float32 buffers (numpy views of the model's flat storage): gradients are sent
// from them and the model is received straight into them. Network waits release the
// GIL. Errors raise omnilearn._core.Error(code, message), code being absl's (= gRPC's).
// It speaks the worker's terms (worker/client/ps_types.h: steps, replies, assignments); the
// proto stays inside the gRPC client.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/model_layout.h"
#include "common/safetensors.h"
#include "common/tensor_dtype.h"
#include "worker/client/ps_client.h"
#include "worker/client/ps_types.h"
#include "worker/client/session.h"
#include "worker/devices/emulated_device.h"
#include "worker/trainer/trainer_metrics.h"

namespace py = pybind11;

namespace omnilearn {
namespace {

PyObject* g_error = nullptr;  // omnilearn._core.Error

[[noreturn]] void Raise(const absl::Status& s) {
  py::tuple args = py::make_tuple(static_cast<int>(s.code()), std::string(s.message()));
  PyErr_SetObject(g_error, args.ptr());
  throw py::error_already_set();
}

// The session's clock in Python's time (time.monotonic and time.sleep, or a test's fake
// ones). Called from the training thread only (the heartbeat thread has the real clock);
// takes the GIL for each call. A sleep that raises (KeyboardInterrupt) ends the wait: the
// session sees `interrupted` and the binding re-raises the exception.
class PythonClock : public Clock {
 public:
  PythonClock(py::function now, py::function sleep, std::atomic<bool>* interrupted)
      : now_(std::move(now)), sleep_(std::move(sleep)), interrupted_(interrupted) {}
  ~PythonClock() override {
    py::gil_scoped_acquire gil;
    now_ = py::function();
    sleep_ = py::function();
    pending_.reset();
  }

  absl::Time Now() const override {
    py::gil_scoped_acquire gil;
    return absl::UnixEpoch() + absl::Seconds(now_().cast<double>());
  }
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return mu.AwaitWithTimeout(cond, deadline - Now());
  }
  void SleepFor(absl::Duration d) const override {
    py::gil_scoped_acquire gil;
    try {
      sleep_(absl::ToDoubleSeconds(d));
    } catch (py::error_already_set& e) {
      pending_.emplace(std::move(e));
      interrupted_->store(true);
    }
  }
  // Re-raises what a sleep raised, if anything (with the GIL held).
  void RethrowPending() {
    if (!pending_) return;
    py::error_already_set e = std::move(*pending_);
    pending_.reset();
    interrupted_->store(false);
    throw e;
  }

 private:
  py::function now_, sleep_;
  std::atomic<bool>* interrupted_;
  mutable std::optional<py::error_already_set> pending_;
};

// A 1-D float32 buffer (numpy array, memoryview...) as a span; None as an empty one.
py::buffer_info Request(const py::object& o, bool writable, const char* what) {
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(o).request(writable);
  if (info.format != py::format_descriptor<float>::format() || info.ndim != 1 ||
      (info.size > 1 && info.strides[0] != sizeof(float))) {
    throw py::value_error(absl::StrCat(what, " must be a contiguous 1-D float32 buffer"));
  }
  return info;
}

class Core {
 public:
  Core(const std::string& target,
       const std::vector<std::tuple<std::string, std::vector<int64_t>, bool, std::string>>& tensors,
       worker::WorkerInfo info, worker::ClientOptions client_options, double reconnect_timeout, double connect_timeout,
       std::string server_hint, py::function now, py::function sleep, py::function log)
      : clock_(std::move(now), std::move(sleep), &interrupted_), log_(std::move(log)) {
    std::vector<TensorSpec> specs;
    for (const auto& [name, shape, buffer, dtype] : tensors) specs.push_back(TensorSpec{name, shape, buffer, dtype});
    absl::StatusOr<ModelLayout> layout = ModelLayout::Create(std::move(specs));
    if (!layout.ok()) Raise(layout.status());
    worker::SessionOptions so;
    so.worker = std::move(info);
    so.reconnect_timeout = absl::Seconds(reconnect_timeout);
    so.connect_timeout = absl::Seconds(connect_timeout);
    so.server_hint = std::move(server_hint);
    so.clock = &clock_;
    so.heartbeat_clock = Clock::Real();
    so.interrupted = &interrupted_;
    so.log = [this](const std::string& line) {
      py::gil_scoped_acquire gil;
      try {
        log_(line);
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("omnilearn worker log");
      }
    };
    absl::StatusOr<std::unique_ptr<worker::PsClient>> client = worker::MakeGrpcPsClient(target, client_options);
    if (!client.ok()) Raise(client.status());
    client_ = std::move(*client);
    total_ = layout->total_elements();
    session_ = std::make_unique<worker::Session>(client_.get(), std::move(*layout), std::move(so));
  }

  ~Core() {
    py::gil_scoped_release nogil;  // the heartbeat thread may be in a call
    push_.reset();
    session_.reset();
    client_.reset();
  }

  // Ends the heartbeats (no call to the server; see leave). The session's state stays
  // readable.
  void Close() {
    py::gil_scoped_release nogil;
    session_->StopHeartbeats();
  }

  void Join(const py::object& weights) {
    py::buffer_info w = ModelBuffer(weights, false, "weights");
    absl::Status s;
    {
      py::gil_scoped_release nogil;
      s = session()->Join(ConstSpan(w));
    }
    Done(s);
  }

  bool Pull(const py::object& weights) {
    py::buffer_info w = ModelBuffer(weights, true, "weights");
    absl::StatusOr<bool> changed;
    {
      py::gil_scoped_release nogil;
      changed = session()->Pull(MutableSpan(w));
    }
    Done(changed.status());
    return *changed;
  }

  // (outcome, reply, changed): outcome "replied", "rejoined" or "stop"; reply the
  // PushReply (when replied or stopped by a reply, else None); changed whether the model
  // moved.
  py::tuple PushPull(const worker::StepReport& step, const py::object& gradient, const py::object& weights) {
    std::optional<py::buffer_info> g = Gradient(gradient);
    py::buffer_info w = ModelBuffer(weights, true, "weights");
    worker::PushReply reply;
    bool changed = false;
    absl::StatusOr<worker::PushOutcome> outcome;
    {
      py::gil_scoped_release nogil;
      // Opened and ended at once, as a C++ worker's whole push is: its timeline line begins here.
      std::unique_ptr<worker::StreamedPush> whole = session()->BeginPushPull(step, GradientSpan(g), 0);
      outcome = session()->FinishPushPull(std::move(whole), step.end, MutableSpan(w), &reply, &changed);
    }
    Done(outcome.status());
    return py::make_tuple(OutcomeName(*outcome), ReplyOf(*outcome, std::move(reply)), changed);
  }

  // Opens a push whose gradient leaves during backward (Session::BeginPushPull), from
  // `gradient` (kept referenced until the push ends); a push still open is cancelled
  // first. True when it streams (else finish_push sends it whole).
  bool BeginPush(const worker::StepReport& step, const py::object& gradient, int64_t bucket_bytes) {
    CancelPush();
    py::buffer_info g = ModelBuffer(gradient, false, "gradient");
    open_gradient_ = gradient;
    py::gil_scoped_release nogil;
    push_ = session()->BeginPushPull(step, ConstSpan(g), bucket_bytes);
    return push_->streaming();
  }
  // Tensor i's gradient is final (autograd's hook, the GIL held: it only queues).
  void Ready(int i) {
    if (push_ != nullptr) push_->Ready(i);
  }
  // Gives the open push up: the server changes nothing.
  void CancelPush() {
    if (push_ == nullptr) return;
    {
      py::gil_scoped_release nogil;  // ends the stream's writer thread
      push_.reset();
    }
    open_gradient_ = py::none();
  }
  // Ends the open push as push_pull does: (outcome, reply, changed). `early`: returns with
  // the reply while the model still arrives into `weights` (kept referenced meanwhile);
  // await_tensors / await_model wait for it (Session::FinishPushPull).
  py::tuple FinishPush(const worker::StepEnd& end, const py::object& weights, bool early) {
    if (push_ == nullptr) throw py::value_error("finish_push without begin_push");
    py::buffer_info w = ModelBuffer(weights, true, "weights");
    worker::PushReply reply;
    bool changed = false;
    absl::StatusOr<worker::PushOutcome> outcome;
    {
      py::gil_scoped_release nogil;
      outcome = session()->FinishPushPull(std::move(push_), end, MutableSpan(w), &reply, &changed, early);
    }
    open_gradient_ = py::none();
    arriving_weights_ = weights;
    Done(outcome.status());
    return py::make_tuple(OutcomeName(*outcome), ReplyOf(*outcome, std::move(reply)), changed);
  }

  // Waits (the GIL released) until these tensors of a model arriving are in place.
  void AwaitTensors(const std::vector<int>& tensors) {
    py::gil_scoped_release nogil;
    for (int t : tensors) session()->AwaitTensor(t);
  }
  // Waits for the rest of a model arriving (pulling it whole when its stream broke).
  void AwaitModel() {
    absl::Status s;
    {
      py::gil_scoped_release nogil;
      s = session()->AwaitModel();
    }
    arriving_weights_ = py::none();
    Done(s);
  }

  // A push without the model back (reports): (outcome, reply).
  py::tuple Push(const worker::StepReport& step, const py::object& gradient, const py::object& weights) {
    std::optional<py::buffer_info> g = Gradient(gradient);
    py::buffer_info w = ModelBuffer(weights, false, "weights");
    worker::PushReply reply;
    absl::StatusOr<worker::PushOutcome> outcome;
    {
      py::gil_scoped_release nogil;
      outcome = session()->Push(step, GradientSpan(g), ConstSpan(w), &reply);
    }
    Done(outcome.status());
    return py::make_tuple(OutcomeName(*outcome), ReplyOf(*outcome, std::move(reply)));
  }

  // A worker with no samples (the `idle` property): one wait with the server, then its
  // model into `weights`: (outcome, reply, changed) as push_pull.
  py::tuple Idle(const py::object& weights) {
    py::buffer_info w = ModelBuffer(weights, true, "weights");
    worker::PushReply reply;
    bool changed = false;
    absl::StatusOr<worker::PushOutcome> outcome;
    {
      py::gil_scoped_release nogil;
      outcome = session()->Idle(MutableSpan(w), &reply, &changed);
    }
    Done(outcome.status());
    return py::make_tuple(OutcomeName(*outcome), ReplyOf(*outcome, std::move(reply)), changed);
  }

  void Leave(bool finished) {
    py::gil_scoped_release nogil;
    session_->Leave(finished);
  }

  // The assigned samples of the next mini-batch: (ids as native int64 bytes, epoch of the
  // first span), or empty bytes and -1 when the server assigns none. Bytes, not a numpy
  // array: pybind11 before 2.12 builds wrong int64 arrays under numpy 2, and the core is
  // built with whichever pybind11 the machine has (Debian 12's is 2.10).
  py::tuple Samples() {
    const worker::Assignment& spans = session()->samples();
    std::string ids(CountSamples(spans) * sizeof(int64_t), '\0');
    char* out = ids.data();
    for (const SampleSpan& s : spans) {
      for (uint64_t id : s.ids) {
        const int64_t v = static_cast<int64_t>(id);
        std::memcpy(out, &v, sizeof(v));
        out += sizeof(v);
      }
    }
    return py::make_tuple(py::bytes(ids), spans.empty() ? -1 : static_cast<int64_t>(spans[0].epoch));
  }

  worker::Session* session() { return session_.get(); }

 private:
  // A whole model's buffer (kept while its span is used).
  py::buffer_info ModelBuffer(const py::object& o, bool writable, const char* what) const {
    py::buffer_info b = Request(o, writable, what);
    if (b.size != total_) {
      throw py::value_error(absl::StrCat("a model buffer of ", b.size, " values; the model has ", total_));
    }
    return b;
  }
  static absl::Span<float> MutableSpan(const py::buffer_info& b) {
    return absl::MakeSpan(static_cast<float*>(b.ptr), b.size);
  }
  static absl::Span<const float> ConstSpan(const py::buffer_info& b) {
    return absl::MakeConstSpan(static_cast<const float*>(b.ptr), b.size);
  }
  std::optional<py::buffer_info> Gradient(const py::object& gradient) const {
    if (gradient.is_none()) return std::nullopt;
    return ModelBuffer(gradient, false, "gradient");
  }
  static absl::Span<const float> GradientSpan(const std::optional<py::buffer_info>& g) {
    return g ? ConstSpan(*g) : absl::Span<const float>();
  }
  // The reply the server sent, or None for an outcome without one (a rejoin, a stop seen
  // before any call).
  static py::object ReplyOf(worker::PushOutcome o, worker::PushReply reply) {
    if (o == worker::PushOutcome::kRejoined) return py::none();
    if (o == worker::PushOutcome::kStop && reply.action != worker::Action::kStop) return py::none();
    return py::cast(std::move(reply));
  }
  static const char* OutcomeName(worker::PushOutcome o) {
    switch (o) {
      case worker::PushOutcome::kReplied:
        return "replied";
      case worker::PushOutcome::kRejoined:
        return "rejoined";
      case worker::PushOutcome::kStop:
        return "stop";
    }
    return "?";
  }
  // Raises for a failed call: what a sleep raised (Ctrl-C) first, else Error(code, message).
  void Done(const absl::Status& s) {
    clock_.RethrowPending();
    if (!s.ok()) Raise(s);
  }

  std::atomic<bool> interrupted_{false};
  PythonClock clock_;
  py::function log_;
  int64_t total_ = 0;
  std::unique_ptr<worker::PsClient> client_;
  std::unique_ptr<worker::Session> session_;
  std::unique_ptr<worker::StreamedPush> push_;  // the push begun, until finished or cancelled
  py::object open_gradient_ = py::none();       // its gradient's owner, kept alive meanwhile
  py::object arriving_weights_ = py::none();    // the weights a model may still arrive into
};

}  // namespace
}  // namespace omnilearn

namespace omnilearn {
namespace {

const char* ActionName(worker::Action a) {
  switch (a) {
    case worker::Action::kContinue:
      return "continue";
    case worker::Action::kRejoin:
      return "rejoin";
    case worker::Action::kStop:
      return "stop";
  }
  return "?";
}

// The worker's terms as Python classes: a step to push, its end, the server's reply.
// The C++ worker's emulated device (worker/devices/emulated_device.h), so both languages pace
// steps by one rule: omnilearn.emulation wraps it. Pace runs on the caller's now/sleep.
void BindEmulatedDevice(py::module_& m) {
  using worker::EmulatedDevice;
  py::class_<EmulatedDevice>(m, "EmulatedDevice")
      .def(py::init([](const std::string& text, uint64_t seed) {
             absl::StatusOr<EmulatedDevice> d = EmulatedDevice::Parse(text, seed);
             if (!d.ok()) throw py::value_error(std::string(d.status().message()));
             return std::make_unique<EmulatedDevice>(*std::move(d));
           }),
           py::arg("text"), py::arg("seed"))
      .def(
          "at",
          [](const EmulatedDevice& d, double epoch) {
            const worker::DeviceProfile& p = d.At(epoch);
            return py::make_tuple(p.fixed_ms, p.ms_per_sample, p.jitter);
          },
          py::arg("epoch"))
      .def("step_seconds", &EmulatedDevice::StepSeconds, py::arg("batch"), py::arg("epoch"))
      .def(
          "pace",
          [](EmulatedDevice& d, double started, int64_t batch, double epoch, py::function now, py::function sleep) {
            std::atomic<bool> interrupted{false};
            PythonClock clock(std::move(now), std::move(sleep), &interrupted);
            const worker::PacedStep s = d.Pace(clock, absl::UnixEpoch() + absl::Seconds(started), batch, epoch);
            clock.RethrowPending();
            return py::make_tuple(s.emulated_seconds, s.real_seconds, s.overrun);
          },
          py::arg("started"), py::arg("batch"), py::arg("epoch"), py::arg("now"), py::arg("sleep"));
}

// A Python worker's Prometheus series: the C++ worker's own (worker/trainer/trainer_metrics.h) in
// a registry of their own; omnilearn.metrics serves their exposition.
class WorkerMetrics {
 public:
  explicit WorkerMetrics(const std::string& name) : series_(&registry_, name) {}
  worker::TrainerMetrics& series() { return series_; }
  std::string Exposition() const { return registry_.Serialize(); }

 private:
  metrics::Registry registry_;
  worker::TrainerMetrics series_;
};

void BindWorkerMetrics(py::module_& m) {
  py::class_<WorkerMetrics>(m, "WorkerMetrics")
      .def(py::init<const std::string&>(), py::arg("name"))
      .def(
          "step", [](WorkerMetrics& w, double seconds, double loss) { w.series().Step(seconds, loss); },
          py::arg("compute_seconds"), py::arg("loss"))
      .def(
          "communication", [](WorkerMetrics& w, double seconds) { w.series().Communication(seconds); },
          py::arg("seconds"))
      .def(
          "pushed", [](WorkerMetrics& w, int64_t batch, bool oom) { w.series().Pushed(batch, oom); }, py::arg("batch"),
          py::arg("out_of_memory"))
      .def(
          "accuracy", [](WorkerMetrics& w, double a) { w.series().Accuracy(a); }, py::arg("accuracy"))
      .def(
          "emulation_overruns", [](WorkerMetrics& w, uint64_t n) { w.series().EmulationOverruns(n); }, py::arg("total"))
      .def(
          "rejoins", [](WorkerMetrics& w, uint64_t n) { w.series().Rejoins(n); }, py::arg("total"))
      .def("exposition", &WorkerMetrics::Exposition);
}

// A C-contiguous buffer's bytes (a numpy array's data), or ValueError.
absl::string_view ContiguousBytes(const py::buffer_info& info, const std::string& name) {
  py::ssize_t stride = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != stride) {
      throw py::value_error("tensor '" + name + "' is not C-contiguous");
    }
    stride *= info.shape[d];
  }
  return absl::string_view(static_cast<const char*>(info.ptr), static_cast<size_t>(info.size * info.itemsize));
}

// Safetensors files through common/safetensors (one reader and writer, with its checks and
// checksum) and the one dtype table, for omnilearn.tensor_files.
void BindTensorFiles(py::module_& m) {
  m.def("tensor_dtypes", [] {
    std::vector<std::tuple<std::string, int, std::string>> out;
    for (const TensorDtype& t : kTensorDtypes) out.emplace_back(t.name, t.bytes, t.framework_name);
    return out;
  });
  m.def(
      "read_safetensors",
      [](const std::string& path) {
        absl::StatusOr<RawSafetensorsFile> f;
        {
          py::gil_scoped_release unlocked;
          f = ReadRawSafetensors(path);
        }
        if (!f.ok()) Raise(f.status());
        std::vector<std::tuple<std::string, std::string, std::vector<int64_t>, int64_t, int64_t>> entries;
        for (const SafetensorsEntry& e : f->tensors) {
          entries.emplace_back(e.name, e.dtype, e.shape, e.byte_offset, e.elements * TensorDtypeBytes(e.dtype));
        }
        return py::make_tuple(py::bytearray(f->data.data(), f->data.size()), entries, f->metadata);
      },
      py::arg("path"));
  m.def(
      "write_safetensors",
      [](const std::string& path, const std::vector<std::tuple<std::string, std::string, py::buffer>>& tensors,
         const std::map<std::string, std::string>& metadata) {
        std::vector<py::buffer_info> buffers;  // held (and the arrays with them) during the write
        std::vector<RawTensorView> views;
        for (const auto& [name, dtype, buffer] : tensors) {
          buffers.push_back(buffer.request());
          const py::buffer_info& b = buffers.back();
          views.push_back(
              {name, std::vector<int64_t>(b.shape.begin(), b.shape.end()), dtype, ContiguousBytes(b, name)});
        }
        absl::Status s;
        {
          py::gil_scoped_release unlocked;
          s = WriteRawSafetensors(path, views, metadata);
        }
        if (!s.ok()) Raise(s);
      },
      py::arg("path"), py::arg("tensors"), py::arg("metadata"));
}

void BindTypes(py::module_& m) {
  using worker::PushReply;
  using worker::StepEnd;
  using worker::StepReport;
  py::class_<StepEnd>(m, "StepEnd", "What a step came to (a streamed push's trailer).")
      .def(py::init([](double compute_seconds, double train_loss, std::optional<double> test_accuracy,
                       bool accuracy_is_validation, std::vector<double> group_lr,
                       std::optional<uint64_t> emulation_overruns) {
             return StepEnd{compute_seconds,        train_loss,          test_accuracy,
                            accuracy_is_validation, std::move(group_lr), emulation_overruns};
           }),
           py::arg("compute_seconds") = 0.0, py::arg("train_loss") = 0.0, py::arg("test_accuracy") = py::none(),
           py::arg("accuracy_is_validation") = false, py::arg("group_lr") = std::vector<double>{},
           py::arg("emulation_overruns") = py::none())
      .def_readwrite("group_lr", &StepEnd::group_lr)
      .def_readwrite("compute_seconds", &StepEnd::compute_seconds)
      .def_readwrite("train_loss", &StepEnd::train_loss)
      .def_readwrite("test_accuracy", &StepEnd::test_accuracy);
  py::class_<StepReport>(m, "StepReport", "A step as pushed with its gradient.")
      .def(py::init([](int64_t batch_size, double communication_seconds, StepEnd end, bool out_of_memory,
                       bool report_only, uint64_t emulation_overruns) {
             StepReport r{batch_size, communication_seconds, end, out_of_memory, report_only};
             r.emulation_overruns = emulation_overruns;
             return r;
           }),
           py::arg("batch_size") = 0, py::arg("communication_seconds") = 0.0, py::arg("end") = StepEnd{},
           py::arg("out_of_memory") = false, py::arg("report_only") = false, py::arg("emulation_overruns") = 0)
      .def_readwrite("batch_size", &StepReport::batch_size)
      .def_readwrite("communication_seconds", &StepReport::communication_seconds)
      .def_readwrite("end", &StepReport::end)
      .def_readwrite("out_of_memory", &StepReport::out_of_memory)
      .def_readwrite("report_only", &StepReport::report_only)
      .def_readwrite("emulation_overruns", &StepReport::emulation_overruns);
  py::class_<PushReply>(m, "PushReply", "The server's answer to a push.")
      .def_property_readonly("action", [](const PushReply& r) { return ActionName(r.action); })
      .def_readonly("applied", &PushReply::applied)
      .def_readonly("message", &PushReply::message)
      .def_readonly("model_version", &PushReply::model_version)
      .def_readonly("next_batch_size", &PushReply::next_batch_size)
      .def_readonly("global_samples", &PushReply::global_samples)
      .def_readonly("idle", &PushReply::idle)
      .def("__repr__", [](const PushReply& r) {
        return absl::StrCat("PushReply(action=", ActionName(r.action), ", applied=", r.applied ? "True" : "False",
                            ", model_version=", r.model_version, ", next_batch_size=", r.next_batch_size,
                            ", global_samples=", r.global_samples, ")");
      });
}

// omnilearn.optim's description of a torch.optim object (a dict; None: the job's optimizer).
std::optional<worker::OptimizerChoice> OptimizerChoiceOf(const py::object& spec) {
  if (spec.is_none()) return std::nullopt;
  const py::dict d = spec.cast<py::dict>();
  worker::OptimizerChoice o;
  o.kind = d["kind"].cast<std::string>();
  o.lr = d["lr"].cast<double>();
  o.momentum = d["momentum"].cast<double>();
  o.weight_decay = d["weight_decay"].cast<double>();
  o.beta1 = d["beta1"].cast<double>();
  o.beta2 = d["beta2"].cast<double>();
  o.eps = d["eps"].cast<double>();
  using Options = std::map<std::string, double>;
  if (d.contains("options")) o.options = d["options"].cast<Options>();
  for (const py::handle g : d["groups"].cast<py::list>()) {
    const py::dict group = g.cast<py::dict>();
    o.groups.push_back({group["tensors"].cast<std::vector<std::string>>(), group["lr"].cast<double>(),
                        group["weight_decay"].cast<double>(),
                        group.contains("options") ? group["options"].cast<Options>() : Options{}});
  }
  return o;
}

worker::WorkerInfo WorkerInfoOf(const std::string& name, const std::string& host, const std::string& device,
                                int64_t max_batch_size, uint64_t dataset_size, double epochs,
                                const py::object& optimizer) {
  if (device != "cpu" && device != "cuda") throw py::value_error("device must be 'cpu' or 'cuda'");
  return worker::WorkerInfo{name,
                            host,
                            device == "cuda" ? worker::DeviceKind::kCuda : worker::DeviceKind::kCpu,
                            max_batch_size,
                            dataset_size,
                            worker::JobSamples(epochs, dataset_size),
                            OptimizerChoiceOf(optimizer),
                            /*takes_local_steps=*/true};  // omnilearn.session splits a batch into local steps
}

// The Python worker's Core, from omnilearn.session's keyword arguments.
std::unique_ptr<Core> MakeCore(
    const std::string& target,
    const std::vector<std::tuple<std::string, std::vector<int64_t>, bool, std::string>>& tensors,
    const std::string& name, const std::string& host, const std::string& device, int64_t max_batch_size,
    uint64_t dataset_size, double rpc_timeout, double reconnect_timeout, double connect_timeout,
    const std::string& server_hint, const std::string& auth_token, const std::string& tls_ca,
    const std::string& tls_cert, const std::string& tls_key, const std::string& tls_server_name, py::function now,
    py::function sleep, py::function log, double epochs, const py::object& optimizer) {
  worker::ClientOptions o;
  o.rpc_timeout = absl::Seconds(rpc_timeout);
  o.auth_token = auth_token;
  o.tls_ca = tls_ca;
  o.tls_cert = tls_cert;
  o.tls_key = tls_key;
  o.tls_server_name = tls_server_name;
  return std::make_unique<Core>(
      target, tensors, WorkerInfoOf(name, host, device, max_batch_size, dataset_size, epochs, optimizer), o,
      reconnect_timeout, connect_timeout, server_hint, std::move(now), std::move(sleep), std::move(log));
}

// The class omnilearn.session drives: its constructor, calls and properties.
void BindCore(py::module_& m) {
  py::class_<Core>(m, "Core")
      .def(py::init(&MakeCore), py::kw_only(), py::arg("target"), py::arg("tensors"), py::arg("name"), py::arg("host"),
           py::arg("device"), py::arg("max_batch_size"), py::arg("dataset_size"), py::arg("rpc_timeout"),
           py::arg("reconnect_timeout"), py::arg("connect_timeout"), py::arg("server_hint"), py::arg("auth_token"),
           py::arg("tls_ca"), py::arg("tls_cert"), py::arg("tls_key"), py::arg("tls_server_name"), py::arg("now"),
           py::arg("sleep"), py::arg("log"), py::arg("epochs") = 0.0, py::arg("optimizer") = py::none())
      .def("join", &Core::Join, py::arg("weights"))
      .def("idle", &Core::Idle, py::arg("weights"))
      .def("pull", &Core::Pull, py::arg("weights"))
      .def("push_pull", &Core::PushPull, py::arg("step"), py::arg("gradient"), py::arg("weights"))
      .def("push", &Core::Push, py::arg("step"), py::arg("gradient"), py::arg("weights"))
      .def("begin_push", &Core::BeginPush, py::arg("step"), py::arg("gradient"), py::arg("bucket_bytes"))
      .def("ready", &Core::Ready, py::arg("tensor"))
      .def("cancel_push", &Core::CancelPush)
      .def("finish_push", &Core::FinishPush, py::arg("end"), py::arg("weights"), py::arg("early") = false)
      .def("await_tensors", &Core::AwaitTensors, py::arg("tensors"))
      .def("await_model", &Core::AwaitModel)
      .def("leave", &Core::Leave, py::arg("finished"))
      .def("close", &Core::Close)
      .def("samples", &Core::Samples)
      .def_property_readonly("worker_id", [](Core& c) { return c.session()->worker_id(); })
      .def_property_readonly("is_idle", [](Core& c) { return c.session()->idle(); })
      .def_property_readonly("batch", [](Core& c) { return c.session()->batch(); })
      .def_property_readonly("model_version", [](Core& c) { return c.session()->model_version(); })
      .def_property_readonly("global_samples", [](Core& c) { return c.session()->global_samples(); })
      .def_property_readonly("mode", [](Core& c) { return worker::ModeName(c.session()->mode()); })
      .def_property_readonly("local_steps", [](Core& c) { return c.session()->local_steps(); })
      .def_property_readonly("local_batch", [](Core& c) { return c.session()->local_batch(); })
      .def_property_readonly("stop_requested", [](Core& c) { return c.session()->stop_requested(); })
      .def_property_readonly("rejoins", [](Core& c) { return c.session()->rejoins(); });
}

}  // namespace
}  // namespace omnilearn

PYBIND11_MODULE(_core, m) {
  m.doc() = "The C++ worker core of OmniLearn's Python workers (see omnilearn.worker).";
  omnilearn::g_error = PyErr_NewException("omnilearn._core.Error", PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::handle(omnilearn::g_error);
  omnilearn::BindTypes(m);
  omnilearn::BindEmulatedDevice(m);
  omnilearn::BindWorkerMetrics(m);
  omnilearn::BindTensorFiles(m);
  m.def("training_done", &omnilearn::worker::TrainingDone, py::arg("global_samples"), py::arg("epochs"),
        py::arg("dataset_size"), py::arg("iterations"), py::arg("max_iterations"));
  omnilearn::BindCore(m);
}
