#include "server/collective_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace ps::server {
namespace {

// How often a waiting call asks whether its caller went away.
constexpr absl::Duration kCancelCheckPeriod = absl::Milliseconds(100);

}  // namespace

struct CollectiveTable::Outcome {
  bool done = false;
  absl::Status status;
  std::shared_ptr<const CollectiveResult> result;
};

CollectiveTable::CollectiveTable(int num_ranks, size_t cache_bytes)
    : num_ranks_(num_ranks), cache_bytes_(cache_bytes) {}

absl::StatusOr<std::shared_ptr<const CollectiveResult>> CollectiveTable::Run(
    int rank, CollectiveCall call, absl::FunctionRef<bool()> cancelled) {
  if (rank < 0 || rank >= num_ranks_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is outside the job's ", num_ranks_, " ranks"));
  }
  const bool join = call.kind == CollectiveKind::kJoin;
  absl::Status check = CheckCall(call, num_ranks_);
  if (check.ok() && !join && call.name.empty()) {
    check = absl::InvalidArgumentError("a collective needs a name");
  }
  const Key key =
      join ? Key(call.generation, "", 0, 0)
           : Key(call.generation, call.name, call.sequence, call.part);
  std::shared_ptr<Outcome> outcome;
  std::vector<std::pair<Key, Pending*>> ready;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = completed_.find(key); it != completed_.end()) {
      outcome = it->second;
    } else if (auto gone = evicted_.find(
                   {call.generation, std::get<1>(key), call.part});
               pending_.count(key) == 0 && gone != evicted_.end() &&
               gone->second >= call.sequence) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", rank, " repeats ", KindName(call.kind), " '",
                       call.name, "' #", call.sequence,
                       ", which completed and is no longer cached "
                       "(results up to #",
                       gone->second, " were dropped)"));
    } else {
      Pending& pending = pending_[key];
      if (pending.outcome == nullptr) {
        pending.by_rank.resize(num_ranks_);
        pending.outcome = std::make_shared<Outcome>();
      }
      outcome = pending.outcome;
      // A repeated call (a restarted rank) does not contribute again.
      if (pending.by_rank[rank] == nullptr && !pending.combining) {
        if (!check.ok()) {
          pending.invalid = absl::Status(
              check.code(), absl::StrCat(KindName(call.kind), " '", call.name,
                                         "' #", call.sequence, ": rank ", rank,
                                         ": ", check.message()));
        }
        const uint64_t generation = call.generation;
        pending.by_rank[rank] =
            std::make_unique<CollectiveCall>(std::move(call));
        // Each branch may complete the operation, which erases `pending`.
        if (!pending.invalid.ok()) {
          CompleteLocked(key, pending, {true, pending.invalid, nullptr});
        } else if (join) {
          JoinLocked(rank, generation, &ready);
        } else if (Pending* p = ReadyLocked(key, pending)) {
          ready.push_back({key, p});
        }
      }
    }
  }
  for (auto& [k, p] : ready) Finish(k, p);
  return Await(outcome, cancelled);
}

CollectiveTable::Pending* CollectiveTable::ReadyLocked(const Key& key,
                                                       Pending& pending) {
  if (pending.combining || pending.outcome->done) return nullptr;
  const auto gen = generations_.find(std::get<0>(key));
  for (int r = 0; r < num_ranks_; ++r) {
    const bool joined = gen != generations_.end() && gen->second.joined[r];
    if (pending.by_rank[r] == nullptr && !joined) return nullptr;
  }
  pending.combining = true;
  return &pending;
}

