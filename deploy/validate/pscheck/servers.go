package main

// Our rules for the servers' StatefulSet: each shard has its own checkpoint
// claim, the shards spread over the nodes, a restarted shard restores its
// own checkpoint, and a finished shard stays finished (the StatefulSet
// would restart a server that exited 0 into a finished run).

import (
	"path"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// serverEntrypoint runs ps_server in the image (deploy/docker).
const serverEntrypoint = "/usr/local/bin/ps-server-entrypoint"

// doneFileVariable names the file where the entrypoint marks a shard done.
const doneFileVariable = "PS_SERVER_DONE_FILE"

const hostnameKey = "kubernetes.io/hostname"

func checkServerSet(sts *appsv1.StatefulSet, c *corev1.Container, f *flags, env map[string]envValue, m *manifests, p *problems) {
	at := where("StatefulSet", sts.Name)
	t := &sts.Spec.Template
	if len(c.Command) == 0 || c.Command[0] != serverEntrypoint {
		p.add(at, "container %q: command must be [%s]: a StatefulSet restarts a server that exits 0 once training is done, and restarted on a finished run it exits 2, again and again; the entrypoint keeps a finished shard idle", c.Name, serverEntrypoint)
	}
	if !f.has("restore") {
		p.add(at, "flag --restore is missing: a restarted shard would start fresh, or refuse its own checkpoint, instead of restoring it")
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		p.add(at, "spec.podManagementPolicy: must be Parallel: with OrderedReady shard i starts only once shard i-1 is ready, and a finished shard is never ready again")
	}
	if svc := m.services[sts.Spec.ServiceName]; svc != nil && !svc.Spec.PublishNotReadyAddresses {
		p.add(at, "spec.serviceName: Service %q lacks publishNotReadyAddresses: true, so a starting or restoring shard has no DNS name until it is ready", svc.Name)
	}
	checkDoneFile(at, c, env, sts.Spec.VolumeClaimTemplates, p)
	checkSpread(at, t, p)
}

// checkDoneFile: the entrypoint's mark must outlive the pod on the shard's
// own claim, or a rescheduled finished shard restores a finished run (exit 2,
// forever), or one shard's mark stops another.
func checkDoneFile(at string, c *corev1.Container, env map[string]envValue, claimTemplates []corev1.PersistentVolumeClaim, p *problems) {
	v, ok := env[doneFileVariable]
	switch {
	case !ok:
		p.add(at, "container %q: $%s is not set: the entrypoint needs the file that marks the shard done, on the shard's own claim", c.Name, doneFileVariable)
		return
	case !v.known:
		return
	case !strings.HasPrefix(v.value, "/"):
		p.add(at, "container %q: $%s=%s: must be an absolute path", c.Name, doneFileVariable, v.value)
		return
	}
	vm := mountFor(c, v.value)
	if vm == nil || !isClaimTemplate(vm.Name, claimTemplates) {
		p.add(at, "container %q: $%s=%s is not on a volumeClaimTemplate's mount: the shard's own claim must keep it, or a restarted finished shard restores a finished run", c.Name, doneFileVariable, v.value)
	}
}

func isClaimTemplate(name string, claimTemplates []corev1.PersistentVolumeClaim) bool {
	for _, t := range claimTemplates {
		if t.Name == name {
			return true
		}
	}
	return false
}

// checkOwnClaim: a server's checkpoints go to a claim of its own (a
// volumeClaimTemplate), not one every shard mounts: a shared ReadWriteOnce
// claim ties every shard to one node.
func checkOwnClaim(at string, c *corev1.Container, flag, file string, set serverSet, p *problems) {
	vm := mountFor(c, file)
	if vm == nil {
		return // Reported by checkPersistentPath.
	}
	if isClaimTemplate(vm.Name, set.claimTemplates) {
		return
	}
	for _, v := range set.spec.Volumes {
		if v.Name == vm.Name && v.PersistentVolumeClaim != nil {
			p.add(at, "flag --%s=%s is on claim %q, which every shard mounts: one claim per shard (volumeClaimTemplates), or all shards share one node and one node's failure takes them all", flag, file, v.PersistentVolumeClaim.ClaimName)
		}
	}
}

// checkSpread: the shards must not be forced onto one node, and must be
// spread over the nodes: a topology spread constraint over hostnames, or
// pod anti-affinity on the hostname, that selects the servers themselves.
func checkSpread(at string, t *corev1.PodTemplateSpec, p *problems) {
	own := labels.Set(t.Labels)
	selects := func(sel *metav1.LabelSelector) bool {
		if sel == nil {
			return false
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		return err == nil && !s.Empty() && s.Matches(own)
	}
	if colocated(t) {
		p.add(at, "spec.template.spec.affinity.podAffinity: requires every shard on the node of the others: one network card carries every shard's traffic and one node's failure takes them all; spread them (topologySpreadConstraints)")
	}
	spread := false
	for _, tsc := range t.Spec.TopologySpreadConstraints {
		if tsc.TopologyKey == hostnameKey && selects(tsc.LabelSelector) && tsc.MaxSkew >= 1 {
			spread = true
		}
	}
	if a := t.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			spread = spread || (term.TopologyKey == hostnameKey && selects(term.LabelSelector))
		}
		for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			spread = spread || (w.PodAffinityTerm.TopologyKey == hostnameKey && selects(w.PodAffinityTerm.LabelSelector))
		}
	}
	if !spread {
		p.add(at, "spec.template.spec.topologySpreadConstraints: no constraint (or pod anti-affinity) over %s that selects the servers: the scheduler may put every shard on one node", hostnameKey)
	}
}

// checkEntrypointProbe: [entrypoint, --probe, PORT] with PORT the one the
// server answers on.
func checkEntrypointProbe(at, fld string, probe *corev1.Probe, port int, portFlag string, p *problems) {
	e := probe.Exec
	if e == nil || len(e.Command) != 3 || e.Command[0] != serverEntrypoint || e.Command[1] != "--probe" {
		p.add(at, "%s: must be exec [%s, --probe, PORT]: it passes a finished shard, and otherwise a shard that accepts connections", fld, serverEntrypoint)
		return
	}
	if n, err := strconv.Atoi(e.Command[2]); err != nil || n != port {
		p.add(at, "%s.exec.command[2]: Invalid value: %q: %s=%d", fld, e.Command[2], portFlag, port)
	}
}

// runsOurWorker: the container runs ps_worker (flags), not a program of
// the user's that reads the launcher's variables.
func runsOurWorker(c *corev1.Container) bool {
	return len(c.Command) > 0 && path.Base(c.Command[0]) == "ps_worker"
}
