#include "update/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/declaration_proto.h"
#include "common/partition.h"
#include "common/record_file.h"
#include "common/tensor_codec.h"

namespace ps::update {
namespace {

constexpr absl::string_view kKind = "checkpoint";
// Bumped on any change to the records' layout.
// 2: the declaration and the server count.
// 3: each rank's bound on examples a push (read from 2 as none).
constexpr uint32_t kFormatVersion = 3;
constexpr uint32_t kOldestFormatVersion = 2;
constexpr absl::string_view kSuffix = ".ckpt";
// Records before the slices: header, declaration, ranks, examples,
// staleness.
constexpr size_t kFixedRecords = 5;

void PutFloats(std::string* dst, const std::vector<float>& values) {
  std::string bytes;
  EncodeFloats(values, &bytes);
  PutLengthPrefixed(dst, bytes);
}

bool GetFloats(absl::string_view* input, std::vector<float>* values) {
  absl::string_view bytes;
  if (!GetLengthPrefixed(input, &bytes) || bytes.size() % sizeof(float) != 0) {
    return false;
  }
  values->resize(bytes.size() / sizeof(float));
  return DecodeFloats(bytes, absl::MakeSpan(*values)).ok();
}

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("checkpoint ", what, " is malformed"));
}

std::string EncodeHeader(const ShardCheckpoint& c) {
  std::string r;
  PutFixed32(&r, kFormatVersion);
  PutFixed64(&r, c.partition_fingerprint);
  PutFixed32(&r, static_cast<uint32_t>(c.identity.num_servers));
  PutFixed32(&r, static_cast<uint32_t>(c.identity.server_index));
  PutLengthPrefixed(&r, c.identity.mode);
  PutFixed32(&r, static_cast<uint32_t>(c.identity.num_workers));
  PutFixed64(&r, c.version);
  PutFixed64(&r, c.planned_steps);
  return r;
}

absl::Status DecodeHeader(absl::string_view r, ShardCheckpoint* c,
                          uint32_t* format) {
  uint32_t servers = 0, index = 0, workers = 0;
  absl::string_view mode;
  if (!GetFixed32(&r, format)) return Malformed("header");
  if (*format < kOldestFormatVersion || *format > kFormatVersion) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint format ", *format, " is not one of the supported ",
        kOldestFormatVersion, " to ", kFormatVersion));
  }
  if (!GetFixed64(&r, &c->partition_fingerprint) || !GetFixed32(&r, &servers) ||
      !GetFixed32(&r, &index) || !GetLengthPrefixed(&r, &mode) ||
      !GetFixed32(&r, &workers) || !GetFixed64(&r, &c->version) ||
      !GetFixed64(&r, &c->planned_steps) || !r.empty() || servers < 1 ||
      servers > INT32_MAX || index >= servers || workers > INT32_MAX) {
    return Malformed("header");
  }
  c->identity.num_servers = static_cast<int>(servers);
  c->identity.server_index = static_cast<int>(index);
  c->identity.mode = std::string(mode);
  c->identity.num_workers = static_cast<int>(workers);
  return absl::OkStatus();
}

std::string EncodeDeclaration(const ModelSpec& model) {
  proto::ModelDeclaration declaration;
  ModelSpecToProto(model, &declaration);
  return declaration.SerializeAsString();
}

// The declaration must be valid and give the header's fingerprint: a
// checkpoint whose slices were laid out for another partition is useless.
absl::Status DecodeDeclaration(absl::string_view r, ShardCheckpoint* c) {
  proto::ModelDeclaration declaration;
  if (!declaration.ParseFromArray(r.data(), static_cast<int>(r.size()))) {
    return Malformed("declaration");
  }
  absl::StatusOr<ModelSpec> model = ModelSpecFromProto(declaration);
  if (!model.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint declaration: ", model.status().message()));
  }
  DeclarationLimits unlimited;
  unlimited.max_model_bytes = UINT64_MAX / 2;
  unlimited.max_tensors = INT32_MAX;
  if (absl::Status s = ValidateModelSpec(*model, unlimited); !s.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint declaration: ", s.message()));
  }
  absl::StatusOr<Partition> partition =
      Partition::Create(*model, c->identity.num_servers);
  if (!partition.ok() || partition->fingerprint() != c->partition_fingerprint) {
    return absl::DataLossError(
        "checkpoint declaration does not give the recorded partition "
        "fingerprint");
  }
  c->model = *std::move(model);
  return absl::OkStatus();
}

