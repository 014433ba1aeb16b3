package main

// Our rules across objects: the servers (a StatefulSet) and the workers
// (one or more Jobs) must agree on ports, counts, mode and model, every rank
// must be run exactly once, and the workers' server addresses must be the
// server pods' DNS names, in index order.
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
	// How messages name a value: "flag --NAME" unless set (environment
	// variables read as flags).
	names map[string]string
}

func (f *flags) spell(name string) string {
	if n, ok := f.names[name]; ok {
		return n
	}
	return "flag --" + name
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
			f.p.add(f.at, "%s is missing", f.spell(name))
		} else {
			f.p.add(f.at, "%s=%s: its value is not known from the manifests, so it cannot be checked", f.spell(name), value)
		}
	}
	return "", false
}

func (f *flags) has(name string) bool {
	_, ok := f.values[name]
	return ok
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
			f.p.add(f.at, "%s=%q is not an integer", f.spell(name), value)
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

// serverSet is the servers' workload: a StatefulSet whose pods get DNS
// names <name>-<index>.<service>.
type serverSet struct {
	at       string
	name     string
	service  string
	replicas int
	spec     *corev1.PodSpec
	// The StatefulSet's volumeClaimTemplates: one claim per pod each.
	claimTemplates []corev1.PersistentVolumeClaim
}

func checkCluster(m *manifests, p *problems) {
	var serverSets []*appsv1.StatefulSet
	var workerJobs []*batchv1.Job
	for _, job := range m.jobs {
		switch {
		case findContainer(&job.Spec.Template.Spec, "server") != nil:
			p.add(where("Job", job.Name), "servers in a Job: the shards of one Job's pod template share every claim, so one ReadWriteOnce checkpoint claim forces every shard onto one node; run the servers as a StatefulSet whose volumeClaimTemplates give each shard its own claim (deploy/k8s/base/server-statefulset.yaml)")
		case findContainer(&job.Spec.Template.Spec, "worker") != nil:
			workerJobs = append(workerJobs, job)
		default:
			p.add(where("Job", job.Name), "no container named \"server\" or \"worker\"")
		}
	}
	for _, sts := range m.statefulSets {
		if findContainer(&sts.Spec.Template.Spec, "server") != nil {
			serverSets = append(serverSets, sts)
		} else {
			p.add(where("StatefulSet", sts.Name), "no container named \"server\"")
		}
	}
	if len(serverSets) != 1 || len(workerJobs) == 0 {
		p.add("manifests", "expected one StatefulSet of servers (container \"server\") and one or more Jobs of workers (container \"worker\"), found %d and %d", len(serverSets), len(workerJobs))
		return
	}
	sts := serverSets[0]
	sAt := where("StatefulSet", sts.Name)
	server := findContainer(&sts.Spec.Template.Spec, "server")
	quiet := &problems{} // Env problems were reported by the pod checks.
	sEnv := containerEnv(podContext{at: sAt, m: m}, server, field.NewPath(""), quiet)
	sf := parseFlags(sAt, server, sEnv, p)
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	set := serverSet{at: sAt, name: sts.Name, service: sts.Spec.ServiceName, replicas: int(replicas), spec: &sts.Spec.Template.Spec, claimTemplates: sts.Spec.VolumeClaimTemplates}
	checkServerSet(sts, server, sf, sEnv, m, p)
	port, portOK := checkServerFlags(set, server, sf, m, p)
	if n, ok := sf.getInt("num_servers"); ok && n != set.replicas {
		p.add(sAt, "flag --num_servers=%d but spec.replicas is %d: every server must know how many shards there are", n, set.replicas)
	}
	if code, ok := sf.values["signal_exit_code"]; !ok || code == "0" {
		p.add(sAt, "flag --signal_exit_code must be set and nonzero (143): a server stopped by SIGTERM would exit 0, and its shard would be marked done and never serve again")
	}
	if _, ok := sf.values["checkpoint_dir"]; ok {
		checkRunID(sAt, server, "checkpoint_dir", p)
	}

	numWorkers := -1
	ranks := map[int]string{}
	for _, wjob := range workerJobs {
		wAt := where("Job", wjob.Name)
		worker := findContainer(&wjob.Spec.Template.Spec, "worker")
		wEnv := containerEnv(podContext{at: wAt, m: m}, worker, field.NewPath(""), quiet)
		checkWorkerProgramLabel(wjob, worker, p)
		if !runsOurWorker(worker) {
			checkProgramArgs(wAt, worker, p)
			checkProgramImage(wAt, worker, p)
			own, n := checkProgramWorker(wjob, worker, wEnv, set, port, portOK, sf, m.workerVariables, p)
			for _, r := range own {
				if other, dup := ranks[r]; dup {
					p.add(wAt, "rank %d is run by both %s and %s", r, other, wAt)
				}
				ranks[r] = wAt
			}
			if n >= 0 {
				if numWorkers >= 0 && numWorkers != n {
					p.add(wAt, "$PS_NUM_WORKERS=%d but other workers say %d", n, numWorkers)
				}
				numWorkers = n
			}
			continue
		}
		wf := parseFlags(wAt, worker, wEnv, p)
		checkWorkerFlags(wjob, worker, wf, p)
		workers, workersOK := wf.getInt("num_workers")
		if n, ok := sf.getInt("num_workers"); ok && workersOK && n != workers {
			p.add(sAt, "flag --num_workers=%d but the workers (%s) say --num_workers=%d", n, wAt, workers)
		}
		if workersOK {
			if numWorkers >= 0 && numWorkers != workers {
				p.add(wAt, "flag --num_workers=%d but other workers say %d", workers, numWorkers)
			}
			numWorkers = workers
		}
		// The model is rank 0's to declare: servers take no --model.
		for _, name := range []string{"mode"} {
			s, sok := sf.get(name)
			w, wok := wf.get(name)
			if sok && wok && s != w {
				p.add(wAt, "flag --%s=%s but the servers (%s) say --%s=%s", name, w, sAt, name, s)
			}
		}
		if portOK {
			checkServerAddresses(set, port, wf, p)
		}
		checkWorkerAuth(sAt, sf, wAt, worker, wf, p)
		if _, ok := wf.values["save_model"]; ok {
			checkRunID(wAt, worker, "save_model", p)
		}
		rank, ok := wf.getInt("rank")
		if !ok {
			continue
		}
		var own []int
		if rank >= 0 {
			own = []int{rank}
		} else if rank == -1 && wjob.Spec.Completions != nil {
			_, elsewhere := wf.values["rank0_elsewhere"]
			for i := 0; i < int(*wjob.Spec.Completions) && i <= maxIndexedJobCompletions; i++ {
				if i > 0 || !elsewhere {
					own = append(own, i)
				}
			}
		}
		for _, r := range own {
			if other, dup := ranks[r]; dup {
				p.add(wAt, "rank %d is run by both %s and %s", r, other, wAt)
			}
			ranks[r] = wAt
		}
	}
	for r := 0; r < numWorkers; r++ {
		if _, ok := ranks[r]; !ok {
			p.add("manifests", "rank %d of --num_workers=%d is run by no worker Job", r, numWorkers)
		}
	}
}

// checkRunID: a flag's path must include the run id, or runs share
// checkpoints (a new run restores an old one, or another mode's, and fails)
// and models (a new run overwrites the last).
func checkRunID(at string, c *corev1.Container, flag string, p *problems) {
	for _, arg := range c.Args {
		name := strings.TrimLeft(arg, "-")
		if strings.HasPrefix(name, flag+"=") && !strings.Contains(arg, "$(PS_RUN_ID)") {
			p.add(at, "flag %s does not include $(PS_RUN_ID): every run would share it, so a new run restores or overwrites another run's files", arg)
		}
	}
}

func checkServerFlags(set serverSet, c *corev1.Container, f *flags, m *manifests, p *problems) (int, bool) {
	at := f.at
	if n, ok := f.getInt("server_index"); ok && n != -1 {
		p.add(at, "flag --server_index=%d: must be -1 (index from the pod's hostname); all pods of the Job share one template", n)
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
		checkPersistentPath(at, c, "checkpoint_dir", dir, set.spec, set.claimTemplates, p)
		checkOwnClaim(at, c, "checkpoint_dir", dir, set, p)
	}
	port, ok := f.getInt("port")
	if !ok {
		return 0, false
	}
	cf := fmt.Sprintf("spec.template.spec.containers[%d]", containerIndex(set.spec, c))
	if !hasContainerPort(c, port) {
		p.add(at, "%s.ports: no containerPort %d, the server's --port", cf, port)
	}
	for _, flag := range []string{"tls_cert", "tls_key", "tls_client_ca", "token_file"} {
		checkMountedFile(at, c, f, flag, p)
	}
	// Probes go to --health_port where the server has one: it serves the
	// health service there in plaintext.
	probePort, probeFlag := port, "the server listens on --port"
	if f.has("health_port") {
		if hp, ok := f.getInt("health_port"); ok && hp > 0 {
			probePort, probeFlag = hp, "the server serves health checks on --health_port"
			if hp == port {
				p.add(at, "flag --health_port=%d is the server's --port: the server would not start", hp)
			}
		}
	}
	checkFramesPort(at, cf, c, f, port, p)
	if f.has("tls_cert") && probePort == port {
		p.add(at, "flag --tls_cert: the kubelet's gRPC probes speak plaintext and fail on the TLS port --port=%d; add --health_port and probe that port (components/auth does)", port)
	}
	// Readiness asks the health service. Startup and liveness go through
	// the entrypoint, which also passes a finished shard: it no longer
	// serves gRPC, and a gRPC probe would restart it forever.
	for _, probe := range []struct {
		name  string
		probe *corev1.Probe
		grpc  bool
	}{{"readinessProbe", c.ReadinessProbe, true}, {"livenessProbe", c.LivenessProbe, false}, {"startupProbe", c.StartupProbe, false}} {
		switch {
		case probe.probe == nil && probe.grpc:
			p.add(at, "%s.%s: Required value: a grpc probe of the server's grpc.health.v1 service", cf, probe.name)
		case probe.probe == nil:
			p.add(at, "%s.%s: Required value: an exec probe [%s, --probe, PORT]", cf, probe.name, serverEntrypoint)
		case probe.grpc && probe.probe.GRPC == nil:
			p.add(at, "%s.%s: must be a grpc probe (the server serves grpc.health.v1)", cf, probe.name)
		case probe.grpc && int(probe.probe.GRPC.Port) != probePort:
			p.add(at, "%s.%s.grpc.port: Invalid value: %d: %s=%d", cf, probe.name, probe.probe.GRPC.Port, probeFlag, probePort)
		case !probe.grpc && probe.probe.GRPC != nil:
			p.add(at, "%s.%s: a grpc probe fails once the shard is done (the server has exited), so the shard would be restarted forever; use an exec probe [%s, --probe, PORT]", cf, probe.name, serverEntrypoint)
		case !probe.grpc:
			checkEntrypointProbe(at, cf+"."+probe.name, probe.probe, probePort, probeFlag, p)
		}
		// Unset is 1 s: too short for a CPU-limited server that is busy
		// applying gradients; failed probes would restart a healthy server.
		if probe.probe != nil && probe.probe.TimeoutSeconds < minProbeTimeoutSeconds {
			p.add(at, "%s.%s.timeoutSeconds: %d (unset is 1): a CPU-throttled server busy with gradients answers slower; use at least %d", cf, probe.name, probe.probe.TimeoutSeconds, minProbeTimeoutSeconds)
		}
	}
	if svc := m.services[set.service]; svc != nil {
		found := false
		for _, sp := range svc.Spec.Ports {
			if target, ok := resolveTargetPort(sp, set.spec); ok && int(target) == port {
				found = true
			}
		}
		if !found {
			p.add(at, "Service %q has no port leading to the server's --port=%d", svc.Name, port)
		}
	}
	return port, true
}

const minProbeTimeoutSeconds = 3

// checkFramesPort checks the server's frames over TCP (--tcp_data_port):
// never beside TLS, which the server refuses (the frames are not
// encrypted); a fixed port differs from the server's other ports and is a
// containerPort; a containerPort named frames has a server listening there.
// Unset is a free port without TLS (nothing to declare) and none with it.
func checkFramesPort(at, cf string, c *corev1.Container, f *flags, port int, p *problems) {
	frames := -1
	if !f.has("tcp_data_port") {
		if !f.has("tls_cert") {
			frames = 0
		}
	} else if n, ok := f.getInt("tcp_data_port"); ok {
		frames = n
	} else {
		return
	}
	switch {
	case frames < -1 || frames > 65535:
		p.add(at, "flag --tcp_data_port=%d: must be in [-1, 65535]", frames)
		return
	case frames >= 0 && f.has("tls_cert"):
		p.add(at, "flag --tcp_data_port=%d with --tls_cert: frames over TCP are not encrypted and the server refuses them beside TLS; set it to -1 (components/auth sets PS_FRAMES_PORT=-1)", frames)
		return
	}
	if frames > 0 {
		others := map[string]int{"port": port}
		for _, flag := range []string{"health_port", "metrics_port"} {
			if n, ok := f.known(flag); ok {
				if v, err := strconv.Atoi(n); err == nil {
					others[flag] = v
				}
			}
		}
		for _, flag := range []string{"port", "health_port", "metrics_port"} {
			if v, ok := others[flag]; ok && v == frames {
				p.add(at, "flag --tcp_data_port=%d is the server's --%s: the server would not start", frames, flag)
			}
		}
		if !hasContainerPort(c, frames) {
			p.add(at, "%s.ports: no containerPort %d, the server's --tcp_data_port", cf, frames)
		}
	}
	for _, cp := range c.Ports {
		if cp.Name == "frames" && int(cp.ContainerPort) != frames {
			p.add(at, "%s.ports: containerPort %d named frames, but the server's --tcp_data_port is %d", cf, cp.ContainerPort, frames)
		}
	}
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
		case rank >= 0 && completions == 1 && parallelism != 1:
			p.add(at, "flag --rank=%d but spec.parallelism is %d: one pod per rank", rank, parallelism)
		case rank == -1 && !indexed:
			p.add(at, "flag --rank=-1 reads $JOB_COMPLETION_INDEX, which only an Indexed Job sets (spec.completionMode: Indexed)")
		case rank >= 0 && completions > 1:
			p.add(at, "flag --rank=%d: all %d pods would claim rank %d; use --rank=-1 with an Indexed Job", rank, completions, rank)
		case rank < -1:
			p.add(at, "flag --rank=%d: must be -1 or a rank", rank)
		}
	}
	rank, rankOK := f.getInt("rank")
	if n, ok := f.getInt("num_workers"); ok && rankOK && rank == -1 {
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
	// Only the image built with WITH_CUDA=1 (tagged *-cuda) can use a GPU;
	// the default one would hold it and train on the CPU.
	if gpus.Sign() > 0 && !isCudaImage(c.Image) {
		p.add(at, "container %q takes %s %s but image %q is not the CUDA build (tag ending in -cuda, deploy/docker/Dockerfile with WITH_CUDA=1): the GPU would sit unused", c.Name, gpus.String(), gpuResource, c.Image)
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
// DNS name of server pod i under the headless Service, at the port the
// server listens on, for exactly `replicas` servers.
func checkServerAddresses(set serverSet, port int, f *flags, p *problems) {
	replicas := set.replicas
	at := f.at
	list, hasList := f.values["servers"]
	pattern, hasPattern := f.values["server_pattern"]
	servers, serverPattern, numServers := f.spell("servers"), f.spell("server_pattern"), f.spell("num_servers")
	var addresses []string
	var source string
	switch {
	case hasList && hasPattern:
		p.add(at, "%s and %s are both given; use one", servers, serverPattern)
		return
	case hasList:
		if _, ok := f.get("servers"); !ok {
			return
		}
		source = servers
		addresses = strings.Split(list, ",")
		if n, ok := f.known("num_servers"); ok && n != strconv.Itoa(len(addresses)) {
			p.add(at, "%s=%s but %s lists %d servers", numServers, n, servers, len(addresses))
		}
	case hasPattern:
		if _, ok := f.get("server_pattern"); !ok {
			return
		}
		source = serverPattern
		n, ok := f.getInt("num_servers")
		if !ok {
			return
		}
		if !strings.Contains(pattern, "{index}") {
			p.add(at, "%s=%s has no {index}", serverPattern, pattern)
			return
		}
		for i := 0; i < n && i <= replicas; i++ {
			addresses = append(addresses, strings.ReplaceAll(pattern, "{index}", strconv.Itoa(i)))
		}
		if n != replicas {
			p.add(at, "%s=%d but StatefulSet %s runs %d servers", numServers, n, set.name, replicas)
			return
		}
	default:
		p.add(at, "%s or %s (with %s) is missing", servers, serverPattern, numServers)
		return
	}
	if len(addresses) != replicas {
		p.add(at, "%s names %d servers but StatefulSet %s runs %d", source, len(addresses), set.name, replicas)
		return
	}
	for i, address := range addresses {
		address = strings.TrimSpace(address)
		colon := strings.LastIndexByte(address, ':')
		want := fmt.Sprintf("%s-%d.%s", set.name, i, set.service)
		if colon < 0 {
			p.add(at, "%s: server %d is %q, which has no port; expected %s:%d", source, i, address, want, port)
			continue
		}
		host, portText := address[:colon], address[colon+1:]
		if !isPodDNSName(host, want) {
			p.add(at, "%s: server %d is %q, but server pod %d is %s (pod %s-%d under Service %s)", source, i, address, i, want, set.name, i, set.service)
		}
		if portText != strconv.Itoa(port) {
			p.add(at, "%s: server %d is %q, but the servers listen on --port=%d", source, i, address, port)
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

// isCudaImage: the image's tag ends in -cuda (digests are taken on trust).
func isCudaImage(image string) bool {
	if strings.Contains(image, "@") {
		return true
	}
	slash := strings.LastIndexByte(image, '/')
	colon := strings.LastIndexByte(image, ':')
	return colon > slash && strings.HasSuffix(image[colon+1:], "-cuda")
}
