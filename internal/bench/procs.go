package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"berth.dev/berth/internal/app"
	"berth.dev/berth/internal/config"
)

// server is the berth under test of one mode: one or more processes on
// the mode's database and Redis. Setup requests go to the first; the load
// is split evenly between them (at).
type server struct {
	url     string // the first process's base URL
	urls    []string
	secret  []byte
	procs   []*process
	stopped bool
}

// process is one berth: inside the bench's process (app set) or a `berth
// serve` process of its own (cmd set).
type process struct {
	url string
	pid int

	app  *app.App
	stop context.CancelFunc
	done chan error

	cmd    *exec.Cmd
	exited chan error
}

// at returns the base URL of the process that request i goes to.
func (s *server) at(i int64) string {
	return s.urls[int(uint64(i)%uint64(len(s.urls)))]
}

// startServers starts n berths with cfg: inside this process when argv is
// nil, else as n `berth serve` processes run by argv with env (and the
// address each listens on) added to this process's environment.
func startServers(ctx context.Context, cfg config.Config, env map[string]string, n int, argv []string, logw io.Writer) (*server, error) {
	s := &server{secret: []byte(cfg.AuthSecret)}
	for range n {
		var (
			p   *process
			err error
		)
		if argv == nil {
			p, err = startInProcess(ctx, cfg, logw)
		} else {
			p, err = startServe(ctx, argv, env, logw)
		}
		if err != nil {
			_ = s.shutdown()
			return nil, err
		}
		s.procs = append(s.procs, p)
		s.urls = append(s.urls, p.url)
	}
	s.url = s.urls[0]
	return s, nil
}

