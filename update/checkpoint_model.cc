#include "update/checkpoint_model.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/partition.h"
#include "update/checkpoint.h"

namespace ps::update {
namespace {

// The versions of shard `index`'s checkpoints in `dir`.
absl::StatusOr<std::set<uint64_t>> VersionsOf(const std::string& dir,
                                              int index) {
  absl::StatusOr<std::vector<std::string>> paths = ListCheckpoints(dir, index);
  if (!paths.ok()) return paths.status();
  std::set<uint64_t> versions;
  for (const std::string& path : *paths) {
    std::optional<uint64_t> v = CheckpointVersion(
        std::filesystem::path(path).filename().string(), index);
    if (v.has_value()) versions.insert(*v);
  }
  return versions;
}

}  // namespace

absl::StatusOr<CheckpointedModel> ReadCheckpointedModel(
    const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> first = ListCheckpoints(dir, 0);
  if (!first.ok()) return first.status();
  if (first->empty()) {
    return absl::NotFoundError(
        absl::StrCat("no checkpoint of shard 0 in ", dir));
  }
  // The newest file of shard 0 says how many shards the job had.
  absl::StatusOr<ShardCheckpoint> newest = ReadCheckpoint(first->front());
  if (!newest.ok()) return newest.status();
  const int num_servers = newest->identity.num_servers;

  std::vector<std::set<uint64_t>> versions;
  std::set<uint64_t> common;
  for (int s = 0; s < num_servers; ++s) {
    absl::StatusOr<std::set<uint64_t>> v = VersionsOf(dir, s);
    if (!v.ok()) return v.status();
    if (s == 0) {
      common = *v;
    } else {
      std::set<uint64_t> both;
      std::set_intersection(common.begin(), common.end(), v->begin(), v->end(),
                            std::inserter(both, both.end()));
      common = std::move(both);
    }
    versions.push_back(*std::move(v));
  }
  if (common.empty()) {
    std::vector<std::string> each;
    for (int s = 0; s < num_servers; ++s) {
      each.push_back(absl::StrCat("shard ", s, ": [",
                                  absl::StrJoin(versions[s], ", "), "]"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " holds no version that every one of the job's ", num_servers,
        " shards checkpointed (", absl::StrJoin(each, "; "), ")"));
  }

  CheckpointedModel result;
  result.version = *common.rbegin();
  std::optional<Partition> partition;
  for (int s = 0; s < num_servers; ++s) {
    const std::string path =
        absl::StrCat(dir, "/", CheckpointFileName(s, result.version));
    absl::StatusOr<ShardCheckpoint> c = ReadCheckpoint(path);
    if (!c.ok()) return c.status();
    auto corrupt = [&path](absl::string_view what) {
      return absl::DataLossError(absl::StrCat(path, ": ", what));
    };
    if (c->identity.num_servers != num_servers ||
        c->identity.server_index != s || c->version != result.version) {
      return corrupt("its header is of another shard, job or version");
    }
    if (s == 0) {
      absl::StatusOr<Partition> p = Partition::Create(c->model, num_servers);
      if (!p.ok()) return corrupt(p.status().message());
      partition = *std::move(p);
      result.model = c->model;
      for (const TensorSpec& t : result.model.tensors) {
        result.weights.emplace_back(t.num_elements());
      }
    } else if (absl::Status d = CompareModelSpecs(
                   result.model, "shard 0's checkpoint", c->model, "this one");
               !d.ok()) {
      return corrupt(d.message());
    }
    const std::vector<Slice>& slices = partition->SlicesOfServer(s);
    if (c->slices.size() != slices.size()) {
      return corrupt(absl::StrCat("it holds ", c->slices.size(),
                                  " slices, the partition gives shard ", s, " ",
                                  slices.size()));
    }
    for (size_t i = 0; i < slices.size(); ++i) {
      const std::vector<float>& w = c->slices[i].weights;
      if (w.size() != slices[i].num_elements) {
        return corrupt(absl::StrCat("slice ", i, " holds ", w.size(),
                                    " weights, expected ",
                                    slices[i].num_elements));
      }
      std::copy(w.begin(), w.end(),
                result.weights[slices[i].tensor_id].begin() +
                    static_cast<std::ptrdiff_t>(slices[i].offset));
    }
  }
  return result;
}

}  // namespace ps::update
