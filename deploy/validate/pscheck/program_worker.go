package main

// Workers that run the user's program (a PyTorch script with
// `import paramserver.torch`) instead of ps_worker: they learn their rank,
// the worker count and the servers from the same variables the launcher
// sets for the programs it starts (worker_variables.go reads them from the
// code), one worker per pod of an Indexed Job.

import (
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// The pod's completion index, which the Job controller sets as an
// annotation and (Kubernetes 1.28+) a label.
var completionIndexFields = map[string]bool{
	"metadata.annotations['batch.kubernetes.io/job-completion-index']": true,
	"metadata.labels['batch.kubernetes.io/job-completion-index']":      true,
}

// The worker flags (as checkWorkerAuth knows them) each authentication
// variable stands for.
var authFlags = map[string]string{
	"PS_TLS_CA":          "tls_ca",
	"PS_TLS_CERT":        "tls_cert",
	"PS_TLS_KEY":         "tls_key",
	"PS_TLS_SERVER_NAME": "tls_server_name",
	"PS_TOKEN_FILE":      "token_file",
}

// checkProgramWorker returns the ranks the Job runs and its worker count
// (-1: unknown).
func checkProgramWorker(job *batchv1.Job, c *corev1.Container, env map[string]envValue, set serverSet, port int, portOK bool, sf *flags, v *workerVariables, p *problems) ([]int, int) {
	at := where("Job", job.Name)
	if v == nil {
		p.add(at, "container %q runs a program of its own (not ps_worker): pass -worker-environment=common/worker_environment.cc to check the variables it needs", c.Name)
		return nil, -1
	}
	envAt := func(name string) (envValue, bool) {
		value, ok := env[name]
		return value, ok
	}
	for _, name := range v.launcher {
		if v.isAuth(name) || name == v.list {
			continue
		}
		if _, ok := envAt(name); !ok {
			p.add(at, "container %q: $%s is not set: the launcher sets it for every worker program (%s, WorkerEnvironmentVariables)", c.Name, name, v.source)
		}
	}
	// The servers: the count, and the list or its pattern.
	_, hasList := envAt(v.list)
	_, hasPattern := envAt(v.serverPattern)
	if !hasList && !hasPattern {
		p.add(at, "container %q: neither $%s nor $%s is set: the program cannot find the servers", c.Name, v.list, v.serverPattern)
	}
	asFlags := &flags{at: at, values: map[string]string{}, opaque: map[string]bool{}, missing: map[string]bool{}, reported: map[string]bool{}, p: p, names: map[string]string{}}
	for name, variable := range map[string]string{"servers": v.list, "server_pattern": v.serverPattern, "num_servers": v.count} {
		asFlags.names[name] = "$" + variable
		if value, ok := envAt(variable); ok {
			asFlags.values[name] = value.value
			asFlags.opaque[name] = !value.known
		}
	}
	for variable, flag := range authFlags {
		if !v.isAuth(variable) {
			p.add(at, "%s no longer reads $%s: update authFlags in deploy/validate/pscheck/program_worker.go", v.source, variable)
			continue
		}
		asFlags.names[flag] = "$" + variable
		if value, ok := envAt(variable); ok && value.value != "" {
			asFlags.values[flag] = value.value
			asFlags.opaque[flag] = !value.known
		}
	}
	if portOK && (hasList || hasPattern) {
		checkServerAddresses(set, port, asFlags, p)
	}
	checkWorkerAuth(set.at, sf, at, c, asFlags, p)

	// Variables that the launcher gives the same value must agree.
	for _, a := range v.launcher {
		for _, b := range v.launcher {
			if a >= b || v.value[a] != v.value[b] {
				continue
			}
			ea, aok := envAt(a)
			eb, bok := envAt(b)
			if aok && bok && ea.known && eb.known && ea.value != eb.value {
				p.add(at, "container %q: $%s=%s but $%s=%s: the launcher gives both %s", c.Name, a, ea.value, b, eb.value, v.value[a])
			}
		}
	}
	if id, ok := sf.known("job_id"); ok {
		if value, has := envAt("PS_JOB_ID"); has && value.known && value.value != id {
			p.add(at, "container %q: $PS_JOB_ID=%s but the servers (%s) say --job_id=%s: they would refuse it", c.Name, value.value, set.at, id)
		}
	}

	// One worker per pod of an Indexed Job, its rank the completion index.
	indexed := job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion
	if !indexed || job.Spec.Completions == nil {
		p.add(at, "a worker program's Job must be Indexed (spec.completionMode: Indexed, spec.completions): each pod's rank is its completion index")
		return nil, -1
	}
	completions := int(*job.Spec.Completions)
	rankVariable := v.rank[0]
	for _, name := range v.rank {
		if v.value[name] == "rank" {
			rankVariable = name
		}
	}
	for _, name := range v.launcher {
		if v.value[name] != v.value[rankVariable] {
			continue
		}
		if !fromCompletionIndex(c, name) {
			p.add(at, "container %q: $%s must come from the pod's completion index (valueFrom.fieldRef.fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']), or every pod claims one rank", c.Name, name)
		}
	}
	expect := map[string]string{}
	for _, name := range v.launcher {
		switch v.value[name] {
		case "num_workers":
			expect[name] = strconv.Itoa(completions)
		case "local_rank":
			expect[name] = "0"
		case "local_num_workers":
			expect[name] = "1"
		}
	}
	for name, want := range expect {
		if value, ok := envAt(name); ok && value.known && value.value != want {
			why := "one worker per pod"
			if want != "0" && want != "1" {
				why = fmt.Sprintf("spec.completions is %d", completions)
			}
			p.add(at, "container %q: $%s=%s, expected %s: %s", c.Name, name, value.value, want, why)
		}
	}
	if par := job.Spec.Parallelism; par == nil || int(*par) != completions {
		p.add(at, "spec.parallelism is %s but spec.completions is %d: every rank must run at the same time, or synchronous steps wait forever", fmtInt32(par, "1"), completions)
	}
	if n, ok := sf.getInt("num_workers"); ok && n != completions {
		p.add(set.at, "flag --num_workers=%d but the workers (%s) run %d ranks", n, at, completions)
	}
	ranks := make([]int, 0, completions)
	for i := 0; i < completions && i <= maxIndexedJobCompletions; i++ {
		ranks = append(ranks, i)
	}
	return ranks, completions
}

func fromCompletionIndex(c *corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return completionIndexFields[e.ValueFrom.FieldRef.FieldPath]
		}
	}
	return false
}
