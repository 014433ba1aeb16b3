#include "allreduce/ring_testing.h"

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"

namespace ps::allreduce {

void RunRingInThreads(int size, const std::function<void(GlooGroup&)>& body,
                      absl::Duration timeout) {
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      GroupOptions options;
      options.rank = rank;
      options.size = size;
      options.hostname = "127.0.0.1";
      options.timeout = timeout;
      absl::StatusOr<std::unique_ptr<GlooGroup>> group =
          GlooGroup::Connect(options, store);
      ASSERT_TRUE(group.ok()) << group.status();
      body(**group);
    });
  }
  for (std::thread& t : threads) t.join();
}

std::vector<float> SpreadValues(int seed, size_t n, int min_exponent,
                                int max_exponent) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(min_exponent, max_exponent);
  std::vector<float> values(n);
  for (float& x : values) x = std::ldexp(mantissa(random), exponent(random));
  return values;
}

InProcessCoordinator::InProcessCoordinator(int num_workers,
                                           const std::string& job_id)
    : state_(num_workers), service_(&state_, job_id) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port_);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  EXPECT_NE(server_, nullptr);
}

InProcessCoordinator::~InProcessCoordinator() { server_->Shutdown(); }

std::string InProcessCoordinator::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

}  // namespace ps::allreduce