std::string EncodeRanks(const std::vector<RankRecord>& ranks) {
  std::string r;
  for (const RankRecord& rank : ranks) {
    PutFixed64(&r, rank.incarnation);
    PutFixed64(&r, rank.clock);
    PutFixed64(&r, rank.progress.epoch);
    PutFixed64(&r, rank.progress.examples_done);
    PutFixed32(&r, rank.done ? 1 : 0);
    PutFixed32(&r, rank.max_examples);
  }
  return r;
}

absl::Status DecodeRanks(absl::string_view r, int num_workers, uint32_t format,
                         std::vector<RankRecord>* ranks) {
  ranks->resize(num_workers);
  for (RankRecord& rank : *ranks) {
    uint32_t done = 0;
    if (!GetFixed64(&r, &rank.incarnation) || !GetFixed64(&r, &rank.clock) ||
        !GetFixed64(&r, &rank.progress.epoch) ||
        !GetFixed64(&r, &rank.progress.examples_done) ||
        !GetFixed32(&r, &done) || done > 1 ||
        (format >= 3 && !GetFixed32(&r, &rank.max_examples))) {
      return Malformed("ranks record");
    }
    rank.done = done == 1;
  }
  return r.empty() ? absl::OkStatus() : Malformed("ranks record");
}

std::string EncodeExamples(const ExampleCounts& examples) {
  std::string r;
  PutFixed64(&r, examples.size());
  for (const auto& [epoch, counts] : examples) {
    PutFixed64(&r, epoch);
    for (uint64_t c : counts) PutFixed64(&r, c);
  }
  return r;
}

absl::Status DecodeExamples(absl::string_view r, int num_workers,
                            ExampleCounts* examples) {
  uint64_t epochs = 0;
  if (!GetFixed64(&r, &epochs) ||
      epochs > r.size() / (8 * (uint64_t{1} + num_workers))) {
    return Malformed("examples record");
  }
  for (uint64_t e = 0; e < epochs; ++e) {
    uint64_t epoch = 0;
    if (!GetFixed64(&r, &epoch)) return Malformed("examples record");
    std::vector<uint64_t>& counts = (*examples)[epoch];
    counts.resize(num_workers);
    for (uint64_t& c : counts) {
      if (!GetFixed64(&r, &c)) return Malformed("examples record");
    }
  }
  if (!r.empty() || examples->size() != epochs) {
    return Malformed("examples record");
  }
  return absl::OkStatus();
}

std::string EncodeStaleness(const StalenessHistogramState& s) {
  std::string r;
  PutFixed32(&r, static_cast<uint32_t>(s.buckets.size()));
  for (uint64_t b : s.buckets) PutFixed64(&r, b);
  PutFixed64(&r, s.count);
  PutFixed64(&r, s.max);
  uint64_t sum_bits = 0;
  std::memcpy(&sum_bits, &s.sum, sizeof(sum_bits));
  PutFixed64(&r, sum_bits);
  return r;
}

absl::Status DecodeStaleness(absl::string_view r, StalenessHistogramState* s) {
  uint32_t buckets = 0;
  if (!GetFixed32(&r, &buckets) || buckets != s->buckets.size()) {
    return Malformed("staleness record");
  }
  for (uint64_t& b : s->buckets) {
    if (!GetFixed64(&r, &b)) return Malformed("staleness record");
  }
  uint64_t sum_bits = 0;
  if (!GetFixed64(&r, &s->count) || !GetFixed64(&r, &s->max) ||
      !GetFixed64(&r, &sum_bits) || !r.empty()) {
    return Malformed("staleness record");
  }
  std::memcpy(&s->sum, &sum_bits, sizeof(sum_bits));
  return absl::OkStatus();
}

