#include "server/rpc/admission.h"

#include <atomic>
#include <thread>

#include "catch2/catch.hpp"
#include "common/await_state.h"
#include "common/clock.h"

namespace omnilearn {
namespace server {
namespace {

ServiceLimits Limits() {
  ServiceLimits l;
  l.stream_idle_timeout = absl::Seconds(60);
  l.max_join_uploads = 2;
  return l;
}

TEST_CASE("one upload slot per session", "[admission]") {
  FakeClock clock;
  Admission a(&clock, Limits());
  REQUIRE(a.BeginUpload(7));
  REQUIRE_FALSE(a.BeginUpload(7));
  REQUIRE(a.BeginUpload(8));  // another session's slot
  REQUIRE(a.UploadInFlight(7));
  a.EndUpload(7);
  REQUIRE_FALSE(a.UploadInFlight(7));
  REQUIRE(a.BeginUpload(7));
}

TEST_CASE("a resend has a slot of its own beside the session's upload, one at a time", "[admission]") {
  FakeClock clock;
  Admission a(&clock, Limits());
  REQUIRE(a.BeginUpload(7));  // the first sending, its connection lost unnoticed
  REQUIRE(a.BeginUpload(7, /*resend=*/true));
  REQUIRE_FALSE(a.BeginUpload(7, /*resend=*/true));
  REQUIRE_FALSE(a.BeginUpload(7));
  a.EndUpload(7);
  REQUIRE(a.UploadInFlight(7));  // the resend still
  a.EndUpload(7, /*resend=*/true);
  REQUIRE_FALSE(a.UploadInFlight(7));
  REQUIRE(a.BeginUpload(7, /*resend=*/true));
}

TEST_CASE("join uploads wait for their turn until their deadline, on the clock", "[admission]") {
  FakeClock clock;
  Admission a(&clock, Limits());
  REQUIRE(a.BeginJoinUpload(clock.Now()));
  REQUIRE(a.BeginJoinUpload(clock.Now()));
  // Both slots taken: a deadline already passed gives up at once.
  REQUIRE_FALSE(a.BeginJoinUpload(clock.Now()));
  // A waiter gets the slot a finished upload frees.
  std::atomic<int> got{-1};
  std::thread waiter([&] { got = a.BeginJoinUpload(clock.Now() + absl::Minutes(1)) ? 1 : 0; });
  a.EndJoinUpload();
  waiter.join();
  REQUIRE(got == 1);
  // A waiter whose deadline passes on the clock gives up.
  got = -1;
  const absl::Time deadline = clock.Now() + absl::Seconds(10);
  std::thread late([&] { got = a.BeginJoinUpload(deadline) ? 1 : 0; });
  clock.Advance(absl::Seconds(11));
  late.join();
  REQUIRE(got == 0);
}

struct Watchdog {
  explicit Watchdog(Admission* a) : a(a), thread([a] { a->CancelIdleStreamsUntilStopped(); }) {}
  ~Watchdog() {
    a->Stop();
    thread.join();
  }
  Admission* a;
  std::thread thread;
};

TEST_CASE("a stream idle for the timeout is cancelled once; touched or unwatched ones are not", "[admission]") {
  FakeClock clock;
  Admission a(&clock, Limits());
  Watchdog dog(&a);
  std::atomic<int> idle{0}, busy{0}, gone{0};
  const Admission::StreamId s_idle = a.Watch([&] { ++idle; });
  const Admission::StreamId s_busy = a.Watch([&] { ++busy; });
  const Admission::StreamId s_gone = a.Watch([&] { ++gone; });
  clock.Advance(absl::Seconds(40));
  a.Touch(s_busy);
  a.Unwatch(s_gone);                 // handed to the core: no longer idle, however long it takes
  clock.Advance(absl::Seconds(30));  // 70 s since s_idle's last message, 30 s since s_busy's
  REQUIRE(AwaitState([&] { return idle.load() == 1; }));
  clock.Advance(absl::Seconds(40));  // 70 s since s_busy's
  REQUIRE(AwaitState([&] { return busy.load() == 1; }));
  // A cancelled stream is not re-armed by a late message, nor cancelled twice: a probe
  // watched after them is cancelled in a later pass, which would have seen them again.
  a.Touch(s_idle);
  clock.Advance(absl::Minutes(5));
  std::atomic<int> probed{0};
  const Admission::StreamId probe = a.Watch([&] { ++probed; });
  clock.Advance(absl::Minutes(2));
  REQUIRE(AwaitState([&] { return probed.load() == 1; }));
  a.Unwatch(probe);
  REQUIRE(idle == 1);
  REQUIRE(busy == 1);
  REQUIRE(gone == 0);
  a.Unwatch(s_idle);
  a.Unwatch(s_busy);
  REQUIRE(a.watched() == 0);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
