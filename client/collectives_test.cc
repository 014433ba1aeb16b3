// ps::Collectives against the shards' real collective service, in process:
// 1 and 2 servers, 1 to 3 ranks (each a thread with its own client), every
// result against a reference computed here in rank order.

#include "client/collectives.h"  // First: must be self-contained.

#include "client/rpc_header_macros.h"

static_assert(!PS_SAW_PROTOBUF_HEADER,
              "client/collectives.h includes a protobuf header");
static_assert(!PS_SAW_GRPC_HEADER,
              "client/collectives.h includes a gRPC header");

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/parameter_server.grpc.pb.h"
#include "server/blocking_stream_service.h"
#include "server/collective_service.h"
#include "server/grpc_server.h"

namespace ps {
namespace {

// One shard's collectives on 127.0.0.1, as the server binary serves them.
class Shard {
 public:
  Shard(int index, int num_ranks) {
    server::CollectiveServiceOptions options;
    options.server_index = index;
    options.num_workers = num_ranks;
    service_ = std::make_unique<server::CollectiveService>(options);
    service_->AddTo(streams_);
    server::GrpcServerOptions server_options;
    server_options.stream_service = &streams_;
    server_options.max_message_bytes = 64 << 20;
    auto started = server::GrpcServer::Start(
        "127.0.0.1:0", &typed_, proto::ParameterServer::service_full_name(),
        server_options);
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) server_ = *std::move(started);
  }
  std::string address() const {
    return absl::StrCat("127.0.0.1:", server_->port());
  }

 private:
  proto::ParameterServer::Service typed_;
  server::BlockingStreamService streams_{0};
  std::unique_ptr<server::CollectiveService> service_;
  std::unique_ptr<server::GrpcServer> server_;
};

class Job {
 public:
  Job(int num_servers, int num_ranks) : num_ranks_(num_ranks) {
    ClientOptions options;
    for (int s = 0; s < num_servers; ++s) {
      shards_.push_back(std::make_unique<Shard>(s, num_ranks));
      options.servers.push_back(shards_.back()->address());
    }
    options.connect_timeout = absl::Seconds(30);
    options_ = options;
    for (int r = 0; r < num_ranks; ++r) clients_.push_back(Connect(r));
  }

  // A new client for `rank`: a restarted process.
  std::unique_ptr<Collectives> Connect(int rank) {
    ClientOptions options = options_;
    options.rank = rank;
    auto client = Collectives::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  int num_ranks() const { return num_ranks_; }

  // Runs `body(rank, client)` on a thread per rank.
  void OnEveryRank(const std::function<void(int, Collectives&)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < num_ranks_; ++r) {
      threads.emplace_back([&, r] { body(r, *clients_[r]); });
    }
    for (auto& t : threads) t.join();
  }

 private:
  const int num_ranks_;
  ClientOptions options_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<std::unique_ptr<Collectives>> clients_;
};

// Rank r's values of a tensor of n elements: distinct per rank and element,
// not exactly representable sums, so that the order of summing shows.
std::vector<float> ValuesOf(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>((rank + 1) * 0.1 + static_cast<double>(i % 97) *
                                                     (rank % 2 ? -1.3 : 0.7));
  }
  return v;
}

std::vector<float> Reference(ReduceOp op, int num_ranks, size_t n) {
  std::vector<float> acc = ValuesOf(0, n);
  for (int r = 1; r < num_ranks; ++r) {
    const std::vector<float> v = ValuesOf(r, n);
    for (size_t i = 0; i < n; ++i) {
      if (op == ReduceOp::kMin) acc[i] = std::min(acc[i], v[i]);
      if (op == ReduceOp::kMax) acc[i] = std::max(acc[i], v[i]);
      if (op == ReduceOp::kSum || op == ReduceOp::kAverage) acc[i] += v[i];
    }
  }
  if (op == ReduceOp::kAverage) {
    for (float& a : acc) a /= static_cast<float>(num_ranks);
  }
  return acc;
}

