package main

import (
	"context"
	"errors"
	"io"
)

// runDLQ is `processor dlq list|redrive`.
func runDLQ(_ context.Context, args []string, _, _ io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "redrive") {
		return usageError(errors.New("usage: processor dlq list|redrive [flags]"))
	}
	return errors.New("dlq " + args[0] + ": not available in this build yet")
}