std::string EncodeSlice(const SliceSnapshot& slice) {
  std::string r;
  PutFixed64(&r, slice.update_count);
  PutFloats(&r, slice.weights);
  PutFixed32(&r, static_cast<uint32_t>(slice.state.size()));
  for (const auto& [name, values] : slice.state) {
    PutLengthPrefixed(&r, name);
    PutFloats(&r, values);
  }
  return r;
}

absl::Status DecodeSlice(absl::string_view r, size_t index,
                         SliceSnapshot* slice) {
  const std::string what = absl::StrCat("slice ", index, " record");
  uint32_t vectors = 0;
  if (!GetFixed64(&r, &slice->update_count) ||
      !GetFloats(&r, &slice->weights) || !GetFixed32(&r, &vectors) ||
      vectors > r.size()) {
    return Malformed(what);
  }
  slice->state.resize(vectors);
  for (auto& [name, values] : slice->state) {
    absl::string_view n;
    if (!GetLengthPrefixed(&r, &n) || !GetFloats(&r, &values) ||
        values.size() != slice->weights.size()) {
      return Malformed(what);
    }
    name = std::string(n);
  }
  return r.empty() ? absl::OkStatus() : Malformed(what);
}

}  // namespace

std::vector<std::string> EncodeCheckpoint(const ShardCheckpoint& c) {
  std::vector<std::string> records;
  records.reserve(kFixedRecords + c.slices.size());
  records.push_back(EncodeHeader(c));
  records.push_back(EncodeDeclaration(c.model));
  records.push_back(EncodeRanks(c.ranks));
  records.push_back(EncodeExamples(c.examples));
  records.push_back(EncodeStaleness(c.staleness));
  for (const SliceSnapshot& s : c.slices) records.push_back(EncodeSlice(s));
  return records;
}

absl::StatusOr<ShardCheckpoint> DecodeCheckpoint(
    const std::vector<std::string>& records) {
  if (records.size() < kFixedRecords) {
    return absl::DataLossError(absl::StrCat("checkpoint has ", records.size(),
                                            " records, fewer than ",
                                            kFixedRecords));
  }
  ShardCheckpoint c;
  uint32_t format = 0;
  absl::Status s = DecodeHeader(records[0], &c, &format);
  if (s.ok()) s = DecodeDeclaration(records[1], &c);
  if (s.ok()) {
    s = DecodeRanks(records[2], c.identity.num_workers, format, &c.ranks);
  }
  if (s.ok()) {
    s = DecodeExamples(records[3], c.identity.num_workers, &c.examples);
  }
  if (s.ok()) s = DecodeStaleness(records[4], &c.staleness);
  if (!s.ok()) return s;
  c.slices.resize(records.size() - kFixedRecords);
  for (size_t i = 0; i < c.slices.size(); ++i) {
    s = DecodeSlice(records[kFixedRecords + i], i, &c.slices[i]);
    if (!s.ok()) return s;
  }
  return c;
}

absl::Status CheckIdentity(const CheckpointIdentity& expected,
                           const CheckpointIdentity& found) {
  auto differs = [](absl::string_view what, const auto& mine,
                    const auto& theirs, absl::string_view hint) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint is of another ", what, ": ", theirs,
                     ", this shard's is ", mine, " (", hint, ")"));
  };
  if (found.num_servers != expected.num_servers) {
    return differs("server count", expected.num_servers, found.num_servers,
                   "check --num_servers");
  }
  if (found.server_index != expected.server_index) {
    return differs("shard", expected.server_index, found.server_index,
                   "check --server_index");
  }
  if (found.mode != expected.mode) {
    return differs("mode", expected.mode, found.mode, "check --mode");
  }
  if (found.num_workers != expected.num_workers) {
    return differs("worker count", expected.num_workers, found.num_workers,
                   "check --num_workers");
  }
  return absl::OkStatus();
}

