#include "update/update_log_record.h"

#include <cstring>

#include "absl/base/config.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/record_file.h"

namespace ps::update {
namespace {

#if !defined(ABSL_IS_LITTLE_ENDIAN)
#error \
    "update log records hold float32 values in the host's (little) endianness"
#endif

enum class Type : uint32_t {
  kPush = 1,
  kApply = 2,
  // 3 was format 2's sync step (the ranks whose logged pushes it summed).
  kRegister = 4,
  kDone = 5,
  kStepMean = 6,
};

void PutRate(std::string* out, const std::optional<float>& rate) {
  uint32_t bits = 0;
  if (rate.has_value()) std::memcpy(&bits, &*rate, sizeof(bits));
  PutFixed32(out, rate.has_value() ? 1 : 0);
  PutFixed32(out, bits);
}

bool GetRate(absl::string_view* in, std::optional<float>* rate) {
  uint32_t has = 0, bits = 0;
  if (!GetFixed32(in, &has) || !GetFixed32(in, &bits) || has > 1) return false;
  if (has == 1) {
    float value = 0;
    std::memcpy(&value, &bits, sizeof(value));
    *rate = value;
  }
  return true;
}

std::string PushHeader(const LoggedPush& p) {
  std::string out;
  PutFixed32(&out, static_cast<uint32_t>(Type::kPush));
  PutFixed32(&out, static_cast<uint32_t>(p.rank));
  PutFixed64(&out, p.incarnation);
  PutFixed64(&out, p.step);
  PutFixed64(&out, p.base_version);
  PutFixed32(&out, p.num_examples);
  PutFixed64(&out, p.epoch);
  PutFixed64(&out, p.examples_done);
  PutRate(&out, p.learning_rate);
  return out;
}

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("update log record is malformed: ", what));
}

// A u32 slice count, then per slice a u64 element count and the float32
// values.
bool GetSlices(absl::string_view* in, std::vector<std::vector<float>>* slices) {
  uint32_t count = 0;
  if (!GetFixed32(in, &count)) return false;
  for (uint32_t s = 0; s < count; ++s) {
    uint64_t n = 0;
    if (!GetFixed64(in, &n) || n > in->size() / sizeof(float)) return false;
    std::vector<float>& values = slices->emplace_back(n);
    std::memcpy(values.data(), in->data(), n * sizeof(float));
    in->remove_prefix(n * sizeof(float));
  }
  return true;
}

absl::StatusOr<LogRecord> DecodeStepMean(absl::string_view in) {
  LoggedStepMean s;
  uint32_t parts = 0;
  if (!GetFixed64(&in, &s.step) || !GetRate(&in, &s.learning_rate) ||
      !GetFixed32(&in, &parts)) {
    return Malformed("step mean header cut short");
  }
  for (uint32_t i = 0; i < parts; ++i) {
    LoggedStepPart& p = s.parts.emplace_back();
    uint32_t rank = 0;
    if (!GetFixed32(&in, &rank) || !GetFixed64(&in, &p.base_version) ||
        !GetFixed32(&in, &p.num_examples) || !GetFixed64(&in, &p.epoch) ||
        !GetFixed64(&in, &p.examples_done)) {
      return Malformed(absl::StrCat("step mean part ", i, " cut short"));
    }
    p.rank = static_cast<int>(rank);
  }
  if (!GetSlices(&in, &s.mean)) return Malformed("step mean cut short");
  if (!in.empty()) return Malformed("bytes after a step's mean");
  return s;
}

absl::StatusOr<LogRecord> DecodePush(absl::string_view in) {
  LoggedPush p;
  uint32_t rank = 0, slices = 0;
  if (!GetFixed32(&in, &rank) || !GetFixed64(&in, &p.incarnation) ||
      !GetFixed64(&in, &p.step) || !GetFixed64(&in, &p.base_version) ||
      !GetFixed32(&in, &p.num_examples) || !GetFixed64(&in, &p.epoch) ||
      !GetFixed64(&in, &p.examples_done) || !GetRate(&in, &p.learning_rate) ||
      !GetFixed32(&in, &slices)) {
    return Malformed("push header cut short");
  }
  p.rank = static_cast<int>(rank);
  for (uint32_t s = 0; s < slices; ++s) {
    uint64_t n = 0;
    if (!GetFixed64(&in, &n) || n > in.size() / sizeof(float)) {
      return Malformed(absl::StrCat("push slice ", s, " cut short"));
    }
    std::vector<float>& values = p.gradients.emplace_back(n);
    std::memcpy(values.data(), in.data(), n * sizeof(float));
    in.remove_prefix(n * sizeof(float));
  }
  if (!in.empty()) return Malformed("bytes after a push's gradients");
  return p;
}

}  // namespace

