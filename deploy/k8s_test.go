package deploy

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"berth.dev/berth/internal/config"
)

// The schema checks (field names and types) are deploy/check.sh's, with
// kubeconform; these tests check what a schema cannot: that the pieces
// fit each other and berth.

type obj = map[string]any

func get(o any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := o.(obj)
			if !ok {
				return nil
			}
			o = m[k]
		case int:
			s, ok := o.([]any)
			if !ok || k >= len(s) {
				return nil
			}
			o = s[k]
		}
	}
	return o
}

func loadManifests(t *testing.T, files ...string) map[string]obj {
	t.Helper()
	out := map[string]obj{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o obj
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o == nil {
				continue
			}
			kind, _ := get(o, "kind").(string)
			name, _ := get(o, "metadata", "name").(string)
			out[kind+"/"+name] = o
		}
	}
	return out
}

func baseManifests(t *testing.T) map[string]obj {
	t.Helper()
	b, err := os.ReadFile("k8s/base/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kust struct{ Resources []string }
	if err := yaml.Unmarshal(b, &kust); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, r := range kust.Resources {
		files = append(files, filepath.Join("k8s/base", r))
	}
	return loadManifests(t, files...)
}

func TestKubernetesDeployments(t *testing.T) {
	m := baseManifests(t)
	secret := loadManifests(t, "k8s/base/secret.example.yaml")["Secret/berth-secrets"]
	for _, name := range []string{"Deployment/berth-serve", "Deployment/berth-worker", "Job/berth-migrate"} {
		d, ok := m[name]
		if !ok {
			t.Errorf("no %s in the base", name)
			continue
		}
		pod := get(d, "spec", "template").(obj)
		c := get(pod, "spec", "containers", 0).(obj)
		args, _ := get(c, "args").([]any)
		if len(args) == 0 || !slices.Contains(berthCommands, args[0].(string)) {
			t.Errorf("%s: args %v is not a berth subcommand", name, args)
			continue
		}
		for _, r := range []string{"cpu", "memory"} {
			if get(c, "resources", "requests", r) == nil {
				t.Errorf("%s: no %s request", name, r)
			}
		}
		if get(c, "resources", "limits", "memory") == nil {
			t.Errorf("%s: no memory limit", name)
		}
		if get(c, "securityContext", "readOnlyRootFilesystem") != true || get(pod, "spec", "securityContext", "runAsNonRoot") != true {
			t.Errorf("%s: not non-root with a read-only root filesystem", name)
		}
		env := podEnv(t, name, m, c, secret)
		cmd := args[0].(string)
		if cmd == "serve" || cmd == "worker" {
			// Named as berth names it: a worker is held to its own rules
			// (BERTH_PUBLIC_URL, for the refunds' webhooks).
			fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			// The example's auth secret is a placeholder, which berth
			// refuses; an environment's own random one takes its place.
			if _, err := config.LoadFlags(fs, nil, func(k string) string { return env[k] }); err == nil ||
				!strings.Contains(err.Error(), "BERTH_AUTH_SECRET: is a placeholder") {
				t.Errorf("%s: berth %s takes the example's placeholder auth secret: %v", name, cmd, err)
			}
			env["BERTH_AUTH_SECRET"] = "k3Vq9xZ2pL7wR4tY8nB6mC1d"
			fs = flag.NewFlagSet(cmd, flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			if _, err := config.LoadFlags(fs, nil, func(k string) string { return env[k] }); err != nil {
				t.Errorf("%s: berth %s would refuse its settings: %v", name, cmd, err)
			}
		} else if env["BERTH_DATABASE_URL"] == "" {
			t.Errorf("%s: no BERTH_DATABASE_URL", name)
		}
	}

	serve := m["Deployment/berth-serve"]
	c := get(serve, "spec", "template", "spec", "containers", 0)
	if p := get(c, "readinessProbe", "httpGet", "path"); p != "/readyz" {
		t.Errorf("serve readiness probe %v, want /readyz", p)
	}
	if p := get(c, "livenessProbe", "httpGet", "path"); p != "/healthz" {
		t.Errorf("serve liveness probe %v, want /healthz (a lost database must not restart pods)", p)
	}
	preStop, _ := get(c, "lifecycle", "preStop", "sleep", "seconds").(int)
	grace, _ := get(serve, "spec", "template", "spec", "terminationGracePeriodSeconds").(int)
	if preStop == 0 || time.Duration(grace)*time.Second <= time.Duration(preStop)*time.Second+shutdownTimeout {
		t.Errorf("serve: preStop %ds + berth's %s shutdown must fit in terminationGracePeriodSeconds %d", preStop, shutdownTimeout, grace)
	}
	worker := m["Deployment/berth-worker"]
	if p := get(worker, "spec", "template", "spec", "containers", 0, "livenessProbe", "httpGet", "path"); p != "/healthz" {
		t.Errorf("worker liveness probe %v, want /healthz", p)
	}
	cm := m["ConfigMap/berth-config"]
	if get(cm, "data", "BERTH_EVENTS_IN_SERVE") != "false" {
		t.Error("serve relays events besides the worker Deployment (BERTH_EVENTS_IN_SERVE is not false)")
	}
}

// podEnv is the environment a container gets from its env and envFrom,
// with secrets taken from the example Secret.
func podEnv(t *testing.T, name string, m map[string]obj, c, secret obj) map[string]string {
	t.Helper()
	env := map[string]string{}
	from, _ := get(c, "envFrom").([]any)
	for _, f := range from {
		ref, _ := get(f, "configMapRef", "name").(string)
		cm, ok := m["ConfigMap/"+ref]
		if !ok {
			t.Errorf("%s: envFrom names ConfigMap %q, which the base does not have", name, ref)
			continue
		}
		for k, v := range get(cm, "data").(obj) {
			env[k] = v.(string)
		}
	}
	vars, _ := get(c, "env").([]any)
	for _, v := range vars {
		k := get(v, "name").(string)
		if s, ok := get(v, "value").(string); ok {
			env[k] = s
			continue
		}
		if ref := get(v, "valueFrom", "secretKeyRef"); ref != nil {
			if get(ref, "name") != "berth-secrets" {
				t.Errorf("%s: %s comes from secret %v, not berth-secrets", name, k, get(ref, "name"))
			}
			val, ok := get(secret, "stringData", get(ref, "key").(string)).(string)
			if !ok {
				t.Errorf("%s: %s reads key %v, which secret.example.yaml does not document", name, k, get(ref, "key"))
			}
			env[k] = val
		}
	}
	return env
}

func TestKubernetesSelectorsMatch(t *testing.T) {
	m := baseManifests(t)
	podLabels := map[string]obj{}
	for name, o := range m {
		if get(o, "kind") == "Deployment" {
			podLabels[name] = get(o, "spec", "template", "metadata", "labels").(obj)
			if sel := get(o, "spec", "selector", "matchLabels").(obj); !subset(sel, podLabels[name]) {
				t.Errorf("%s selects %v, its pods carry %v", name, sel, podLabels[name])
			}
		}
	}
	matches := func(sel obj) bool {
		for _, l := range podLabels {
			if subset(sel, l) {
				return true
			}
		}
		return false
	}
	for name, o := range m {
		switch get(o, "kind") {
		case "Service":
			if !matches(get(o, "spec", "selector").(obj)) {
				t.Errorf("%s selects no pods", name)
			}
		case "PodDisruptionBudget":
			if !matches(get(o, "spec", "selector", "matchLabels").(obj)) {
				t.Errorf("%s selects no pods", name)
			}
		case "HorizontalPodAutoscaler":
			target := "Deployment/" + get(o, "spec", "scaleTargetRef", "name").(string)
			if _, ok := m[target]; !ok {
				t.Errorf("%s scales %s, which the base does not have", name, target)
			}
		}
	}
	for _, overlay := range []string{"staging", "production"} {
		b, err := os.ReadFile(filepath.Join("k8s/overlays", overlay, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("- ../../base")) {
			t.Errorf("overlay %s does not build on the base", overlay)
		}
	}
}

func subset(sel, labels obj) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}
