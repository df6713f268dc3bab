package pacing

import "time"

// meter counts one lane's sends and answers in tenths of a second: what
// was sent, what the origin accepted and what it refused with a 429. It
// reads them over the last second of sending: the tenths of the last
// pause are left out, or a cut after a pause would read the pause as what
// the origin accepts.
type meter struct {
	ticks      [30]tick
	from, till int64 // the last pause, in tenths
	start      int64 // the first tenth
}

type tick struct {
	at                        int64 // unix time in tenths of a second
	sent, accepted, throttled int
}

func (m *meter) tick(now time.Time) *tick {
	at := now.UnixMilli() / 100
	if m.start == 0 {
		m.start = at
	}
	t := &m.ticks[at%int64(len(m.ticks))]
	if t.at != at {
		*t = tick{at: at}
	}
	return t
}

// resumed is when the last pause ended.
func (m *meter) resumed() time.Time { return time.UnixMilli((m.till + 1) * 100) }

// paused leaves the tenths from now until until out of the readings.
func (m *meter) paused(now, until time.Time) {
	m.from, m.till = now.UnixMilli()/100, until.UnixMilli()/100
}

// rates are the sends, acceptances and 429s per second over the last
// second of sending, or longer (up to the tenths kept) until readAnswers
// answers are in: a few answers a second read over one are noise. A lane
// younger than that is read over its age: what an origin gives a newcomer
// at once overstates its rate, which the next cut mends, where a second
// read as if sent nothing before understates it for the whole climb back.
func (m *meter) rates(now time.Time) (sent, accepted, throttled float64) {
	at := now.UnixMilli() / 100
	var s, a, k int
	tenths := 0
	for i := at; i > at-int64(len(m.ticks)) && i >= m.start && (tenths < readTenths || a+k < readAnswers); i-- {
		if i >= m.from && i <= m.till && i != at {
			continue
		}
		tenths++
		if t := &m.ticks[i%int64(len(m.ticks))]; t.at == i {
			s, a, k = s+t.sent, a+t.accepted, k+t.throttled
		}
	}
	secs := (time.Duration(tenths-1)*100*time.Millisecond + now.Sub(time.UnixMilli(at*100))).Seconds()
	secs = max(secs, 0.1)
	return float64(s) / secs, float64(a) / secs, float64(k) / secs
}

// A reading spans readTenths tenths of sending, more until readAnswers
// answers are in.
const readAnswers, readTenths = 50, 10
