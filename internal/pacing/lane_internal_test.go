package pacing

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/tiers"
)

// testPacer is a pacer of the default configuration.
func testPacer(t *testing.T) *Pacer {
	t.Helper()
	p, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testLane is a new lane of a testPacer, for an origin, created at start.
func testLane(t *testing.T, start time.Time) (*Pacer, *lane) {
	t.Helper()
	p := testPacer(t)
	return p, newLane("https://push.example.net", p, start)
}

// answer records n answers, the first k of them 429s, spread over span
// from the first millisecond after at.
func answer(l *lane, at time.Time, span time.Duration, n, k int) {
	for i := range n {
		a := at.Add(time.Millisecond + time.Duration(i)*span/time.Duration(n))
		l.recordLocked(a, a, i < k, false, false)
	}
}

// TestAcceptedLeavesOutTheTickUnderWay: what the origin accepted while it
// refused is the median over windows of answers; a tick a few
// milliseconds old holds a few answers and must not count as a whole
// tenth of a second of them. Taken so, it read a tenth of the limit, and
// the cut after slow start landed between 260 and 420 sends/s against an
// origin of 400 (tier 1 behind a flood then waited for a second round).
func TestAcceptedLeavesOutTheTickUnderWay(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	_, l := testLane(t, start)
	// Three tenths at 300, 500 and 400 accepted a second, the origin
	// refusing most of what was sent: it takes 400.
	answer(l, start, tickSpan, 150, 120)
	answer(l, start.Add(tickSpan), tickSpan, 150, 100)
	answer(l, start.Add(2*tickSpan), tickSpan, 150, 110)
	// Two milliseconds into the fourth tenth: an answer and a 429.
	now := start.Add(3*tickSpan + 2*time.Millisecond)
	l.recordLocked(now, now, false, false, false)
	l.recordLocked(now, now, true, false, false)
	if got := l.acceptedLocked(now); got < 380 || got > 420 {
		t.Errorf("accepted %.0f/s, want about 400 (the whole tenths' median)", got)
	}
}

// TestAcceptedLeavesOutThePause: a lone lane sent nothing over a pause, so
// what the origin accepted is not judged over it. A lane met 30% refused
// at random at 60 answers a second, paused for a second, then met the same
// share on the first answers after it: counted over the pause, the origin
// took a few sends a second, and the cut took the lane from 18/s to
// 3.3/s, where the breaker lacked the answers to open.
func TestAcceptedLeavesOutThePause(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	_, l := testLane(t, start)
	answer(l, start, 2*tickSpan, 12, 4) // 60 answers a second, 30% refused
	l.pausedAt, l.paused = start.Add(2*tickSpan), start.Add(12*tickSpan)
	answer(l, l.paused, 2*tickSpan, 12, 4) // the same after the pause
	now := l.paused.Add(2 * tickSpan)
	if got := l.acceptedLocked(now); got < 30 {
		t.Errorf("accepted %.1f/s two tenths after a 1 s pause, answers at 60/s with 30%% refused, want about 40: the pause counted as time the origin took nothing", got)
	}
}

// TestAcceptedAfterThePauseLeavesOutTheRefill: a limit refills its
// allowance over a pause, and the first answers after it are that
// allowance, not the limit's rate; what it takes is judged from the first
// refusal after the pause. Judged from the pause's end, a lone processor
// read a limit of 20/s at 250 ms above it, and one draw in six held more
// than 5% 429s.
func TestAcceptedAfterThePauseLeavesOutTheRefill(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	_, l := testLane(t, start)
	answer(l, start, 2*tickSpan, 12, 6)
	l.pausedAt, l.paused = start.Add(2*tickSpan), start.Add(12*tickSpan)
	// The refilled allowance: 20 accepted in the first 50 ms; then 40 sends
	// a second, the limit taking 20 of them.
	answer(l, l.paused, 50*time.Millisecond, 20, 0)
	from := l.paused.Add(50 * time.Millisecond)
	for i := range 20 {
		a := from.Add(time.Duration(i) * 25 * time.Millisecond)
		l.recordLocked(a, a, i%2 == 0, false, false)
	}
	now := from.Add(500 * time.Millisecond)
	if got := l.acceptedLocked(now); got < 15 || got > 25 {
		t.Errorf("accepted %.1f/s after a pause that refilled 20 answers and half a second at 40 sent for 20 taken, want about 20", got)
	}
}

// TestAcceptedOfAWindowThatClosed: an origin that counts whole seconds
// takes a second's worth at once and refuses everything after it until
// the next second. Judged from the first refusal after a pause, as a
// token bucket is, it took nothing, and the cut took a lone processor
// from 3,000/s to 46/s; it took what it gave before that refusal.
func TestAcceptedOfAWindowThatClosed(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	_, l := testLane(t, start)
	answer(l, start, 2*tickSpan, 100, 100) // the window closed: a storm
	l.pausedAt, l.paused = start.Add(2*tickSpan), start.Add(12*tickSpan)
	// After the pause, 500 sends a second to a window of 300: all taken
	// for 0.6 s, then all refused.
	answer(l, l.paused, 600*time.Millisecond, 300, 0)
	from := l.paused.Add(600 * time.Millisecond)
	for i := range 100 {
		a := from.Add(time.Duration(i) * 2 * time.Millisecond)
		l.recordLocked(a, a, true, false, false)
	}
	now := from.Add(200 * time.Millisecond)
	if got := l.acceptedLocked(now); got < 270 || got > 330 {
		t.Errorf("accepted %.1f/s after a pause: 300 taken at once, then 100 refused with none taken, want about 300", got)
	}
	// Had it taken a token bucket's share since, its rate is read as
	// before: what it took from that refusal on, no less than it refilled
	// from the pause's start.
	for i := range 40 {
		a := now.Add(time.Duration(i) * 5 * time.Millisecond)
		l.recordLocked(a, a, i%2 == 0, false, false)
	}
	now = now.Add(200 * time.Millisecond)
	if got, floor := l.acceptedLocked(now), 300/l.refusedAfter.Sub(l.pausedAt).Seconds(); got < floor {
		t.Errorf("accepted %.1f/s, want at least the %.1f/s refilled since the pause began", got, floor)
	}
}

// TestProbeBoundedByOwnCeiling: a lane sharing its origin probes up to
// probeCap of what the origin was seen to take from it (its ceiling), not
// of what its peers say they send: their rates rise with its own, and a
// bound taken from them rose in step (three processors sent 1.88× a limit
// that had doubled, in one second).
func TestProbeBoundedByOwnCeiling(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	p, l := testLane(t, start)
	l.slowStart, l.rate, l.ceiling, l.latency = false, 100, 100, 0.05
	l.lastCut = start.Add(-time.Minute)
	l.peers = map[string]peer{}
	for s := 1; s <= 20; s++ {
		now := start.Add(time.Duration(s) * time.Second)
		// Peers probing in step with this lane.
		for _, name := range []string{"p1", "p2"} {
			l.peers[name] = peer{rate: l.rate, at: now}
		}
		l.starved = true
		l.growLocked(p, now)
	}
	if l.rate > probeCap*l.ceiling*1.0001 {
		t.Errorf("rate %.0f after 20 s of probing in step with its peers, want at most %.0f (probeCap of the ceiling %.0f)", l.rate, probeCap*l.ceiling, l.ceiling)
	}
}

// TestStormJudgedOnTwentyAnswers: a storm, which counts toward opening
// the breaker, is judged on twenty answers. Ten fresh answers after a
// peer's cut, three of them 429s, are a limit's 429s while the last 10 s
// of answers hold 5% (three processors at 500 ms per push, each a few
// sends a second, opened the breaker one draw in six on them); a lane cut
// to a send a second by a service refusing half of all sends at random
// finds its twenty answers further back than 10 s.
func TestStormJudgedOnTwentyAnswers(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	p := testPacer(t)
	newSettled := func() *lane {
		l := newLane("https://push.example.net", p, start)
		l.slowStart, l.settled = false, start
		return l
	}
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }

	// A limit's 429s: 60 s of six answers a second, one in twenty a 429,
	// then a peer's cut and ten fresh answers, three of them 429s.
	l := newSettled()
	for i := range 360 {
		now := at(float64(i) / 6)
		l.recordLocked(now.Add(-500*time.Millisecond), now, i%20 == 0, false, false)
	}
	cut := at(60)
	l.restartLocked(cut)
	for i := range 10 {
		now := cut.Add(time.Duration(600+50*i) * time.Millisecond)
		l.recordLocked(now.Add(-500*time.Millisecond), now, i < 3, false, false)
	}
	if now := cut.Add(1100 * time.Millisecond); l.stormyLocked(now) {
		t.Errorf("a limit's 429s (5%% over 10 s, 3 of 10 fresh answers) judged a storm")
	}

	// Random 429s at a send a second: 30 s of answers, every other a 429.
	l = newSettled()
	for i := range 30 {
		now := at(30 + float64(i))
		l.recordLocked(now.Add(-10*time.Millisecond), now, i%2 == 0, false, false)
	}
	if now := at(59.5); !l.stormyLocked(now) {
		t.Errorf("half of the answers of the last 30 s 429s, at a send a second: not judged a storm")
	}
}

