package main

// Object rules the API server enforces beyond decoding (from
// k8s.io/kubernetes/pkg/apis/{apps,batch,core}/validation, restated here
// with apimachinery's validators), and our rules for each kind.

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxIndexedJobCompletions is the API server's limit for Indexed Jobs.
const maxIndexedJobCompletions = 100000

// checkSelector validates a workload's selector and that it selects the pod
// template, as the API server does for StatefulSets (and Jobs with
// manualSelector).
func checkSelector(at string, sel *metav1.LabelSelector, template map[string]string, fld *field.Path, p *problems) {
	if sel == nil {
		p.add(at, "%s: Required value", fld)
		return
	}
	p.addErrs(at, metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, fld))
	if len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
		p.add(at, "%s: Invalid value: empty selector is invalid for deployment", fld)
		return
	}
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		p.add(at, "%s: Invalid value: %v", fld, err)
		return
	}
	if !selector.Matches(labels.Set(template)) {
		p.add(at, "spec.template.metadata.labels: Invalid value: %v: `selector` does not match template `labels`", labels.Set(template))
	}
}

func checkStatefulSet(sts *appsv1.StatefulSet, m *manifests, p *problems) {
	at := where("StatefulSet", sts.Name)
	spec := field.NewPath("spec")
	if sts.Spec.Replicas != nil && *sts.Spec.Replicas < 0 {
		p.add(at, "%s: Invalid value: %d: must be greater than or equal to 0", spec.Child("replicas"), *sts.Spec.Replicas)
	}
	switch sts.Spec.PodManagementPolicy {
	case "", appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement:
	default:
		p.add(at, "%s: Unsupported value: %q", spec.Child("podManagementPolicy"), sts.Spec.PodManagementPolicy)
	}
	switch sts.Spec.UpdateStrategy.Type {
	case "", appsv1.RollingUpdateStatefulSetStrategyType, appsv1.OnDeleteStatefulSetStrategyType:
	default:
		p.add(at, "%s: Unsupported value: %q", spec.Child("updateStrategy", "type"), sts.Spec.UpdateStrategy.Type)
	}
	checkSelector(at, sts.Spec.Selector, sts.Spec.Template.Labels, spec.Child("selector"), p)
	tmpl := spec.Child("template")
	checkTemplateLabels(at, &sts.Spec.Template.ObjectMeta, tmpl.Child("metadata"), p)
	if rp := sts.Spec.Template.Spec.RestartPolicy; rp != "" && rp != corev1.RestartPolicyAlways {
		p.add(at, "%s: Unsupported value: %q: supported values: \"Always\"", tmpl.Child("spec", "restartPolicy"), rp)
	}
	claimTemplates := map[string]bool{}
	for i := range sts.Spec.VolumeClaimTemplates {
		vct := &sts.Spec.VolumeClaimTemplates[i]
		vf := spec.Child("volumeClaimTemplates").Index(i)
		for _, msg := range validation.IsDNS1123Label(vct.Name) {
			p.add(at, "%s: Invalid value: %q: %s", vf.Child("metadata", "name"), vct.Name, msg)
		}
		claimTemplates[vct.Name] = true
		checkTemplateVersionLabel(at, &vct.ObjectMeta, vf.Child("metadata"), p)
		checkClaimSpec(at, &vct.Spec, vf.Child("spec"), p)
	}
	checkPodSpec(podContext{at: at, m: m, claimTemplates: claimTemplates}, &sts.Spec.Template.Spec, tmpl.Child("spec"), p)

	// serviceName must name a headless Service that selects these pods:
	// it is what gives each pod its DNS name <pod>.<serviceName>.
	name := sts.Spec.ServiceName
	sf := spec.Child("serviceName")
	svc := m.services[name]
	switch {
	case name == "":
		p.add(at, "%s: Required value: name a headless Service (clusterIP: None) for stable pod DNS names", sf)
	case svc == nil:
		p.add(at, "%s: Service %q is not in the manifests", sf, name)
	case svc.Spec.ClusterIP != corev1.ClusterIPNone:
		p.add(at, "%s: Service %q is not headless (spec.clusterIP is %q, must be \"None\"), so pods get no stable DNS names", sf, name, svc.Spec.ClusterIP)
	case len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)):
		p.add(at, "%s: Service %q selector %v does not select this StatefulSet's pods", sf, name, svc.Spec.Selector)
	}
}

