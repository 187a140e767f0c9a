#include "server/checkpoint/replica_store.h"

#include <memory>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "server/checkpoint/checkpoint.h"

namespace omnilearn {
namespace server {
namespace {

// Slice `slice`'s checkpoint of `version`, as its shard encodes it.
std::string SliceFile(int slice, uint64_t version) {
  CheckpointState s;
  s.layout = *ModelLayout::Create({{"w@0", {3}}});
  s.weights = std::make_shared<const std::vector<float>>(std::vector<float>{1, 2, static_cast<float>(version)});
  s.optimizer_state = {{"momentum", std::make_shared<const std::vector<float>>(std::vector<float>{0, 0, 1})}};
  s.mode = "sync";
  s.version = version;
  s.slice = slice;
  return *EncodeCheckpoint(s);
}

TEST_CASE("replicas: the newest K of each slice, by version", "[replica]") {
  ReplicaStore store(2);
  for (uint64_t v : {4, 8, 12}) REQUIRE(store.Keep(2, v, 0xabc, SliceFile(2, v)).ok());
  REQUIRE(store.Keep(1, 8, 0xabc, SliceFile(1, 8)).ok());
  const std::map<int, std::vector<uint64_t>> held = store.Held();
  REQUIRE(held.at(2) == std::vector<uint64_t>{12, 8});
  REQUIRE(held.at(1) == std::vector<uint64_t>{8});
  absl::StatusOr<std::shared_ptr<const std::string>> got = store.Get(2, 12, 0xabc);
  REQUIRE(got.ok());
  REQUIRE(**got == SliceFile(2, 12));
  REQUIRE(DecodeCheckpoint(**got)->version == 12);
  REQUIRE(absl::IsNotFound(store.Get(2, 4, 0xabc).status()));   // dropped for the newer two
  REQUIRE(absl::IsNotFound(store.Get(2, 12, 0xdef).status()));  // another map's
  REQUIRE(store.bytes() == 3 * SliceFile(2, 8).size());
}

TEST_CASE("replicas: a new map's replica drops the old map's", "[replica]") {
  ReplicaStore store(3);
  REQUIRE(store.Keep(1, 5, 0x1, SliceFile(1, 5)).ok());
  REQUIRE(store.Keep(2, 3, 0x2, SliceFile(2, 3)).ok());
  REQUIRE(store.Held().size() == 1);
  REQUIRE(absl::IsNotFound(store.Get(1, 5, 0x1).status()));
  REQUIRE(store.Get(2, 3, 0x2).ok());
}

TEST_CASE("replicas: bytes that are not that slice's checkpoint of that version are refused", "[replica]") {
  ReplicaStore store(3);
  REQUIRE(absl::IsInvalidArgument(store.Keep(2, 9, 0x1, SliceFile(2, 8))));
  REQUIRE(absl::IsInvalidArgument(store.Keep(1, 8, 0x1, SliceFile(2, 8))));
  std::string torn = SliceFile(2, 8);
  torn.back() ^= 1;
  REQUIRE(!store.Keep(2, 8, 0x1, torn).ok());
  REQUIRE(!store.Keep(2, 8, 0x1, "not a file").ok());
  REQUIRE(store.Held().empty());
  REQUIRE(store.bytes() == 0);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