// TestHaltOnRollingShare: the breaker's rule as users read it, "halt past
// 20%": over the answers of the rolling window since the lane settled,
// this processor's and those its peers report, a 429 share past HaltRate
// with Confidence, once a cut has not ended it. A run of storms opens the
// breaker only where that share is past HaltRate at all. A lane cut to a few sends
// a second by 429s thrown at random judges each storm on a handful of
// answers and could miss four in a row for the whole minute; the rolling
// share does not. 10% at random stays below it, and so do answers that no
// cut has been tried on.
func TestHaltOnRollingShare(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	p := testPacer(t)
	// lane is settled at start and cut a second after settleFor, then
	// answers three times a second for secs seconds, every throttleEvery-th
	// a 429 (none if 0).
	lane := func(secs, throttleEvery int) (*lane, time.Time) {
		l := newLane("https://push.example.net", p, start)
		l.slowStart, l.settled, l.lastCut = false, start, start.Add(settleFor+time.Second)
		now := l.lastCut
		for i := range 3 * secs {
			now = l.lastCut.Add(time.Duration(i+1) * time.Second / 3)
			l.recordLocked(now.Add(-100*time.Millisecond), now, throttleEvery > 0 && i%throttleEvery == 0, false, false)
		}
		return l, now
	}

	if l, now := lane(25, 3); !l.haltingLocked(now) {
		t.Errorf("a third of 75 answers over 25 s 429s: the breaker's rule did not hold")
	}
	if l, now := lane(50, 10); l.haltingLocked(now) || l.rollingPastLocked(now) {
		t.Errorf("a tenth of 150 answers 429s: the breaker's rule held, or a run of storms could open it, below the halt share")
	}
	if l, now := lane(10, 3); !l.rollingPastLocked(now) {
		t.Errorf("a third of 30 answers 429s: a run of storms could not open the breaker")
	}
	if l, now := lane(25, 3); func() bool { l.lastCut = start; return l.haltingLocked(now) }() {
		t.Errorf("a third of the answers 429s but no cut tried on them: the breaker's rule held")
	}

	// The first round trip after a cut, a tenth of a second past
	// settleFor: 50 answers, every one a 429, are not yet a rolling
	// share; two seconds later, at the same share, they are.
	{
		l := newLane("https://push.example.net", p, start)
		l.slowStart, l.settled = false, start.Add(-20*time.Millisecond)
		cut := start.Add(settleFor + 50*time.Millisecond)
		l.restartLocked(cut)
		answer(l, cut, 50*time.Millisecond, 50, 50)
		if now := cut.Add(60 * time.Millisecond); l.haltingLocked(now) || l.rollingPastLocked(now) {
			t.Errorf("50 429s of one round trip, %v after the rolling share begins: judged a rolling share past the halt rate", now.Sub(l.settled.Add(settleFor)))
		}
		answer(l, cut.Add(100*time.Millisecond), 2*time.Second, 300, 100)
		if now := cut.Add(2200 * time.Millisecond); !l.haltingLocked(now) {
			t.Errorf("150 of 350 answers over 2 s 429s: the breaker's rule did not hold")
		}
	}

	// Three processors: ten seconds of this one's answers are too few
	// alone; with what its peers report they are enough.
	l, now := lane(10, 3)
	if l.haltingLocked(now) {
		t.Errorf("30 answers alone, under the %d the rule needs: it held", haltSamples*l.cfg.MinSamples)
	}
	l.peers = map[string]peer{
		"p1": {rate: 3, at: now, answers: 30, throttled: 10},
		"p2": {rate: 3, at: now.Add(-2 * peerFresh), answers: 300, throttled: 0}, // no longer fresh
	}
	if !l.haltingLocked(now) {
		t.Errorf("a third of 60 answers 429s, 30 of them a peer's: the breaker's rule did not hold")
	}
}

