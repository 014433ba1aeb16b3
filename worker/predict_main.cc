// Uses a model the worker trained (--save_model):
//   predict --model=cnn --model_file=m.model                 test accuracy
//   predict --model=cnn --model_file=m.model --images=x.idx  one class a line
//
// Exit codes: 0 done; 1 failed; 2 bad flags, model or data.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/device.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "worker/idx_reader.h"
#include "worker/nn/model.h"
#include "worker/nn/model_description.h"
#include "worker/predict.h"

ABSL_FLAG(std::string, model, "784-256-128-10",
          "The network the model file was trained as: the worker's --model "
          "(layer sizes, a preset, a layer stack or @file)");
ABSL_FLAG(std::string, model_file, "",
          "The trained model: the file the worker's --save_model wrote");
ABSL_FLAG(std::string, images, "",
          "An IDX images file (gzipped or not) to classify: prints one class "
          "a line, in file order. Empty: measure accuracy on the test split "
          "of --data_dir instead");
ABSL_FLAG(std::string, labels, "",
          "With --images: its IDX labels file; prints the accuracy instead "
          "of the classes");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Directory with the Fashion-MNIST IDX files (without --images)");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or cuda");
ABSL_FLAG(int, batch_size, 256, "Examples per forward pass");

namespace ps::worker {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitBadConfig = 2;

int Fail(const absl::Status& status, int code) {
  std::fprintf(stderr, "predict: %s\n", std::string(status.message()).c_str());
  return code;
}

int Run() {
  const std::string model_file = absl::GetFlag(FLAGS_model_file);
  if (model_file.empty()) {
    return Fail(absl::InvalidArgumentError("--model_file is required"),
                kExitBadConfig);
  }
  const std::string images_path = absl::GetFlag(FLAGS_images);
  const std::string labels_path = absl::GetFlag(FLAGS_labels);
  if (images_path.empty() && !labels_path.empty()) {
    return Fail(absl::InvalidArgumentError("--labels needs --images"),
                kExitBadConfig);
  }
  const int batch_size = absl::GetFlag(FLAGS_batch_size);
  if (batch_size < 1 || batch_size > (1 << 20)) {
    return Fail(absl::InvalidArgumentError("--batch_size must be in [1, 2^20]"),
                kExitBadConfig);
  }
  absl::StatusOr<nn::ModelDescription> description =
      nn::ModelDescription::FromFlag(absl::GetFlag(FLAGS_model));
  if (!description.ok()) return Fail(description.status(), kExitBadConfig);

  absl::StatusOr<LabeledImages> data;
  if (images_path.empty()) {
    data = LoadFashionMnist(absl::GetFlag(FLAGS_data_dir), Split::kTest);
  } else if (labels_path.empty()) {
    data = LoadIdxImages(images_path);
  } else {
    data = LoadLabeledImages(images_path, labels_path);
  }
  if (!data.ok()) return Fail(data.status(), kExitBadConfig);

  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
      kernels::CreateBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok()) return Fail(backend.status(), kExitBadConfig);
  absl::StatusOr<std::unique_ptr<nn::Model>> model =
      LoadTrainedModel(*description, model_file, batch_size, backend->get());
  if (!model.ok()) {
    return Fail(model.status(), absl::IsInvalidArgument(model.status()) ||
                                        absl::IsNotFound(model.status())
                                    ? kExitBadConfig
                                    : kExitFailed);
  }

  if (!images_path.empty() && labels_path.empty()) {
    absl::StatusOr<std::vector<int>> classes = Classify(**model, *data);
    if (!classes.ok()) return Fail(classes.status(), kExitBadConfig);
    for (int c : *classes) std::printf("%d\n", c);
    return 0;
  }
  absl::StatusOr<double> accuracy = Accuracy(**model, *data);
  if (!accuracy.ok()) return Fail(accuracy.status(), kExitBadConfig);
  std::printf("accuracy: %.4f on %lld examples\n", *accuracy,
              static_cast<long long>(data->num_examples));
  return 0;
}

}  // namespace
}  // namespace ps::worker

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Loads a model the worker trained (--save_model) and prints its "
      "accuracy on the Fashion-MNIST test split, or on --images with "
      "--labels, or the class of each of --images.\n"
      "Exit codes: 0 done; 1 failed; 2 bad flags, model file or data.");
  absl::ParseCommandLine(argc, argv);
  // Log lines (the backend's) go to stderr: stdout holds only the results.
  spdlog::set_default_logger(spdlog::stderr_color_mt("predict"));
  return ps::worker::Run();
}
