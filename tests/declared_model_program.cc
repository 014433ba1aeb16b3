// A training program built on the public client library alone, run by the
// launcher as every worker (`launch ... -- declared_model_program`). It
// declares tensors no flag describes (a scalar, a [3,5,7] tensor, a large
// tensor split across the servers, one whose values rank 0 supplies; names
// with dots and slashes) and trains them on a quadratic whose minimum is
// known: rank r's gradient is w - target_r, so with the servers' plain SGD
// at rate lr a sync step is w -= lr * (w - mean of the targets).
//
// Rank 0 checks the end: in sync mode against the same arithmetic done in
// this process (float tolerance); in ssp and async, where gradients may be
// computed from weights some updates old, that the distance to the minimum
// shrank at least fourfold (the rate is small enough that delays of a few
// updates still converge).
// Prints "declared_model_program: ok" and exits 0 when the check holds.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/parameter_client.h"

ABSL_FLAG(int, steps, 20, "Steps every rank trains.");
ABSL_FLAG(int64_t, big_elements, 10'000'000,
          "Elements of the large tensor, which the servers split.");
ABSL_FLAG(double, learning_rate, 0.2,
          "The servers' SGD rate (their --learning_rate), for the check.");
ABSL_FLAG(int, mismatch_rank, -1,
          "This rank declares a differently shaped tensor (to be refused).");

namespace ps {
namespace {

constexpr int kValuesFromRank0 = 3;  // Tensor id of "init/from_rank0".

ModelSpec Declaration(int rank) {
  ModelSpec m;
  m.seed = 11;
  m.tensors.push_back(
      {"scale", DType::kFloat32, {}, InitializerSpec::Constant(2.0), false});
  std::vector<int64_t> block = {3, 5, 7};
  if (rank == absl::GetFlag(FLAGS_mismatch_rank)) block = {3, 7, 5};
  m.tensors.push_back({"block/conv.w", DType::kFloat32, block,
                       InitializerSpec::GlorotUniform(35, 3)});
  m.tensors.push_back({"embedding.table/big",
                       DType::kFloat32,
                       {absl::GetFlag(FLAGS_big_elements)},
                       InitializerSpec::Normal(0, 0.5)});
  m.tensors.push_back({"init/from_rank0",
                       DType::kFloat32,
                       {1000},
                       InitializerSpec::FromRank0()});
  return m;
}

// In [-1, 1), a function of (tensor, element) alone.
float Base(int tensor, int64_t element) {
  uint64_t x = (static_cast<uint64_t>(tensor) << 40) ^ element;
  x = (x ^ (x >> 31)) * 0x7fb5d329728ea185ULL;
  x = (x ^ (x >> 27)) * 0x81dadef4bc2dd44dULL;
  x ^= x >> 33;
  return static_cast<float>(x >> 40) / 8388608.0f - 1.0f;
}

// Rank r's target; the ranks' mean is Base.
float Target(int tensor, int64_t element, int rank, int num_workers) {
  return Base(tensor, element) + 0.01f * (rank - 0.5f * (num_workers - 1));
}

// What rank `rank` offers as the values of "init/from_rank0": the servers
// must keep rank 0's.
std::vector<float> OfferedValues(int rank) {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * i - 7.0f + rank;
  return v;
}

absl::Status Run() {
  absl::StatusOr<ClientOptions> options = ClientOptions::FromEnvironment();
  if (!options.ok()) return options.status();
  const int rank = options->rank;
  const int steps = absl::GetFlag(FLAGS_steps);
  absl::StatusOr<std::unique_ptr<ParameterClient>> client =
      ParameterClient::Connect(*options);
  if (!client.ok()) return client.status();
  const ModelSpec model = Declaration(rank);
  // Each step averages over one example.
  absl::StatusOr<Registration> reg =
      (*client)->Declare(model, steps, /*max_examples_per_push=*/1);
  if (!reg.ok()) return reg.status();

  TensorValues weights(model.tensors.size());
  weights[kValuesFromRank0] = OfferedValues(rank);
  if (absl::Status s = (*client)->Broadcast(weights); !s.ok()) return s;
  if (weights[kValuesFromRank0] != OfferedValues(0)) {
    return absl::InternalError("the broadcast values are not rank 0's");
  }
  const TensorValues initial = weights;

  uint64_t version = 0;
  TensorValues gradients(model.tensors.size());
  for (uint64_t step = reg->next_step; step < static_cast<uint64_t>(steps);
       ++step) {
    std::unique_ptr<StepPush> push = (*client)->StartStep(
        {step, version, 1, DataCursor{0, step + 1}}, /*pull_after=*/true);
    for (size_t t = 0; t < model.tensors.size(); ++t) {
      gradients[t].resize(weights[t].size());
      for (size_t i = 0; i < weights[t].size(); ++i) {
        gradients[t][i] = weights[t][i] - Target(t, i, rank, reg->num_workers);
      }
      if (absl::Status s = push->Send(t, gradients[t]); !s.ok()) return s;
    }
    absl::StatusOr<uint64_t> pulled = push->FinishWithPull(weights);
    if (!pulled.ok()) return pulled.status();
    version = *pulled;
  }
  if (rank == 0) {
    absl::StatusOr<uint64_t> final_version =
        (*client)->PullFinal(steps, weights);
    if (!final_version.ok()) return final_version.status();
    const float lr = static_cast<float>(absl::GetFlag(FLAGS_learning_rate));
    double worst = 0;                 // sync: |w - the same steps done here|.
    double start_sq = 0, end_sq = 0;  // Squared distances to the minimum.
    for (size_t t = 0; t < model.tensors.size(); ++t) {
      for (size_t i = 0; i < weights[t].size(); ++i) {
        const double minimum = Base(t, i);
        start_sq += (initial[t][i] - minimum) * (initial[t][i] - minimum);
        end_sq += (weights[t][i] - minimum) * (weights[t][i] - minimum);
        if (reg->mode != ConsistencyMode::kSync) continue;
        float expected = initial[t][i];
        for (int s = 0; s < steps; ++s) {
          float sum = 0;
          for (int r = 0; r < reg->num_workers; ++r) {
            sum += expected - Target(t, i, r, reg->num_workers);
          }
          expected -= lr * (sum / reg->num_workers);
        }
        worst = std::max(worst, std::abs(double{weights[t][i]} - expected));
      }
    }
    const double shrink = std::sqrt(end_sq / start_sq);
    std::printf(
        "declared_model_program: mode %s, %d steps, version %llu, distance "
        "to the minimum x%.3g, worst |w - the same steps in one process| "
        "%.3g\n",
        std::string(ConsistencyModeName(reg->mode)).c_str(), steps,
        static_cast<unsigned long long>(*final_version), shrink, worst);
    if (reg->mode == ConsistencyMode::kSync ? !(worst <= 1e-5)
                                            : !(shrink <= 0.25)) {
      return absl::InternalError("the trained weights are not the expected");
    }
  }
  if (absl::Status s = (*client)->Finish(); !s.ok()) return s;
  std::printf("declared_model_program: ok\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = ps::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "declared_model_program: %s\n",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