func checkClaimSpec(at string, spec *corev1.PersistentVolumeClaimSpec, fld *field.Path, p *problems) {
	if len(spec.AccessModes) == 0 {
		p.add(at, "%s: Required value: at least 1 access mode is required", fld.Child("accessModes"))
	}
	for i, mode := range spec.AccessModes {
		switch mode {
		case corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod:
		default:
			p.add(at, "%s: Unsupported value: %q", fld.Child("accessModes").Index(i), mode)
		}
	}
	storage, ok := spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		p.add(at, "%s: Required value", fld.Child("resources", "requests").Key("storage"))
	} else if storage.Sign() <= 0 {
		p.add(at, "%s: Invalid value: %q: must be greater than zero", fld.Child("resources", "requests").Key("storage"), storage.String())
	}
}

func checkJob(job *batchv1.Job, m *manifests, p *problems) {
	at := where("Job", job.Name)
	spec := field.NewPath("spec")
	for _, v := range []struct {
		name  string
		value *int32
	}{{"parallelism", job.Spec.Parallelism}, {"completions", job.Spec.Completions}, {"backoffLimit", job.Spec.BackoffLimit}, {"ttlSecondsAfterFinished", job.Spec.TTLSecondsAfterFinished}} {
		if v.value != nil && *v.value < 0 {
			p.add(at, "%s: Invalid value: %d: must be greater than or equal to 0", spec.Child(v.name), *v.value)
		}
	}
	if d := job.Spec.ActiveDeadlineSeconds; d != nil && *d <= 0 {
		p.add(at, "%s: Invalid value: %d: must be greater than 0", spec.Child("activeDeadlineSeconds"), *d)
	}
	manual := job.Spec.ManualSelector != nil && *job.Spec.ManualSelector
	if job.Spec.Selector != nil && !manual {
		p.add(at, "%s: Invalid value: the Job controller generates the selector; set it only with manualSelector: true", spec.Child("selector"))
	}
	if manual {
		checkSelector(at, job.Spec.Selector, job.Spec.Template.Labels, spec.Child("selector"), p)
	}
	tmpl := spec.Child("template")
	checkTemplateLabels(at, &job.Spec.Template.ObjectMeta, tmpl.Child("metadata"), p)
	rp := job.Spec.Template.Spec.RestartPolicy
	if rp != corev1.RestartPolicyOnFailure && rp != corev1.RestartPolicyNever {
		p.add(at, "%s: Unsupported value: %q: a Job's pods need restartPolicy \"OnFailure\" or \"Never\"", tmpl.Child("spec", "restartPolicy"), rp)
	}
	if job.Spec.PodFailurePolicy != nil && rp != corev1.RestartPolicyNever {
		p.add(at, "%s: Invalid value: %q: only \"Never\" is supported when podFailurePolicy is specified", tmpl.Child("spec", "restartPolicy"), rp)
	}
	indexed := job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion
	if cm := job.Spec.CompletionMode; cm != nil && *cm != batchv1.IndexedCompletion && *cm != batchv1.NonIndexedCompletion {
		p.add(at, "%s: Unsupported value: %q", spec.Child("completionMode"), *cm)
	}
	if indexed {
		if job.Spec.Completions == nil {
			p.add(at, "%s: Required value: when completion mode is Indexed", spec.Child("completions"))
		} else if *job.Spec.Completions > maxIndexedJobCompletions {
			p.add(at, "%s: Invalid value: %d: must be less than or equal to %d when completion mode is Indexed", spec.Child("completions"), *job.Spec.Completions, maxIndexedJobCompletions)
		}
		if par := job.Spec.Parallelism; par != nil && *par > maxIndexedJobCompletions {
			p.add(at, "%s: Invalid value: %d: must be less than or equal to %d when completion mode is Indexed", spec.Child("parallelism"), *par, maxIndexedJobCompletions)
		}
	} else if job.Spec.BackoffLimitPerIndex != nil {
		p.add(at, "%s: Forbidden: requires indexed completion mode", spec.Child("backoffLimitPerIndex"))
	}
	checkPodSpec(podContext{at: at, m: m}, &job.Spec.Template.Spec, tmpl.Child("spec"), p)
	checkPodFailurePolicy(at, job, spec.Child("podFailurePolicy"), p)
	checkSubdomain(at, job, m, tmpl.Child("spec", "subdomain"), p)

	// Our rule: a claim mounted by several pods of the Job at once must allow
	// several nodes, or the pods must share one node; else pods scheduled
	// elsewhere never start.
	if par := job.Spec.Parallelism; par != nil && *par > 1 && !colocated(&job.Spec.Template) {
		for i, v := range job.Spec.Template.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			claim := m.claims[v.PersistentVolumeClaim.ClaimName]
			if claim != nil && !allowsManyNodes(claim.Spec.AccessModes, v.PersistentVolumeClaim.ReadOnly) {
				p.add(at, "%s: PersistentVolumeClaim %q allows %v, but up to %s pods mount it at once, on any node: mount it in one pod only, or keep the pods on one node (required podAffinity on kubernetes.io/hostname)", tmpl.Child("spec", "volumes").Index(i), claim.Name, claim.Spec.AccessModes, fmtInt32(job.Spec.Parallelism, "1"))
			}
		}
	}
}

