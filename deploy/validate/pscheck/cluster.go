package main

// Our rules across objects: the servers (the StatefulSet) and the workers
// (the Job) must agree on ports, counts, mode and model, and the workers'
// server addresses must be the StatefulSet's pod DNS names, in ordinal order.
// Flags are read from the container args after $(VAR) expansion from the
// ConfigMap, as the kubelet would expand them.

import (
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const gpuResource corev1.ResourceName = "nvidia.com/gpu"

// flags is a container's command line after expansion.
type flags struct {
	at     string
	values map[string]string
	// Values that depend on the cluster (fieldRef, secrets) or on a variable
	// no entry defines (already reported by the pod checks).
	opaque   map[string]bool
	missing  map[string]bool
	reported map[string]bool
	p        *problems
}

func parseFlags(at string, c *corev1.Container, env map[string]envValue, p *problems) *flags {
	f := &flags{at: at, values: map[string]string{}, opaque: map[string]bool{}, missing: map[string]bool{}, reported: map[string]bool{}, p: p}
	args := c.Args
	for i := 0; i < len(args); i++ {
		arg, missing, unknown := expand(args[i], env)
		if !strings.HasPrefix(arg, "-") {
			continue
		}
		name := strings.TrimLeft(arg, "-")
		value := "true"
		if eq := strings.IndexByte(name, '='); eq >= 0 {
			name, value = name[:eq], name[eq+1:]
		} else if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			value, missing, unknown = expand(args[i], env)
		}
		if _, dup := f.values[name]; dup {
			p.add(at, "container %q: flag --%s is given twice", c.Name, name)
		}
		f.values[name] = value
		f.opaque[name] = unknown
		f.missing[name] = len(missing) > 0
	}
	return f
}

// get returns a flag that must be present with a value known here. Each
// flag's problem is reported once.
func (f *flags) get(name string) (string, bool) {
	value, ok := f.values[name]
	if ok && !f.opaque[name] {
		return value, true
	}
	if !f.reported[name] && !f.missing[name] {
		f.reported[name] = true
		if !ok {
			f.p.add(f.at, "flag --%s is missing", name)
		} else {
			f.p.add(f.at, "flag --%s=%s: its value is not known from the manifests, so it cannot be checked", name, value)
		}
	}
	return "", false
}

// known returns a flag's value if it is present and known; absent is fine.
func (f *flags) known(name string) (string, bool) {
	if _, ok := f.values[name]; !ok {
		return "", false
	}
	return f.get(name)
}

func (f *flags) getInt(name string) (int, bool) {
	value, ok := f.get(name)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(value)
	if err != nil {
		if !f.reported[name] {
			f.reported[name] = true
			f.p.add(f.at, "flag --%s=%q is not an integer", name, value)
		}
		return 0, false
	}
	return n, true
}

func containerIndex(spec *corev1.PodSpec, c *corev1.Container) int {
	for i := range spec.Containers {
		if &spec.Containers[i] == c {
			return i
		}
	}
	return -1
}

func findContainer(spec *corev1.PodSpec, name string) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	return nil
}

func checkCluster(m *manifests, p *problems) {
	if len(m.statefulSets) != 1 || len(m.jobs) != 1 {
		p.add("manifests", "expected exactly one StatefulSet (the servers) and one Job (the workers), found %d and %d", len(m.statefulSets), len(m.jobs))
		return
	}
	sts, job := m.statefulSets[0], m.jobs[0]
	sAt, wAt := where("StatefulSet", sts.Name), where("Job", job.Name)
	server := findContainer(&sts.Spec.Template.Spec, "server")
	worker := findContainer(&job.Spec.Template.Spec, "worker")
	if server == nil {
		p.add(sAt, "no container named \"server\"")
	}
	if worker == nil {
		p.add(wAt, "no container named \"worker\"")
	}
	if server == nil || worker == nil {
		return
	}
	quiet := &problems{} // Env problems were reported by the pod checks.
	sf := parseFlags(sAt, server, containerEnv(podContext{at: sAt, m: m}, server, field.NewPath(""), quiet), p)
	wf := parseFlags(wAt, worker, containerEnv(podContext{at: wAt, m: m}, worker, field.NewPath(""), quiet), p)
	port, portOK := checkServerFlags(sts, server, sf, m, p)
	checkWorkerFlags(job, worker, wf, p)

	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	if n, ok := sf.getInt("num_servers"); ok && n != int(replicas) {
		p.add(sAt, "flag --num_servers=%d but spec.replicas is %d: every server must know how many shards there are", n, replicas)
	}
	workers, workersOK := wf.getInt("num_workers")
	if n, ok := sf.getInt("num_workers"); ok && workersOK && n != workers {
		p.add(sAt, "flag --num_workers=%d but the workers (%s) say --num_workers=%d", n, wAt, workers)
	}
	for _, name := range []string{"mode", "model"} {
		s, sok := sf.get(name)
		w, wok := wf.get(name)
		if sok && wok && s != w {
			p.add(wAt, "flag --%s=%s but the servers (%s) say --%s=%s", name, w, sAt, name, s)
		}
	}
	if portOK {
		checkServerAddresses(sts, int(replicas), port, wf, p)
	}
}

