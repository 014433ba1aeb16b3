// The launcher's flags (launch_main.cc reads them as RunSettings, by this
// file's name; `launch --help` lists them). Which of them define a run, and
// so may not change on --resume, is run_flags.h's to say.

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"

ABSL_FLAG(int, num_servers, 2,
          "Parameter-server shards to start; with --pipeline_stages and our "
          "worker, shards of each stage's server group (stages x this "
          "servers in all).");
ABSL_FLAG(int, num_workers, 2, "Workers to start.");
ABSL_FLAG(std::string, model, "784-256-128-10",
          "The network our worker trains: MLP layer sizes (784-256-128-10), "
          "a preset (mlp, cnn), a layer stack (\"input 1x28x28; conv 32 3x3 "
          "pad 1; relu; ...\") or @file holding one (see "
          "worker/nn/model_description.h); the servers hold whatever rank 0 "
          "declares.");
ABSL_FLAG(int, epochs, 10, "Training epochs.");
ABSL_FLAG(int, batch_size, 64, "Examples per worker per step.");
ABSL_FLAG(int, pipeline_stages, 1,
          "Pipeline parallelism: split --model's layers into this many "
          "stages, each a worker; --num_workers is then replicas x stages "
          "(rank = replica x stages + stage) and --batch_size is per "
          "replica. Our worker: each stage's parameters on a server group of "
          "their own (--num_servers each), in any --mode but allreduce. "
          "Programs after -- get PS_PIPELINE_STAGES (sync, one group).");
ABSL_FLAG(int, micro_batches, 1,
          "With --pipeline_stages: micro-batches per step (GPipe); must "
          "divide --batch_size.");
ABSL_FLAG(std::string, worker_memory_budget, "0",
          "Cap on each of our workers' tensor memory, in bytes with an "
          "optional K, M or G (0: none): a job whose workers would need more "
          "is refused before anything starts, naming the smallest "
          "--pipeline_stages that fits (worker/pipeline/memory_budget.h).");
ABSL_FLAG(std::string, mode, "sync",
          "Consistency: sync|ssp|async, or allreduce: no parameter servers, "
          "the workers average gradients over a Gloo ring (one coordinator "
          "process for their rendezvous).");
ABSL_FLAG(int, staleness, 0,
          "--mode=ssp: how many steps a worker may lead the slowest (>= 1; "
          "needed with ssp).");
ABSL_FLAG(std::string, optimizer, "",
          "adam|sgd; empty: what the training program declares (a "
          "paramserver.torch script declares the optimizer it wraps), else "
          "the servers' default, adam.");
ABSL_FLAG(std::string, lr_schedule, "constant",
          "constant (the servers' default), or cosine: the servers decay the "
          "learning rate to 0 over the planned steps (./run.sh's main job).");
ABSL_FLAG(bool, checkpoints, true,
          "Servers checkpoint (into --checkpoint_dir), so that a restarted "
          "server, or the run on --resume, goes on from there. Without, a "
          "server that dies ends the job and Ctrl-C loses the run.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Where the servers checkpoint; empty: the run directory's "
          "checkpoints/.");
ABSL_FLAG(std::string, run_dir, "",
          "The run's directory (must not exist or be empty): run.txt, logs/ "
          "(every process's full log), checkpoints/, curves.csv and "
          "curves.png. Empty: runs/<date>-<time>-<random> here.");
ABSL_FLAG(std::string, resume, "",
          "Resume the stopped or failed run in this directory, with the "
          "flags it was started with (run.txt) and its checkpoints; flags "
          "that define a run (--epochs, --model, ...) may not be given.");
ABSL_FLAG(std::string, extend, "",
          "Train the run in this directory further, finished or not, from "
          "its checkpoints, with the flags given here changed: --epochs (the "
          "new total; epochs go on numbering), --max_steps, --learning_rate, "
          "--lr_schedule (the schedule spans the new total from the step "
          "reached), and --log_every, --eval_every, --save_model, --device, "
          "--auth, --server_flags, --worker_flags. The others (--model, "
          "--num_servers, --mode, ...) are the run's. Recorded as a segment "
          "in run.txt; the checkpoints from before are kept in "
          "checkpoints/before-segment-N/.");
ABSL_FLAG(int, max_restarts, 3,
          "Restarts, in all, of processes that fail while the workers run "
          "(not for exit code 2, bad configuration): a server restores its "
          "latest checkpoint, a worker resumes where the servers recorded "
          "it. 0: the first failure ends the job.");
ABSL_FLAG(absl::Duration, restart_backoff, absl::Seconds(1),
          "Wait before a restart, doubled at each restart of the same "
          "process (at most 30s).");
ABSL_FLAG(std::string, output, "auto",
          "progress: one progress line (a bar on a terminal, else a line "
          "every --progress_interval), each epoch's test accuracy, warnings "
          "and errors; every line is in the run's logs/. stream: every line "
          "of every process. auto: progress for our worker, stream for a "
          "program after --.");
ABSL_FLAG(absl::Duration, progress_interval, absl::Seconds(10),
          "--output=progress off a terminal: a progress line this often.");
