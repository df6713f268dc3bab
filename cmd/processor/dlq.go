package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tierpush/tierpush/internal/dlq"
	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// runDLQ is `processor dlq list|redrive`.
func runDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "list":
			return runDLQList(ctx, args[1:], stdout, stderr)
		case "redrive":
			return runDLQRedrive(ctx, args[1:], stdout, stderr)
		}
		if isHelp(args[0]) {
			fmt.Fprintln(stdout, "usage: processor dlq list|redrive [flags]; processor dlq list --help lists the flags")
			return nil
		}
	}
	return usageError(errors.New("usage: processor dlq list|redrive [flags]"))
}

// filterFlags are the selection flags list and redrive share.
type filterFlags struct {
	reasons, statuses, tiers, origins, apps listFlag
	since, until                            string
}

func (f *filterFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.reasons, "reason", "only this push-reason (max_attempts, ttl_expired, rejected, payload_too_large, invalid_event, endpoint_blocked, bad_signature, unknown_app, vapid_rejected); repeatable. A redrive passes over rejected, payload_too_large, invalid_event and endpoint_blocked, which would fail again, unless named here")
	fs.Var(&f.statuses, "status", "only this last HTTP status (0: none); repeatable")
	fs.Var(&f.tiers, "tier", "only this tier (tier1, tier2, tier3; retry topics count as their tier); repeatable")
	fs.Var(&f.origins, "origin", "only this push service, https://fcm.googleapis.com or a bare host; repeatable")
	fs.Var(&f.apps, "app", "only events of this app (default: those of the default identity); repeatable")
	fs.StringVar(&f.since, "since", "", "only records dead-lettered at or after this time: RFC 3339, or a duration ago (24h)")
	fs.StringVar(&f.until, "until", "", "only records dead-lettered before this time: RFC 3339, or a duration ago")
}

// filter builds the dlq.Filter; its errors name the flag.
func (f *filterFlags) filter(now time.Time) (dlq.Filter, error) {
	var out dlq.Filter
	var errs []error
	for _, s := range f.reasons {
		r, err := dlq.ParseReason(s)
		errs = append(errs, flagErr("reason", err))
		out.Reasons = append(out.Reasons, r)
	}
	for _, s := range f.statuses {
		n, err := dlq.ParseStatus(s)
		errs = append(errs, flagErr("status", err))
		out.Statuses = append(out.Statuses, n)
	}
	for _, s := range f.tiers {
		t, err := tiers.Parse(s)
		errs = append(errs, flagErr("tier", err))
		out.Tiers = append(out.Tiers, t)
	}
	for _, s := range f.origins {
		o, err := dlq.ParseServiceOrigin(s)
		errs = append(errs, flagErr("origin", err))
		out.Origins = append(out.Origins, o)
	}
	for _, s := range f.apps {
		a, err := dlq.ParseApp(s)
		errs = append(errs, flagErr("app", err))
		out.Apps = append(out.Apps, a)
	}
	var err error
	if f.since != "" {
		out.Since, err = dlq.ParseTime(f.since, now)
		errs = append(errs, flagErr("since", err))
	}
	if f.until != "" {
		out.Until, err = dlq.ParseTime(f.until, now)
		errs = append(errs, flagErr("until", err))
	}
	if !out.Since.IsZero() && !out.Until.IsZero() && !out.Until.After(out.Since) {
		errs = append(errs, errors.New("--until: must be after --since"))
	}
	if err := errors.Join(errs...); err != nil {
		return dlq.Filter{}, usageError(err)
	}
	return out, nil
}

func flagErr(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("--%s: %w", name, err)
}

// runDLQList is `processor dlq list`: the dead-lettered records a filter
// selects, as a table or JSON lines, then a count by reason.
func runDLQList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var k kafkaFlags
	var sel filterFlags
	fs := newFlagSet("processor dlq list", stderr)
	k.register(fs)
	sel.register(fs)
	format := fs.String("format", "table", "table or json (JSON lines on stdout; the count by reason goes to stderr)")
	limit := fs.Int("limit", 0, "show at most this many records (the count by reason still covers every match); 0: all")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f, err := sel.filter(time.Now())
	if err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return usageError(fmt.Errorf("--format %q: want table or json", *format))
	}
	if *limit < 0 {
		return usageError(fmt.Errorf("--limit %d: want 0 (all) or more", *limit))
	}
	cl, err := k.client()
	if err != nil {
		return err
	}
	defer cl.Close()

	var out recordWriter = newDLQTable(stdout)
	if *format == "json" {
		out = jsonLines{json.NewEncoder(stdout)}
	}
	counts := make(map[string]int)
	shown := 0
	err = dlq.List(ctx, cl, k.names(), f, func(r *dlq.Record) error {
		counts[string(r.Meta.Reason)]++
		if *limit > 0 && shown >= *limit {
			return nil
		}
		shown++
		return out.write(r)
	})
	if ferr := out.flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	w := stdout
	if *format == "json" {
		w = stderr
	}
	writeCounts(w, counts, shown)
	return nil
}