// colocated: the template requires its pods on the node of pods like them.
func colocated(t *corev1.PodTemplateSpec) bool {
	a := t.Spec.Affinity
	if a == nil || a.PodAffinity == nil {
		return false
	}
	for _, term := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if term.TopologyKey != "kubernetes.io/hostname" || term.LabelSelector == nil {
			continue
		}
		if sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector); err == nil && !sel.Empty() && sel.Matches(labels.Set(t.Labels)) {
			return true
		}
	}
	return false
}

// checkPodFailurePolicy: our binaries exit 2 on bad configuration, which no
// retry fixes, so it must fail the Job at once; evictions, drains and
// preemptions (the DisruptionTarget condition) must not use up backoffLimit.
func checkPodFailurePolicy(at string, job *batchv1.Job, fld *field.Path, p *problems) {
	pfp := job.Spec.PodFailurePolicy
	if pfp == nil {
		p.add(at, "%s: Required value: exit code 2 (bad configuration) must FailJob and DisruptionTarget (evictions) must be Ignored; without it every retry of a bad flag and every eviction counts against backoffLimit", fld)
		return
	}
	failsOn2, ignoresDisruption := false, false
	for _, rule := range pfp.Rules {
		if r := rule.OnExitCodes; r != nil && rule.Action == batchv1.PodFailurePolicyActionFailJob && r.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn {
			for _, v := range r.Values {
				failsOn2 = failsOn2 || v == 2
			}
		}
		if rule.Action == batchv1.PodFailurePolicyActionIgnore {
			for _, c := range rule.OnPodConditions {
				ignoresDisruption = ignoresDisruption || (c.Type == corev1.DisruptionTarget && (c.Status == "" || c.Status == corev1.ConditionTrue))
			}
		}
	}
	if !failsOn2 {
		p.add(at, "%s.rules: no FailJob rule for exit code 2: bad configuration would be retried until backoffLimit", fld)
	}
	if !ignoresDisruption {
		p.add(at, "%s.rules: no Ignore rule for the DisruptionTarget condition: evictions and drains would count against backoffLimit", fld)
	}
}

