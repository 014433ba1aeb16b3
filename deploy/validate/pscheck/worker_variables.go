package main

// The variables a worker program reads (common/worker_environment.cc), read
// from that source file itself, so that this checker cannot drift from
// what the client library and the launcher do: the launcher sets them for
// each program it starts (WorkerEnvironmentVariables), the client reads
// them (ReadWorkerEnvironment), and a Kubernetes pod that runs the user's
// program must set the same.

import (
	"fmt"
	"os"
	"regexp"
	"strings"
)

// workerVariables is what the source says.
type workerVariables struct {
	source string
	// kRankVariables: where a worker is among the others.
	rank []string
	// kServerVariables: the servers; serverPattern (kServerPatternVariable)
	// may stand in for the list (the one of them that is not a count).
	servers       []string
	count, list   string
	serverPattern string
	// WorkerEnvironmentVariables: every variable the launcher sets, and
	// the C++ expression each gets; variables that get the same expression
	// hold the same value (RANK and PS_RANK).
	launcher []string
	value    map[string]string
	// ReadAuthEnvironment: the authentication files and name.
	auth []string
}

var (
	quoted = regexp.MustCompile(`"([A-Z][A-Z0-9_]*)"`)
	pair   = regexp.MustCompile(`\{"([A-Z][A-Z0-9_]*)",\s*([^}]*)\}`)
)

// readWorkerVariables parses common/worker_environment.cc.
func readWorkerVariables(file string) (*workerVariables, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	src := string(data)
	body := func(from, to string) (string, error) {
		a := strings.Index(src, from)
		if a < 0 {
			return "", fmt.Errorf("%s: no %q: the checker reads the worker's variables from it; update deploy/validate/pscheck/worker_variables.go", file, from)
		}
		b := strings.Index(src[a:], to)
		if b < 0 {
			return "", fmt.Errorf("%s: no %q after %q", file, to, from)
		}
		return src[a : a+b], nil
	}
	names := func(text string) []string {
		var out []string
		for _, m := range quoted.FindAllStringSubmatch(text, -1) {
			out = append(out, m[1])
		}
		return out
	}
	v := &workerVariables{source: file, value: map[string]string{}}
	text, err := body("kRankVariables[] = {", "};")
	if err != nil {
		return nil, err
	}
	v.rank = names(text)
	if text, err = body("kServerVariables[] = {", "};"); err != nil {
		return nil, err
	}
	v.servers = names(text)
	if text, err = body("kServerPatternVariable =", ";"); err != nil {
		return nil, err
	}
	if found := names(text); len(found) == 1 {
		v.serverPattern = found[0]
	}
	if text, err = body("WorkerEnvironmentVariables(\n", "\n}\n"); err != nil {
		return nil, err
	}
	for _, m := range pair.FindAllStringSubmatch(text, -1) {
		v.launcher = append(v.launcher, m[1])
		v.value[m[1]] = strings.TrimSpace(m[2])
	}
	if text, err = body("void ReadAuthEnvironment(", "\n}\n"); err != nil {
		return nil, err
	}
	v.auth = names(text)
	// The count is the one read as a number.
	for _, name := range v.servers {
		if strings.Contains(src, `ReadCount(lookup, "`+name+`"`) {
			v.count = name
		} else {
			v.list = name
		}
	}
	if len(v.rank) == 0 || len(v.servers) != 2 || v.count == "" || v.list == "" || v.serverPattern == "" || len(v.launcher) == 0 || len(v.auth) == 0 {
		return nil, fmt.Errorf("%s: found rank variables %v, server variables %v, pattern %q, launcher's %v, authentication %v: the layout changed; update deploy/validate/pscheck/worker_variables.go", file, v.rank, v.servers, v.serverPattern, v.launcher, v.auth)
	}
	return v, nil
}

func (v *workerVariables) isAuth(name string) bool {
	for _, a := range v.auth {
		if a == name {
			return true
		}
	}
	return false
}