func checkServerFlags(sts *appsv1.StatefulSet, c *corev1.Container, f *flags, m *manifests, p *problems) (int, bool) {
	at := f.at
	if n, ok := f.getInt("server_index"); ok && n != -1 {
		p.add(at, "flag --server_index=%d: must be -1 (index from the pod's hostname); all pods of a StatefulSet share one template", n)
	}
	if host, ok := f.get("host"); ok && host != "0.0.0.0" && host != "::" && host != "[::]" {
		p.add(at, "flag --host=%s: must be 0.0.0.0 (or ::) so that workers and probes reach the pod IP", host)
	}
	if mode, ok := f.get("mode"); ok && mode != "sync" && mode != "ssp" && mode != "async" {
		p.add(at, "flag --mode=%s: must be sync, ssp or async", mode)
	}
	if _, ok := f.known("staleness"); ok {
		if n, ok := f.getInt("staleness"); ok && n < 0 {
			p.add(at, "flag --staleness=%d: must be >= 0", n)
		}
	}
	if dir, ok := f.known("checkpoint_dir"); ok && dir != "" {
		checkPersistentPath(at, c, "checkpoint_dir", dir, &sts.Spec.Template.Spec, sts.Spec.VolumeClaimTemplates, p)
	}
	port, ok := f.getInt("port")
	if !ok {
		return 0, false
	}
	cf := fmt.Sprintf("spec.template.spec.containers[%d]", containerIndex(&sts.Spec.Template.Spec, c))
	if !hasContainerPort(c, port) {
		p.add(at, "%s.ports: no containerPort %d, the server's --port", cf, port)
	}
	for _, probe := range []struct {
		name     string
		probe    *corev1.Probe
		required bool
	}{{"readinessProbe", c.ReadinessProbe, true}, {"livenessProbe", c.LivenessProbe, true}, {"startupProbe", c.StartupProbe, false}} {
		switch {
		case probe.probe == nil:
			if probe.required {
				p.add(at, "%s.%s: Required value: a grpc probe of the server's grpc.health.v1 service", cf, probe.name)
			}
		case probe.probe.GRPC == nil:
			p.add(at, "%s.%s: must be a grpc probe (the server serves grpc.health.v1)", cf, probe.name)
		case int(probe.probe.GRPC.Port) != port:
			p.add(at, "%s.%s.grpc.port: Invalid value: %d: the server listens on --port=%d", cf, probe.name, probe.probe.GRPC.Port, port)
		}
	}
	if svc := m.services[sts.Spec.ServiceName]; svc != nil {
		found := false
		for _, sp := range svc.Spec.Ports {
			if target, ok := resolveTargetPort(sp, &sts.Spec.Template.Spec); ok && int(target) == port {
				found = true
			}
		}
		if !found {
			p.add(at, "Service %q has no port leading to the server's --port=%d", svc.Name, port)
		}
	}
	return port, true
}

func hasContainerPort(c *corev1.Container, port int) bool {
	for _, cp := range c.Ports {
		if int(cp.ContainerPort) == port {
			return true
		}
	}
	return false
}

func checkWorkerFlags(job *batchv1.Job, c *corev1.Container, f *flags, p *problems) {
	at := f.at
	indexed := job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion
	completions, parallelism := int32(1), int32(1)
	if job.Spec.Completions != nil {
		completions = *job.Spec.Completions
	}
	if job.Spec.Parallelism != nil {
		parallelism = *job.Spec.Parallelism
	}
	if rank, ok := f.getInt("rank"); ok {
		switch {
		case rank == -1 && !indexed:
			p.add(at, "flag --rank=-1 reads $JOB_COMPLETION_INDEX, which only an Indexed Job sets (spec.completionMode: Indexed)")
		case rank >= 0 && completions > 1:
			p.add(at, "flag --rank=%d: all %d pods would claim rank %d; use --rank=-1 with an Indexed Job", rank, completions, rank)
		case rank < -1:
			p.add(at, "flag --rank=%d: must be -1 or a rank", rank)
		}
	}
	if n, ok := f.getInt("num_workers"); ok {
		if n != int(completions) {
			p.add(at, "flag --num_workers=%d but spec.completions is %d: one pod per rank", n, completions)
		}
		if n != int(parallelism) {
			p.add(at, "flag --num_workers=%d but spec.parallelism is %d: every rank must run at the same time, or synchronous steps wait forever", n, parallelism)
		}
	}
	device, ok := f.get("device")
	gpus := resource.Quantity{}
	if q, has := c.Resources.Limits[gpuResource]; has {
		gpus = q
	}
	switch {
	case !ok:
	case device != "auto" && device != "cpu" && device != "cuda":
		p.add(at, "flag --device=%s: must be auto, cpu or cuda", device)
	case device == "cpu" && gpus.Sign() > 0:
		p.add(at, "flag --device=cpu but the worker takes %s %s: a GPU held and never used", gpus.String(), gpuResource)
	case device != "cpu" && gpus.Sign() <= 0:
		p.add(at, "flag --device=%s but resources.limits has no %s: without one the worker trains on the CPU", device, gpuResource)
	}
	if path, ok := f.known("save_model"); ok && path != "" {
		checkPersistentPath(at, c, "save_model", path, &job.Spec.Template.Spec, nil, p)
	}
	if dir, ok := f.get("data_dir"); ok && !strings.HasPrefix(dir, "/") {
		p.add(at, "flag --data_dir=%s: must be an absolute path", dir)
	}
	for _, name := range []string{"batch_size", "epochs"} {
		if _, present := f.known(name); present {
			if n, ok := f.getInt(name); ok && n < 1 {
				p.add(at, "flag --%s=%d: must be >= 1", name, n)
			}
		}
	}
}

