#ifndef PS_WORKER_PIPELINE_STAGE_LINK_H_
#define PS_WORKER_PIPELINE_STAGE_LINK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/local_socket.h"

namespace ps::worker::pipeline {

// What travels on a link, and which way.
enum class Direction : uint8_t {
  kActivations = 1,  // Stage s's output, to stage s + 1.
  kGradients = 2,    // d(loss)/d(that output), back to stage s.
  // Replica 0's evaluation: test examples' activations forward, the last
  // stage's count of correct answers back, and at the end each stage's
  // final weights back to rank 0, which saves the whole model.
  kEvaluation = 3,
  kCorrect = 4,
  kWeights = 5,
  // Where each stage's group says to resume, forward then the replica's
  // agreement back (PipelineTrainer).
  kResume = 6,
  // The replica's end is through (rank 0 saved and evaluated), forward from
  // stage 0: no stage says Done before it (PipelineTrainer).
  kEnd = 7,
};

// Which tensor a message is: every message names its step, micro-batch and
// direction, and the receiver checks them against what its schedule
// expects, so that nothing is matched with the wrong micro-batch.
struct Tag {
  uint64_t step = 0;
  uint32_t micro_batch = 0;
  Direction direction = Direction::kActivations;

  bool operator==(const Tag& o) const {
    return step == o.step && micro_batch == o.micro_batch &&
           direction == o.direction;
  }
  std::string ToString() const;
};

// The worker at the other end of a link, for messages.
struct LinkPeer {
  int stage = 0;
  int rank = 0;
  std::string ToString() const;  // "stage 1 (rank 3)"
};

// One connection between neighbouring stages of a replica: activations go
// downstream and their gradients come back on it, as frames of the
// same-host transport (common/local_socket.h; any connected stream socket
// will do). A message is a kMessage frame: a fixed header (magic, direction,
// step, micro-batch, rows, floats per row, loss) and the rows' floats, in the
// host's byte order, as both ends run on one host.
//
// A peer that closed the link (it died or stopped) or stayed silent past
// the idle timeout fails the call with Aborted naming it: the step cannot
// go on without it, and a restart of the job can.
//
// Not thread-safe: a stage's schedule drives its links from one thread.
class StageLink {
 public:
  StageLink(std::unique_ptr<LocalSocket> socket, LinkPeer peer);

  const LinkPeer& peer() const { return peer_; }

  // Sends `values` (rows * values.size() / rows floats) under `tag`; `loss`
  // rides along (the last stage's micro-batch loss goes back with its
  // gradients, so that the first stage can report it).
  absl::Status Send(const Tag& tag, int rows, float loss,
                    absl::Span<const float> values);

  // Receives the message `expected` names, of `rows` rows of
  // out.size() / rows floats, into `out`; returns its loss. DataLoss naming
  // both when the peer sent another tag or shape; Aborted as above.
  absl::StatusOr<float> Receive(const Tag& expected, int rows,
                                absl::Span<float> out);

  // Fails the peer's reads and writes, and this end's, from now on.
  void Shutdown() { socket_->Shutdown(); }

 private:
  absl::Status PeerFailed(const absl::Status& status,
                          absl::string_view doing) const;

  std::unique_ptr<LocalSocket> socket_;
  const LinkPeer peer_;
};

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_STAGE_LINK_H_