class CollectivesTest : public ::testing::TestWithParam<std::tuple<int, int>> {
};

TEST_P(CollectivesTest, AllreduceMatchesTheRankOrderReferenceBitForBit) {
  const auto [num_servers, num_ranks] = GetParam();
  Job job(num_servers, num_ranks);
  const std::vector<std::vector<int64_t>> shapes = {{}, {3, 4}, {300, 401}};
  job.OnEveryRank([&](int rank, Collectives& c) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax}) {
      for (const auto& shape : shapes) {
        size_t n = 1;
        for (int64_t d : shape) n *= d;
        std::vector<float> out(n);
        absl::Status s =
            c.Allreduce(absl::StrCat("t", n, ".", static_cast<int>(op)), op,
                        shape, ValuesOf(rank, n), absl::MakeSpan(out));
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_EQ(out, Reference(op, num_ranks, n))
            << "rank " << rank << " shape of " << n;
      }
    }
  });
}

TEST_P(CollectivesTest, AllgatherBroadcastAndBytes) {
  const auto [num_servers, num_ranks] = GetParam();
  Job job(num_servers, num_ranks);
  job.OnEveryRank([&](int rank, Collectives& c) {
    // Rank r sends r + 1 rows of 2.
    std::vector<float> rows = ValuesOf(rank, 2 * (rank + 1));
    absl::StatusOr<GatheredTensor> gathered =
        c.Allgather("g", {rank + 1, 2}, rows);
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    std::vector<float> expected;
    std::vector<int64_t> dims;
    for (int r = 0; r < num_ranks; ++r) {
      const std::vector<float> v = ValuesOf(r, 2 * (r + 1));
      expected.insert(expected.end(), v.begin(), v.end());
      dims.push_back(r + 1);
    }
    EXPECT_EQ(gathered->values, expected);
    EXPECT_EQ(gathered->first_dims, dims);

    const int root = num_ranks - 1;
    std::vector<float> w = ValuesOf(rank, 70000);  // Spread over servers.
    ASSERT_TRUE(c.Broadcast("w", root, {70000}, absl::MakeSpan(w)).ok());
    EXPECT_EQ(w, ValuesOf(root, 70000));

    absl::StatusOr<std::string> bytes = c.BroadcastBytes(
        "", root, rank == root ? std::string("pickle\0bytes", 12) : "");
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, std::string("pickle\0bytes", 12));
    EXPECT_TRUE(c.Barrier().ok());
  });
}

TEST_P(CollectivesTest, StartedCollectivesOverlapAndKeepTheirOrder) {
  const auto [num_servers, num_ranks] = GetParam();
  Job job(num_servers, num_ranks);
  job.OnEveryRank([&](int rank, Collectives& c) {
    // Unnamed calls of different shapes, in flight together: matched by
    // the order they started in, whatever order they reach the servers.
    std::vector<std::vector<float>> in, out;
    for (size_t n : {5, 70000, 1, 3}) {
      in.push_back(ValuesOf(rank, n));
      out.emplace_back(n);
    }
    std::vector<std::unique_ptr<PendingCollective>> pending;
    for (size_t i = 0; i < in.size(); ++i) {
      const int64_t n = static_cast<int64_t>(in[i].size());
      pending.push_back(c.StartAllreduce("", ReduceOp::kSum, {n}, in[i],
                                         absl::MakeSpan(out[i])));
    }
    GatheredTensor gathered;
    std::vector<float> row = {static_cast<float>(rank)};
    auto gather = c.StartAllgather("", {1}, row, &gathered);
    for (size_t i = 0; i < in.size(); ++i) {
      absl::Status s = pending[i]->Wait();
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_TRUE(pending[i]->Done());
      EXPECT_EQ(out[i], Reference(ReduceOp::kSum, num_ranks, in[i].size()));
    }
    ASSERT_TRUE(gather->Wait().ok());
    EXPECT_EQ(gathered.values.size(), static_cast<size_t>(num_ranks));
  });
}

