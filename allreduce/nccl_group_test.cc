#include "allreduce/nccl_group.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "allreduce/bucketed_allreduce.h"
#include "allreduce/compression.h"
#include "allreduce/ring_testing.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/backend_testing.h"
#include "kernels/cuda_backend.h"

// NCCL's all-reduce on the GPUs this machine has: one rank on device 0 (the
// sum of one rank is itself: values must come back unchanged, through the
// bucketed path too), and N ranks in threads, one per device, only where
// there are N devices (NCCL refuses two ranks on one GPU). Without a device
// the tests skip, unless PS_REQUIRE_CUDA=1 (a GPU machine's run must not
// pass by skipping).
namespace ps::allreduce {
namespace {

using ::ps::kernels::testing::Download;
using ::ps::kernels::testing::Upload;

using ::ps::kernels::testing::kNoCudaDevice;
using ::ps::kernels::testing::RequireCuda;

// Skips (returns true) when the machine has fewer than `devices` GPUs;
// with PS_REQUIRE_CUDA=1 a machine with none fails instead.
#define SKIP_WITHOUT_DEVICES(devices)                                      \
  do {                                                                     \
    const int count = kernels::CudaDeviceCount();                          \
    if (count == 0) {                                                      \
      if (RequireCuda()) FAIL() << "PS_REQUIRE_CUDA=1 but no CUDA device"; \
      GTEST_SKIP() << kNoCudaDevice;                                       \
    }                                                                      \
    if (count < (devices)) {                                               \
      GTEST_SKIP() << "needs " << (devices) << " CUDA devices, found "     \
                   << count << ": skipping";                               \
    }                                                                      \
  } while (false)

// From binary16's subnormals up to 64: sums of a few ranks stay finite.
std::vector<float> Values(int rank, size_t n) {
  return SpreadValues(rank + 3, n, -28, 6);
}

NcclOptions OnDevice(int device) {
  NcclOptions options;
  options.device = device;
  options.timeout = absl::Seconds(60);
  return options;
}

TEST(NcclGroupTest, WithoutNcclConnectIsUnimplemented) {
  if (NcclCompiledIn()) GTEST_SKIP() << "built with NCCL";
  RunRingInThreads(1, [](GlooGroup& ring) {
    EXPECT_TRUE(
        absl::IsUnimplemented(NcclGroup::Connect(ring, OnDevice(0)).status()));
  });
}

// Built with NCCL, the library loads (it is where the build found it);
// PS_REQUIRE_CUDA=1 makes that a requirement on a GPU machine too.
TEST(NcclGroupTest, TheLibraryLoadsWhenCompiledIn) {
  if (!NcclCompiledIn()) {
    EXPECT_TRUE(absl::IsUnimplemented(NcclAvailable()));
    GTEST_SKIP() << "built without NCCL";
  }
  EXPECT_TRUE(NcclAvailable().ok()) << NcclAvailable();
}

TEST(NcclGroupTest, RefusesADeviceThatDoesNotExist) {
  if (!NcclAvailable().ok()) GTEST_SKIP() << NcclAvailable();
  RunRingInThreads(1, [](GlooGroup& ring) {
    for (int device : {-1, kernels::CudaDeviceCount()}) {
      EXPECT_TRUE(absl::IsFailedPrecondition(
          NcclGroup::Connect(ring, OnDevice(device)).status()))
          << device;
    }
  });
}

// One rank: NCCL's sum over one rank is the identity, for device buffers in
// float and half, and for a host bucket staged through the device.
TEST(NcclGroupTest, OneRankSumsToItself) {
  SKIP_WITHOUT_DEVICES(1);
  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
      kernels::CreateCudaBackend(0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  RunRingInThreads(1, [&](GlooGroup& ring) {
    absl::StatusOr<std::unique_ptr<NcclGroup>> group =
        NcclGroup::Connect(ring, OnDevice(0));
    ASSERT_TRUE(group.ok()) << group.status();
    EXPECT_EQ((*group)->rank(), 0);
    EXPECT_EQ((*group)->size(), 1);

    const std::vector<float> values = Values(0, 10001);
    absl::StatusOr<std::unique_ptr<kernels::DeviceBuffer>> buffer =
        Upload(**backend, values);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    ASSERT_TRUE((*backend)->Synchronize().ok());
    ASSERT_TRUE((*group)->AllreduceSum((*buffer)->data(), values.size()).ok());
    absl::StatusOr<std::vector<float>> summed = Download(**backend, **buffer);
    ASSERT_TRUE(summed.ok()) << summed.status();
    EXPECT_EQ(*summed, values);

    std::vector<float> bucket = values;
    ASSERT_TRUE(
        (*group)
            ->ReduceBucket(absl::MakeSpan(bucket), Compression::kNone, 0)
            .ok());
    EXPECT_EQ(bucket, values);
    bucket = values;
    ASSERT_TRUE(
        (*group)
            ->ReduceBucket(absl::MakeSpan(bucket), Compression::kFp16, 1)
            .ok());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(bucket[i], HalfToFloat(FloatToHalf(values[i]))) << i;
    }
  });
}

// The worker's path: BucketedAllreduce over NCCL, several buckets, steps in
// a row, scaled tensors, with and without fp16.
TEST(NcclGroupTest, BucketedStepsOnOneRank) {
  SKIP_WITHOUT_DEVICES(1);
  const std::vector<size_t> sizes = {300, 20, 5000, 7, 3};
  for (Compression compression : {Compression::kNone, Compression::kFp16}) {
    SCOPED_TRACE(CompressionName(compression));
    RunRingInThreads(1, [&](GlooGroup& ring) {
      absl::StatusOr<std::unique_ptr<NcclGroup>> group =
          NcclGroup::Connect(ring, OnDevice(0));
      ASSERT_TRUE(group.ok()) << group.status();
      absl::StatusOr<std::unique_ptr<BucketedAllreduce>> made =
          BucketedAllreduce::Create(group->get(), sizes, 4096, compression,
                                    {4});
      ASSERT_TRUE(made.ok()) << made.status();
      BucketedAllreduce& reduce = **made;
      ASSERT_GT(reduce.plan().bucket_sizes.size(), 2);
      for (int step = 0; step < 3; ++step) {
        ASSERT_TRUE(reduce.Begin().ok());
        std::vector<std::vector<float>> values(sizes.size());
        for (int t = static_cast<int>(sizes.size()) - 1; t >= 0; --t) {
          values[t] = Values(step * 10 + t, sizes[t]);
          if (t == 4) values[t] = {60001.0f + step, 4097.0f, 1.0f};
          ASSERT_TRUE(reduce.Add(t, values[t], 2.0f).ok());
        }
        ASSERT_TRUE(reduce.Wait().ok());
        for (size_t t = 0; t < sizes.size(); ++t) {
          absl::Span<const float> sum = reduce.Reduced(t);
          for (size_t i = 0; i < sizes[t]; ++i) {
            const float scaled = 2.0f * values[t][i];
            const float expected = compression == Compression::kFp16 && t != 4
                                       ? HalfToFloat(FloatToHalf(scaled))
                                       : scaled;
            ASSERT_EQ(sum[i], expected) << t << " " << i;
          }
        }
      }
    });
  }
}

// N ranks, one per device (only where the machine has them): float sums
// within a float32 ring's rounding of the exact sum, fp16 within
// Fp16SumBound; every rank gets the same bits.
TEST(NcclGroupTest, RanksOnSeveralDevicesSum) {
  const int ranks = std::max(2, kernels::CudaDeviceCount());
  SKIP_WITHOUT_DEVICES(ranks);
  constexpr size_t kElements = 20000;
  std::vector<double> exact(kElements, 0.0), abs_sum(kElements, 0.0);
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> values = Values(r, kElements);
    for (size_t i = 0; i < kElements; ++i) {
      exact[i] += values[i];
      abs_sum[i] += std::fabs(values[i]);
    }
  }
  for (Compression compression : {Compression::kNone, Compression::kFp16}) {
    SCOPED_TRACE(CompressionName(compression));
    std::vector<std::vector<float>> results(ranks);
    RunRingInThreads(ranks, [&](GlooGroup& ring) {
      absl::StatusOr<std::unique_ptr<NcclGroup>> group =
          NcclGroup::Connect(ring, OnDevice(ring.rank()));
      ASSERT_TRUE(group.ok()) << group.status();
      std::vector<float> bucket = Values(ring.rank(), kElements);
      ASSERT_TRUE(
          (*group)->ReduceBucket(absl::MakeSpan(bucket), compression, 0).ok());
      results[ring.rank()] = bucket;
    });
    for (size_t i = 0; i < kElements; ++i) {
      const double error = std::fabs(results[0][i] - exact[i]);
      const double bound =
          compression == Compression::kFp16
              ? Fp16SumBound(abs_sum[i], ranks)
              : ranks * 0x1p-24 / (1 - ranks * 0x1p-24) * abs_sum[i];
      ASSERT_LE(error, bound) << i;
    }
    for (int r = 1; r < ranks; ++r) EXPECT_EQ(results[r], results[0]) << r;
  }
}

// A rank that never joins the collective: the others' call fails past the
// timeout (the communicator aborted) instead of waiting forever.
TEST(NcclGroupTest, ASilentPeerIsAnErrorNotAHang) {
  SKIP_WITHOUT_DEVICES(2);
  RunRingInThreads(2, [&](GlooGroup& ring) {
    NcclOptions options = OnDevice(ring.rank());
    options.timeout = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<NcclGroup>> group =
        NcclGroup::Connect(ring, options);
    ASSERT_TRUE(group.ok()) << group.status();
    if (ring.rank() == 1) return;  // Silent: destroys its communicator.
    std::vector<float> bucket(1000, 1.0f);
    const absl::Status status =
        (*group)->ReduceBucket(absl::MakeSpan(bucket), Compression::kNone, 0);
    EXPECT_FALSE(status.ok());
    EXPECT_FALSE(
        (*group)
            ->ReduceBucket(absl::MakeSpan(bucket), Compression::kNone, 1)
            .ok())
        << "a failed group stays failed";
  });
}

}  // namespace
}  // namespace ps::allreduce
