// Command pscheck validates rendered Kubernetes manifests of the
// parameter-server cluster (the output of kustomize build) offline.
//
// Each document is decoded strictly into its Kubernetes API type with
// apimachinery (unknown or duplicate fields, wrong types and malformed
// quantities are errors), its metadata goes through the API server's
// validators (names, labels, annotations, selectors), then come the rules
// the API server applies that decoding does not (selector matches template
// labels, Job restartPolicy, Indexed Job completions, ...) and our own: the
// servers are a StatefulSet whose serviceName is a headless Service that
// publishes not-ready pods, each shard with its own checkpoint claim, spread
// over the nodes, run through the entrypoint that keeps a finished shard
// finished; Jobs fail on exit code 2 and ignore evictions; no version label
// in immutable templates; no ReadWriteMany on the default storage class;
// checkpoints and models under the run id; GPUs only with the CUDA image;
// ports, counts, ranks and server addresses agree between servers, workers,
// Service, probes and flags; workers meet the servers' TLS, client-certificate
// and token flags, whose files are mounted, and probes of a TLS server go to
// its plaintext --health_port; a worker that runs the user's program gets
// the variables the launcher sets (read from common/worker_environment.cc),
// authentication as variables rather than ps_worker's flags, and on a GPU
// not one of our images without CUDA PyTorch; each worker Job's label
// parameter-server/worker-program, by which the components auth and gpu
// choose their patches, names the program it runs.
// With -runs, the files are runs meant for one namespace: they must share no
// object, claim, pod name or label value, and no Service of one may select
// another's pods.
//
// Usage: pscheck [-worker-environment=FILE] [-runs] FILE|- ...
// Prints every problem, one per line, and exits 1 if there is any.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func checkStream(r io.Reader, vars *workerVariables) (*manifests, []string) {
	p := &problems{}
	m := decodeAll(r, p)
	m.workerVariables = vars
	for _, cm := range m.configMaps {
		checkConfigMap(cm, p)
	}
	for _, svc := range m.services {
		checkService(svc, m, p)
	}
	for _, pvc := range m.claims {
		checkClaim(pvc, p)
	}
	for _, sts := range m.statefulSets {
		checkStatefulSet(sts, m, p)
	}
	for _, job := range m.jobs {
		checkJob(job, m, p)
	}
	checkCluster(m, p)
	checkInstance(m, p)
	return m, p.list
}

func main() {
	workerEnvironment := flag.String("worker-environment", "", "common/worker_environment.cc, where the variables a worker program reads are defined")
	runs := flag.Bool("runs", false, "the files are runs that share one namespace")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: pscheck [-worker-environment=FILE] [-runs] FILE|- ...  (rendered manifests, e.g. kustomize build output)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	var vars *workerVariables
	if *workerEnvironment != "" {
		var err error
		if vars, err = readWorkerVariables(*workerEnvironment); err != nil {
			fmt.Fprintf(os.Stderr, "pscheck: %v\n", err)
			os.Exit(2)
		}
	}
	failed := false
	var all []*manifests
	for _, name := range flag.Args() {
		var r io.Reader = os.Stdin
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				fmt.Fprintf(os.Stderr, "pscheck: %v\n", err)
				os.Exit(2)
			}
			defer f.Close()
			r = f
		}
		m, found := checkStream(r, vars)
		all = append(all, m)
		for _, line := range found {
			fmt.Printf("%s: %s\n", name, line)
		}
		if m.count == 0 && len(found) == 0 {
			found = append(found, "no objects")
			fmt.Printf("%s: no objects\n", name)
		}
		if len(found) > 0 {
			failed = true
			fmt.Printf("pscheck: %s: %d problem(s)\n", name, len(found))
		} else {
			fmt.Printf("pscheck: %s: %d objects, no problems\n", name, m.count)
		}
	}
	if *runs {
		found := checkRuns(flag.Args(), all)
		for _, line := range found {
			fmt.Printf("runs: %s\n", line)
		}
		if len(found) > 0 {
			failed = true
			fmt.Printf("pscheck: runs: %d problem(s)\n", len(found))
		} else {
			fmt.Printf("pscheck: runs: %d runs share a namespace without conflict\n", len(all))
		}
	}
	if failed {
		os.Exit(1)
	}
}
