package main

// Pod template checks: the parts of the API server's pod validation
// (k8s.io/kubernetes/pkg/apis/core/validation, not packaged by Debian) that
// strict decoding does not do, written against the same apimachinery
// validators, plus our own rules for pods that must not hang or run as root.

import (
	"path"
	"reflect"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// podContext is what pod checks need from around the pod.
type podContext struct {
	at string
	m  *manifests
	// Volumes that come from a StatefulSet's volumeClaimTemplates.
	claimTemplates map[string]bool
}

func checkPodSpec(ctx podContext, spec *corev1.PodSpec, fld *field.Path, p *problems) {
	volumes := checkVolumes(ctx, spec.Volumes, fld.Child("volumes"), p)
	for name := range ctx.claimTemplates {
		if volumes[name] != nil {
			p.add(ctx.at, "%s: volume %q is also a volumeClaimTemplate", fld.Child("volumes"), name)
		}
	}
	if len(spec.Containers) == 0 {
		p.add(ctx.at, "%s: Required value", fld.Child("containers"))
	}
	names := map[string]bool{}
	for i := range spec.InitContainers {
		checkContainer(ctx, spec, &spec.InitContainers[i], volumes, names, fld.Child("initContainers").Index(i), p)
	}
	for i := range spec.Containers {
		checkContainer(ctx, spec, &spec.Containers[i], volumes, names, fld.Child("containers").Index(i), p)
	}
	// Our rules.
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds <= 0 {
		p.add(ctx.at, "%s: must be set to a positive number of seconds (time to exit cleanly on SIGTERM)", fld.Child("terminationGracePeriodSeconds"))
	}
	sc := spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		p.add(ctx.at, "%s: must be true (pods run as non-root)", fld.Child("securityContext", "runAsNonRoot"))
	}
	if sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		p.add(ctx.at, "%s: must not be 0 (root)", fld.Child("securityContext", "runAsUser"))
	}
	checkServiceLinks(ctx, spec, fld, p)
}

// checkVolumes returns the pod's volumes by name.
func checkVolumes(ctx podContext, vols []corev1.Volume, fld *field.Path, p *problems) map[string]*corev1.Volume {
	byName := map[string]*corev1.Volume{}
	for i := range vols {
		v := &vols[i]
		vf := fld.Index(i)
		for _, msg := range validation.IsDNS1123Label(v.Name) {
			p.add(ctx.at, "%s: Invalid value: %q: %s", vf.Child("name"), v.Name, msg)
		}
		if byName[v.Name] != nil {
			p.add(ctx.at, "%s: Duplicate value: %q", vf.Child("name"), v.Name)
		}
		byName[v.Name] = v
		if n := countSet(v.VolumeSource); n != 1 {
			p.add(ctx.at, "%s: must specify exactly one volume type, found %d", vf, n)
		}
		if c := v.PersistentVolumeClaim; c != nil && ctx.m.claims[c.ClaimName] == nil {
			p.add(ctx.at, "%s: PersistentVolumeClaim %q is not in the manifests (the pod would stay Pending)", vf.Child("persistentVolumeClaim", "claimName"), c.ClaimName)
		}
		if c := v.ConfigMap; c != nil && ctx.m.configMaps[c.Name] == nil && (c.Optional == nil || !*c.Optional) {
			p.add(ctx.at, "%s: ConfigMap %q is not in the manifests", vf.Child("configMap", "name"), c.Name)
		}
	}
	return byName
}

// countSet counts the non-nil pointer fields of a one-of struct.
func countSet(oneOf interface{}) int {
	v := reflect.ValueOf(oneOf)
	n := 0
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.Ptr && !f.IsNil() {
			n++
		}
	}
	return n
}