// checkPersistentPath: a flag's path must be on a writable volume that
// outlives the pod (a PersistentVolumeClaim or a volumeClaimTemplate), or
// the file is lost, or cannot be written at all on a read-only root.
func checkPersistentPath(at string, c *corev1.Container, flag, file string, spec *corev1.PodSpec, claimTemplates []corev1.PersistentVolumeClaim, p *problems) {
	if !strings.HasPrefix(file, "/") {
		p.add(at, "flag --%s=%s: must be an absolute path", flag, file)
		return
	}
	vm := mountFor(c, file)
	if vm == nil {
		p.add(at, "flag --%s=%s is on no volume mount of container %q: it would be lost with the pod", flag, file, c.Name)
		return
	}
	if vm.ReadOnly {
		p.add(at, "flag --%s=%s is on read-only mount %s", flag, file, vm.MountPath)
	}
	persistent := false
	for _, t := range claimTemplates {
		persistent = persistent || t.Name == vm.Name
	}
	for _, v := range spec.Volumes {
		persistent = persistent || (v.Name == vm.Name && v.PersistentVolumeClaim != nil)
	}
	if !persistent {
		p.add(at, "flag --%s=%s is on volume %q, which is not a PersistentVolumeClaim: it would be lost with the pod", flag, file, vm.Name)
	}
}

// checkServerAddresses: address i of the workers' server list must be the
// DNS name of StatefulSet pod i under the headless Service, at the port the
// server listens on, for exactly `replicas` servers.
func checkServerAddresses(sts *appsv1.StatefulSet, replicas, port int, f *flags, p *problems) {
	at := f.at
	list, hasList := f.values["servers"]
	pattern, hasPattern := f.values["server_pattern"]
	var addresses []string
	var source string
	switch {
	case hasList && hasPattern:
		p.add(at, "flags --servers and --server_pattern are both given; use one")
		return
	case hasList:
		if _, ok := f.get("servers"); !ok {
			return
		}
		source = "--servers"
		addresses = strings.Split(list, ",")
		if n, ok := f.known("num_servers"); ok && n != strconv.Itoa(len(addresses)) {
			p.add(at, "flag --num_servers=%s but --servers lists %d servers", n, len(addresses))
		}
	case hasPattern:
		if _, ok := f.get("server_pattern"); !ok {
			return
		}
		source = "--server_pattern"
		n, ok := f.getInt("num_servers")
		if !ok {
			return
		}
		if !strings.Contains(pattern, "{index}") {
			p.add(at, "flag --server_pattern=%s has no {index}", pattern)
			return
		}
		for i := 0; i < n && i <= replicas; i++ {
			addresses = append(addresses, strings.ReplaceAll(pattern, "{index}", strconv.Itoa(i)))
		}
		if n != replicas {
			p.add(at, "flag --num_servers=%d but StatefulSet %s has %d replicas", n, sts.Name, replicas)
			return
		}
	default:
		p.add(at, "flag --servers or --server_pattern (with --num_servers) is missing")
		return
	}
	if len(addresses) != replicas {
		p.add(at, "flag %s names %d servers but StatefulSet %s has %d replicas", source, len(addresses), sts.Name, replicas)
		return
	}
	for i, address := range addresses {
		address = strings.TrimSpace(address)
		colon := strings.LastIndexByte(address, ':')
		want := fmt.Sprintf("%s-%d.%s", sts.Name, i, sts.Spec.ServiceName)
		if colon < 0 {
			p.add(at, "flag %s: server %d is %q, which has no port; expected %s:%d", source, i, address, want, port)
			continue
		}
		host, portText := address[:colon], address[colon+1:]
		if !isPodDNSName(host, want) {
			p.add(at, "flag %s: server %d is %q, but StatefulSet pod %d is %s (pod %s-%d under Service %s)", source, i, address, i, want, sts.Name, i, sts.Spec.ServiceName)
		}
		if portText != strconv.Itoa(port) {
			p.add(at, "flag %s: server %d is %q, but the servers listen on --port=%d", source, i, address, port)
		}
	}
}

// isPodDNSName accepts <pod>.<service>, optionally followed by .<namespace>
// and .svc[.<cluster domain>].
func isPodDNSName(host, want string) bool {
	if host == want {
		return true
	}
	if !strings.HasPrefix(host, want+".") {
		return false
	}
	rest := strings.Split(strings.TrimPrefix(host, want+"."), ".")
	return len(rest) == 1 || rest[1] == "svc"
}
