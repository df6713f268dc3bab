package consume

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// topicPause pauses a set of topics as a whole, apart from the pauses of
// their partitions (kgo keeps the two independent).
type topicPause struct {
	topics []string
	on     bool
}

// set pauses the topics or resumes them, if that changes anything.
func (t *topicPause) set(cl *kgo.Client, on bool) {
	if on == t.on {
		return
	}
	t.on = on
	if on {
		cl.PauseFetchTopics(t.topics...)
	} else {
		cl.ResumeFetchTopics(t.topics...)
	}
}

// budget bounds one tier's retry records in memory: at max, the tier's
// retry topics stop fetching until some are started, so memory does not
// grow with the partitions or with how many records come due together, and
// a lower tier's records waiting for their due time never keep a higher
// tier's due retry unread.
type budget struct {
	topics []string
	max    int64

	mu     sync.Mutex
	n      int64
	paused bool
}

// add counts delta more records held and pauses or resumes the topics.
// Decided on the count under mu: whichever change comes last leaves the
// pause as the count asks.
func (b *budget) add(cl *kgo.Client, delta int) {
	if delta == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += int64(delta)
	if want := b.n >= b.max; want != b.paused {
		b.paused = want
		if want {
			cl.PauseFetchTopics(b.topics...)
		} else {
			cl.ResumeFetchTopics(b.topics...)
		}
	}
}

func (b *budget) load() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}