// checkSubdomain: pods of a Job with a subdomain get DNS names
// <hostname>.<subdomain> only from a headless Service of that name that
// selects them; publishNotReadyAddresses gives the names before the pods are
// ready (a server restoring a checkpoint), so clients can resolve and retry.
func checkSubdomain(at string, job *batchv1.Job, m *manifests, fld *field.Path, p *problems) {
	name := job.Spec.Template.Spec.Subdomain
	if name == "" {
		return
	}
	svc := m.services[name]
	switch {
	case svc == nil:
		p.add(at, "%s: Service %q is not in the manifests, so the pods get no DNS names", fld, name)
	case svc.Spec.ClusterIP != corev1.ClusterIPNone:
		p.add(at, "%s: Service %q is not headless (spec.clusterIP is %q, must be \"None\"), so pods get no DNS names", fld, name, svc.Spec.ClusterIP)
	case len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(job.Spec.Template.Labels)):
		p.add(at, "%s: Service %q selector %v does not select this Job's pods", fld, name, svc.Spec.Selector)
	case !svc.Spec.PublishNotReadyAddresses:
		p.add(at, "%s: Service %q lacks publishNotReadyAddresses: true, so a starting or restoring pod has no DNS name until it is ready", fld, name)
	}
}

func allowsManyNodes(modes []corev1.PersistentVolumeAccessMode, readOnly bool) bool {
	for _, mode := range modes {
		if mode == corev1.ReadWriteMany || (readOnly && mode == corev1.ReadOnlyMany) {
			return true
		}
	}
	return false
}

func checkService(svc *corev1.Service, m *manifests, p *problems) {
	at := where("Service", svc.Name)
	spec := field.NewPath("spec")
	switch svc.Spec.Type {
	case "", corev1.ServiceTypeClusterIP:
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			p.add(at, "%s: Invalid value: %q: may not be set to 'None' for %s services", spec.Child("clusterIP"), svc.Spec.ClusterIP, svc.Spec.Type)
		}
	default:
		p.add(at, "%s: Unsupported value: %q", spec.Child("type"), svc.Spec.Type)
	}
	if len(svc.Spec.Ports) == 0 && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		p.add(at, "%s: Required value", spec.Child("ports"))
	}
	p.addErrs(at, metav1validation.ValidateLabels(svc.Spec.Selector, spec.Child("selector")))
	names := map[string]bool{}
	for i, port := range svc.Spec.Ports {
		pf := spec.Child("ports").Index(i)
		if len(svc.Spec.Ports) > 1 && port.Name == "" {
			p.add(at, "%s: Required value", pf.Child("name"))
		}
		if port.Name != "" {
			for _, msg := range validation.IsDNS1123Label(port.Name) {
				p.add(at, "%s: Invalid value: %q: %s", pf.Child("name"), port.Name, msg)
			}
			if names[port.Name] {
				p.add(at, "%s: Duplicate value: %q", pf.Child("name"), port.Name)
			}
			names[port.Name] = true
		}
		for _, msg := range validation.IsValidPortNum(int(port.Port)) {
			p.add(at, "%s: Invalid value: %d: %s", pf.Child("port"), port.Port, msg)
		}
		checkProtocol(at, port.Protocol, pf.Child("protocol"), p)
		if port.TargetPort.Type == intstr.String {
			for _, msg := range validation.IsValidPortName(port.TargetPort.StrVal) {
				p.add(at, "%s: Invalid value: %q: %s", pf.Child("targetPort"), port.TargetPort.StrVal, msg)
			}
		} else if port.TargetPort.IntVal != 0 {
			for _, msg := range validation.IsValidPortNum(int(port.TargetPort.IntVal)) {
				p.add(at, "%s: Invalid value: %d: %s", pf.Child("targetPort"), port.TargetPort.IntVal, msg)
			}
		}
	}
	// Our rule: a Service selects some pods of ours, and each of its ports
	// leads to a port of theirs.
	if len(svc.Spec.Selector) == 0 {
		p.add(at, "%s: Required value: select the pods this Service is for", spec.Child("selector"))
		return
	}
	selected := 0
	for _, pod := range allTemplates(m) {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.labels)) {
			continue
		}
		selected++
		for i, port := range svc.Spec.Ports {
			target, ok := resolveTargetPort(port, pod.spec)
			pf := spec.Child("ports").Index(i)
			if !ok {
				p.add(at, "%s: %s does not lead to a container port of %s's pods", pf.Child("targetPort"), port.TargetPort.String(), pod.owner)
			} else if svc.Spec.ClusterIP == corev1.ClusterIPNone && target != port.Port {
				// No proxy remaps ports of a headless Service: clients dial
				// the pod IP at the port they were told.
				p.add(at, "%s: Invalid value: %d: a headless Service's port must equal its target port %d (%s's pods listen there)", pf.Child("port"), port.Port, target, pod.owner)
			}
		}
	}
	if selected == 0 {
		p.add(at, "%s: %v selects no pods in the manifests", spec.Child("selector"), svc.Spec.Selector)
	}
}