std::string CheckpointFileName(int server_index, uint64_t version) {
  return absl::StrCat("shard-", server_index, "-", version, kSuffix);
}

std::optional<uint64_t> CheckpointVersion(absl::string_view name,
                                          int server_index) {
  const std::string prefix = absl::StrCat("shard-", server_index, "-");
  if (!absl::ConsumePrefix(&name, prefix) ||
      !absl::ConsumeSuffix(&name, kSuffix) || name.empty() ||
      !std::all_of(name.begin(), name.end(),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  uint64_t version = 0;
  if (!absl::SimpleAtoi(name, &version)) return std::nullopt;
  return version;
}

absl::StatusOr<ShardCheckpoint> ReadCheckpoint(const std::string& path) {
  absl::StatusOr<std::vector<std::string>> records =
      ReadRecordFile(path, kKind);
  if (!records.ok()) return records.status();
  return DecodeCheckpoint(*records);
}

absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& dir,
                                                         int server_index) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return std::vector<std::string>();
  std::vector<std::pair<uint64_t, std::string>> found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::optional<uint64_t> version =
        CheckpointVersion(it->path().filename().string(), server_index);
    if (version.has_value()) found.emplace_back(*version, it->path().string());
  }
  if (ec) {
    return absl::UnavailableError(absl::StrCat("--checkpoint_dir: cannot list ",
                                               dir, ": ", ec.message()));
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> paths;
  for (auto& [version, path] : found) paths.push_back(std::move(path));
  return paths;
}

absl::StatusOr<std::string> WriteCheckpoint(const std::string& dir,
                                            const ShardCheckpoint& checkpoint,
                                            int keep) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat(
        "--checkpoint_dir: cannot create ", dir, ": ", ec.message()));
  }
  const std::string path = absl::StrCat(
      dir, "/",
      CheckpointFileName(checkpoint.identity.server_index, checkpoint.version));
  absl::Status s = WriteRecordFile(path, kKind, EncodeCheckpoint(checkpoint));
  if (!s.ok()) return s;
  absl::StatusOr<std::vector<std::string>> all =
      ListCheckpoints(dir, checkpoint.identity.server_index);
  if (!all.ok()) return all.status();
  int kept = 0;
  for (const std::string& p : *all) {
    if (p == path || kept < keep) {
      ++kept;
      continue;
    }
    // A file we cannot delete only costs disk space.
    std::filesystem::remove(p, ec);
  }
  return path;
}

absl::StatusOr<std::optional<LoadedCheckpoint>> LoadNewestCheckpoint(
    const std::string& dir, const CheckpointIdentity& expected) {
  absl::StatusOr<std::vector<std::string>> paths =
      ListCheckpoints(dir, expected.server_index);
  if (!paths.ok()) return paths.status();
  if (paths->empty()) return std::optional<LoadedCheckpoint>();
  LoadedCheckpoint loaded;
  for (const std::string& path : *paths) {
    absl::StatusOr<ShardCheckpoint> checkpoint = ReadCheckpoint(path);
    if (!checkpoint.ok()) {
      loaded.skipped.push_back(
          absl::StrCat(path, ": ", checkpoint.status().message()));
      continue;
    }
    if (absl::Status s = CheckIdentity(expected, checkpoint->identity);
        !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot restore ", path, ": ", s.message()));
    }
    // Out of the way, so that later restores do not trip on them again.
    std::error_code ec;
    for (size_t i = 0; i < loaded.skipped.size(); ++i) {
      std::filesystem::rename((*paths)[i], (*paths)[i] + ".corrupt", ec);
    }
    loaded.path = path;
    loaded.checkpoint = *std::move(checkpoint);
    return std::optional<LoadedCheckpoint>(std::move(loaded));
  }
  return absl::DataLossError(
      absl::StrCat("no readable checkpoint of shard ", expected.server_index,
                   " in ", dir, ": ", absl::StrJoin(loaded.skipped, "; ")));
}

}  // namespace ps::update