// writeCounts prints the count by reason.
func writeCounts(w io.Writer, counts map[string]int, shown int) {
	total := 0
	for _, n := range counts {
		total += n
	}
	switch {
	case total == 0:
		fmt.Fprintln(w, "no records match")
		return
	case shown < total:
		fmt.Fprintf(w, "\nshowing %d of %s; count by reason:\n", shown, plural(total, "matching record"))
	default:
		fmt.Fprintf(w, "\n%s; count by reason:\n", plural(total, "matching record"))
	}
	reasons := slices.Sorted(maps.Keys(counts))
	slices.SortStableFunc(reasons, func(a, b string) int { return counts[b] - counts[a] })
	nameW, countW := 0, len(strconv.Itoa(total))
	for _, r := range reasons {
		nameW = max(nameW, utf8.RuneCountInString(tableCell(r, 40)))
	}
	for _, r := range reasons {
		fmt.Fprintf(w, "  %-*s  %*d\n", nameW, tableCell(r, 40), countW, counts[r])
	}
}

// recordWriter prints dead-lettered records. It never prints a value: no
// endpoint, key or payload.
type recordWriter interface {
	write(r *dlq.Record) error
	flush() error
}

// dlqTable is the human view. Its columns are what an operator decides on;
// every cell is sanitized, as ids and error texts come from outside.
type dlqTable struct {
	tw   *tabwriter.Writer
	rows int
}

func newDLQTable(w io.Writer) *dlqTable {
	return &dlqTable{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
}

func (t *dlqTable) write(r *dlq.Record) error {
	if t.rows == 0 {
		fmt.Fprintln(t.tw, "ID\tTIER\tAPP\tREASON\tSTATUS\tATTEMPTS\tREDRIVES\tORIGIN\tDEAD-LETTERED\tERROR")
	}
	tier := "-"
	if r.Tier.Valid() {
		tier = r.Tier.String()
	}
	_, err := fmt.Fprintf(t.tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n",
		tableCell(r.EventID, 40), tier, tableCell(event.AppName(r.App), 32), tableCell(string(r.Meta.Reason), 24), r.Meta.Status, r.Meta.Attempt,
		r.Meta.RedriveCount, tableCell(dlq.OriginHost(r.Origin), 48), r.At.UTC().Format(time.RFC3339), tableCell(r.Meta.Error, 80))
	// Flush now and then: column widths may shift, memory stays bounded.
	if t.rows++; t.rows%1000 == 0 && err == nil {
		err = t.tw.Flush()
	}
	return err
}

func (t *dlqTable) flush() error { return t.tw.Flush() }

// tableCell makes s safe for one table cell: no control or invisible
// characters (a hostile id could hold terminal escapes), at most n runes.
func tableCell(s string, n int) string {
	if s == "" {
		return "-"
	}
	var b strings.Builder
	i := 0
	for _, r := range s {
		if i == n {
			b.WriteRune('…')
			break
		}
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			r = ' '
		case r == utf8.RuneError || !unicode.IsPrint(r):
			r = '?'
		}
		b.WriteRune(r)
		i++
	}
	return b.String()
}

// jsonLines is the machine view: one JSON object per record.
type jsonLines struct{ enc *json.Encoder }

// listLine is a record of `dlq list --format json`.
type listLine struct {
	DLQ            string    `json:"dlq"` // topic/partition/offset of the DLQ record
	ID             string    `json:"id"`
	Tier           string    `json:"tier,omitempty"`
	App            string    `json:"app,omitempty"` // the event's app; none for the default identity
	Reason         string    `json:"reason"`
	Status         int       `json:"status"`
	Attempts       int       `json:"attempts"`
	RedriveCount   int       `json:"redrive_count"`
	Origin         string    `json:"origin,omitempty"` // push service, scheme://host
	Source         string    `json:"source,omitempty"` // push-origin: where the event was read
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
	FirstSeen      time.Time `json:"first_seen,omitzero"`
	Error          string    `json:"error,omitempty"`
}

