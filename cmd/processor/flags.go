package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tierpush/tierpush/internal/configfile"
	"github.com/tierpush/tierpush/tiers"
)

// Every command reads its flags from three places, each only for the flags
// the one before left unset: the command line, then TIERPUSH_<FLAG>
// environment variables, then the --config YAML file (configfile). The
// file is shared by the processor and the tools: a key of `processor run`
// that a tool has no flag for is ignored by the tool, a key no command
// knows is refused. A bad value names the flag (or variable, or key) and
// says what was wanted, without a page of usage.

// configUsage is the help of --config, which every command has.
const configUsage = "YAML file with the flags' keys, plus tiers: (retry ladders) and pacing: (docs/configuration.md)"

// parseOption adjusts parseFlags for one command.
type parseOption func(*parseOpts)

type parseOpts struct {
	tiers       *tiers.Policy
	notFromFile []string
}

// withTiers receives the config file's retry ladders: the defaults with
// its tiers: over them.
func withTiers(p *tiers.Policy) parseOption { return func(o *parseOpts) { o.tiers = p } }

// notFromFile names flags of the command that the config file must not
// set: a tool's flag named like one of the processor's that means another
// thing (dlq redrive's --group is the redrive's group, not the
// processor's).
func notFromFile(names ...string) parseOption {
	return func(o *parseOpts) { o.notFromFile = append(o.notFromFile, names...) }
}

// flagSetWriter is an output that asked for a command's flags themselves
// instead of their usage text: how the configuration reference lists each
// command's flags (configref_test.go). notFromFile are the flags the
// config file does not set.
type flagSetWriter interface {
	io.Writer
	takeFlagSet(fs *flag.FlagSet, notFromFile []string)
}

// parseFlags reads fs from args, TIERPUSH_* environment variables and the
// --config file, in that order of precedence. -h prints the usage and
// returns flag.ErrHelp; any other error is a usage error (exit 2).
func parseFlags(fs *flag.FlagSet, args []string, opts ...parseOption) error {
	var o parseOpts
	for _, opt := range opts {
		opt(&o)
	}
	if o.tiers != nil {
		*o.tiers = tiers.DefaultPolicy()
	}
	fs.String("config", "", configUsage)
	var last valueError
	restore := explainValues(fs, &last)
	defer restore()

	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard) // the error alone, not a page of usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		restore() // the usage shows each flag's own type
		if w, ok := out.(flagSetWriter); ok {
			w.takeFlagSet(fs, o.notFromFile)
			return err
		}
		fs.Usage()
		return err
	case err != nil && last.err != nil:
		return usageError(fmt.Errorf("--%s: %w", last.flag, last.err))
	case err != nil:
		return usageError(fmt.Errorf("%w (%s --help lists the flags)", err, fs.Name()))
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if err := readEnv(fs); err != nil {
		return usageError(err)
	}
	path := fs.Lookup("config").Value.String()
	if path == "" {
		return nil
	}
	if err := readConfigFile(fs, path, o); err != nil {
		return usageError(inConfigFile(path, err))
	}
	return nil
}

// inConfigFile names the file in front of each of err's errors, with its
// place when it has one: "--config prod.yaml:12:5: …".
func inConfigFile(path string, err error) error {
	var errs []error
	for _, e := range flatten(err) {
		var at *configfile.Error
		if errors.As(e, &at) {
			errs = append(errs, fmt.Errorf("--config %s:%w", path, e))
		} else {
			errs = append(errs, fmt.Errorf("--config %s: %w", path, e))
		}
	}
	return errors.Join(errs...)
}

// flatten lists the errors errors.Join put together, however nested.
func flatten(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, flatten(e)...)
	}
	return out
}

// readEnv sets the flags the command line left unset from their
// TIERPUSH_<FLAG> variables; a value with commas sets a flag once per
// element (repeatable flags).
func readEnv(fs *flag.FlagSet) error {
	set := setFlags(fs)
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		env := envName(f.Name)
		v := os.Getenv(env)
		if set[f.Name] || v == "" {
			return
		}
		for _, part := range strings.Split(v, ",") {
			if err := fs.Set(f.Name, part); err != nil {
				errs = append(errs, fmt.Errorf("%s (--%s): %w", env, f.Name, err))
				return
			}
		}
	})
	return errors.Join(errs...)
}

