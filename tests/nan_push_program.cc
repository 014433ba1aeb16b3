// A training program on the public client library alone, run by the
// launcher as every worker (`launch ... -- nan_push_program`), in which one
// rank's gradient turns NaN once: rank --nan_rank pushes a NaN in one
// element at step --nan_step, as a worker whose batch diverged would. The
// servers must refuse that push; the rank then says which step was refused
// and why, and exits 1, as our worker does on a diverged loss. Started
// again by the launcher (it then resumes from its Registration, past the
// fault's first run), it trains on.
//
// The model is a quadratic: rank r's gradient is w - target_r. Rank 0
// checks at the end that every weight is finite and prints
// "nan_push_program: N weights finite at version V".
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
ABSL_FLAG(int, nan_rank, 1, "The rank whose gradient turns NaN.");
ABSL_FLAG(int, nan_step, 5,
          "The step (>= 1) whose gradient is NaN, in that rank's first run "
          "only.");

namespace ps {
namespace {

constexpr int kElements = 1000;

ModelSpec Declaration() {
  ModelSpec m;
  m.seed = 3;
  m.tensors.push_back(
      {"w", DType::kFloat32, {kElements}, InitializerSpec::Normal(0, 1)});
  m.tensors.push_back({"b", DType::kFloat32, {10}, InitializerSpec::Zeros()});
  return m;
}

float Target(int tensor, int element, int rank) {
  return 0.01f * (tensor + 1) * (element % 7) + 0.1f * rank;
}

absl::Status Run() {
  absl::StatusOr<ClientOptions> options = ClientOptions::FromEnvironment();
  if (!options.ok()) return options.status();
  const int rank = options->rank;
  const int steps = absl::GetFlag(FLAGS_steps);
  const int nan_step = absl::GetFlag(FLAGS_nan_step);
  if (nan_step < 1 || nan_step >= steps) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nan_step must be in [1, --steps), got ", nan_step));
  }
  absl::StatusOr<std::unique_ptr<ParameterClient>> client =
      ParameterClient::Connect(*options);
  if (!client.ok()) return client.status();
  const ModelSpec model = Declaration();
  // Each step averages over one example.
  absl::StatusOr<Registration> reg = (*client)->Declare(model, steps, 1);
  if (!reg.ok()) return reg.status();
  // A rank started again resumes past step 0: the fault was its first run.
  const bool inject = rank == absl::GetFlag(FLAGS_nan_rank) &&
                      reg->next_step == 0 && reg->cursor.examples_done == 0;

  TensorValues weights;
  absl::StatusOr<uint64_t> version = (*client)->Pull(reg->next_step, weights);
  if (!version.ok()) return version.status();
  TensorValues gradients(model.tensors.size());
  DataCursor cursor = reg->cursor;
  for (uint64_t step = reg->next_step; step < static_cast<uint64_t>(steps);
       ++step) {
    ++cursor.examples_done;
    std::unique_ptr<StepPush> push =
        (*client)->StartStep({step, *version, 1, cursor}, /*pull_after=*/true);
    for (size_t t = 0; t < model.tensors.size(); ++t) {
      gradients[t].resize(weights[t].size());
      for (size_t i = 0; i < weights[t].size(); ++i) {
        gradients[t][i] = weights[t][i] - Target(t, i, rank);
      }
      if (inject && step == static_cast<uint64_t>(nan_step) && t == 1) {
        gradients[t][3] = std::nanf("");
      }
      if (absl::Status s = push->Send(t, gradients[t]); !s.ok()) return s;
    }
    version = push->FinishWithPull(weights);
    if (!version.ok()) {
      return absl::Status(
          version.status().code(),
          absl::StrCat("rank ", rank, ": the push of step ", step,
                       " was refused: ", version.status().message()));
    }
  }
  if (rank == 0) {
    version = (*client)->PullFinal(steps, weights);
    if (!version.ok()) return version.status();
    size_t finite = 0, total = 0;
    for (const std::vector<float>& tensor : weights) {
      for (float w : tensor) finite += std::isfinite(w) ? 1 : 0;
      total += tensor.size();
    }
    if (finite != total) {
      return absl::InternalError(
          absl::StrCat("nan_push_program: ", total - finite, " of ", total,
                       " weights are not finite at version ", *version));
    }
    std::printf("nan_push_program: %zu weights finite at version %llu\n", total,
                static_cast<unsigned long long>(*version));
    std::fflush(stdout);
  }
  return (*client)->Finish();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = ps::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