func (j jsonLines) write(r *dlq.Record) error {
	l := listLine{
		DLQ: dlq.Source{Topic: r.Raw.Topic, Partition: r.Raw.Partition, Offset: r.Raw.Offset}.String(),
		ID:  r.EventID, App: r.App, Reason: string(r.Meta.Reason), Status: r.Meta.Status, Attempts: r.Meta.Attempt,
		RedriveCount: r.Meta.RedriveCount, Origin: r.Origin, Source: r.Source.String(),
		DeadLetteredAt: r.At.UTC(), Error: r.Meta.Error,
	}
	if r.Tier.Valid() {
		l.Tier = r.Tier.String()
	}
	if !r.Meta.FirstSeen.IsZero() {
		l.FirstSeen = r.Meta.FirstSeen.UTC()
	}
	return j.enc.Encode(l)
}

func (jsonLines) flush() error { return nil }

// runDLQRedrive is `processor dlq redrive`: replay the selected records to
// their tier topics from the redrive group's position.
func runDLQRedrive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var k kafkaFlags
	var sel filterFlags
	o := dlq.Options{MaxRedrives: dlq.DefaultMaxRedrives, Group: dlq.DefaultGroup}
	fs := newFlagSet("processor dlq redrive", stderr)
	k.register(fs)
	sel.register(fs)
	fs.BoolVar(&o.DryRun, "dry-run", false, "show what would be redriven; produce and commit nothing")
	fs.IntVar(&o.Limit, "limit", 0, "stop after redriving this many records (run again to continue); 0: no limit")
	fs.Float64Var(&o.Rate, "rate", 100, "most records redriven per second; 0: unpaced")
	fs.IntVar(&o.MaxRedrives, "max-redrives", o.MaxRedrives, "loop guard: refuse records already redriven this many times (push-redrive-count)")
	fs.StringVar(&o.Group, "group", o.Group, "consumer group whose committed offsets on the DLQ are the redrive's position; records passed over are committed past for this group")
	fs.BoolVar(&o.IncludeBadSignature, "include-bad-signature", false, "also redrive records dead-lettered as bad_signature (possibly forged or tampered with)")
	quiet := fs.Bool("quiet", false, "no progress bar (there is none either when stderr is not a terminal)")
	// The config file's group: is the processor's, never the redrive's.
	if err := parseFlags(fs, args, notFromFile("group")); err != nil {
		return err
	}
	f, err := sel.filter(time.Now())
	if err != nil {
		return err
	}
	switch {
	case o.Limit < 0:
		return usageError(fmt.Errorf("--limit %d: want 0 (no limit) or more", o.Limit))
	case o.Rate < 0:
		return usageError(fmt.Errorf("--rate %v: want 0 (unpaced) or more", o.Rate))
	case o.MaxRedrives < 1:
		return usageError(fmt.Errorf("--max-redrives %d: want 1 or more", o.MaxRedrives))
	case o.Group == "":
		return usageError(errors.New("--group: must not be empty"))
	case o.Group == DefaultConfig().Group || o.Group == os.Getenv("TIERPUSH_GROUP"):
		// TIERPUSH_GROUP sets --group here too: joining the processor's
		// group would rebalance the running processors.
		return usageError(fmt.Errorf("--group %q is the processor's consumer group; give the redrive a group of its own (default %s)", o.Group, dlq.DefaultGroup))
	}
	cl, err := k.client()
	if err != nil {
		return err
	}
	defer cl.Close()

	bar := newProgressBar(stderr, *quiet, time.Now)
	var rows *dlqTable
	if o.DryRun {
		rows = newDLQTable(stdout)
	}
	o.OnStart = bar.start
	o.OnRecord = func(r dlq.Result) {
		bar.add(r)
		if rows != nil && r.Action == dlq.ActionWouldRedrive {
			rows.write(r.Record)
		}
	}
	rep, err := dlq.Redrive(ctx, cl, k.names(), f, o)
	bar.finish()
	if rows != nil && rep.Redriven > 0 {
		rows.flush()
		fmt.Fprintln(stdout)
	}
	writeReport(stdout, rep, o)
	switch {
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("interrupted after %d records; run the same command again to resume", rep.Scanned)
	case err != nil:
		return err
	}
	return nil
}