// TestAcceptedBetweenRefusals: on the real clock answers come in clumps
// (a fetched batch sent at once, a busy core), so a tenth of a second
// with a refusal can hold a burst the origin's allowance took: 127
// accepted in one read 1,270/s of an origin that takes 500, and the median
// of such tenths read 920, so cuts toward it changed nothing (make bench d
// held 5.1-5.3% 429s). Between two refusals half a second apart the origin
// took what it refilled. The figures are those of a bench run, tenths
// from the one under way back.
func TestAcceptedBetweenRefusals(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	_, l := testLane(t, start)
	ticks := [][2]int{{8, 29}, {127, 5}, {65, 0}, {41, 0}, {0, 0}, {57, 5}, {155, 0}, {71, 0}, {29, 0}, {0, 0}, {50, 0}, {164, 0}}
	now := start.Add(time.Duration(len(ticks)-1)*tickSpan + 22*time.Millisecond)
	for i := len(ticks) - 1; i >= 0; i-- {
		a, r := ticks[i][0], ticks[i][1]
		answer(l, start.Add(time.Duration(len(ticks)-1-i)*tickSpan), 20*time.Millisecond, a+r, r)
	}
	if got := l.acceptedLocked(now); got < 450 || got > 560 {
		t.Errorf("accepted %.0f/s, want about 500 (what it took between the refusals half a second apart)", got)
	}
}

