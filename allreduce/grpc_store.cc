#include "allreduce/grpc_store.h"

#include <utility>

#include "absl/time/time.h"
#include "gloo/common/error.h"

namespace ps::allreduce {
namespace {

[[noreturn]] void Throw(const absl::Status& status) {
  throw gloo::IoException("rendezvous with the coordinator: " +
                          status.ToString());
}

}  // namespace

GrpcStore::GrpcStore(RendezvousClient* client, std::string prefix)
    : client_(client), prefix_(std::move(prefix)) {}

std::vector<std::string> GrpcStore::Prefixed(
    const std::vector<std::string>& keys) const {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const std::string& key : keys) prefixed.push_back(prefix_ + "/" + key);
  return prefixed;
}

void GrpcStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status =
      client_->Set(prefix_ + "/" + key, std::string(data.begin(), data.end()));
  if (!status.ok()) Throw(status);
}

std::vector<char> GrpcStore::get(const std::string& key) {
  absl::StatusOr<std::vector<std::string>> values =
      client_->Get(Prefixed({key}), absl::FromChrono(kDefaultTimeout));
  if (!values.ok()) Throw(values.status());
  const std::string& value = values->front();
  return std::vector<char>(value.begin(), value.end());
}

void GrpcStore::wait(const std::vector<std::string>& keys) {
  wait(keys, kDefaultTimeout);
}

void GrpcStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  absl::StatusOr<std::vector<std::string>> values =
      client_->Get(Prefixed(keys), absl::FromChrono(timeout));
  if (!values.ok()) Throw(values.status());
}

}  // namespace ps::allreduce
