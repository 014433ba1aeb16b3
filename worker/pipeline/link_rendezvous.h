#ifndef PS_WORKER_PIPELINE_LINK_RENDEZVOUS_H_
#define PS_WORKER_PIPELINE_LINK_RENDEZVOUS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/pipeline/link_routes.h"
#include "worker/pipeline/pipeline_place.h"
#include "worker/pipeline/stage_link.h"

namespace ps::worker::pipeline {

// A worker's links to the stages before and after it in its replica; null
// at the ends of the pipeline.
struct Neighbours {
  std::unique_ptr<StageLink> previous;
  std::unique_ptr<StageLink> next;
};

// What names a job's links: its --job_id and servers, so that two jobs on
// one host never meet.
uint64_t JobKey(absl::string_view job_id, absl::string_view servers);

// The abstract socket at which stage `stage` of replica `replica` of job
// `job_key` waits for stage + 1 (common/local_socket.h).
std::string LinkSocketName(uint64_t job_key, int replica, int stage);

// Connects a worker to its neighbours. On one host the workers learn each
// other's places from their ranks (the launcher's, or a scheduler's), so
// each stage but the last listens at its LinkSocketName and each stage but
// the first connects to its predecessor's, retrying until `timeout` while
// the predecessor starts. The listener admits only a process of this user
// that says it is the next stage of the same replica and job.
//
// A neighbour on another host is reached over TCP where `routes` says
// (link_routes.h; the launcher reserves the ports): the stage listens at
// routes.listen, or connects to routes.previous, and the listener admits
// only a hello that names the next stage, carries the job's secret and
// this host's byte order, and tells a peer it refuses why (the connecting
// stage then fails at once, PermissionDenied). A port still taken at
// `timeout` (another process took it after the launcher let it go) is
// FailedPrecondition naming it.
//
// Every link then fails a read or write that waits longer than
// `idle_timeout` for its peer (a peer that dies closes its end at once;
// this is for one that hangs). DeadlineExceeded naming the neighbour that
// did not come in time.
absl::StatusOr<Neighbours> ConnectNeighbours(const PipelinePlace& place,
                                             uint64_t job_key,
                                             absl::Duration timeout,
                                             absl::Duration idle_timeout,
                                             const LinkRoutes& routes = {});

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_LINK_RENDEZVOUS_H_