// TestPeerPauseEndsTheJudgement: a peer's pause answers the 429s this lane
// saw before it, as a pause of its own would. Judged after the pause, a
// lane paused 11 ms after its own cut read those 429s (23%) against what
// it accepted over the 5 s pause (12/s), cut to a hundredth of a limit of
// 2,000/s, and its peers followed: a quarter of the limit went unused for
// twenty seconds.
func TestPeerPauseEndsTheJudgement(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	p, l := testLane(t, start)
	l.slowStart, l.settled = false, start.Add(-time.Minute)
	l.rate, l.ceiling, l.latency = 1000, 1100, 0.005
	cut := start.Add(10 * time.Second)
	l.restartLocked(cut)
	// The sends of the first 10 ms at the new rate: a quarter of them 429s.
	for i := range 30 {
		granted := cut.Add(time.Duration(i) * 300 * time.Microsecond)
		l.recordLocked(granted, granted.Add(5*time.Millisecond), i%4 == 0, false, false)
	}
	at := cut.Add(11 * time.Millisecond)
	until := at.Add(5 * time.Second)
	l.apply(p, Signal{Origin: l.origin, From: "peer", At: at, Kind: SignalPause, Until: until}, at)
	if !l.paused.Equal(until) {
		t.Fatalf("paused until %v, want the peer's %v", l.paused.Sub(start), until.Sub(start))
	}
	// The first answer after the pause.
	now := until.Add(5 * time.Millisecond)
	l.recordLocked(until, now, false, false, false)
	l.adaptLocked(p, now)
	if l.rate < 1000 {
		t.Errorf("rate %.1f/s after the pause, want 1000: a cut on the answers the pause answered", l.rate)
	}
}