func checkContainer(ctx podContext, spec *corev1.PodSpec, c *corev1.Container, volumes map[string]*corev1.Volume, names map[string]bool, fld *field.Path, p *problems) {
	for _, msg := range validation.IsDNS1123Label(c.Name) {
		p.add(ctx.at, "%s: Invalid value: %q: %s", fld.Child("name"), c.Name, msg)
	}
	if names[c.Name] {
		p.add(ctx.at, "%s: Duplicate value: %q", fld.Child("name"), c.Name)
	}
	names[c.Name] = true
	if c.Image == "" {
		p.add(ctx.at, "%s: Required value", fld.Child("image"))
	} else if ref := c.Image[strings.LastIndex(c.Image, "/")+1:]; !strings.Contains(ref, ":") && !strings.Contains(ref, "@") || strings.HasSuffix(ref, ":latest") {
		p.add(ctx.at, "%s: %q: pin a version tag or digest, not latest", fld.Child("image"), c.Image)
	}
	switch c.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		p.add(ctx.at, "%s: Unsupported value: %q", fld.Child("imagePullPolicy"), c.ImagePullPolicy)
	}
	checkPorts(ctx.at, c.Ports, fld.Child("ports"), p)
	env := containerEnv(ctx, c, fld, p)
	for i, arg := range c.Args {
		checkReferences(ctx.at, arg, env, fld.Child("args").Index(i), p)
	}
	for i, arg := range c.Command {
		checkReferences(ctx.at, arg, env, fld.Child("command").Index(i), p)
	}
	checkResources(ctx.at, c.Resources, fld.Child("resources"), p)
	for _, probe := range []struct {
		name  string
		probe *corev1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
		if probe.probe != nil {
			checkProbe(ctx.at, probe.name, probe.probe, c.Ports, fld.Child(probe.name), p)
		}
	}
	mountPaths := map[string]bool{}
	for i, vm := range c.VolumeMounts {
		vf := fld.Child("volumeMounts").Index(i)
		if volumes[vm.Name] == nil && !ctx.claimTemplates[vm.Name] {
			p.add(ctx.at, "%s: Not found: %q (no such volume or volumeClaimTemplate)", vf.Child("name"), vm.Name)
		}
		if !path.IsAbs(vm.MountPath) {
			p.add(ctx.at, "%s: Invalid value: %q: must be an absolute path", vf.Child("mountPath"), vm.MountPath)
		}
		if mountPaths[vm.MountPath] {
			p.add(ctx.at, "%s: Invalid value: %q: must be unique", vf.Child("mountPath"), vm.MountPath)
		}
		mountPaths[vm.MountPath] = true
	}
	// Our rule: no way back to root.
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		p.add(ctx.at, "%s: must be false", fld.Child("securityContext", "allowPrivilegeEscalation"))
	}
	if sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		p.add(ctx.at, "%s: must not be 0 (root)", fld.Child("securityContext", "runAsUser"))
	}
	if sc != nil && sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot {
		p.add(ctx.at, "%s: must not be false (pods run as non-root)", fld.Child("securityContext", "runAsNonRoot"))
	}
}

func checkPorts(at string, ports []corev1.ContainerPort, fld *field.Path, p *problems) {
	names := map[string]bool{}
	for i, port := range ports {
		pf := fld.Index(i)
		for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
			p.add(at, "%s: Invalid value: %d: %s", pf.Child("containerPort"), port.ContainerPort, msg)
		}
		if port.Name != "" {
			for _, msg := range validation.IsValidPortName(port.Name) {
				p.add(at, "%s: Invalid value: %q: %s", pf.Child("name"), port.Name, msg)
			}
			if names[port.Name] {
				p.add(at, "%s: Duplicate value: %q", pf.Child("name"), port.Name)
			}
			names[port.Name] = true
		}
		checkProtocol(at, port.Protocol, pf.Child("protocol"), p)
	}
}

func checkProtocol(at string, proto corev1.Protocol, fld *field.Path, p *problems) {
	switch proto {
	case "", corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
	default:
		p.add(at, "%s: Unsupported value: %q: supported values: \"TCP\", \"UDP\", \"SCTP\"", fld, proto)
	}
}

// envValue is one environment variable as the kubelet would set it; known is
// false when only the cluster can tell (fieldRef, secrets).
type envValue struct {
	value string
	known bool
}

