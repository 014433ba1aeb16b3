package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// recommendedLabels are https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/.
var recommendedLabels = []string{
	"app.kubernetes.io/name",
	"app.kubernetes.io/instance",
	"app.kubernetes.io/version",
	"app.kubernetes.io/component",
	"app.kubernetes.io/part-of",
	"app.kubernetes.io/managed-by",
}

// problems collects every finding, each tagged with the object it is about,
// so that one run reports all of them.
type problems struct {
	list []string
}

// add records one finding on one line, however many lines its text has.
func (p *problems) add(where, format string, args ...interface{}) {
	text := strings.Join(strings.Fields(fmt.Sprintf(format, args...)), " ")
	p.list = append(p.list, where+": "+text)
}

func (p *problems) addErrs(where string, errs field.ErrorList) {
	for _, err := range errs {
		p.add(where, "%s", err.Error())
	}
}

// manifests is one rendered overlay, every document decoded strictly into
// the Kubernetes API type of its kind.
type manifests struct {
	configMaps   map[string]*corev1.ConfigMap
	services     map[string]*corev1.Service
	claims       map[string]*corev1.PersistentVolumeClaim
	statefulSets []*appsv1.StatefulSet
	jobs         []*batchv1.Job
	count        int
	// From -worker-environment; nil: not given.
	workerVariables *workerVariables
}

func where(kind, name string) string { return kind + "/" + name }

// header is read leniently first, only to name a document in messages even
// when its strict decoding fails.
type header struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

func newDecoder() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err) // Only fails on a programming error in the scheme.
		}
	}
	// EnableStrict: unknown and duplicate fields are errors, as with
	// kubectl --validate=strict against an API server.
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// decodeAll reads a multi-document YAML stream (kustomize build output).
func decodeAll(r io.Reader, p *problems) *manifests {
	m := &manifests{
		configMaps: map[string]*corev1.ConfigMap{},
		services:   map[string]*corev1.Service{},
		claims:     map[string]*corev1.PersistentVolumeClaim{},
	}
	decoder := newDecoder()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for index := 1; ; index++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		at := fmt.Sprintf("document %d", index)
		if err != nil {
			p.add(at, "cannot read YAML: %v", err)
			break
		}
		var h header
		if err := yaml.Unmarshal(doc, &h); err != nil {
			p.add(at, "not a YAML object: %v", err)
			continue
		}
		if h.Kind == "" && len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue // An empty document between two "---".
		}
		if h.Kind != "" {
			at = where(h.Kind, h.Metadata.Name)
		}
		obj, gvk, err := decoder.Decode(doc, nil, nil)
		if strictErr, ok := runtime.AsStrictDecodingError(err); ok && obj != nil {
			for _, e := range strictErr.Errors() {
				p.add(at, "%v", e)
			}
		} else if err != nil {
			if runtime.IsNotRegisteredError(err) {
				p.add(at, "kind %q is not one the manifests may contain (%s): %v", h.Kind, supportedKinds, err)
			} else {
				p.add(at, "%v", err)
			}
			continue
		}
		kind := h.Kind
		if gvk != nil {
			kind = gvk.Kind
		}
		m.count++
		m.add(obj, kind, at, p)
	}
	return m
}

func stripComments(doc []byte) []byte {
	var out []string
	for _, line := range strings.Split(string(doc), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			out = append(out, line)
		}
	}
	return []byte(strings.Join(out, "\n"))
}

const supportedKinds = "ConfigMap, Service, PersistentVolumeClaim, StatefulSet, Job"

func (m *manifests) add(obj runtime.Object, kind, at string, p *problems) {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		checkMeta(at, &o.ObjectMeta, apivalidation.NameIsDNSSubdomain, p)
		m.configMaps[o.Name] = o
	case *corev1.Service:
		checkMeta(at, &o.ObjectMeta, apivalidation.NameIsDNS1035Label, p)
		m.services[o.Name] = o
	case *corev1.PersistentVolumeClaim:
		checkMeta(at, &o.ObjectMeta, apivalidation.NameIsDNSSubdomain, p)
		m.claims[o.Name] = o
	case *appsv1.StatefulSet:
		// A DNS label, not only a subdomain: pod hostnames are <name>-<ordinal>.
		checkMeta(at, &o.ObjectMeta, apivalidation.NameIsDNSLabel, p)
		m.statefulSets = append(m.statefulSets, o)
	case *batchv1.Job:
		// Indexed Job pods are named and labelled after the Job.
		checkMeta(at, &o.ObjectMeta, apivalidation.NameIsDNSLabel, p)
		m.jobs = append(m.jobs, o)
	default:
		p.add(at, "kind %q is not one the manifests may contain (%s)", kind, supportedKinds)
	}
}

// checkMeta applies the API server's metadata validation (name, labels,
// annotations) and our rule that every object carries the recommended labels.
func checkMeta(at string, meta *metav1.ObjectMeta, nameFn apivalidation.ValidateNameFunc, p *problems) {
	copied := meta.DeepCopy()
	// kubectl fills in the namespace of the context when none is written.
	if copied.Namespace == "" {
		copied.Namespace = "default"
	}
	p.addErrs(at, apivalidation.ValidateObjectMeta(copied, true, nameFn, field.NewPath("metadata")))
	checkRecommendedLabels(at, meta.Labels, field.NewPath("metadata", "labels"), p)
}

func checkRecommendedLabels(at string, labels map[string]string, path *field.Path, p *problems) {
	for _, key := range recommendedLabels {
		if labels[key] == "" {
			p.add(at, "%s: missing recommended label %s", path, key)
		}
	}
}

// versionLabel changes with every release.
const versionLabel = "app.kubernetes.io/version"

// checkTemplateLabels: pods are what kubectl -l selects, so they carry the
// recommended labels too, valid per the API server; all but the version:
// a Job's pod template (and a StatefulSet's volumeClaimTemplates) cannot be
// changed, so a version there makes the next release's `kubectl apply` fail
// with "field is immutable".
func checkTemplateLabels(at string, meta *metav1.ObjectMeta, path *field.Path, p *problems) {
	p.addErrs(at, metav1validation.ValidateLabels(meta.Labels, path.Child("labels")))
	p.addErrs(at, apivalidation.ValidateAnnotations(meta.Annotations, path.Child("annotations")))
	checkTemplateVersionLabel(at, meta, path, p)
	for _, key := range recommendedLabels {
		if key != versionLabel && meta.Labels[key] == "" {
			p.add(at, "%s: missing recommended label %s", path.Child("labels"), key)
		}
	}
}

func checkTemplateVersionLabel(at string, meta *metav1.ObjectMeta, path *field.Path, p *problems) {
	if _, has := meta.Labels[versionLabel]; has {
		p.add(at, "%s: label %s on an immutable template: the next version's kubectl apply fails (field is immutable); put it on the object only (kustomize labels: includeTemplates: false)", path.Child("labels"), versionLabel)
	}
}
