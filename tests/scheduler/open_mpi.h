#ifndef PS_TESTS_SCHEDULER_OPEN_MPI_H_
#define PS_TESTS_SCHEDULER_OPEN_MPI_H_

#include <string>
#include <vector>

#include "common/subprocess.h"

namespace ps::testing {

// Debian's Open MPI `mpirun` on this machine, for tests: no daemon to start
// (mpirun is its own on one node).

// "" where mpirun can run here; else why not, for a test's skip message.
std::string WhyMpirunUnavailable();

// How a test starts `mpirun -np NUM_PROCESSES ARGV...` on this machine:
// TestProcessOptions (tests/cluster_runner.h) with more processes than
// cores allowed (--oversubscribe), none bound to a core (they share two
// with the servers), root allowed where the test runs as root
// (--allow-run-as-root), and $TMPDIR=/tmp, where its session directory's
// socket paths fit (a test's $TEST_TMPDIR may be too long for them).
SubprocessOptions MpirunOptions(const std::string& name, int num_processes,
                                std::vector<std::string> argv);

}  // namespace ps::testing

#endif  // PS_TESTS_SCHEDULER_OPEN_MPI_H_