// containerEnv resolves the container's environment from env and envFrom.
// Later entries win, and env wins over envFrom, as in the kubelet. The
// entry "" holds whether some source's keys cannot be known here.
func containerEnv(ctx podContext, c *corev1.Container, fld *field.Path, p *problems) map[string]envValue {
	env := map[string]envValue{}
	opaque := false
	for i, from := range c.EnvFrom {
		ff := fld.Child("envFrom").Index(i)
		if from.Prefix != "" {
			for _, msg := range validation.IsEnvVarName(from.Prefix) {
				p.add(ctx.at, "%s: Invalid value: %q: %s", ff.Child("prefix"), from.Prefix, msg)
			}
		}
		switch {
		case from.ConfigMapRef != nil && from.SecretRef != nil:
			p.add(ctx.at, "%s: may not have more than one field specified at a time", ff)
		case from.ConfigMapRef != nil:
			cm := ctx.m.configMaps[from.ConfigMapRef.Name]
			if cm == nil {
				if from.ConfigMapRef.Optional == nil || !*from.ConfigMapRef.Optional {
					p.add(ctx.at, "%s: ConfigMap %q is not in the manifests (the pod would not start)", ff.Child("configMapRef", "name"), from.ConfigMapRef.Name)
				}
				continue
			}
			for key, value := range cm.Data {
				name := from.Prefix + key
				if len(validation.IsEnvVarName(name)) != 0 {
					p.add(ctx.at, "%s: ConfigMap %q key %q is not a valid environment variable name (the kubelet skips it)", ff, cm.Name, key)
					continue
				}
				env[name] = envValue{value, true}
			}
		case from.SecretRef != nil:
			opaque = true
		default:
			p.add(ctx.at, "%s: must specify one of: `configMapRef` or `secretRef`", ff)
		}
	}
	for i, e := range c.Env {
		ef := fld.Child("env").Index(i)
		for _, msg := range validation.IsEnvVarName(e.Name) {
			p.add(ctx.at, "%s: Invalid value: %q: %s", ef.Child("name"), e.Name, msg)
		}
		switch {
		case e.ValueFrom == nil:
			value, _, unknown := expand(e.Value, env)
			env[e.Name] = envValue{value, !unknown}
		case e.Value != "":
			p.add(ctx.at, "%s: Invalid value: may not be specified when `value` is not empty", ef.Child("valueFrom"))
		case countSet(*e.ValueFrom) != 1:
			p.add(ctx.at, "%s: must specify exactly one of fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef", ef.Child("valueFrom"))
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			optional := ref.Optional != nil && *ref.Optional
			cm := ctx.m.configMaps[ref.Name]
			if cm == nil {
				if !optional {
					p.add(ctx.at, "%s: ConfigMap %q is not in the manifests", ef.Child("valueFrom", "configMapKeyRef", "name"), ref.Name)
				}
				continue
			}
			value, ok := cm.Data[ref.Key]
			if !ok && !optional {
				p.add(ctx.at, "%s: ConfigMap %q has no key %q", ef.Child("valueFrom", "configMapKeyRef", "key"), ref.Name, ref.Key)
			}
			env[e.Name] = envValue{value, ok}
		default:
			env[e.Name] = envValue{"", false}
		}
	}
	if opaque {
		env[""] = envValue{"", false}
	}
	return env
}

// expand substitutes $(NAME) as the kubelet does ($$ escapes a $). It
// returns the names no entry defines (the kubelet leaves those literally in
// the value) and whether some reference could not be resolved here.
func expand(s string, env map[string]envValue) (string, []string, bool) {
	var out strings.Builder
	var missing []string
	unknown := false
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			out.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			out.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				out.WriteString(s[i:])
				return out.String(), missing, unknown
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok && v.known {
				out.WriteString(v.value)
			} else {
				out.WriteString(s[i : i+3+end])
				unknown = true
				if !ok {
					missing = append(missing, name)
				}
			}
			i += 2 + end
		default:
			out.WriteByte('$')
		}
	}
	return out.String(), missing, unknown
}

// checkReferences: Kubernetes passes an undefined $(NAME) through literally,
// so a typo becomes a confusing flag value at run time; here it is an error.
func checkReferences(at, arg string, env map[string]envValue, fld *field.Path, p *problems) {
	_, missing, _ := expand(arg, env)
	if _, opaque := env[""]; opaque {
		return
	}
	for _, name := range missing {
		p.add(at, "%s: %q refers to $(%s), which no env or envFrom entry defines", fld, arg, name)
	}
}

var standardResources = map[corev1.ResourceName]bool{
	corev1.ResourceCPU: true, corev1.ResourceMemory: true, corev1.ResourceEphemeralStorage: true,
}

func isExtendedResource(name corev1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.Contains(s, "kubernetes.io/") && !strings.HasPrefix(s, "requests.")
}

func checkResources(at string, r corev1.ResourceRequirements, fld *field.Path, p *problems) {
	for _, list := range []struct {
		name string
		rl   corev1.ResourceList
	}{{"limits", r.Limits}, {"requests", r.Requests}} {
		for _, name := range sortedNames(list.rl) {
			q := list.rl[name]
			rf := fld.Child(list.name).Key(string(name))
			if !standardResources[name] && !strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) && !isExtendedResource(name) {
				p.add(at, "%s: Invalid value: %q: must be a standard resource type or fully qualified", rf, name)
			} else if msgs := validation.IsQualifiedName(string(name)); len(msgs) != 0 {
				p.add(at, "%s: Invalid value: %q: %s", rf, name, strings.Join(msgs, "; "))
			}
			if q.Sign() < 0 {
				p.add(at, "%s: Invalid value: %q: must be greater than or equal to 0", rf, q.String())
			}
			if isExtendedResource(name) && q.MilliValue()%1000 != 0 {
				p.add(at, "%s: Invalid value: %q: must be an integer", rf, q.String())
			}
		}
	}
	for _, name := range sortedNames(r.Requests) {
		req := r.Requests[name]
		lim, hasLimit := r.Limits[name]
		rf := fld.Child("requests").Key(string(name))
		if isExtendedResource(name) {
			if !hasLimit {
				p.add(at, "%s: Forbidden: Limit must be set for non overcommitable resources", rf)
			} else if req.Cmp(lim) != 0 {
				p.add(at, "%s: Invalid value: %q: must be equal to %s limit of %s", rf, req.String(), name, lim.String())
			}
		} else if hasLimit && req.Cmp(lim) > 0 {
			p.add(at, "%s: Invalid value: %q: must be less than or equal to %s limit of %s", rf, req.String(), name, lim.String())
		}
	}
	// Our rule: the scheduler needs requests, and memory without a limit
	// can starve the node.
	for _, need := range []struct {
		list string
		rl   corev1.ResourceList
		name corev1.ResourceName
	}{{"requests", r.Requests, corev1.ResourceCPU}, {"requests", r.Requests, corev1.ResourceMemory}, {"limits", r.Limits, corev1.ResourceMemory}} {
		if _, ok := need.rl[need.name]; !ok {
			p.add(at, "%s: Required value: set %s %s", fld.Child(need.list).Key(string(need.name)), need.name, need.list)
		}
	}
}

