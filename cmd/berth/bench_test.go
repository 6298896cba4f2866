package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/bench"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestBenchFlags(t *testing.T) {
	getenv := env(map[string]string{"BERTH_DATABASE_URL": "postgres://db/x", "BERTH_REDIS_URL": "redis://r:6379/0"})
	f, err := benchOptions([]string{"--quick", "--rate", "250", "--protect=on", "--out", "/tmp/b", "--cpuprofile", "/tmp/b/cpu.out",
		"--processes", "both", "--hot-clients-more", "64", "--in-process"}, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	o, out, profile := f.o, f.out, f.profile
	if !slices.Equal(o.Processes, []int{1, 2}) || o.HotClientsMore != 64 || !f.inProcess {
		t.Errorf("--processes both --hot-clients-more 64 --in-process: %v %d %v", o.Processes, o.HotClientsMore, f.inProcess)
	}
	q := bench.Quick()
	if o.Rate != 250 || o.Protect != "on" || out != "/tmp/b" || profile != "/tmp/b/cpu.out" || o.Duration != q.Duration || o.Flights != q.Flights {
		t.Errorf("--quick with overrides: rate %g protect %s out %s profile %s duration %s flights %d", o.Rate, o.Protect, out, profile, o.Duration, o.Flights)
	}
	if o.DatabaseURL != "postgres://db/x" || o.RedisURL != "redis://r:6379/0" {
		t.Errorf("environment not read: %q %q", o.DatabaseURL, o.RedisURL)
	}
	f, err = benchOptions([]string{"--database-url", "postgres://other/y", "--duration", "7s"}, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	o = f.o
	if !slices.Equal(o.Processes, []int{1}) || f.inProcess {
		t.Errorf("default processes %v, in process %v; want [1] as `berth serve`", o.Processes, f.inProcess)
	}
	if o.DatabaseURL != "postgres://other/y" || o.Duration != 7*time.Second || o.Rate != bench.Defaults().Rate {
		t.Errorf("flags over environment and defaults: %q %s %g", o.DatabaseURL, o.Duration, o.Rate)
	}
}

func TestBenchRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--protect=maybe"}, "--protect"},
		{[]string{"--scenario", "black-friday"}, "--scenario"},
		{[]string{"--rate", "-5"}, "--rate"},
		{[]string{"surprise"}, "unexpected argument"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
		{[]string{"--processes", "3x"}, "--processes"},
		{[]string{"--processes", "2"}, "--redis-url"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"bench"}, tc.args...),
			env(map[string]string{"BERTH_DATABASE_URL": "postgres://127.0.0.1:1/x"}), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error()+stderr.String(), tc.want) {
			t.Errorf("bench %v: err %v, stderr %q; want it to name %s", tc.args, err, stderr.String(), tc.want)
		}
		if stdout.Len() != 0 {
			t.Errorf("bench %v printed a report for bad settings: %s", tc.args, stdout.String())
		}
	}
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"bench", "--quick"}, env(nil), &bytes.Buffer{}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "BERTH_DATABASE_URL") {
		t.Errorf("bench without a database: %v", err)
	}
}