ABSL_FLAG(int, log_every, 100,
          "Our worker logs loss and speed every this many steps.");
ABSL_FLAG(int, eval_every, 0,
          "Worker 0 also measures test accuracy every this many steps (0: at "
          "each epoch's end).");
ABSL_FLAG(int64_t, max_steps, 0,
          "Our workers stop after this many steps (0: after --epochs).");
ABSL_FLAG(absl::Duration, retry_timeout, absl::Seconds(120),
          "How long our workers wait for the servers to come up, and keep "
          "retrying an unreachable one (e.g. while it restarts), before "
          "giving up with exit code 3.");
ABSL_FLAG(int, metrics_port_base, 0,
          "0: no metrics. Else server i serves Prometheus metrics on "
          "http://127.0.0.1:<base+i>/metrics and our worker j on "
          "base+S+j, S the servers in all.");
ABSL_FLAG(double, learning_rate, 0,
          "Learning rate; 0 keeps the server's default for the optimizer.");
ABSL_FLAG(int64_t, seed, 1,
          "Our worker's seed of the initial weights and the data order.");
ABSL_FLAG(std::string, job_id, "",
          "The job's id, given to servers and workers so that servers of "
          "another job refuse them; empty: a new one for this run (kept in "
          "its run.txt).");
ABSL_FLAG(std::string, auth, "none",
          "none: plaintext. tls: the launcher makes a CA, a certificate for "
          "the servers (127.0.0.1, and this host's address on several hosts) "
          "and a job token for this run (openssl), "
          "and clients must check the one and send the other on every call. "
          "mtls: also a certificate the clients must present. The files "
          "live in a private temporary directory, removed at the end.");
ABSL_FLAG(std::string, auth_ca, "",
          "--auth on several hosts: the job's CA and token (--make_auth_ca), "
          "copied to every host; each signs its own certificates with it.");
ABSL_FLAG(std::string, make_auth_ca, "",
          "Makes a job's CA and token (for --auth_ca) in this new directory "
          "and exits; copy it to every host over a channel you trust.");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Directory of the Fashion-MNIST IDX files.");
ABSL_FLAG(std::string, device, "auto", "Worker compute device: auto|cpu|cuda.");
ABSL_FLAG(std::string, save_model, "",
          "If set, worker 0 saves the trained model to this path.");
ABSL_FLAG(std::string, server_flags, "",
          "More flags for every server, e.g. \"--momentum=0.5\".");
ABSL_FLAG(std::string, worker_flags, "", "More flags for every worker.");
ABSL_FLAG(std::string, server_binary, "",
          "Server binary; default: //server:server next to this launcher.");
ABSL_FLAG(std::string, worker_binary, "",
          "Worker binary; default: //worker:worker next to this launcher.");
ABSL_FLAG(int, base_port, 0,
          "0: servers pick free ports; else server i listens on base_port+i.");
ABSL_FLAG(absl::Duration, startup_timeout, absl::Seconds(60),
          "How long servers may take to start listening (restoring a "
          "checkpoint included).");
ABSL_FLAG(absl::Duration, shutdown_timeout, absl::Seconds(30),
          "How long servers may take to exit after the workers finished.");
ABSL_FLAG(absl::Duration, kill_grace, absl::Seconds(5),
          "Time between the stop signal and SIGKILL.");
ABSL_FLAG(int, num_hosts, 1,
          "Hosts the job runs on (torchrun's --nnodes): run the same launch "
          "on each, with its --host_index and the same --rendezvous. Not "
          "given: srun's SLURM_NNODES or mpirun's OMPI_COMM_WORLD_SIZE (one "
          "launch per host), else 1. --num_workers and --num_servers are the "
          "job's, split over the hosts.");
ABSL_FLAG(int, host_index, 0,
          "This host's index in [0, --num_hosts) (torchrun's --node_rank); "
          "host 0 serves the rendezvous and prints the job's summary. Not "
          "given: SLURM_NODEID or OMPI_COMM_WORLD_RANK.");
ABSL_FLAG(std::string, rendezvous, "",
          "HOST:PORT where host 0's launcher listens for the others "
          "(torchrun's --rdzv_endpoint). Not given under srun: the first "
          "host of SLURM_STEP_NODELIST, port 29400.");
ABSL_FLAG(std::string, advertise_address, "",
          "The address this host's servers listen on and the other hosts "
          "reach them at; empty: this host's address on the route to the "
          "rendezvous.");
ABSL_FLAG(int, server_hosts, 0,
          "0: every host runs its share of the server shards beside its "
          "workers. N: hosts 0..N-1 run only server shards, the others only "
          "workers.");
ABSL_FLAG(absl::Duration, host_timeout, absl::Seconds(10),
          "A host whose launcher has not been heard from for this long "
          "(killed, or cut off) fails the job, named by every other host.");
ABSL_FLAG(absl::Duration, rendezvous_timeout, absl::Minutes(5),
          "How long each launcher waits for every host to join the "
          "rendezvous (and for the rendezvous to answer).");