// TestCutsInARowHold: 429s thrown at random follow the rate down, a cut
// every judgement; past maxCutsInRow cuts in a row with no clean judgement
// between them, the rate is held so that the judgement keeps its answers
// (a lone processor on a service throttling 30% at random went from 9 to
// 0.9 sends a second in 20 s, and its breaker never opened). Here a fifth
// at random, which the storms' own hold (past HaltRate) does not see. A
// clean judgement between cuts, as a limit's 429s give once the rate is
// under it, lets the next cut through.
func TestCutsInARowHold(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	p := testPacer(t)
	// judge records two seconds of answers at the lane's rate from at,
	// every fifth a 429, and judges them; clean ones, four seconds of
	// them (a clean judgement is made on thirty answers).
	judge := func(l *lane, at time.Time, clean bool) time.Time {
		span := 2 * time.Second
		if clean {
			span *= 2
		}
		n := int(span.Seconds() * l.rate)
		for i := range n {
			a := at.Add(time.Duration(i+1) * span / time.Duration(n+1))
			l.recordLocked(a.Add(-10*time.Millisecond), a, !clean && i%5 == 4, false, false)
		}
		end := at.Add(span)
		l.adaptLocked(p, end)
		return end
	}
	newSettled := func() *lane {
		l := newLane("https://push.example.net", p, start)
		l.slowStart, l.settled = false, start
		l.rate, l.ceiling, l.latency = 20, 22, 0.01
		return l
	}

	l := newSettled()
	at := start.Add(settleFor)
	var rates []float64
	for range 3 {
		at = judge(l, at, false)
		rates = append(rates, l.rate)
	}
	if l.breaker != Closed {
		t.Fatalf("breaker %s, want the rate held with the breaker closed", l.breaker)
	}
	if !(rates[0] < 20 && rates[1] < rates[0]) {
		t.Fatalf("rates %.1f after two judgements of 20%% 429s, want two cuts", rates[:2])
	}
	if rates[2] != rates[1] {
		t.Errorf("rate %.1f after a third judgement of 20%% 429s, want it held at %.1f", rates[2], rates[1])
	}

	l = newSettled()
	at = judge(l, start.Add(settleFor), false)
	at = judge(l, at, false)
	held := l.rate
	at = judge(l, at, true) // a clean judgement: the limit is under the rate
	if l.cutsInRow != 0 {
		t.Fatalf("%d cuts in a row after a clean judgement, want 0", l.cutsInRow)
	}
	judge(l, at, false)
	if l.rate >= held {
		t.Errorf("rate %.1f after a clean judgement and one of 20%% 429s, want a cut below %.1f", l.rate, held)
	}
}

// TestSharingGrowsAsOne: a rate far under StartRate grows as if from half
// of it, so that a lane cut far down comes back in seconds; processors
// sharing an origin each take an equal part of that, and together grow as
// one would alone. Each growing from half of StartRate, three sharing 20/s
// at 250 ms probed past it half again as fast as one, and a draw in four
// met more than 5% 429s.
func TestSharingGrowsAsOne(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	grow := func(peers int) float64 {
		p, l := testLane(t, start)
		now := start.Add(10 * time.Second)
		l.slowStart, l.latency, l.starved = false, 0.25, true
		l.rate, l.ceiling = 6, 6.5 // probing: past CutFactor of the ceiling
		l.lastCut, l.lastGrow = start, now.Add(-time.Second)
		l.peers = map[string]peer{}
		for i := range peers {
			l.peers[fmt.Sprint("p", i)] = peer{rate: 6, at: now}
		}
		l.growLocked(p, now)
		return l.rate
	}
	cfg := DefaultConfig()
	// Alone: a second of ProbeRate on half of StartRate.
	if got, want := grow(0), 6+cfg.StartRate/2*cfg.ProbeRate; math.Abs(got-want) > 0.01 {
		t.Errorf("alone, a second's growth from 6/s: %.2f/s, want %.2f (as if from half of StartRate)", got, want)
	}
	// Three sharing: each on its own rate, over a third of that half.
	if got, want := grow(2), 6+6*cfg.ProbeRate; math.Abs(got-want) > 0.01 {
		t.Errorf("one of three, a second's growth from 6/s: %.2f/s, want %.2f (as if from its own rate)", got, want)
	}
}

