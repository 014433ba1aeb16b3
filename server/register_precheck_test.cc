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

grpc::ByteBuffer Bytes(const proto::RegisterRequest& request) {
  grpc::Slice slice(request.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

TEST(RegisterPrecheckTest, RefusesWhatTheBytesSayBeforeParsing) {
  DeclarationLimits limits;
  limits.max_tensors = 3;
  const ShardIdentity shard{0, 0, 4, "job-1"};
  proto::RegisterRequest request = Request(MlpModelSpec({8, 4}));
  request.mutable_header()->set_protocol_version(kProtocolVersionCurrent);
  request.mutable_header()->set_worker_rank(0);
  // Any fingerprint: the declaration it names is compared once parsed.
  request.mutable_header()->set_partition_fingerprint(12345);
  EXPECT_TRUE(PrecheckRegister(Bytes(request), limits, shard, false).ok());

  request.mutable_header()->set_worker_rank(1);
  EXPECT_EQ(PrecheckRegister(Bytes(request), limits, shard, false).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(PrecheckRegister(Bytes(request), limits, shard, true).ok());

  proto::RegisterRequest other_job = request;
  other_job.mutable_header()->set_job_id("job-2\n");
  const absl::Status job =
      PrecheckRegister(Bytes(other_job), limits, shard, true);
  EXPECT_EQ(job.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(job.message().find('\n'), std::string::npos) << job;

  proto::RegisterRequest many = Request(MlpModelSpec({8, 4, 2}));
  *many.mutable_header() = request.header();
  const absl::Status count = PrecheckRegister(Bytes(many), limits, shard, true);
  EXPECT_EQ(count.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(count.message().find("4 tensors"), std::string::npos) << count;

  // Larger than any request declaring 3 tensors (the size is checked first).
  proto::RegisterRequest large = request;
  large.mutable_header()->set_job_id(std::string(1 << 20, 'j'));
  const absl::Status size = PrecheckRegister(Bytes(large), limits, shard, true);
  EXPECT_EQ(size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(size.message().find("is larger than"), std::string::npos) << size;
}

}  // namespace
}  // namespace ps::server
