#ifndef PS_DEPLOY_LOCAL_TRAINING_PROGRESS_H_
#define PS_DEPLOY_LOCAL_TRAINING_PROGRESS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace ps {

// One epoch of a job, as its workers logged it.
struct EpochRecord {
  int epoch = 0;  // 1-based.
  // Mean of the losses the workers logged with this epoch (each the mean
  // over --log_every steps); nullopt if none was logged.
  std::optional<double> train_loss;
  // Rank 0's last test accuracy in this epoch (at its end, or the final one
  // for the last epoch).
  std::optional<double> test_accuracy;
};

// The job as its workers' progress lines tell it.
struct ProgressSnapshot {
  bool started = false;  // A step line was seen.
  int epoch = 0;         // 1-based, of the most advanced line.
  int epochs = 0;
  int64_t step = 0;  // In the epoch, 1-based.
  int64_t steps_per_epoch = 0;
  double loss = 0;  // Mean of each rank's latest logged loss.
  double samples_per_second = 0;
  std::string eta;  // As the worker printed it, e.g. "1:05".
  std::optional<double> last_test_accuracy;
  // The epoch of that evaluation, and whether it was at the epoch's end.
  int last_eval_epoch = 0;
  bool last_eval_at_epoch_end = false;
  // Done steps / planned steps, in [0, 1].
  double fraction = 0;
};

// Reads the progress lines of our worker binary's log (common/progress_line.h:
// "... [worker 0] info: epoch 2/10 step 100/469 loss 0.4311 samples/s 21325
// eta 0:12", "... test accuracy 0.8710 after 9.1s", "final test accuracy:
// 0.8971") and keeps the job's progress and per-epoch history. Lines of
// other programs are not recognized.
//
// Thread-safety: every method may be called from any thread.
class TrainingProgress {
 public:
  enum class LineKind {
    kOther,
    kStart,  // Rank 0's "training N steps: E epochs of S steps, ...".
    kStep,
    kTestAccuracy,
    kFinalAccuracy
  };

  // Takes one line of worker `rank`; says what it was.
  LineKind Feed(int rank, absl::string_view line);

  ProgressSnapshot Snapshot() const;
  // Every epoch seen, in order.
  std::vector<EpochRecord> History() const;

 private:
  struct Accumulator {
    double loss_sum = 0;
    int losses = 0;
    std::optional<double> test_accuracy;
  };
  struct RankState {
    int epoch = 0;
    int64_t step = 0;
    double loss = 0;
  };

  mutable absl::Mutex mu_;
  ProgressSnapshot latest_ ABSL_GUARDED_BY(mu_);
  std::map<int, RankState> ranks_ ABSL_GUARDED_BY(mu_);
  std::map<int, Accumulator> epochs_ ABSL_GUARDED_BY(mu_);
  int max_epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

// The history as CSV: "epoch,train_loss,test_accuracy", one row an epoch,
// empty fields where nothing was logged.
std::string HistoryCsv(const std::vector<EpochRecord>& history);
// Reads what HistoryCsv wrote.
absl::StatusOr<std::vector<EpochRecord>> ParseHistoryCsv(absl::string_view csv);
// A resumed run's history: `later`'s values, and `earlier`'s where `later`
// has none (epochs done before the resume). Ordered by epoch.
std::vector<EpochRecord> MergeHistory(const std::vector<EpochRecord>& earlier,
                                      const std::vector<EpochRecord>& later);

}  // namespace ps

#endif  // PS_DEPLOY_LOCAL_TRAINING_PROGRESS_H_