// TestOverstatedReadingCutsToTheMedian: on the real clock answers come in
// clumps, and what the origin accepted at a cut can read far above its
// limit (a lone processor on 150 req/s at 150 ms read up to 307/s). Such
// a reading of a lane alone on its origin cuts to CutFactor of the median
// of the last ones, not of the rate it overstates; a low one cuts as it
// reads, as one beside peers does; and a proof of more than probeCap
// times the median, which a burst allowance cannot fake, drops the
// readings from before the limit rose.
func TestOverstatedReadingCutsToTheMedian(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	p := testPacer(t)
	cfg := p.cfg
	settled := func(readings ...float64) (*lane, time.Time) {
		l := newLane("https://push.example.net", p, start)
		l.slowStart, l.settled, l.latency = false, start, 0.15
		now := start
		for _, acc := range readings {
			now = now.Add(5 * time.Second)
			l.rate = acc * 1.2
			l.cutLocked(now, acc, false)
		}
		return l, now.Add(5 * time.Second)
	}

	l, now := settled(150, 140, 155, 145)
	l.rate = 190
	l.cutLocked(now, 220, false)
	if want := cfg.CutFactor * 150; math.Abs(l.rate-want) > 0.01 {
		t.Errorf("a reading of 220/s after readings of 140-155/s cut the rate to %.1f, want %.1f (%.2f of their median, 150)", l.rate, want, cfg.CutFactor)
	}
	if l.ceiling > 150 {
		t.Errorf("ceiling %.1f after an overstated reading, want at most the median, 150", l.ceiling)
	}

	l, now = settled(150, 140, 155, 145)
	l.rate = 100
	l.cutLocked(now, 60, false)
	if want := cfg.CutFactor * 60; math.Abs(l.rate-want) > 0.01 {
		t.Errorf("a reading of 60/s after readings of 140-155/s cut the rate to %.1f, want %.1f: a limit that fell is followed at once", l.rate, want)
	}

	// Beside a peer, a reading is this processor's part of the limit: it
	// stands.
	l, now = settled(150, 140, 155, 145)
	l.peers = map[string]peer{"p1": {rate: 250, at: now}}
	l.rate = 190
	l.cutLocked(now, 220, false)
	if l.rate < cfg.CutFactor*185 {
		t.Errorf("a reading of 220/s beside a peer cut the rate to %.1f, want %.1f: held to the median of a part that moves with the peers", l.rate, cfg.CutFactor*190)
	}

	// Fewer readings than the median is taken over: the reading stands.
	l, now = settled(150, 140)
	l.rate = 250
	l.cutLocked(now, 220, false)
	if want := cfg.CutFactor * 220; math.Abs(l.rate-want) > 0.01 {
		t.Errorf("a reading of 220/s after two readings cut the rate to %.1f, want %.1f", l.rate, want)
	}

	// The limit doubled, and the origin proved it for proofSeconds.
	l, now = settled(150, 140, 155, 145, 150)
	l.lastCut = now.Add(-time.Minute)
	l.ceiling, l.rate = 150, 290
	for sec := now.Unix() - proofSeconds; sec < now.Unix(); sec++ {
		l.seconds[int(sec%int64(len(l.seconds)))] = second{sec: sec, attempts: 300, accepted: 300}
	}
	l.starved, l.lastGrow = true, now.Add(-time.Second)
	l.growLocked(p, now)
	if l.ceiling != 300 {
		t.Fatalf("ceiling %.0f after four seconds of 300 accepted, want 300 (the proof)", l.ceiling)
	}
	l.rate = 340
	l.cutLocked(now.Add(time.Second), 310, false)
	if want := cfg.CutFactor * 310; math.Abs(l.rate-want) > 0.01 {
		t.Errorf("a reading of 310/s after the origin proved 300/s cut the rate to %.1f, want %.1f: the readings from before the rise still held it", l.rate, want)
	}
}

