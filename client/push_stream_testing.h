#ifndef PS_CLIENT_PUSH_STREAM_TESTING_H_
#define PS_CLIENT_PUSH_STREAM_TESTING_H_

// Fakes for the tests of what pushes and pulls through ShardCalls: a shard
// whose calls record what the client wrote and answer as scripted, and the
// answers a real shard would send.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/pull_reader.h"
#include "client/push_stream.h"
#include "client/shard_channel.h"
#include "common/chunk_wire.h"
#include "common/grpc_status.h"
#include "common/partition.h"
#include "common/tensor_codec.h"
#include "proto/parameter_server.pb.h"

namespace ps::client_internal::testing {

// What every fake shard holds: element e of tensor t.
inline float FakeWeight(uint32_t t, uint64_t e) {
  return static_cast<float>(t) * 1000.0f + static_cast<float>(e) * 0.5f;
}

// An MLP 20-30-5 over two shards: some tensors split, some whole.
inline Partition TestPartition() {
  return *Partition::Create(MlpModelSpec({20, 30, 5}), 2);
}

// A stream of step 4 to shard `server` (`shard` fakes it), in 1000-element
// chunks.
inline PushStreamSpec StepFourSpec(ShardCalls* shard,
                                   const Partition* partition, int server,
                                   PushKind kind) {
  StepInfo info;
  info.step = 4;
  return {shard, partition, server, info, kind, /*chunk_elements=*/1000};
}

// Gradients for every tensor: -FakeWeight.
inline TensorValues TestGradients(const Partition& partition) {
  TensorValues gradients;
  ShapeWeights(partition.model(), gradients);
  for (size_t t = 0; t < gradients.size(); ++t) {
    for (size_t e = 0; e < gradients[t].size(); ++e) {
      gradients[t][e] = -FakeWeight(t, e);
    }
  }
  return gradients;
}

// One call as the shard saw it.
struct FakeCall {
  std::string method;
  // Parsed by protobuf, chunk data included.
  std::vector<proto::PushRequest> messages;
  // The thread of each write.
  std::vector<std::thread::id> writers;
  bool writes_done = false;
  // Finish was called; a call destroyed without it was cancelled.
  bool finished = false;
};

// How a call answers.
struct CallScript {
  // What Finish returns.
  grpc::Status status;
  // What Read returns, in order; then the end of the stream.
  std::vector<grpc::ByteBuffer> answers;
  // Write fails (the stream broke) from this write on; -1: never.
  int writes_before_break = -1;
};

// The answer a shard sends to a push: its acknowledgement.
inline grpc::ByteBuffer PushAck() {
  proto::PushResponse response;
  response.set_version(1);
  return SerializeMessage(response);
}

// The answer `server` sends to a pull: its slices as chunks of at most
// `chunk` elements holding FakeWeight, each message at `version`.
inline std::vector<grpc::ByteBuffer> PullAnswer(const Partition& partition,
                                                int server, uint64_t version,
                                                uint64_t chunk) {
  std::vector<grpc::ByteBuffer> out;
  for (const Slice& slice : partition.SlicesOfServer(server)) {
    const std::vector<int64_t>& shape =
        partition.model().tensors[slice.tensor_id].shape;
    for (uint64_t done = 0; done < slice.num_elements; done += chunk) {
      const uint64_t n = std::min(chunk, slice.num_elements - done);
      proto::PullResponse head;
      head.set_version(version);
      proto::TensorChunk c;
      c.set_tensor_id(slice.tensor_id);
      c.set_dtype(proto::DTYPE_FLOAT32);
      c.mutable_shape()->Assign(shape.begin(), shape.end());
      c.set_offset(slice.offset + done);
      c.set_num_elements(n);
      std::vector<float> values(n);
      for (uint64_t i = 0; i < n; ++i) {
        values[i] = FakeWeight(slice.tensor_id, slice.offset + done + i);
      }
      std::string bytes;
      EncodeFloats(values, &bytes);
      out.push_back(SerializeChunkMessage(head, c, kPullResponseChunk,
                                          OwnedSlice(std::move(bytes))));
    }
  }
  return out;
}

// A shard reached through fakes. Unscripted calls answer PushAck and OK.
// Thread-safe.
class FakeShard final : public ShardCalls {
 public:
  explicit FakeShard(int server) : server_(server) {}

  // The next call opened answers so.
  void Script(CallScript script) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    scripts_.push_back(std::move(script));
  }

  std::vector<FakeCall> calls() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    std::vector<FakeCall> out;
    for (const std::shared_ptr<FakeCall>& call : calls_) out.push_back(*call);
    return out;
  }

  // Every `what` CallWithRetry was given, once per attempt.
  std::vector<std::string> attempts() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return attempts_;
  }

  proto::RequestHeader Header() const override {
    proto::RequestHeader header;
    header.set_worker_rank(3);
    header.set_server_index(server_);
    header.set_incarnation(77);
    return header;
  }

  std::unique_ptr<ClientStream> OpenStream(absl::string_view method) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    calls_.push_back(std::make_shared<FakeCall>());
    calls_.back()->method = std::string(method);
    CallScript script;
    if (scripts_.empty()) {
      script.answers.push_back(PushAck());
    } else {
      script = std::move(scripts_.front());
      scripts_.pop_front();
    }
    return std::make_unique<Stream>(this, calls_.back(), std::move(script));
  }

  // Retries UNAVAILABLE at once, up to 5 attempts.
  absl::Status CallWithRetry(absl::string_view what,
                             const std::function<absl::Status()>& attempt)
      const override ABSL_LOCKS_EXCLUDED(mu_) {
    for (int i = 0;; ++i) {
      {
        absl::MutexLock lock(&mu_);
        attempts_.push_back(std::string(what));
      }
      absl::Status status = attempt();
      if (status.code() != absl::StatusCode::kUnavailable || i == 4) {
        return status;
      }
    }
  }

 private:
  class Stream final : public ClientStream {
   public:
    Stream(FakeShard* shard, std::shared_ptr<FakeCall> call, CallScript script)
        : shard_(shard), call_(std::move(call)), script_(std::move(script)) {}

    bool Write(const grpc::ByteBuffer& message) override {
      if (script_.writes_before_break == 0) return false;
      if (script_.writes_before_break > 0) --script_.writes_before_break;
      proto::PushRequest request;
      if (!ParseMessage(message, &request).ok()) return false;
      absl::MutexLock lock(&shard_->mu_);
      call_->messages.push_back(std::move(request));
      call_->writers.push_back(std::this_thread::get_id());
      return true;
    }
    bool WriteLast(const grpc::ByteBuffer& message) override {
      return Write(message) && WritesDone();
    }
    bool WritesDone() override {
      absl::MutexLock lock(&shard_->mu_);
      call_->writes_done = true;
      return true;
    }
    bool Read(grpc::ByteBuffer* message) override {
      if (next_ == script_.answers.size()) return false;
      *message = script_.answers[next_++];
      return true;
    }
    grpc::Status Finish() override {
      absl::MutexLock lock(&shard_->mu_);
      call_->finished = true;
      return script_.status;
    }

   private:
    FakeShard* const shard_;
    const std::shared_ptr<FakeCall> call_;
    CallScript script_;
    size_t next_ = 0;
  };

  const int server_;
  mutable absl::Mutex mu_;
  std::deque<CallScript> scripts_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<FakeCall>> calls_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<std::string> attempts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::client_internal::testing

#endif  // PS_CLIENT_PUSH_STREAM_TESTING_H_
