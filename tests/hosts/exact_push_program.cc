// A training program on the public client library whose arithmetic is
// exact, for tests that must see a push applied once, not twice and not in
// part: it declares one tensor "w" of --elements zeros with plain SGD at a
// learning rate of 1/8, and pushes a gradient of 1 in every element at
// every one of --steps steps. After n applied steps every weight is
// exactly -n/8 (sums of powers of two, far from float's rounding), so a
// push applied twice, or a part of one, shows in the weights.
//
// After each step it checks the weights it pulled against the version they
// carry, and exits 1 naming the first weight that is off; at the end it
// prints "exact_push_program: version V, every weight -V/8".
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

ABSL_FLAG(int, steps, 4, "Steps to train.");
ABSL_FLAG(int64_t, elements, 1 << 20, "Elements of the one tensor.");

namespace ps {
namespace {

constexpr float kLearningRate = 0.125f;

// OK if every weight is -version/8.
absl::Status CheckWeights(const std::vector<float>& weights, uint64_t version) {
  const float expected = -kLearningRate * static_cast<float>(version);
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] != expected) {
      return absl::DataLossError(absl::StrCat(
          "weight ", i, " is ", weights[i], " at version ", version,
          ", not ", expected, ": a push was applied twice or in part"));
    }
  }
  return absl::OkStatus();
}

absl::Status Run() {
  absl::StatusOr<ClientOptions> options = ClientOptions::FromEnvironment();
  if (!options.ok()) return options.status();
  const int steps = absl::GetFlag(FLAGS_steps);
  ModelSpec model;
  model.tensors.push_back({"w",
                           DType::kFloat32,
                           {absl::GetFlag(FLAGS_elements)},
                           InitializerSpec::Zeros()});
  model.optimizer = OptimizerSpec::Sgd(kLearningRate);
  absl::StatusOr<std::unique_ptr<ParameterClient>> client =
      ParameterClient::Connect(*options);
  if (!client.ok()) return client.status();
  absl::StatusOr<Registration> reg = (*client)->Declare(model, steps, 1);
  if (!reg.ok()) return reg.status();
  TensorValues weights;
  absl::StatusOr<uint64_t> version = (*client)->Pull(reg->next_step, weights);
  if (!version.ok()) return version.status();
  const std::vector<float> gradient(model.tensors[0].num_elements(), 1.0f);
  DataCursor cursor = reg->cursor;
  for (uint64_t step = reg->next_step; step < static_cast<uint64_t>(steps);
       ++step) {
    ++cursor.examples_done;
    std::unique_ptr<StepPush> push =
        (*client)->StartStep({step, *version, 1, cursor}, /*pull_after=*/true);
    if (absl::Status s = push->Send(0, gradient); !s.ok()) return s;
    version = push->FinishWithPull(weights);
    if (!version.ok()) {
      return absl::Status(version.status().code(),
                          absl::StrCat("the push of step ", step, ": ",
                                       version.status().message()));
    }
    if (absl::Status s = CheckWeights(weights[0], *version); !s.ok()) return s;
  }
  std::printf("exact_push_program: version %llu, every weight -V/8\n",
              static_cast<unsigned long long>(*version));
  std::fflush(stdout);
  return (*client)->Finish();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = ps::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "exact_push_program: %s\n",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
