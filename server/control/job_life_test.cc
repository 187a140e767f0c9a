#include "server/control/job_life.h"

#include <string>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

TEST_CASE("a job finishes when all left and one completed; a finished job refuses joins unless reset", "[job]") {
  const absl::Time t0 = absl::UnixEpoch();
  JobLife job(t0, 3, absl::Minutes(5));
  REQUIRE(job.expected() == 3);
  REQUIRE(job.start_by() == t0 + absl::Minutes(5));
  REQUIRE(job.number() == 1);
  REQUIRE_FALSE(job.started());
  job.Start();
  REQUIRE(job.started());
  job.NoteLeft(/*completed=*/false);  // a crash or a Ctrl-C does not finish the job...
  REQUIRE_FALSE(job.MaybeFinish(/*all_left=*/true));
  job.NoteLeft(/*completed=*/true);
  REQUIRE_FALSE(job.MaybeFinish(/*all_left=*/false));  // ...nor does a completion while others train
  REQUIRE(job.MaybeFinish(/*all_left=*/true));
  REQUIRE(job.finished());
  REQUIRE_FALSE(job.MaybeFinish(true));  // it ends once
  job.Next(t0 + absl::Seconds(5));
  REQUIRE(job.number() == 2);
  REQUIRE(job.start_by() == t0 + absl::Seconds(5) + absl::Minutes(5));
  REQUIRE_FALSE(job.started());
  REQUIRE_FALSE(job.finished());
  REQUIRE_FALSE(job.MaybeFinish(true));  // the last job's completion does not carry over
}

TEST_CASE("after a rollback the barrier waits for the workers that were live, for the given time", "[job]") {
  const absl::Time t0 = absl::UnixEpoch();
  JobLife job(t0, 4, absl::Minutes(5));
  job.Start();
  job.Regather(t0 + absl::Minutes(10), 2, absl::Seconds(30));
  REQUIRE_FALSE(job.started());
  REQUIRE(job.expected() == 2);
  REQUIRE(job.start_by() == t0 + absl::Minutes(10) + absl::Seconds(30));
  job.Regather(t0 + absl::Minutes(11), 1, absl::Seconds(30));  // before it started again: kept
  REQUIRE(job.expected() == 2);
  REQUIRE(job.start_by() == t0 + absl::Minutes(10) + absl::Seconds(30));
  job.Start();
  job.Regather(t0, 0, absl::Seconds(30));  // nobody was live: the first to join starts it
  REQUIRE(job.expected() == 1);
  job.Next(t0 + absl::Hours(1));  // a new job waits for --num_workers again
  REQUIRE(job.expected() == 4);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
