#include "server/register_precheck.h"

#include <string>

#include "common/declaration_proto.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"

namespace ps::server {
namespace {

proto::RegisterRequest Request(const ModelSpec& model) {
  proto::RegisterRequest request;
  request.mutable_header()->set_worker_rank(3);
  request.mutable_header()->set_job_id("job-1");
  ModelSpecToProto(model, request.mutable_declaration());
  request.set_incarnation(7);
  request.set_planned_steps(100);
  return request;
}

TEST(RegisterPrecheckTest, ReadsTheHeaderAndCountsTensors) {
  const proto::RegisterRequest request = Request(MlpModelSpec({8, 4, 2}));
  absl::StatusOr<RegisterPreview> preview =
      PreviewRegister(request.SerializeAsString());
  ASSERT_TRUE(preview.ok()) << preview.status();
  EXPECT_EQ(preview->header.worker_rank(), 3);
  EXPECT_EQ(preview->header.job_id(), "job-1");
  EXPECT_EQ(preview->tensors, 4u);
}

TEST(RegisterPrecheckTest, ReadsAMessageInSlices) {
  const std::string bytes =
      Request(MlpModelSpec({8, 4, 2})).SerializeAsString();
  grpc::Slice slices[3] = {grpc::Slice(bytes.substr(0, 5)),
                           grpc::Slice(bytes.substr(5, 40)),
                           grpc::Slice(bytes.substr(45))};
  absl::StatusOr<RegisterPreview> preview =
      PreviewRegister(grpc::ByteBuffer(slices, 3));
  ASSERT_TRUE(preview.ok()) << preview.status();
  EXPECT_EQ(preview->header.job_id(), "job-1");
  EXPECT_EQ(preview->tensors, 4u);
  grpc::Slice cut(bytes.substr(0, bytes.size() - 3));
  EXPECT_FALSE(PreviewRegister(grpc::ByteBuffer(&cut, 1)).ok());
}

TEST(RegisterPrecheckTest, RefusesBytesThatAreNoRequest) {
  const std::string bytes =
      Request(MlpModelSpec({8, 4, 2})).SerializeAsString();
  EXPECT_FALSE(PreviewRegister(bytes.substr(0, bytes.size() - 3)).ok());
  EXPECT_FALSE(PreviewRegister(std::string("\xff\xff\xff\xff\x0f", 5)).ok());
  EXPECT_TRUE(PreviewRegister("").ok());  // An empty message is one.
}

TEST(RegisterPrecheckTest, TheLargestValidRequestFitsTheBound) {
  DeclarationLimits limits;
  limits.max_tensors = 50;
  limits.max_name_bytes = 40;
  limits.max_rank = 4;
  ModelSpec model;
  for (int i = 0; i < limits.max_tensors; ++i) {
    TensorSpec t;
    t.name =
        std::string(limits.max_name_bytes - 3, 'n') + std::to_string(100 + i);
    t.shape = {int64_t{1} << 40, 1 << 30, 1 << 30, 1 << 30};
    t.initializer.kind = InitializerSpec::Kind::kNormal;
    t.initializer.mean = 0.123456789;
    t.initializer.stddev = 1.23456789e-7;
    t.initializer.fan_in = int64_t{1} << 50;
    t.initializer.fan_out = int64_t{1} << 50;
    model.tensors.push_back(t);
  }
  const size_t bytes = Request(model).ByteSizeLong();
  EXPECT_LE(bytes, MaxRegisterBytes(limits));
  // And not by far: a few times the largest request at most.
  EXPECT_LE(MaxRegisterBytes(limits), 4 * bytes);
}

}  // namespace
}  // namespace ps::server