// TestRefusedBurstsTeachTheAllowance: an origin that holds little burst (a
// token bucket of a twentieth of a second, a count per whole second)
// refuses most of a burst of tier 1 sent ahead of the rate and none of the
// sends that waited for it. Those 429s are the burst's: slow start goes
// on, nothing pauses, and tier 1 goes ahead of the rate by half of what
// the origin took of the burst at most. Taken for the rate's, they ended
// slow start at 25/s against 500, and a lone processor sent 16-41% of
// limits of 500 and 3,000. Once the allowance is known, 429s on both kinds
// of send are the rate's and cut it; and tier 1 alone, with no send held
// to the rate to tell, is judged as before.
func TestRefusedBurstsTeachTheAllowance(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	req := func(tier tiers.Tier) Request {
		return Request{Origin: "https://push.example.net", Sub: "s", Tier: tier}
	}
	// send grants n sends of tier at now and answers them at now plus
	// 50 ms, the last k of them 429s, as a token bucket answers a burst;
	// it returns the slots' ahead marks.
	send := func(p *Pacer, l *lane, now time.Time, tier tiers.Tier, n, k int) (ahead int) {
		var slots []*Slot
		for range n {
			w, s, _ := l.admit(p, req(tier), now)
			if w != nil {
				t.Fatalf("a %s send waited for the rate at %s; want it granted", tier, now.Sub(start))
			}
			if s == nil {
				t.Fatalf("a %s send was deferred at %s", tier, now.Sub(start))
			}
			slots = append(slots, s)
		}
		for i, s := range slots {
			if s.ahead {
				ahead++
			}
			status := 201
			if i >= n-k {
				status = 429
			}
			l.done(s, push.Result{Class: push.Delivered, Status: status}, status == 429, now.Add(50*time.Millisecond))
		}
		return ahead
	}

	t.Run("a burst refused, the sends held to the rate not", func(t *testing.T) {
		p, l := testLane(t, start)
		l.latency = 0.05
		// Sends held to the rate come first, answered; then a burst of
		// 60 of tier 1, of which the origin takes 12.
		send(p, l, start, tiers.Tier3, 2, 0)
		if ahead := send(p, l, start.Add(time.Millisecond), tiers.Tier1, 60, 48); ahead != 60 {
			t.Fatalf("%d of 60 tier-1 sends in slow start went ahead of the rate, want all", ahead)
		}
		if !l.slowStart || !l.paused.IsZero() {
			t.Fatalf("slow start %v, paused until %s: want slow start going on, no pause", l.slowStart, l.paused)
		}
		if got := l.allowanceLocked(start.Add(time.Second)); got != 6 {
			t.Fatalf("allowance %v, want 6 (half of the 12 the origin took)", got)
		}
		// Tier 1 now goes ahead of the rate by the allowance at most,
		// where its debt at the rate (a quarter second of it) is more.
		now := start.Add(2 * time.Second)
		l.rate, l.tokens, l.tokAt = 200, 1, now
		granted := 0
		for range 20 {
			if w, s, _ := l.admit(p, req(tiers.Tier1), now); s != nil {
				granted++
			} else if w != nil {
				l.cancel(w)
			}
		}
		if granted != 7 {
			t.Errorf("%d tier-1 sends granted at once on a token and an allowance of 6, want 7", granted)
		}
		if got := l.allowanceLocked(now.Add(allowanceFor)); !math.IsInf(got, 1) {
			t.Errorf("allowance %v after %s, want it forgotten", got, allowanceFor)
		}
	})

	t.Run("the rate's 429s, once the allowance is known", func(t *testing.T) {
		p, l := testLane(t, start)
		l.latency = 0.05
		l.allowance, l.allowanceAt = 6, start
		l.rate = 200
		now := start.Add(time.Second)
		l.tokens, l.tokAt = 1, now
		// The bucket is empty for everyone: the sends held to the rate
		// are refused as the burst's are.
		for i := range 40 {
			at := now.Add(time.Duration(i) * 5 * time.Millisecond)
			l.refillLocked(at)
			tier := tiers.Tier3
			if i%2 == 0 {
				tier = tiers.Tier1
			}
			if w, s, _ := l.admit(p, req(tier), at); s != nil {
				l.done(s, push.Result{Class: push.Retryable, Status: 429}, true, at.Add(50*time.Millisecond))
			} else if w != nil {
				l.cancel(w)
			}
			if !l.slowStart {
				break
			}
		}
		if l.slowStart {
			t.Fatalf("slow start goes on through 429s on every kind of send; want it ended (events: rate %.1f)", l.rate)
		}
	})

	t.Run("tier 1 alone", func(t *testing.T) {
		p, l := testLane(t, start)
		l.latency = 0.05
		send(p, l, start, tiers.Tier1, 60, 48)
		if l.slowStart {
			t.Errorf("slow start goes on after 48 of 60 tier-1 sends refused with no other send to tell; want it ended as before")
		}
		if got := l.allowanceLocked(start.Add(time.Second)); !math.IsInf(got, 1) {
			t.Errorf("allowance %v learnt from tier 1 alone, want none", got)
		}
	})
}

