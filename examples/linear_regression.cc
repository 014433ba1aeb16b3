// Linear regression through the parameter servers: a worker program to copy.
//
//   bazel build //examples:linear_regression //deploy/local:launch //server
//   bazel-bin/deploy/local/launch --num_servers=2 --num_workers=2
//       --mode=sync -- bazel-bin/examples/linear_regression [STEPS]
//
// (one command line; --mode=ssp --staleness=2 and --mode=async work too).
//
// Every rank draws its own examples of y = w . x + b + noise, for a w and b
// this file states, computes the gradient of the mean squared error on its
// batch and pushes it; the servers combine the ranks' gradients and apply
// their optimizer (--optimizer, --learning_rate). Rank 0 picks the starting
// weight and broadcasts it; the bias starts at zero on the servers. At the
// end every rank prints what it recovered and exits 0 if that is within
// kTolerance of the truth, 1 otherwise (or on any error).

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/types/span.h"
#include "client/parameter_client.h"

namespace {

// The answer the servers should find.
constexpr int kDims = 4;
constexpr float kTrueWeight[kDims] = {0.5f, -0.4f, 0.3f, -0.2f};
constexpr float kTrueBias = 0.2f;
constexpr float kNoise = 0.01f;

constexpr int kBatch = 32;
// Enough for the launcher's defaults (Adam, learning rate 0.001, constant;
// or decayed by --lr_schedule=cosine over these steps) to end within
// kTolerance, with a margin.
constexpr uint64_t kDefaultSteps = 3000;
constexpr float kTolerance = 0.02f;

// One step's examples on one rank: a function of (rank, step) alone, so a
// restarted rank that resumes at step s draws what it would have drawn.
struct Batch {
  std::vector<float> x;  // kBatch rows of kDims.
  std::vector<float> y;
};

Batch MakeBatch(int rank, uint64_t step) {
  std::seed_seq seed{uint64_t{12345}, static_cast<uint64_t>(rank), step};
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, kNoise);
  Batch batch;
  for (int i = 0; i < kBatch; ++i) {
    float y = kTrueBias + noise(random);
    for (int d = 0; d < kDims; ++d) {
      const float x = uniform(random);
      batch.x.push_back(x);
      y += kTrueWeight[d] * x;
    }
    batch.y.push_back(y);
  }
  return batch;
}

// The gradient of mean((w . x + b - y)^2) over the batch.
void Gradient(const Batch& batch, const std::vector<float>& weight, float bias,
              std::vector<float>& weight_gradient, float& bias_gradient) {
  weight_gradient.assign(kDims, 0.0f);
  bias_gradient = 0.0f;
  for (int i = 0; i < kBatch; ++i) {
    const float* x = &batch.x[i * kDims];
    float error = bias - batch.y[i];
    for (int d = 0; d < kDims; ++d) error += weight[d] * x[d];
    for (int d = 0; d < kDims; ++d) {
      weight_gradient[d] += 2.0f * error * x[d] / kBatch;
    }
    bias_gradient += 2.0f * error / kBatch;
  }
}

