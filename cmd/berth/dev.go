package main

import (
	"context"
	"io"
)

func dev(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return nil
}