// TestStormOnAClosedWindowsTailHeldOnce: an origin that counts whole
// seconds refuses everything once a second's worth is taken, so the sends
// made right after the cut that read it meet the rest of that second. Their
// storm is no evidence against the new rate: paused on it, a lone
// processor left the next second unused and cut again, one cycle in eight
// seconds at 81% of 3,000/s. It is held once; the next storm pauses.
func TestStormOnAClosedWindowsTailHeldOnce(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	p, l := testLane(t, start)
	l.slowStart, l.rate, l.ceiling, l.latency = false, 500, 500, 0.005
	l.settled, l.judgeFrom = start, start
	// A second at 500 sends a second, all taken.
	now := start
	for range 500 {
		now = now.Add(2 * time.Millisecond)
		l.recordLocked(now.Add(-5*time.Millisecond), now, false, false, false)
		l.adaptLocked(p, now)
	}
	// The window closes: every answer a 429, until the lane cuts.
	for i, before := 0, l.rate; l.rate >= before; i++ {
		if i == 200 {
			t.Fatalf("200 refusals in a row after 500 taken: no cut (rate %.0f)", l.rate)
		}
		now = now.Add(2 * time.Millisecond)
		l.recordLocked(now.Add(-5*time.Millisecond), now, true, false, false)
		l.adaptLocked(p, now)
	}
	if !l.paused.IsZero() || l.closedCut.IsZero() {
		t.Fatalf("after the refusals: paused until %v, closed cut at %v; want a cut that read the window closing, no pause", l.paused, l.closedCut)
	}
	refuse := func(n int) {
		for range n {
			now = now.Add(time.Millisecond)
			l.recordLocked(now.Add(-time.Millisecond/2), now, true, false, false)
			l.adaptLocked(p, now)
		}
	}
	rate := l.rate
	refuse(10) // the sends right after the cut: a storm, held
	if !l.paused.IsZero() || l.rate != rate {
		t.Fatalf("the storm on the window's tail: paused until %v, rate %.0f; want neither a pause nor a cut from %.0f", l.paused, l.rate, rate)
	}
	refuse(10) // and a storm after that is judged as any
	if l.paused.IsZero() {
		t.Fatalf("a second storm after the cut: no pause; want one")
	}
}

// TestSlowStartGrowsToWhatTheOriginTook: in slow start tier 1 goes ahead
// of the rate, and the lower tiers wait for it. Where the origin took a
// tier-1 burst whole, the rate is no less than what it took over the last
// second: 6,000 events, a fifth of them tier 1, saw 1,200 tier-1 sends
// taken in 0.35 s while tiers 2 and 3 crawled at 20-100 sends a second
// for the next 0.6 s, on a machine left idle. An origin that refused any
// of that second proves nothing, and the rate doubles as before.
func TestSlowStartGrowsToWhatTheOriginTook(t *testing.T) {
	for _, tt := range []struct {
		name    string
		refused int
		least   float64 // the rate after, at least
		most    float64 // and at most
	}{
		{"all of the burst taken", 0, 1200, math.Inf(1)},
		{"one of it refused", 1, 20, 40},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Unix(1_800_000_000, 0)
			p, l := testLane(t, start)
			l.latency = 0.005
			// The tier-1 burst: 1,200 answers over 0.35 s.
			answer(l, start, 350*time.Millisecond, 1200, tt.refused)
			if !l.slowStart {
				t.Fatalf("slow start ended on the burst")
			}
			// A lower tier's send waited for a token, 50 ms on.
			now := start.Add(400 * time.Millisecond)
			l.lastGrow, l.starved = now.Add(-50*time.Millisecond), true
			l.growLocked(p, now)
			if l.rate < tt.least || l.rate > tt.most {
				t.Errorf("rate %.0f after the burst, want %.0f to %.0f", l.rate, tt.least, tt.most)
			}
		})
	}
}