LogEntry MakePushEntry(
    const LoggedPush& push, absl::Span<const uint64_t> slice_sizes,
    absl::FunctionRef<void(int slice,
                           absl::FunctionRef<void(absl::string_view)> emit)>
        bytes,
    std::shared_ptr<const void> keep) {
  LogEntry entry;
  entry.keep = std::move(keep);
  std::string head = PushHeader(push);
  const bool values = push.num_examples > 0;
  PutFixed32(&head, values ? static_cast<uint32_t>(slice_sizes.size()) : 0);
  for (size_t s = 0; values && s < slice_sizes.size(); ++s) {
    PutFixed64(&head, slice_sizes[s]);
    entry.AddOwned(std::move(head));
    head.clear();
    bytes(static_cast<int>(s),
          [&entry](absl::string_view piece) { entry.pieces.push_back(piece); });
  }
  if (!head.empty()) entry.AddOwned(std::move(head));
  SealLogEntry(entry);
  return entry;
}

LogEntry MakeStepMeanEntry(const LoggedStepMean& step) {
  LogEntry entry;
  std::string head;
  PutFixed32(&head, static_cast<uint32_t>(Type::kStepMean));
  PutFixed64(&head, step.step);
  PutRate(&head, step.learning_rate);
  PutFixed32(&head, static_cast<uint32_t>(step.parts.size()));
  for (const LoggedStepPart& p : step.parts) {
    PutFixed32(&head, static_cast<uint32_t>(p.rank));
    PutFixed64(&head, p.base_version);
    PutFixed32(&head, p.num_examples);
    PutFixed64(&head, p.epoch);
    PutFixed64(&head, p.examples_done);
  }
  PutFixed32(&head, static_cast<uint32_t>(step.mean.size()));
  for (const std::vector<float>& slice : step.mean) {
    PutFixed64(&head, slice.size());
    entry.AddOwned(std::move(head));
    head.clear();
    entry.pieces.push_back(
        absl::string_view(reinterpret_cast<const char*>(slice.data()),
                          slice.size() * sizeof(float)));
  }
  if (!head.empty()) entry.AddOwned(std::move(head));
  SealLogEntry(entry);
  return entry;
}

std::string EncodeLogRecord(const LogRecord& record) {
  std::string out;
  if (const auto* p = std::get_if<LoggedPush>(&record)) {
    std::vector<uint64_t> sizes;
    for (const std::vector<float>& g : p->gradients) sizes.push_back(g.size());
    return MakePushEntry(
               *p, sizes,
               [p](int slice, absl::FunctionRef<void(absl::string_view)> emit) {
                 const std::vector<float>& g = p->gradients[slice];
                 emit(absl::string_view(reinterpret_cast<const char*>(g.data()),
                                        g.size() * sizeof(float)));
               },
               nullptr)
        .Payload();
  } else if (const auto* a = std::get_if<LoggedApply>(&record)) {
    PutFixed32(&out, static_cast<uint32_t>(Type::kApply));
    PutFixed64(&out, a->version);
    PutRate(&out, a->learning_rate);
  } else if (const auto* s = std::get_if<LoggedStepMean>(&record)) {
    return MakeStepMeanEntry(*s).Payload();
  } else if (const auto* r = std::get_if<LoggedRegister>(&record)) {
    PutFixed32(&out, static_cast<uint32_t>(Type::kRegister));
    PutFixed32(&out, static_cast<uint32_t>(r->rank));
    PutFixed64(&out, r->incarnation);
    PutFixed64(&out, r->planned_steps);
    PutFixed32(&out, r->max_examples);
  } else {
    PutFixed32(&out, static_cast<uint32_t>(Type::kDone));
    PutFixed32(&out, static_cast<uint32_t>(std::get<LoggedDone>(record).rank));
  }
  return out;
}

absl::StatusOr<LogRecord> DecodeLogRecord(absl::string_view in) {
  uint32_t type = 0;
  if (!GetFixed32(&in, &type)) return Malformed("no type");
  switch (static_cast<Type>(type)) {
    case Type::kPush:
      return DecodePush(in);
    case Type::kApply: {
      LoggedApply a;
      if (!GetFixed64(&in, &a.version) || !GetRate(&in, &a.learning_rate) ||
          !in.empty()) {
        return Malformed("apply record");
      }
      return a;
    }
    case Type::kStepMean:
      return DecodeStepMean(in);
    case Type::kRegister: {
      LoggedRegister r;
      uint32_t rank = 0;
      if (!GetFixed32(&in, &rank) || !GetFixed64(&in, &r.incarnation) ||
          !GetFixed64(&in, &r.planned_steps) ||
          !GetFixed32(&in, &r.max_examples) || !in.empty()) {
        return Malformed("register record");
      }
      r.rank = static_cast<int>(rank);
      return r;
    }
    case Type::kDone: {
      uint32_t rank = 0;
      if (!GetFixed32(&in, &rank) || !in.empty()) {
        return Malformed("done record");
      }
      return LoggedDone{static_cast<int>(rank)};
    }
  }
  return Malformed(absl::StrCat("unknown type ", type));
}

}  // namespace ps::update