// startInProcess runs berth with cfg in this process on a loopback port.
func startInProcess(ctx context.Context, cfg config.Config, logw io.Writer) (*process, error) {
	log := slog.New(slog.DiscardHandler)
	if logw != nil {
		log = slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	a, err := app.New(ctx, cfg, app.Options{Log: log})
	if err != nil {
		return nil, fmt.Errorf("start berth: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	p := &process{url: "http://" + ln.Addr().String(), pid: os.Getpid(), app: a, stop: stop, done: make(chan error, 1)}
	go func() { p.done <- a.Run(runCtx, ln) }()
	return p, nil
}

// startServe runs `berth serve` as a process of its own on a free
// loopback port and waits until it answers /healthz.
func startServe(ctx context.Context, argv []string, env map[string]string, logw io.Writer) (*process, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = childEnv(os.Environ(), env, map[string]string{"BERTH_HTTP_ADDR": addr})
	if logw == nil {
		logw = io.Discard
	}
	cmd.Stdout, cmd.Stderr = logw, logw
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", strings.Join(argv, " "), err)
	}
	p := &process{url: "http://" + addr, pid: cmd.Process.Pid, cmd: cmd, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	if err := p.waitReady(ctx, time.Minute); err != nil {
		_ = p.shutdown()
		return nil, err
	}
	return p, nil
}

// childEnv is base with the settings of sets (later sets win) put in
// place of any that base has.
func childEnv(base []string, sets ...map[string]string) []string {
	over := map[string]string{}
	for _, set := range sets {
		for k, v := range set {
			over[k] = v
		}
	}
	out := make([]string, 0, len(base)+len(over))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := over[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range over {
		out = append(out, k+"="+v)
	}
	return out
}

// freePort returns a loopback address no one listens on at the moment.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// waitReady polls /healthz until it answers 200, the process exits, or
// limit passes.
func (p *process) waitReady(ctx context.Context, limit time.Duration) error {
	end := time.Now().Add(limit)
	hc := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/healthz", nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-p.exited:
			p.exited <- err
			return fmt.Errorf("berth serve (pid %d) exited before it was ready: %w (see berth's log)", p.pid, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(end) {
			return fmt.Errorf("berth serve (pid %d) did not answer /healthz within %s", p.pid, limit)
		}
	}
}

// shutdown stops the process gracefully (SIGTERM, as an orchestrator
// would), or kills it if it has not stopped after a minute.
func (p *process) shutdown() error {
	if p.app != nil {
		p.stop()
		err := <-p.done
		p.app.Close()
		return err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		return err
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		if err := <-p.exited; err != nil {
			return fmt.Errorf("berth serve (pid %d) did not stop within a minute of SIGTERM: killed (%w)", p.pid, err)
		}
		return fmt.Errorf("berth serve (pid %d) did not stop within a minute of SIGTERM: killed", p.pid)
	}
}

// shutdown stops every process of s.
func (s *server) shutdown() error {
	if s.stopped {
		return nil
	}
	s.stopped = true
	var errs []error
	for _, p := range s.procs {
		errs = append(errs, p.shutdown())
	}
	return errors.Join(errs...)
}

// ProcessMemory is the resident memory of one berth process over a mode,
// sampled from /proc/<pid>/status (VmRSS). InBench says berth ran inside
// the bench's process: the load generator's memory is then included.
type ProcessMemory struct {
	PID     int   `json:"pid"`
	InBench bool  `json:"inBench"`
	Samples int   `json:"samples"`
	StartKB int64 `json:"startKB"`
	MaxKB   int64 `json:"maxKB"`
	EndKB   int64 `json:"endKB"`
	// MaxAt is when the maximum was first seen, in seconds from the start.
	MaxAt float64 `json:"maxAtSeconds"`
	// PerSecondKB is the largest sample of each whole second from the
	// start: whether memory levels off under a long overload or keeps
	// climbing shows here, not in start, max and end.
	PerSecondKB []int64 `json:"perSecondMaxKB"`
}

// add records a sample of kb at t seconds from the start.
func (m *ProcessMemory) add(kb int64, t float64) {
	if m.Samples == 0 {
		m.StartKB = kb
	}
	if kb > m.MaxKB {
		m.MaxKB, m.MaxAt = kb, t
	}
	m.EndKB = kb
	m.Samples++
	sec := int(t)
	for len(m.PerSecondKB) <= sec {
		m.PerSecondKB = append(m.PerSecondKB, 0)
	}
	m.PerSecondKB[sec] = max(m.PerSecondKB[sec], kb)
}

// rssSampler samples the resident memory of processes every interval.
type rssSampler struct {
	mu   sync.Mutex
	mem  []ProcessMemory
	stop chan struct{}
	done chan struct{}
}

func sampleRSS(s *server, every time.Duration) *rssSampler {
	r := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	for _, p := range s.procs {
		r.mem = append(r.mem, ProcessMemory{PID: p.pid, InBench: p.app != nil})
	}
	start := time.Now()
	take := func() {
		t := time.Since(start).Seconds()
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := range r.mem {
			if kb, err := readRSS(r.mem[i].PID); err == nil {
				r.mem[i].add(kb, t)
			}
		}
	}
	take()
	go func() {
		defer close(r.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-r.stop:
				take()
				return
			case <-tick.C:
				take()
			}
		}
	}()
	return r
}

// finish takes a last sample and returns what was seen. The sampler has
// stopped, so the copy shares nothing anyone still writes.
func (r *rssSampler) finish() []ProcessMemory {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ProcessMemory(nil), r.mem...)
}

// readRSS returns a process's resident memory in kB.
func readRSS(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }() // read only: nothing to lose
	return parseVmRSS(f)
}

// parseVmRSS reads the VmRSS line of a /proc/<pid>/status file, in kB.
func parseVmRSS(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(v), " ")
		if strings.TrimSpace(unit) != "kB" {
			return 0, fmt.Errorf("VmRSS in %q, not kB", unit)
		}
		return strconv.ParseInt(num, 10, 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no VmRSS line")
}

// loadAverage returns the first three fields of /proc/loadavg ("" where
// there is none).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
