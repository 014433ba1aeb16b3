#ifndef PS_COMMON_SLURM_LISTS_H_
#define PS_COMMON_SLURM_LISTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// Slurm's compressed lists, as its environment variables carry them.

// A host list ($SLURM_STEP_NODELIST, $SLURM_JOB_NODELIST), in order:
//   "node[01-04,07]"  node01 node02 node03 node04 node07 (the lower bound's
//                     digits give the width: "[8-10]" is 8 9 10, "[08-10]"
//                     is 08 09 10)
//   "a[1-2],b3"       a1 a2 b3
//   "r[1-2]n[1-2]"    r1n1 r1n2 r2n1 r2n2 (several brackets: every
//                     combination, the first varying slowest)
//   "n[1-2]-ib"       n1-ib n2-ib
// InvalidArgument, quoting the list, for an empty list or name, brackets
// that do not match or nest, a bound that is not a number, a range that
// runs backwards, or more than 65536 hosts.
absl::StatusOr<std::vector<std::string>> ExpandSlurmHostList(
    absl::string_view list);

// Tasks per node ($SLURM_STEP_TASKS_PER_NODE), one count per node in the
// host list's order: "2(x3),1" is 2 2 2 1. InvalidArgument, quoting the
// list, for anything else or a count below 1.
absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(
    absl::string_view list);

}  // namespace ps

#endif  // PS_COMMON_SLURM_LISTS_H_