std::string Format(const std::vector<float>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    char number[32];
    std::snprintf(number, sizeof(number), "%s%.4f", i > 0 ? ", " : "",
                  values[i]);
    text += number;
  }
  return text + "]";
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "linear_regression: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t steps = kDefaultSteps;
  if (argc > 2 ||
      (argc == 2 && (!absl::SimpleAtoi(argv[1], &steps) || steps == 0))) {
    std::fprintf(stderr, "usage: %s [STEPS, default %llu]\n", argv[0],
                 static_cast<unsigned long long>(kDefaultSteps));
    return 2;
  }

  // Who this rank is and where the servers are: set by the launcher.
  absl::StatusOr<ps::ClientOptions> options =
      ps::ClientOptions::FromEnvironment();
  if (!options.ok()) return Fail(options.status());
  absl::StatusOr<std::unique_ptr<ps::ParameterClient>> client =
      ps::ParameterClient::Connect(*options);
  if (!client.ok()) return Fail(client.status());

  // The model: a weight rank 0 initialises, and a bias the servers start
  // at zero. Every rank declares the same.
  ps::ModelSpec model;
  model.tensors.push_back({"linear.weight",
                           ps::DType::kFloat32,
                           {kDims},
                           ps::InitializerSpec::FromRank0()});
  model.tensors.push_back({"linear.bias",
                           ps::DType::kFloat32,
                           {},
                           ps::InitializerSpec::Zeros(),
                           /*weight_decay=*/false});
  // A push averages over at most kBatch examples: the servers refuse more.
  absl::StatusOr<ps::Registration> registration =
      (*client)->Declare(model, steps, kBatch);
  if (!registration.ok()) return Fail(registration.status());
  const int weight_id = *(*client)->TensorId("linear.weight");
  const int bias_id = *(*client)->TensorId("linear.bias");

  ps::TensorValues weights(model.tensors.size());
  uint64_t version = 0;
  if (registration->next_step == 0) {
    // A new job: rank 0 picks the starting weight (small random values) and
    // every rank receives exactly those bits.
    if (options->rank == 0) {
      std::mt19937_64 random(7);
      std::uniform_real_distribution<float> uniform(-0.1f, 0.1f);
      for (int d = 0; d < kDims; ++d) {
        weights[weight_id].push_back(uniform(random));
      }
    }
    if (absl::Status s = (*client)->Broadcast(weights); !s.ok()) return Fail(s);
  } else {
    // A restarted rank goes on from where the servers stand.
    absl::StatusOr<uint64_t> pulled =
        (*client)->Pull(registration->next_step, weights);
    if (!pulled.ok()) return Fail(pulled.status());
    version = *pulled;
  }

  // Each step pushes this rank's gradient and brings back the weights for
  // the next one, in one call per server.
  std::vector<float> weight_gradient;
  float bias_gradient = 0;
  for (uint64_t step = registration->next_step; step < steps; ++step) {
    const Batch batch = MakeBatch(options->rank, step);
    Gradient(batch, weights[weight_id], weights[bias_id][0], weight_gradient,
             bias_gradient);
    ps::StepInfo info;
    info.step = step;
    info.base_version = version;
    info.num_examples = kBatch;
    info.cursor.examples_done = (step + 1) * kBatch;
    std::unique_ptr<ps::StepPush> push =
        (*client)->StartStep(info, /*pull_after=*/true);
    // Any order; a framework sends each gradient as backward produces it.
    absl::Status sent =
        push->Send(bias_id, absl::MakeConstSpan(&bias_gradient, 1));
    if (sent.ok()) sent = push->Send(weight_id, weight_gradient);
    if (!sent.ok()) return Fail(sent);
    absl::StatusOr<uint64_t> next_version = push->FinishWithPull(weights);
    if (!next_version.ok()) return Fail(next_version.status());
    version = *next_version;
  }

  // Every rank's last update included, whatever the servers' mode.
  if (absl::StatusOr<uint64_t> final_version =
          (*client)->PullFinal(steps, weights);
      !final_version.ok()) {
    return Fail(final_version.status());
  }
  if (absl::Status status = (*client)->Finish(); !status.ok()) {
    return Fail(status);
  }

  float error = std::fabs(weights[bias_id][0] - kTrueBias);
  for (int d = 0; d < kDims; ++d) {
    error = std::fmax(error, std::fabs(weights[weight_id][d] - kTrueWeight[d]));
  }
  std::printf(
      "rank %d: weight %s (true %s), bias %.4f (true %.4f); largest error "
      "%.4g, tolerance %.4g: %s\n",
      options->rank, Format(weights[weight_id]).c_str(),
      Format(std::vector<float>(kTrueWeight, kTrueWeight + kDims)).c_str(),
      weights[bias_id][0], kTrueBias, error, kTolerance,
      error <= kTolerance ? "recovered" : "NOT recovered");
  return error <= kTolerance ? 0 : 1;
}
