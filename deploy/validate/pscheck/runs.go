package main

// Runs in one namespace: each rendered run must be an island. kustomize's
// namePrefix renames objects (and, with deploy/k8s/base/names.yaml, the
// names inside strings); components/settings puts PS_RUN_ID into the
// app.kubernetes.io/instance label that every selector uses.

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

const instanceLabel = "app.kubernetes.io/instance"

// checkInstance: within one run, every object, pod template, claim template
// and selector carries one instance label value, the run's PS_RUN_ID, so
// that another run's value keeps their selectors apart.
func checkInstance(m *manifests, p *problems) {
	values := map[string][]string{}
	note := func(at string, l map[string]string) {
		values[l[instanceLabel]] = append(values[l[instanceLabel]], at)
	}
	noteSelector := func(at string, sel *metav1.LabelSelector) {
		if sel != nil {
			note(at, sel.MatchLabels)
		}
	}
	for _, cm := range m.configMaps {
		note(where("ConfigMap", cm.Name), cm.Labels)
	}
	for _, svc := range m.services {
		at := where("Service", svc.Name)
		note(at, svc.Labels)
		note(at+" spec.selector", svc.Spec.Selector)
	}
	for _, pvc := range m.claims {
		note(where("PersistentVolumeClaim", pvc.Name), pvc.Labels)
	}
	for _, sts := range m.statefulSets {
		at := where("StatefulSet", sts.Name)
		note(at, sts.Labels)
		note(at+" spec.template", sts.Spec.Template.Labels)
		noteSelector(at+" spec.selector", sts.Spec.Selector)
		for i, t := range sts.Spec.Template.Spec.TopologySpreadConstraints {
			noteSelector(fmt.Sprintf("%s spec.template.spec.topologySpreadConstraints[%d]", at, i), t.LabelSelector)
		}
		for i := range sts.Spec.VolumeClaimTemplates {
			note(fmt.Sprintf("%s spec.volumeClaimTemplates[%d]", at, i), sts.Spec.VolumeClaimTemplates[i].Labels)
		}
	}
	for _, job := range m.jobs {
		at := where("Job", job.Name)
		note(at, job.Labels)
		note(at+" spec.template", job.Spec.Template.Labels)
	}
	runID := ""
	for _, cm := range m.configMaps {
		if id, ok := cm.Data["PS_RUN_ID"]; ok {
			runID = id
		}
	}
	if len(values) <= 1 && (runID == "" || len(values) == 0 || values[runID] != nil) {
		return
	}
	var list []string
	for value, ats := range values {
		list = append(list, fmt.Sprintf("%q (%s, ...)", value, ats[0]))
	}
	sort.Strings(list)
	p.add("manifests", "label %s must be the run's PS_RUN_ID (%q) everywhere, in selectors too (components/settings copies it), so that another run's selectors never pick this run's pods; found %v", instanceLabel, runID, list)
}

// runNames is everything of a run that a namespace holds by name.
func runNames(m *manifests) map[string]string {
	names := map[string]string{}
	add := func(kind, name string) { names[kind+"/"+name] = kind + "/" + name }
	for n := range m.configMaps {
		add("ConfigMap", n)
	}
	for n := range m.services {
		add("Service", n)
	}
	for n := range m.claims {
		add("PersistentVolumeClaim", n)
	}
	for _, job := range m.jobs {
		add("Job", job.Name)
	}
	for _, sts := range m.statefulSets {
		add("StatefulSet", sts.Name)
		replicas := 1
		if sts.Spec.Replicas != nil {
			replicas = int(*sts.Spec.Replicas)
		}
		for i := 0; i < replicas && i < 1000; i++ {
			add("Pod", fmt.Sprintf("%s-%d", sts.Name, i))
			for _, t := range sts.Spec.VolumeClaimTemplates {
				add("PersistentVolumeClaim", fmt.Sprintf("%s-%s-%d", t.Name, sts.Name, i))
			}
		}
	}
	return names
}

func instances(m *manifests) map[string]bool {
	out := map[string]bool{}
	for _, t := range allTemplates(m) {
		if v := t.labels[instanceLabel]; v != "" {
			out[v] = true
		}
	}
	return out
}

// checkRuns compares every pair of runs.
func checkRuns(files []string, runs []*manifests) []string {
	p := &problems{}
	for i := range runs {
		for j := i + 1; j < len(runs); j++ {
			a, b := runs[i], runs[j]
			at := fmt.Sprintf("%s and %s", files[i], files[j])
			bNames := runNames(b)
			var shared []string
			for key := range runNames(a) {
				if bNames[key] != "" {
					shared = append(shared, key)
				}
			}
			sort.Strings(shared)
			for _, key := range shared {
				p.add(at, "both have %s: the second run's kubectl apply changes the first's (give each run its own namePrefix)", key)
			}
			bInstances := instances(b)
			for v := range instances(a) {
				if bInstances[v] {
					p.add(at, "both label their pods %s=%s: give each run its own PS_RUN_ID", instanceLabel, v)
				}
			}
			crossSelect(at, files[i], a, files[j], b, p)
			crossSelect(at, files[j], b, files[i], a, p)
		}
	}
	return p.list
}

// crossSelect: no Service or StatefulSet selector of run `a` selects pods
// of run `b`.
func crossSelect(at, aFile string, a *manifests, bFile string, b *manifests, p *problems) {
	type selector struct {
		owner string
		sel   labels.Selector
	}
	var sels []selector
	for _, svc := range a.services {
		if len(svc.Spec.Selector) > 0 {
			sels = append(sels, selector{where("Service", svc.Name), labels.SelectorFromSet(svc.Spec.Selector)})
		}
	}
	for _, sts := range a.statefulSets {
		if s, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector); err == nil && !s.Empty() {
			sels = append(sels, selector{where("StatefulSet", sts.Name), s})
		}
		for _, t := range sts.Spec.Template.Spec.TopologySpreadConstraints {
			if s, err := metav1.LabelSelectorAsSelector(t.LabelSelector); err == nil && !s.Empty() {
				sels = append(sels, selector{where("StatefulSet", sts.Name) + " topologySpreadConstraints", s})
			}
		}
	}
	for _, s := range sels {
		for _, t := range allTemplates(b) {
			if s.sel.Matches(labels.Set(t.labels)) {
				p.add(at, "%s of %s selects the pods of %s of %s", s.owner, aFile, t.owner, bFile)
			}
		}
	}
}