// readConfigFile sets the flags that neither the command line nor the
// environment set from the config file at path, and hands its ladders to
// o.tiers.
func readConfigFile(fs *flag.FlagSet, path string, o parseOpts) error {
	file, err := configfile.Read(path)
	if err != nil {
		return err
	}
	set := setFlags(fs)
	run := runFlags()
	var errs []error
	for _, s := range file.Settings {
		name := s.Flag
		if s.Alias != "" && run.Lookup(name) == nil && fs.Lookup(name) == nil {
			name = s.Alias // pacing: {enabled: false} is --pacing=false
		}
		switch {
		case name == "config":
			errs = append(errs, configfile.At(s.Pos, fmt.Errorf("%s: a config file cannot name another", s.Key)))
		case slices.Contains(o.notFromFile, name):
		case fs.Lookup(name) != nil:
			if set[name] {
				continue // flags and env vars come first
			}
			if err := fs.Set(name, s.Value); err != nil {
				errs = append(errs, configfile.At(s.Pos, fmt.Errorf("%s: %w", s.Key, err)))
			}
		case run.Lookup(name) != nil:
			// The processor's key, which this tool has no use for.
		default:
			errs = append(errs, configfile.At(s.Pos, unknownKey(s, fs, run)))
		}
	}
	if o.tiers != nil {
		*o.tiers = file.Tiers
	}
	return errors.Join(errs...)
}

// unknownKey says that s names no flag, and which keys its section takes.
func unknownKey(s configfile.Setting, fs, run *flag.FlagSet) error {
	section, _, ok := strings.Cut(s.Key, ".")
	if !ok {
		cmds := run.Name()
		if fs.Name() != run.Name() {
			cmds += " or " + fs.Name()
		}
		return fmt.Errorf("%s: unknown key: no flag of %s has this name (--help lists them)", s.Key, cmds)
	}
	var keys []string
	for _, set := range []*flag.FlagSet{run, fs} {
		set.VisitAll(func(f *flag.Flag) {
			if _, old := deprecatedFlags[f.Name]; old {
				return // still read, no longer worth suggesting
			}
			if sub, ok := strings.CutPrefix(f.Name, flagName(section)+"-"); ok {
				keys = append(keys, strings.ReplaceAll(sub, "-", "_"))
			}
		})
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if len(keys) == 0 {
		return fmt.Errorf("%s: unknown key: no flag is named --%s-…", s.Key, flagName(section))
	}
	return fmt.Errorf("%s: unknown key, want one of %s (the --%s-* flags)", s.Key, strings.Join(keys, ", "), flagName(section))
}

func flagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// setFlags are the flags set so far.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// runFlags is the flag set of `processor run`: every key of the config
// file that the processor reads.
func runFlags() *flag.FlagSet {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("processor run", flag.ContinueOnError)
	cfg.register(fs)
	return fs
}

// valueError is the last bad value a flag was given on the command line:
// the flag package reports it with the cause flattened to text.
type valueError struct {
	flag string
	err  error
}

// explainValues wraps every flag's value so that a bad one says what was
// wanted (explain), recording the last one in last; restore unwraps them.
func explainValues(fs *flag.FlagSet, last *valueError) (restore func()) {
	orig := make(map[*flag.Flag]flag.Value)
	fs.VisitAll(func(f *flag.Flag) {
		orig[f] = f.Value
		f.Value = &explained{Value: f.Value, name: f.Name, last: last}
	})
	return func() {
		for f, v := range orig {
			f.Value = v
		}
	}
}

// explained is a flag value whose errors say what was wanted.
type explained struct {
	flag.Value
	name string
	last *valueError
}

func (v *explained) Set(s string) error {
	err := v.Value.Set(s)
	if err == nil {
		return nil
	}
	err = explain(v.Value, s, err)
	*v.last = valueError{flag: v.name, err: err}
	return err
}

func (v *explained) String() string {
	if v.Value == nil {
		return ""
	}
	return v.Value.String()
}

func (v *explained) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// explain turns the flag package's "parse error" into what a value of the
// flag's type looks like. Flags of their own (flag.Func) already say it.
func explain(v flag.Value, s string, err error) error {
	g, ok := v.(flag.Getter)
	if !ok {
		return err
	}
	var want string
	switch g.Get().(type) {
	case time.Duration:
		want = "a duration like 5s"
	case int, int64, uint, uint64:
		want = "a whole number"
	case float64:
		want = "a number like 0.05"
	case bool:
		want = "true or false"
	default:
		return err
	}
	return fmt.Errorf("want %s, got %q", want, truncateFlag(s))
}
