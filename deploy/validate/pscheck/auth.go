package main

// Authentication between workers and servers (server/auth.h): what the
// servers ask of a worker, and that the files both read are mounted.

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// checkWorkerAuth: a worker must meet what the servers' authentication
// asks (TLS, a client certificate, the job token), or it cannot connect or
// every call is refused; its files must be mounted.
// The worker's setting is a flag of ps_worker's or a variable of the
// user's program (wf.names).
func checkWorkerAuth(sAt string, sf *flags, wAt string, c *corev1.Container, wf *flags, p *problems) {
	for _, flag := range []string{"tls_ca", "tls_cert", "tls_key", "token_file"} {
		checkMountedFile(wAt, c, wf, flag, p)
	}
	name := func(flag string) string { return strings.TrimPrefix(wf.spell(flag), "flag ") }
	hint := ""
	if strings.HasPrefix(name("tls_ca"), "$") {
		hint = fmt.Sprintf(" (components/auth sets the PS_TLS_* variables for Jobs labelled %s=%s when listed after components/torch-worker)", workerProgramLabel, programUsers)
	}
	switch {
	case sf.has("tls_cert") && !wf.has("tls_ca"):
		p.add(wAt, "the servers (%s) speak TLS (--tls_cert) but the worker has no %s: it could not connect%s", sAt, name("tls_ca"), hint)
	case !sf.has("tls_cert") && wf.has("tls_ca"):
		p.add(wAt, "%s but the servers (%s) have no --tls_cert: they speak plaintext and the TLS handshake fails", wf.spell("tls_ca"), sAt)
	}
	if sf.has("tls_client_ca") && !(wf.has("tls_cert") && wf.has("tls_key")) {
		p.add(wAt, "the servers (%s) require client certificates (--tls_client_ca) but the worker lacks %s and %s: it could not connect%s", sAt, name("tls_cert"), name("tls_key"), hint)
	}
	if sf.has("token_file") && !wf.has("token_file") {
		p.add(wAt, "the servers (%s) require the job token (--token_file) but the worker has no %s: every call would be refused%s", sAt, name("token_file"), hint)
	}
}

// checkMountedFile: a flag naming a file the container reads (a
// certificate, a key, a token) must point into one of its volume mounts:
// nothing else puts such a file into the image.
func checkMountedFile(at string, c *corev1.Container, f *flags, flag string, p *problems) {
	file, ok := f.known(flag)
	if !ok {
		return
	}
	if !strings.HasPrefix(file, "/") {
		p.add(at, "%s=%s: must be an absolute path", f.spell(flag), file)
		return
	}
	if mountFor(c, file) == nil {
		p.add(at, "%s=%s is on no volume mount of container %q: mount the Secret that holds it", f.spell(flag), file, c.Name)
	}
}
