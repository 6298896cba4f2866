package deploy

import (
	"flag"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"berth.dev/berth/internal/config"
)

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Restart     string            `yaml:"restart"`
	Healthcheck *struct {
		Test    []string `yaml:"test"`
		Disable bool     `yaml:"disable"`
	} `yaml:"healthcheck"`
	DependsOn       map[string]struct{ Condition string } `yaml:"depends_on"`
	StopGracePeriod string                                `yaml:"stop_grace_period"`
	Volumes         []string                              `yaml:"volumes"`
	Ports           []string                              `yaml:"ports"`
	Build           any                                   `yaml:"build"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return c
}

// berthCommands are the subcommands cmd/berth knows.
var berthCommands = []string{"serve", "worker", "migrate", "seed", "token", "paysim", "dev", "audit", "bench", "version", "probe"}

// healthy reports whether service s has a health check that
// condition: service_healthy can wait for: its own, or the image's
// HEALTHCHECK (berth's image has one) when not disabled.
func healthy(s composeService) bool {
	if s.Healthcheck != nil {
		return !s.Healthcheck.Disable
	}
	return s.Image == "berth:local"
}

func TestComposeWiring(t *testing.T) {
	c := loadCompose(t)
	for _, want := range []string{"postgres", "redis", "kafka", "migrate", "serve-1", "serve-2", "worker", "paysim", "proxy"} {
		if _, ok := c.Services[want]; !ok {
			t.Errorf("compose.yaml has no service %q", want)
		}
	}
	for name, s := range c.Services {
		for dep, d := range s.DependsOn {
			target, ok := c.Services[dep]
			if !ok {
				t.Errorf("%s depends on %s, which is not a service", name, dep)
				continue
			}
			switch d.Condition {
			case "service_healthy":
				if !healthy(target) {
					t.Errorf("%s waits for %s to be healthy, but %s has no health check", name, dep, dep)
				}
			case "service_completed_successfully":
				if target.Restart != "no" {
					t.Errorf("%s waits for %s to complete, but %s restarts (restart: %q)", name, dep, dep, target.Restart)
				}
			case "service_started":
			default:
				t.Errorf("%s depends on %s with condition %q", name, dep, d.Condition)
			}
		}
		if s.Healthcheck != nil && !s.Healthcheck.Disable && len(s.Healthcheck.Test) > 0 {
			if k := s.Healthcheck.Test[0]; k != "CMD" && k != "CMD-SHELL" {
				t.Errorf("%s: health check test starts with %q, want CMD or CMD-SHELL", name, k)
			}
			if s.Image == "berth:local" && s.Healthcheck.Test[0] == "CMD-SHELL" {
				t.Errorf("%s: berth's image has no shell; its health check must be CMD berth probe", name)
			}
		}
	}
	if cycle := dependsCycle(c); cycle != "" {
		t.Errorf("depends_on cycle: %s", cycle)
	}
}

func dependsCycle(c composeFile) string {
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var path []string
	var visit func(string) string
	visit = func(n string) string {
		switch state[n] {
		case visiting:
			return strings.Join(append(path, n), " → ")
		case done:
			return ""
		}
		state[n] = visiting
		path = append(path, n)
		for dep := range c.Services[n].DependsOn {
			if cyc := visit(dep); cyc != "" {
				return cyc
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return ""
	}
	for n := range c.Services {
		if cyc := visit(n); cyc != "" {
			return cyc
		}
	}
	return ""
}

// TestComposeBerthServices loads each berth service's settings the way the
// binary does, so a missing secret or a malformed value fails here rather
// than in a crash loop, and checks that the services reach each other.
func TestComposeBerthServices(t *testing.T) {
	c := loadCompose(t)
	var serves []string
	relays := 0
	for name, s := range c.Services {
		if s.Image != "berth:local" {
			continue
		}
		if len(s.Command) == 0 || !slices.Contains(berthCommands, s.Command[0]) {
			t.Errorf("%s: command %v is not a berth subcommand", name, s.Command)
			continue
		}
		getenv := func(k string) string { return s.Environment[k] }
		switch s.Command[0] {
		case "serve", "worker":
			fs := flag.NewFlagSet(s.Command[0], flag.ContinueOnError) // named as berth names it: a worker's own rules apply
			fs.SetOutput(io.Discard)
			cfg, err := config.LoadFlags(fs, s.Command[1:], getenv)
			if err != nil {
				t.Errorf("%s: berth %s would refuse its settings: %v", name, s.Command[0], err)
				continue
			}
			if !dependsOn(s, "migrate", "service_completed_successfully") {
				t.Errorf("%s starts before the migrations completed", name)
			}
			for _, u := range []string{cfg.DatabaseURL, cfg.RedisURL, cfg.GatewayURL} {
				checkHost(t, c, name, u)
			}
			for _, b := range cfg.KafkaBrokers {
				checkHost(t, c, name, "kafka://"+b)
			}
			if grace, err := time.ParseDuration(s.StopGracePeriod); err != nil || grace <= shutdownTimeout {
				t.Errorf("%s: stop_grace_period %q must exceed berth's %s graceful shutdown", name, s.StopGracePeriod, shutdownTimeout)
			}
			if s.Command[0] == "serve" {
				serves = append(serves, name)
				if cfg.Events.InServe {
					relays++
				}
				// serve only hands its public URL to the gateway, for
				// webhooks: one address in front of every serve, the
				// proxy's, so that any of them may take a charge's.
				if cfg.PublicURL != "http://proxy:8080" {
					t.Errorf("%s: BERTH_PUBLIC_URL %q, want the proxy's, http://proxy:8080, shared by every serve", name, cfg.PublicURL)
				}
			} else {
				relays++
				if len(cfg.KafkaBrokers) == 0 {
					t.Errorf("%s: the worker has no Kafka brokers; the stack's events would stay in one process", name)
				}
				// The refunds consumer gives the gateway a webhook URL; the
				// worker serves no API, so it must be told where the API is.
				if cfg.PublicURL == "" {
					t.Errorf("%s: no BERTH_PUBLIC_URL; refunds would fail", name)
				} else {
					checkHost(t, c, name, cfg.PublicURL)
				}
			}
		case "migrate":
			if s.Environment["BERTH_DATABASE_URL"] == "" {
				t.Errorf("%s: no BERTH_DATABASE_URL", name)
			}
		case "paysim":
			if _, err := config.WebhookKey(s.Environment["BERTH_WEBHOOK_SECRET"]); err != nil {
				t.Errorf("%s: BERTH_WEBHOOK_SECRET %v", name, err)
			}
		}
	}
	if len(serves) < 2 {
		t.Errorf("want two serve processes, have %v", serves)
	}
	if relays != 1 {
		t.Errorf("%d services relay events, want exactly the worker", relays)
	}
	// The proxy balances over every serve and checks /readyz.
	cfg, err := os.ReadFile("haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range serves {
		if !regexp.MustCompile(`(?m)^\s*server\s+\S+\s+` + regexp.QuoteMeta(s) + `:8080\s+check`).Match(cfg) {
			t.Errorf("haproxy.cfg does not balance over %s with a health check", s)
		}
		if !dependsOn(c.Services["proxy"], s, "service_healthy") {
			t.Errorf("the proxy starts before %s is healthy", s)
		}
	}
	if !strings.Contains(string(cfg), "httpchk GET /readyz") {
		t.Error("haproxy.cfg does not check /readyz")
	}
}

// shutdownTimeout is how long berth serve lets in-flight requests finish
// after SIGTERM (internal/app Run).
const shutdownTimeout = 20 * time.Second

func dependsOn(s composeService, dep, condition string) bool {
	d, ok := s.DependsOn[dep]
	return ok && d.Condition == condition
}

func checkHost(t *testing.T, c composeFile, service, rawURL string) {
	t.Helper()
	m := regexp.MustCompile(`^[a-z]+://(?:[^@/]*@)?([^:/?]+)`).FindStringSubmatch(rawURL)
	if m == nil {
		t.Errorf("%s: cannot read a host from %q", service, rawURL)
		return
	}
	if _, ok := c.Services[m[1]]; !ok {
		t.Errorf("%s: %s names host %q, which is not a service", service, rawURL, m[1])
		return
	}
	if !slices.Contains(allDeps(c, service), m[1]) && m[1] != service {
		t.Errorf("%s talks to %s but does not (transitively) depend on it", service, m[1])
	}
}

func allDeps(c composeFile, name string) []string {
	var out []string
	var walk func(string)
	walk = func(n string) {
		for d := range c.Services[n].DependsOn {
			if !slices.Contains(out, d) {
				out = append(out, d)
				walk(d)
			}
		}
	}
	walk(name)
	return out
}

// TestDockerfileRunsReleaseBuild keeps the image's build the one CI runs.
func TestDockerfileRunsReleaseBuild(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{"./scripts/release-build.sh", "USER 65532:65532", "distroless/static", `CMD ["/usr/local/bin/berth", "probe"]`} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^FROM `).FindAllString(df, -1)); n < 2 {
		t.Errorf("Dockerfile has %d stages, want a build stage and a runtime stage", n)
	}
}