// writeReport prints what a redrive did.
func writeReport(w io.Writer, rep dlq.Report, o dlq.Options) {
	var byTier []string
	for _, t := range tiers.All {
		if n := rep.ByTier[t]; n > 0 {
			byTier = append(byTier, fmt.Sprintf("%s %d", t, n))
		}
	}
	what := plural(rep.Redriven, "record")
	if len(byTier) > 0 {
		what += " (" + strings.Join(byTier, ", ") + ")"
	}
	if o.DryRun {
		fmt.Fprintf(w, "dry run: would redrive %s of %d from group %s's position; nothing produced, nothing committed\n", what, rep.Total, o.Group)
	} else {
		fmt.Fprintf(w, "redrove %s of %d; position committed in group %s\n", what, rep.Total, o.Group)
	}
	if len(rep.Skipped) > 0 {
		var parts []string
		skipped := 0
		for _, s := range slices.Sorted(maps.Keys(rep.Skipped)) {
			parts = append(parts, fmt.Sprintf("%s %d", s, rep.Skipped[s]))
			skipped += rep.Skipped[s]
		}
		fmt.Fprintf(w, "passed over %d: %s\n", skipped, strings.Join(parts, ", "))
		if rep.Skipped[dlq.SkipBadSignature] > 0 {
			fmt.Fprintln(w, "  bad_signature records may be forged; after checking them, redrive them with --include-bad-signature --reason bad_signature and another --group")
		}
		writeWouldFail(w, rep.WouldFail, o.Group)
	}
	if rep.LimitReached {
		fmt.Fprintf(w, "stopped at --limit %d; run again to continue\n", o.Limit)
	}
}

// writeWouldFail says which records were passed over because they would
// fail again, and how to redrive them once their cause is fixed.
func writeWouldFail(w io.Writer, byReason map[topology.Reason]int, group string) {
	if len(byReason) == 0 {
		return
	}
	reasons := slices.Sorted(maps.Keys(byReason))
	for _, r := range reasons {
		why, _ := dlq.WouldFailAgain(r)
		fmt.Fprintf(w, "  %s would fail again, not redriven: %s\n", plural(byReason[r], string(r)+" record"), why)
	}
	fmt.Fprintf(w, "  once the cause is fixed, name the reason to redrive them (--reason %s) with another --group: group %s's position is past them\n",
		reasons[0], group)
}

// plural is "1 record", "2 records".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// progressBar draws the redrive's progress on stderr, when stderr is a
// terminal and --quiet is not given; otherwise it does nothing.
type progressBar struct {
	w                       io.Writer // nil: quiet
	now                     func() time.Time
	last                    time.Time
	total                   int64
	done, redriven, skipped int
}

func newProgressBar(stderr io.Writer, quiet bool, now func() time.Time) *progressBar {
	if quiet || !isTerminal(stderr) {
		return &progressBar{}
	}
	return &progressBar{w: stderr, now: now}
}

// isTerminal reports whether w is a character device, as a terminal is.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (b *progressBar) start(total int64) {
	b.total = total
	b.draw(true)
}

func (b *progressBar) add(r dlq.Result) {
	b.done++
	if r.Action == dlq.ActionSkipped {
		b.skipped++
	} else {
		b.redriven++
	}
	b.draw(false)
}

// draw redraws the bar, at most ten times a second unless forced.
func (b *progressBar) draw(force bool) {
	if b.w == nil {
		return
	}
	now := b.now()
	if !force && now.Sub(b.last) < 100*time.Millisecond {
		return
	}
	b.last = now
	const width = 30
	filled := width
	if b.total > 0 {
		filled = int(min(int64(width), int64(b.done)*width/b.total))
	}
	fmt.Fprintf(b.w, "\r[%s%s] %d/%d  %d redriven  %d passed over",
		strings.Repeat("=", filled), strings.Repeat(" ", width-filled), b.done, b.total, b.redriven, b.skipped)
}

func (b *progressBar) finish() {
	if b.w == nil || b.last.IsZero() {
		return // quiet, or never started
	}
	b.draw(true)
	fmt.Fprintln(b.w)
}
