#include "worker/pipeline/stage_link.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps::worker::pipeline {
namespace {

constexpr uint32_t kMagic = 0x4c505350;  // "PSPL"

struct Header {
  uint32_t magic = kMagic;
  uint8_t direction = 0;
  uint8_t reserved[3] = {};
  uint64_t step = 0;
  uint32_t micro_batch = 0;
  uint32_t rows = 0;
  uint64_t floats = 0;
  float loss = 0;
  uint32_t reserved2 = 0;
};
static_assert(sizeof(Header) == 40);

std::string DirectionName(Direction d) {
  switch (d) {
    case Direction::kActivations:
      return "activations";
    case Direction::kGradients:
      return "gradients";
    case Direction::kEvaluation:
      return "evaluation activations";
    case Direction::kCorrect:
      return "evaluation count";
    case Direction::kWeights:
      return "final weights";
    case Direction::kResume:
      return "resume point";
    case Direction::kEnd:
      return "end of training";
  }
  return absl::StrCat("direction ", static_cast<int>(d));
}

}  // namespace

std::string Tag::ToString() const {
  return absl::StrFormat("%s of step %d micro-batch %d",
                         DirectionName(direction), step, micro_batch);
}

std::string LinkPeer::ToString() const {
  return absl::StrFormat("stage %d (rank %d)", stage, rank);
}

StageLink::StageLink(std::unique_ptr<LocalSocket> socket, LinkPeer peer)
    : socket_(std::move(socket)), peer_(std::move(peer)) {}

absl::Status StageLink::PeerFailed(const absl::Status& status,
                                   absl::string_view doing) const {
  if (absl::IsDataLoss(status)) {
    return absl::DataLossError(
        absl::StrCat(doing, " ", peer_.ToString(), ": ", status.message()));
  }
  return absl::AbortedError(absl::StrCat(
      doing, " ", peer_.ToString(), " failed, it died or stopped (",
      status.message(), "); the step cannot go on without it"));
}

absl::Status StageLink::Send(const Tag& tag, int rows, float loss,
                             absl::Span<const float> values) {
  Header header;
  header.direction = static_cast<uint8_t>(tag.direction);
  header.step = tag.step;
  header.micro_batch = tag.micro_batch;
  header.rows = static_cast<uint32_t>(rows);
  header.floats = values.size();
  header.loss = loss;
  std::string payload(sizeof(header) + values.size() * sizeof(float), '\0');
  std::memcpy(payload.data(), &header, sizeof(header));
  if (!values.empty()) {
    std::memcpy(payload.data() + sizeof(header), values.data(),
                values.size() * sizeof(float));
  }
  socket_->Queue(FrameType::kMessage, payload);
  if (absl::Status s = socket_->Flush(); !s.ok()) {
    return PeerFailed(s, absl::StrCat("sending ", tag.ToString(), " to"));
  }
  return absl::OkStatus();
}

absl::StatusOr<float> StageLink::Receive(const Tag& expected, int rows,
                                         absl::Span<float> out) {
  const size_t want = sizeof(Header) + out.size() * sizeof(float);
  Frame frame;
  const std::string doing =
      absl::StrCat("receiving ", expected.ToString(), " from");
  if (absl::Status s = socket_->ReadFrame(want, &frame); !s.ok()) {
    return PeerFailed(s, doing);
  }
  if (frame.type != FrameType::kMessage ||
      frame.payload.size() < sizeof(Header)) {
    return PeerFailed(absl::DataLossError("not a stage message"), doing);
  }
  Header header;
  std::memcpy(&header, frame.payload.begin(), sizeof(header));
  const Tag got{header.step, header.micro_batch,
                static_cast<Direction>(header.direction)};
  if (header.magic != kMagic || !(got == expected)) {
    return PeerFailed(
        absl::DataLossError(absl::StrCat(
            "got ",
            header.magic != kMagic ? std::string("no stage message")
                                   : got.ToString(),
            " instead (the stages' schedules disagree)")),
        doing);
  }
  if (header.rows != static_cast<uint32_t>(rows) ||
      header.floats != out.size() || frame.payload.size() != want) {
    return PeerFailed(absl::DataLossError(absl::StrFormat(
                          "got %d rows of %d floats in all, expected %d of %d",
                          header.rows, header.floats, rows, out.size())),
                      doing);
  }
  if (!out.empty()) {
    std::memcpy(out.data(), frame.payload.begin() + sizeof(header),
                out.size() * sizeof(float));
  }
  return header.loss;
}

}  // namespace ps::worker::pipeline