void CollectiveTable::JoinLocked(int rank, uint64_t generation,
                                 std::vector<std::pair<Key, Pending*>>* ready) {
  Generation& gen = generations_[generation];
  if (gen.joined.empty()) gen.joined.resize(num_ranks_, false);
  gen.joined[rank] = true;
  gen.last_joined = rank;
  if (std::all_of(gen.joined.begin(), gen.joined.end(),
                  [](bool j) { return j; })) {
    auto result = std::make_shared<CollectiveResult>();
    result->last_rank = gen.last_joined;
    const Key key(generation, "", 0, 0);
    CompleteLocked(key, pending_.at(key), {true, absl::OkStatus(), result});
    return;
  }
  // The operations of this generation may wait for this rank no longer.
  for (auto it = pending_.lower_bound(Key(generation, "", 0, 0));
       it != pending_.end() && std::get<0>(it->first) == generation; ++it) {
    if (std::get<1>(it->first).empty()) continue;  // The join itself.
    if (Pending* p = ReadyLocked(it->first, it->second)) {
      ready->push_back({it->first, p});
    }
  }
}

void CollectiveTable::Finish(const Key& key, Pending* pending) {
  // by_rank does not change once combining: no lock needed to read it.
  std::vector<const CollectiveCall*> calls;
  calls.reserve(pending->by_rank.size());
  for (const auto& call : pending->by_rank) calls.push_back(call.get());
  absl::StatusOr<CollectiveResult> combined = Combine(calls);
  Outcome outcome;
  outcome.done = true;
  if (combined.ok()) {
    outcome.result =
        std::make_shared<const CollectiveResult>(*std::move(combined));
  } else {
    outcome.status = combined.status();
  }
  absl::MutexLock lock(&mu_);
  CompleteLocked(key, *pending, std::move(outcome));
}

void CollectiveTable::CompleteLocked(const Key& key, Pending& pending,
                                     Outcome outcome) {
  const CollectiveCall* first = nullptr;
  for (const auto& call : pending.by_rank) {
    if (call != nullptr) {
      first = call.get();
      break;
    }
  }
  if (outcome.status.ok() && first != nullptr && !first->anonymous &&
      first->kind != CollectiveKind::kJoin) {
    auto [spec, fresh] = specs_.try_emplace(first->name);
    if (fresh) {
      spec->second.kind = first->kind;
      spec->second.op = first->op;
      spec->second.shape = first->shape;
    } else if (std::string diff = SpecDifference(spec->second, *first);
               !diff.empty()) {
      outcome.status = absl::FailedPreconditionError(absl::StrCat(
          "collective name '", first->name, "' is reused for another ",
          "operation (", diff, "): a name identifies one operation; give ",
          "this one another name"));
      outcome.result = nullptr;
    }
  }
  *pending.outcome = std::move(outcome);
  const size_t bytes =
      64 + (pending.outcome->result ? pending.outcome->result->data.size() : 0);
  completed_[key] = pending.outcome;
  completed_order_.push_back(key);
  completed_bytes_ += bytes;
  pending_.erase(key);
  // The newest result stays, whatever its size.
  while (completed_bytes_ > cache_bytes_ && completed_order_.size() > 1) {
    const Key evicted = completed_order_.front();
    completed_order_.pop_front();
    auto it = completed_.find(evicted);
    if (it == completed_.end()) continue;
    auto& gone = evicted_[{std::get<0>(evicted), std::get<1>(evicted),
                           std::get<3>(evicted)}];
    gone = std::max(gone, std::get<2>(evicted));
    completed_bytes_ -=
        64 + (it->second->result ? it->second->result->data.size() : 0);
    completed_.erase(it);
  }
}

absl::StatusOr<std::shared_ptr<const CollectiveResult>> CollectiveTable::Await(
    const std::shared_ptr<Outcome>& outcome,
    absl::FunctionRef<bool()> cancelled) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&outcome->done), kCancelCheckPeriod);
      if (outcome->done) {
        if (!outcome->status.ok()) return outcome->status;
        return outcome->result;
      }
    }
    if (cancelled()) {
      return absl::CancelledError(
          "the call ended before every rank called; its contribution stays");
    }
  }
}

}  // namespace ps::server