TEST(CollectivesErrorsTest, MismatchesAreRefusedOnEveryRankNamingTheRank) {
  Job job(2, 3);
  job.OnEveryRank([&](int rank, Collectives& c) {
    const int64_t n = rank == 1 ? 4 : 3;
    std::vector<float> v(n, 1.0f);
    absl::Status s =
        c.Allreduce("m", ReduceOp::kSum, {n}, v, absl::MakeSpan(v));
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("rank 1 sends shape [4], not [3]"),
              std::string::npos)
        << s;
    // An unknown root: refused on every rank alike.
    std::vector<float> w(2);
    s = c.Broadcast("b", 7, {2}, absl::MakeSpan(w));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("unknown root rank 7"), std::string::npos) << s;
    // Later calls still work.
    float one = 1.0f, sum = 0.0f;
    ASSERT_TRUE(
        c.Allreduce("ok", ReduceOp::kSum, {}, {&one, 1}, {&sum, 1}).ok());
    EXPECT_EQ(sum, 3.0f);
  });
}

TEST(CollectivesErrorsTest, ARestartedRankRepeatingACallGetsTheSameResult) {
  Job job(2, 2);
  std::vector<std::vector<float>> got(2);
  job.OnEveryRank([&](int rank, Collectives& c) {
    got[rank] = ValuesOf(rank, 70000);
    ASSERT_TRUE(c.Allreduce("grad", ReduceOp::kSum, {70000}, got[rank],
                            absl::MakeSpan(got[rank]))
                    .ok());
  });
  EXPECT_EQ(got[0], got[1]);
  // Rank 1 restarts: its new client's first "grad" is #1 again, with other
  // values. Alone, it gets what both got, and adds nothing.
  std::unique_ptr<Collectives> restarted = job.Connect(1);
  ASSERT_NE(restarted, nullptr);
  std::vector<float> again(70000, 1000.0f);
  ASSERT_TRUE(restarted
                  ->Allreduce("grad", ReduceOp::kSum, {70000}, again,
                              absl::MakeSpan(again))
                  .ok());
  EXPECT_EQ(again, got[1]);
}

TEST_P(CollectivesTest, JoinLetsTheOthersGoOnAndNamesTheLastRank) {
  const auto [num_servers, num_ranks] = GetParam();
  if (num_ranks != 3) GTEST_SKIP() << "three ranks of uneven data";
  Job job(num_servers, num_ranks);
  std::vector<int> lasts(3);
  job.OnEveryRank([&](int rank, Collectives& c) {
    // Rank r has r + 1 batches.
    for (int step = 0; step <= rank; ++step) {
      float v = 1.0f, out = 0.0f;
      ASSERT_TRUE(
          c.Allreduce("loss", ReduceOp::kSum, {}, {&v, 1}, {&out, 1}).ok());
      EXPECT_EQ(out, static_cast<float>(3 - step)) << "step " << step;
    }
    absl::StatusOr<int> last = c.Join();
    ASSERT_TRUE(last.ok()) << last.status();
    lasts[rank] = *last;
    // With one server, the order of joins is the one it saw: rank 2 has
    // the most batches. With two, server 0 may see rank 1's join late.
    if (num_servers == 1) {
      EXPECT_EQ(*last, 2);
    }
    // Every rank again, counts of "loss" from 1.
    float v = 1.0f, out = 0.0f;
    ASSERT_TRUE(
        c.Allreduce("loss", ReduceOp::kSum, {}, {&v, 1}, {&out, 1}).ok());
    EXPECT_EQ(out, 3.0f);
  });
  EXPECT_EQ(lasts[0], lasts[1]);
  EXPECT_EQ(lasts[1], lasts[2]);
}

INSTANTIATE_TEST_SUITE_P(ServersAndRanks, CollectivesTest,
                         ::testing::Combine(::testing::Values(1, 2),
                                            ::testing::Values(1, 2, 3)));

}  // namespace
}  // namespace ps
