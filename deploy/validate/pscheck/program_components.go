package main

// What the components auth and gpu do to a worker depends on the program it
// runs: ps_worker takes flags and our images; the user's own program
// (components/torch-worker) reads the launcher's variables and runs in the
// user's image. The components tell them apart by a label on the worker
// Job, which must therefore say what the container runs.

import (
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

const (
	workerProgramLabel = "parameter-server/worker-program"
	// ps_worker, which takes flags.
	programOurs = "ps-worker"
	// The user's program, which reads PS_* variables.
	programUsers = "user-program"
)

// Our images by repository name (the last path component, which a
// kustomize `images:` newName keeps when it only adds a registry).
const (
	// deploy/docker/Dockerfile: ps_worker and the paramserver module, no
	// PyTorch; the CUDA build for ps_worker only.
	ourImage = "parameter-server"
	// docs/kubernetes.md, "Your own PyTorch program": ours with PyTorch
	// added, for the CPU unless tagged *-cuda.
	ourTorchImage = "parameter-server-torch"
)

// checkWorkerProgramLabel: the Job's label must name the program its
// container runs, or auth appends ps_worker's flags to a script's argv (or
// gives ps_worker variables it never reads), and gpu puts a script on our
// image, which has no PyTorch.
func checkWorkerProgramLabel(job *batchv1.Job, c *corev1.Container, p *problems) {
	at := where("Job", job.Name)
	want, runs := programUsers, fmt.Sprintf("runs %q, not ps_worker", strings.Join(c.Command, " "))
	if runsOurWorker(c) {
		want, runs = programOurs, "runs ps_worker"
	}
	got, ok := job.Labels[workerProgramLabel]
	switch {
	case !ok:
		p.add(at, "metadata.labels: missing label %s=%s (container %q %s): components/auth and components/gpu choose their patches by it", workerProgramLabel, want, c.Name, runs)
	case got != programOurs && got != programUsers:
		p.add(at, "metadata.labels[%s]: Unsupported value: %q: supported values: %q, %q", workerProgramLabel, got, programOurs, programUsers)
	case got != want:
		p.add(at, "metadata.labels[%s] is %q but container %q %s: components/auth and components/gpu would treat it as %s; set it to %q (components/torch-worker does for the user's program)", workerProgramLabel, got, c.Name, runs, describeProgram(got), want)
	}
}

func describeProgram(label string) string {
	if label == programOurs {
		return "ps_worker (its flags in the program's argv, our image)"
	}
	return "the user's program (PS_TLS_* variables that ps_worker does not read, the image left as it is)"
}

// checkProgramArgs: ps_worker's authentication flags in the arguments of
// the user's program reach its argv, where the client library does not
// look: it reads the variables the launcher sets.
func checkProgramArgs(at string, c *corev1.Container, p *problems) {
	for _, arg := range c.Args {
		name := strings.TrimLeft(arg, "-")
		if eq := strings.IndexByte(name, '='); eq >= 0 {
			name = name[:eq]
		}
		for variable, flag := range authFlags {
			if strings.HasPrefix(arg, "-") && name == flag {
				p.add(at, "container %q runs a program of its own but is given ps_worker's flag %s: it lands in the program's argv, and the client library reads $%s instead (components/auth sets it for Jobs labelled %s=%s)", c.Name, arg, variable, workerProgramLabel, programUsers)
			}
		}
	}
}

// checkProgramImage: a user's program that takes a GPU needs PyTorch built
// for CUDA. Our image has no PyTorch, and the PyTorch image the docs build
// has the CPU build unless tagged *-cuda; any other image is the user's,
// taken on trust.
func checkProgramImage(at string, c *corev1.Container, p *problems) {
	gpus, ok := c.Resources.Limits[gpuResource]
	if !ok || gpus.Sign() <= 0 {
		return
	}
	switch repository := imageRepository(c.Image); {
	case repository == ourImage:
		p.add(at, "container %q runs the user's program on a GPU (%s %s) but on our image %q, which has no PyTorch (its CUDA build is for ps_worker): use an image with a CUDA build of PyTorch (docs/kubernetes.md, \"Your own PyTorch program\")", c.Name, gpus.String(), gpuResource, c.Image)
	case repository == ourTorchImage && !isCudaImage(c.Image):
		p.add(at, "container %q runs the user's program on a GPU (%s %s) but image %q is the PyTorch image built for the CPU: build it FROM parameter-server:0.1.0-cuda with a CUDA PyTorch, tag it *-cuda and name that tag in `images:` (docs/kubernetes.md, \"Your own PyTorch program\")", c.Name, gpus.String(), gpuResource, c.Image)
	}
}

// imageRepository is the last component of an image's repository, without
// registry, tag or digest.
func imageRepository(image string) string {
	if at := strings.IndexByte(image, '@'); at >= 0 {
		image = image[:at]
	}
	if colon := strings.LastIndexByte(image, ':'); colon > strings.LastIndexByte(image, '/') {
		image = image[:colon]
	}
	return image[strings.LastIndexByte(image, '/')+1:]
}
