// Command processor runs tierpush: it consumes notification events from the
// tier topics, sends them as Web Push, and routes failures through per-tier
// retry ladders to the dead-letter topic. Subcommands run the embedded
// broker, the push simulator and the operator tools.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/tierpush/tierpush/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		os.Exit(exitCode(err, os.Stderr))
	}
}

// exitCode prints err and maps it to the contract's exit codes: 2 for bad
// configuration, 1 for runtime failures.
func exitCode(err error, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "processor: %v\n", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

// commands maps subcommand names to their entry points.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"run":     runProcessor,
	"broker":  runBroker,
	"vapid":   runVAPID,
	"send":    runSend,
	"topics":  runTopics,
	"pushsim": runPushsim,
	"dlq":     runDLQ,
	"status":  runStatus,
	"demo":    runDemo,
	"version": runVersion,
}

// version and commit are stamped at build time: -ldflags "-X
// main.version=v1.2.3 -X main.commit=$(git rev-parse HEAD)", as the
// Dockerfile does. Without commit, the Go toolchain's VCS stamp is used.
var (
	version = "dev"
	commit  = ""
)

// runVersion is `processor version`: the version, the commit it was built
// from and the Go version.
func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	fmt.Fprintf(stdout, "processor %s\ncommit %s\n%s\n", version, buildCommit(), runtime.Version())
	return nil
}

// buildCommit is the commit the binary was built from: the stamped one, or
// as the Go toolchain recorded it.
func buildCommit() string {
	if commit != "" && commit != "unknown" {
		return commit
	}
	rev, modified := "unknown", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if modified {
		rev += " (modified)"
	}
	return rev
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// run is the whole program: `processor [subcommand] [flags]`. With no
// subcommand, or flags first, it runs the pipeline.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		printHelp(stdout)
		return nil
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, ok := commands[args[0]]
		if !ok {
			printHelp(stderr)
			return usageError(fmt.Errorf("unknown subcommand %q", args[0]))
		}
		return cmd(ctx, args[1:], stdout, stderr)
	}
	return runProcessor(ctx, args, stdout, stderr)
}

func printHelp(w io.Writer) {
	fmt.Fprint(w, `usage: processor [run] [flags]     run the pipeline (processor run -h lists the flags)
       processor broker [flags]    run only the embedded broker
       processor vapid             print a new VAPID key pair
       processor send [flags]      produce one event into a tier topic
       processor topics ensure     create or check every topic
       processor dlq list|redrive  inspect or replay the dead-letter topic
       processor pushsim [flags]   run the push service simulator
       processor status [flags]    a running processor's pacing and lag, from its /metrics
       processor demo [flags]      subscribe at the simulator and produce sample events
       processor version           the version, commit and Go version

Every flag also reads TIERPUSH_<FLAG> (--max-in-flight: TIERPUSH_MAX_IN_FLIGHT) and the
--config YAML file's key of the same name; the file also holds the retry ladders (tiers:) and
pacing: (cut_rate: sets --pacing-cut-rate). A flag wins over its variable, which wins over the
file. "processor <subcommand> --help" lists its flags.
Exit codes: 0 clean shutdown, 2 bad configuration (the message names the flag), 1 failure.
`)
}

// newFlagSet returns a flag set that reports errors instead of exiting and
// whose help names each flag's environment variable.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage of %s (each flag also reads the variable in brackets):\n", name)
		fs.VisitAll(func(f *flag.Flag) {
			if env := "[" + envName(f.Name) + "] "; !strings.HasPrefix(f.Usage, env) {
				f.Usage = env + f.Usage
			}
		})
		fs.PrintDefaults()
	}
	return fs
}

// envName is the environment variable of a flag: --max-in-flight reads
// TIERPUSH_MAX_IN_FLIGHT.
func envName(flagName string) string {
	return "TIERPUSH_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func parseLevel(s string) (slog.Level, error) { return telemetry.ParseLevel(s) }

func newLogger(w io.Writer, format, level string) *slog.Logger {
	return telemetry.NewLogger(w, format, level)
}
