package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
)

// Every command's -h starts with what it does, names the command (worker
// is not serve), and exits 0; bare berth prints the usage and exits 2
// without an error line of its own.
func TestHelpSaysWhatEachCommandDoes(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, c := range commands {
		if c.name == "version" {
			continue // no flags
		}
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{c.name, "-h"}, noEnv, &stdout, &stderr)
		if !errors.Is(err, flag.ErrHelp) || exitCode(err) != 0 {
			t.Errorf("berth %s -h: %v (exit %d), want help and exit 0", c.name, err, exitCode(err))
		}
		fs := newFlags(c.name)
		var help bytes.Buffer
		fs.SetOutput(&help)
		fs.Usage()
		if want := "berth " + c.name + ": " + c.what + ".\n"; !strings.HasPrefix(help.String(), want) {
			t.Errorf("berth %s -h starts %q, want %q", c.name, firstLine(help.String()), want)
		}
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"worker", "-h"}, func(string) string { return "" }, &stdout, &stderr)
	if !errors.Is(err, flag.ErrHelp) || !strings.HasPrefix(stderr.String(), "berth worker: ") {
		t.Errorf("berth worker -h: %v, %q", err, firstLine(stderr.String()))
	}

	stderr.Reset()
	err = run(context.Background(), nil, func(string) string { return "" }, &stdout, &stderr)
	var quiet exitError
	if !errors.As(err, &quiet) || exitCode(err) != 2 || !strings.Contains(stderr.String(), "Usage: berth <command>") {
		t.Errorf("bare berth: %v (exit %d), stderr %q", err, exitCode(err), firstLine(stderr.String()))
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