func sortedNames(rl corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(rl))
	for name := range rl {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	return names
}

func checkProbe(at, kind string, probe *corev1.Probe, ports []corev1.ContainerPort, fld *field.Path, p *problems) {
	if n := countSet(probe.ProbeHandler); n != 1 {
		p.add(at, "%s: must specify exactly one handler (exec, httpGet, tcpSocket, grpc), found %d", fld, n)
	}
	for _, v := range []struct {
		name  string
		value int32
	}{{"initialDelaySeconds", probe.InitialDelaySeconds}, {"timeoutSeconds", probe.TimeoutSeconds}, {"periodSeconds", probe.PeriodSeconds}, {"successThreshold", probe.SuccessThreshold}, {"failureThreshold", probe.FailureThreshold}} {
		if v.value < 0 {
			p.add(at, "%s: Invalid value: %d: must be greater than or equal to 0", fld.Child(v.name), v.value)
		}
	}
	if kind != "readinessProbe" && probe.SuccessThreshold > 1 {
		p.add(at, "%s: Invalid value: %d: must be 1", fld.Child("successThreshold"), probe.SuccessThreshold)
	}
	if g := probe.GRPC; g != nil {
		for _, msg := range validation.IsValidPortNum(int(g.Port)) {
			p.add(at, "%s: Invalid value: %d: %s", fld.Child("grpc", "port"), g.Port, msg)
		}
	}
	if h := probe.HTTPGet; h != nil && h.Port.Type == intstr.String && !hasNamedPort(ports, h.Port.StrVal) {
		p.add(at, "%s: Invalid value: %q: must be a container port name", fld.Child("httpGet", "port"), h.Port.StrVal)
	}
	if t := probe.TCPSocket; t != nil && t.Port.Type == intstr.String && !hasNamedPort(ports, t.Port.StrVal) {
		p.add(at, "%s: Invalid value: %q: must be a container port name", fld.Child("tcpSocket", "port"), t.Port.StrVal)
	}
}

func hasNamedPort(ports []corev1.ContainerPort, name string) bool {
	for _, port := range ports {
		if port.Name == name {
			return true
		}
	}
	return false
}

// checkServiceLinks: unless enableServiceLinks is false, the kubelet sets
// <SERVICE>_PORT, <SERVICE>_SERVICE_HOST, ... for every Service with a
// cluster IP in the namespace, silently shadowing envFrom values of the same
// name (a Service "ps" overrides PS_PORT from a ConfigMap).
func checkServiceLinks(ctx podContext, spec *corev1.PodSpec, fld *field.Path, p *problems) {
	if spec.EnableServiceLinks != nil && !*spec.EnableServiceLinks {
		return
	}
	for _, svc := range ctx.m.services {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		prefix := strings.ToUpper(strings.ReplaceAll(svc.Name, "-", "_")) + "_"
		for i := range spec.Containers {
			for name := range containerEnv(ctx, &spec.Containers[i], fld, &problems{}) {
				if strings.HasPrefix(name, prefix+"SERVICE_") || strings.HasPrefix(name, prefix+"PORT") {
					p.add(ctx.at, "%s: Service %q injects variables named %s* that shadow %s; set enableServiceLinks: false", fld.Child("enableServiceLinks"), svc.Name, prefix, name)
				}
			}
		}
	}
}

// mountFor returns the volume mount of c that holds the absolute file path,
// or nil.
func mountFor(c *corev1.Container, file string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	clean := path.Clean(file)
	for i := range c.VolumeMounts {
		vm := &c.VolumeMounts[i]
		mp := path.Clean(vm.MountPath)
		if clean == mp || strings.HasPrefix(clean, strings.TrimSuffix(mp, "/")+"/") {
			if best == nil || len(mp) > len(best.MountPath) {
				best = vm
			}
		}
	}
	return best
}
