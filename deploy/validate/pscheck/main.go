// Command pscheck validates rendered Kubernetes manifests of the
// parameter-server cluster (the output of kustomize build) offline.
//
// Each document is decoded strictly into its Kubernetes API type with
// apimachinery (unknown or duplicate fields, wrong types and malformed
// quantities are errors), its metadata goes through the API server's
// validators (names, labels, annotations, selectors), then come the rules
// the API server applies that decoding does not (selector matches template
// labels, Job restartPolicy, Indexed Job completions, ...) and our own: the
// servers are an Indexed Job whose subdomain is a headless Service that
// publishes not-ready pods; Jobs fail on exit code 2 and ignore evictions;
// no version label in immutable templates; no ReadWriteMany on the default
// storage class; checkpoints and models under the run id; GPUs only with
// the CUDA image; ports, counts, ranks and server addresses agree between
// servers, workers, Service, probes and flags; workers meet the servers'
// TLS, client-certificate and token flags, whose files are mounted, and
// probes of a TLS server go to its plaintext --health_port.
//
// Usage: pscheck FILE|- ...
// Prints every problem, one per line, and exits 1 if there is any.
package main

import (
	"fmt"
	"io"
	"os"
)

func checkStream(r io.Reader) (objects int, found []string) {
	p := &problems{}
	m := decodeAll(r, p)
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
	return m.count, p.list
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pscheck FILE|- ...  (rendered manifests, e.g. kustomize build output)")
		os.Exit(2)
	}
	failed := false
	for _, name := range os.Args[1:] {
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
		objects, found := checkStream(r)
		for _, line := range found {
			fmt.Printf("%s: %s\n", name, line)
		}
		if objects == 0 && len(found) == 0 {
			found = append(found, "no objects")
			fmt.Printf("%s: no objects\n", name)
		}
		if len(found) > 0 {
			failed = true
			fmt.Printf("pscheck: %s: %d problem(s)\n", name, len(found))
		} else {
			fmt.Printf("pscheck: %s: %d objects, no problems\n", name, objects)
		}
	}
	if failed {
		os.Exit(1)
	}
}