type podTemplate struct {
	owner  string
	labels map[string]string
	spec   *corev1.PodSpec
}

func allTemplates(m *manifests) []podTemplate {
	var out []podTemplate
	for _, sts := range m.statefulSets {
		out = append(out, podTemplate{where("StatefulSet", sts.Name), sts.Spec.Template.Labels, &sts.Spec.Template.Spec})
	}
	for _, job := range m.jobs {
		out = append(out, podTemplate{where("Job", job.Name), job.Spec.Template.Labels, &job.Spec.Template.Spec})
	}
	return out
}

// resolveTargetPort finds the container port a Service port leads to.
func resolveTargetPort(port corev1.ServicePort, spec *corev1.PodSpec) (int32, bool) {
	for _, c := range spec.Containers {
		for _, cp := range c.Ports {
			switch {
			case port.TargetPort.Type == intstr.String && cp.Name == port.TargetPort.StrVal:
				return cp.ContainerPort, true
			case port.TargetPort.Type == intstr.Int && port.TargetPort.IntVal == 0 && cp.ContainerPort == port.Port:
				return cp.ContainerPort, true
			case port.TargetPort.Type == intstr.Int && port.TargetPort.IntVal != 0 && cp.ContainerPort == port.TargetPort.IntVal:
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

func checkClaim(pvc *corev1.PersistentVolumeClaim, p *problems) {
	at := where("PersistentVolumeClaim", pvc.Name)
	checkClaimSpec(at, &pvc.Spec, field.NewPath("spec"), p)
	// Our rule: the default storage classes of EKS, GKE, AKS, kind and
	// minikube offer only ReadWriteOnce; such a claim stays Pending, and so
	// does every pod that mounts it, with no error.
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName == "" {
		for i, mode := range pvc.Spec.AccessModes {
			if mode == corev1.ReadWriteMany || mode == corev1.ReadOnlyMany {
				p.add(at, "spec.accessModes[%d]: %s on the default storage class, which usually cannot provide it (the claim and its pods stay Pending): use ReadWriteOnce, or name a storageClassName that offers %s", i, mode, mode)
			}
		}
	}
}

func checkConfigMap(cm *corev1.ConfigMap, p *problems) {
	at := where("ConfigMap", cm.Name)
	for key := range cm.Data {
		for _, msg := range validation.IsConfigMapKey(key) {
			p.add(at, "data[%s]: Invalid value: %q: %s", key, key, msg)
		}
		if _, dup := cm.BinaryData[key]; dup {
			p.add(at, "data[%s]: duplicate of binaryData key", key)
		}
	}
}

func fmtInt32(v *int32, unset string) string {
	if v == nil {
		return unset
	}
	return fmt.Sprint(*v)
}
