#ifndef PS_ALLREDUCE_GRPC_STORE_H_
#define PS_ALLREDUCE_GRPC_STORE_H_

#include <chrono>
#include <string>
#include <vector>

#include "allreduce/rendezvous_client.h"
#include "gloo/rendezvous/store.h"

namespace ps::allreduce {

// Gloo's rendezvous store (gloo::rendezvous::Store) over the coordinator:
// the keys of one round, prefixed with "<prefix>/". Gloo's interface has no
// status, so a failed call throws gloo::IoException, as Gloo's own stores
// do; GlooGroup::Connect catches it. Thread-compatible; borrows `client`.
class GrpcStore final : public gloo::rendezvous::Store {
 public:
  GrpcStore(RendezvousClient* client, std::string prefix);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits (up to kDefaultTimeout) for the key, as Gloo's FileStore does.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::vector<std::string> Prefixed(const std::vector<std::string>& keys) const;

  RendezvousClient* const client_;
  const std::string prefix_;
};

}  // namespace ps::allreduce

#endif  // PS_ALLREDUCE_GRPC_STORE_H_
