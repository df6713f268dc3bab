package main

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaLogger is the Kafka client's kgo.Logger: its warnings and errors
// are the processor's, its info lines (connections, metadata, group
// joins, multi-KB balance plans: 30 of 48 lines at start) are debug
// detail, shown only with --log-level debug.
type kafkaLogger struct{ sl *slog.Logger }

var _ kgo.Logger = kafkaLogger{}

func newKafkaLogger(sl *slog.Logger) kafkaLogger { return kafkaLogger{sl} }

// Level is the most detailed level the client should format: it skips
// building the info lines nobody would see.
func (l kafkaLogger) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case l.sl.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelDebug
	case l.sl.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	case l.sl.Enabled(ctx, slog.LevelError):
		return kgo.LogLevelError
	}
	return kgo.LogLevelNone
}

func (l kafkaLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	sl := slog.LevelDebug // kgo's info and debug
	switch level {
	case kgo.LogLevelError:
		sl = slog.LevelError
	case kgo.LogLevelWarn:
		sl = slog.LevelWarn
	}
	l.sl.Log(context.Background(), sl, msg, keyvals...)
}
