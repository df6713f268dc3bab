package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The churn tests kill one of three group members at random moments and
// start a replacement at once, as the fault suite's scenario 1 does with
// processor processes, on the embedded broker in virtual time
// (testing/synctest and kfake's VirtualNetwork): minutes of sessions and
// rebalance timeouts take milliseconds. The classic members use kgo's
// group defaults: cooperative-sticky, 45 s session, 60 s rebalance
// timeout, 3 s heartbeat; the KIP-848 ones the embedded broker's session
// (GroupConfigs: 6 s, 1 s heartbeat).

const (
	churnGroup = "g"
	churnTopic = "t"
	churnParts = 12
	churnKills = 10
	// churnSettle is how long the group may take to be stable with three
	// members after the last kill.
	churnSettle = 10 * time.Minute
)

// TestGroupChurnStatic: with static membership (kgo.InstanceID, the
// processor's --instance-id) a killed member's replacement takes its place
// at once, without waiting for the killed member's session to expire, and
// the group always ends stable with three members.
func TestGroupChurnStatic(t *testing.T) {
	for seed := range uint64(3) {
		r := churnRun(t, true, false, seed)
		t.Logf("seed %d: %s", seed, r)
		if !r.stable {
			t.Errorf("seed %d: group not stable with 3 members %s after the last kill: %s", seed, churnSettle, r)
		}
		for i, d := range r.recovery {
			if d < 0 || d >= 45*time.Second {
				t.Errorf("seed %d: kill %d: replacement given partitions after %v, want before the killed member's 45 s session ends", seed, i+1, d)
			}
		}
	}
}

// TestGroupChurnDynamic reproduces a kfake bug with dynamic members (no
// instance ID): after a few kills the group stays in PreparingRebalance
// for good. Every live member's JoinGroup is parked until kgo gives up
// after 70 s (rebalance timeout + 10 s) and rejoins; each rejoin restarts
// the rebalance timer (groups.go rebalance()), and a member that died
// while parked in JoinGroup stays in the group with no session timer
// (reply() arms it only when the reply is delivered), so the group never
// has every member joined. It fails today; it runs only when asked.
func TestGroupChurnDynamic(t *testing.T) {
	if os.Getenv("TIERPUSH_KFAKE_CHURN") == "" {
		t.Skip("reproduces a known kfake bug (docs/reliability.md, open issue 4); set TIERPUSH_KFAKE_CHURN=1")
	}
	stalled := 0
	for seed := range uint64(5) {
		r := churnRun(t, false, false, seed)
		t.Logf("seed %d: %s", seed, r)
		if !r.stable {
			stalled++
		}
	}
	if stalled > 0 {
		t.Errorf("%d of 5 runs: group not stable with 3 members %s after the last kill", stalled, churnSettle)
	}
}

// TestGroupChurnConsumer: KIP-848 dynamic members, as the processor runs by
// default, through the same kills: the group ends stable with three members
// every time (the classic protocol's stall above does not happen), and each
// killed member's partitions are another's within 10 s of the kill: its
// session (6 s) runs out, and a live member takes them at its next
// heartbeat. Each kill waits for the one before it to be over.
func TestGroupChurnConsumer(t *testing.T) {
	for seed := range uint64(5) {
		r := churnRun(t, false, true, seed)
		t.Logf("seed %d: %s", seed, r)
		if !r.stable {
			t.Errorf("seed %d: group not stable with 3 members %s after the last kill: %s", seed, churnSettle, r)
		}
		for i, d := range r.moved {
			if d < 0 || d > 10*time.Second {
				t.Errorf("seed %d: kill %d: the killed member's partitions another's after %v, want within 10 s", seed, i+1, d)
			}
		}
	}
}

// churnResult is what one run saw.
type churnResult struct {
	stable   bool            // stable with 3 members, each given partitions, within churnSettle
	settled  time.Duration   // last kill → stable
	recovery []time.Duration // per kill: until the replacement was given partitions; -1 never
	// moved, KIP-848 runs: per kill, until the killed member was out of
	// the group, its partitions another's; -1 never.
	moved []time.Duration
	group string // the group's final state and members
}

func (r churnResult) String() string {
	recs := make([]string, len(r.recovery))
	for i, d := range r.recovery {
		recs[i] = "never"
		if d >= 0 {
			recs[i] = fmt.Sprintf("%.0fs", d.Seconds())
		}
	}
	moved := ""
	if r.moved != nil {
		var ms []string
		for _, d := range r.moved {
			ms = append(ms, fmt.Sprintf("%.0fs", d.Seconds()))
		}
		moved = "; killed member's partitions moved after " + strings.Join(ms, " ")
	}
	return fmt.Sprintf("stable %v after %s; per kill %s%s; group %s", r.stable, r.settled.Round(time.Second), strings.Join(recs, " "), moved, r.group)
}

// churnRun runs one schedule, seeded, in a synctest bubble; consumer runs
// the members on KIP-848.
func churnRun(t *testing.T, static, consumer bool, seed uint64) churnResult {
	var res churnResult
	synctest.Test(t, func(t *testing.T) {
		vn := &kfake.VirtualNetwork{}
		const addr = "127.0.0.1:19092"
		cluster, err := Start(Config{Addr: addr, Partitions: churnParts, Listen: vn.Listen}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer cluster.Close()
		admCl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.Dialer(vn.DialContext))
		if err != nil {
			t.Fatal(err)
		}
		defer admCl.Close()
		ctx := context.Background()
		c := &churn{t: t, vn: vn, addr: addr, static: static, consumer: consumer, adm: kadm.NewClient(admCl)}
		if os.Getenv("TIERPUSH_CHURN_LOG") != "" {
			c.logw = os.Stderr
		}
		if _, err := c.adm.CreateTopic(ctx, churnParts, 1, nil, churnTopic); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			c.start(i)
		}
		if _, ok := c.waitStable(ctx, 3*time.Minute); !ok {
			t.Fatalf("group never stable at start: %s", c.describe(ctx))
		}

		rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
		type kill struct {
			at time.Time
			by *member // the replacement
		}
		var ks []kill
		for range churnKills {
			time.Sleep(time.Duration(2+rng.IntN(30)) * time.Second)
			i := rng.IntN(3)
			killed := c.slots[i]
			id, _ := killed.cl.GroupMetadata()
			c.kill(killed)
			at := time.Now()
			ks = append(ks, kill{at: at, by: c.start(i)})
			t.Logf("kill slot %d; group %s", i, c.describe(ctx))
			if consumer {
				res.moved = append(res.moved, c.waitGone(ctx, id, at))
			}
		}
		res.settled, res.stable = c.waitStable(ctx, churnSettle)
		for _, k := range ks {
			// The first process of the slot from this kill on that was
			// given partitions (the replacement may itself be killed).
			d := time.Duration(-1)
			for _, m := range c.all {
				if m.slot != k.by.slot || m.started.Before(k.at) {
					continue
				}
				if a := m.firstAssigned(); !a.IsZero() && (d < 0 || a.Sub(k.at) < d) {
					d = a.Sub(k.at)
				}
			}
			res.recovery = append(res.recovery, d)
		}
		res.group = c.describe(ctx)
		for _, m := range c.slots {
			m.cl.Close()
		}
	})
	return res
}

// cuttable dials through a virtual network and can be cut as a SIGKILL
// cuts a process's sockets: every connection closes at once and no new one
// opens, so the client can tell the broker nothing more.
type cuttable struct {
	vn    *kfake.VirtualNetwork
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

var errKilled = errors.New("process killed")

func (d *cuttable) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	cut := d.cut
	d.mu.Unlock()
	if cut {
		return nil, errKilled
	}
	// Not under d.mu: synctest does not count a goroutine waiting on a
	// mutex as durably blocked.
	conn, err := d.vn.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		conn.Close()
		return nil, errKilled
	}
	d.conns = append(d.conns, conn)
	return conn, nil
}

func (d *cuttable) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = true
	for _, conn := range d.conns {
		conn.Close()
	}
}

// member is one consumer of the group, as a processor process is one.
type member struct {
	slot    int
	name    string
	d       *cuttable
	cl      *kgo.Client
	started time.Time

	mu       sync.Mutex
	assigned time.Time // first OnPartitionsAssigned with partitions
}

func (m *member) firstAssigned() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.assigned
}

// churn is three slots of group members on the embedded broker.
type churn struct {
	t        *testing.T
	vn       *kfake.VirtualNetwork
	addr     string
	static   bool
	consumer bool      // KIP-848 members
	logw     io.Writer // kgo logs of every member, when set
	adm      *kadm.Client
	slots    []*member // the current member of each slot
	all      []*member
	gens     []int
}

// start starts a member in slot (a new one, or in place of a killed one).
func (c *churn) start(slot int) *member {
	for len(c.slots) <= slot {
		c.slots = append(c.slots, nil)
		c.gens = append(c.gens, 0)
	}
	d := &cuttable{vn: c.vn}
	m := &member{slot: slot, name: fmt.Sprintf("proc-%d.%d", slot, c.gens[slot]), d: d, started: time.Now()}
	c.gens[slot]++
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.addr),
		kgo.Dialer(d.dial),
		kgo.ConsumerGroup(churnGroup),
		kgo.ConsumeTopics(churnTopic),
		// kgo's autocommit loop waits on a RWMutex while a JoinGroup is
		// parked, which synctest does not count as durably blocked: time
		// would stand still. Commits play no part in the group's states.
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			if len(a) == 0 {
				return
			}
			m.mu.Lock()
			if m.assigned.IsZero() {
				m.assigned = time.Now()
			}
			m.mu.Unlock()
		}),
	}
	if c.static {
		opts = append(opts, kgo.InstanceID(fmt.Sprintf("proc-%d", slot)))
	}
	if c.consumer {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	if c.logw != nil {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(prefixWriter{c.logw, m.name}, kgo.LogLevelInfo, nil)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	m.cl = cl
	go func() {
		for !cl.PollFetches(context.Background()).IsClientClosed() {
		}
	}()
	c.slots[slot] = m
	c.all = append(c.all, m)
	return m
}

// kill cuts m off like a SIGKILL. The client is closed in the background;
// it can no longer reach the broker, so it neither commits nor leaves.
func (c *churn) kill(m *member) {
	m.d.kill()
	go m.cl.Close()
}

// waitStable waits up to d until the group is Stable with three members
// and each slot's current member has been given partitions.
func (c *churn) waitStable(ctx context.Context, d time.Duration) (time.Duration, bool) {
	began := time.Now()
	for time.Since(began) < d {
		state, ms := c.members(ctx)
		if state == "Stable" && len(ms) == 3 {
			n := 0
			for _, m := range c.slots {
				if !m.firstAssigned().IsZero() {
					n++
				}
			}
			if n == len(c.slots) {
				return time.Since(began), true
			}
		}
		time.Sleep(time.Second)
	}
	return d, false
}

// churnMember is a member as the broker describes it.
type churnMember struct {
	id, instance string
	partitions   int
}

// members returns the group's state and members, described as a KIP-848
// group or a classic one.
func (c *churn) members(ctx context.Context) (string, []churnMember) {
	var out []churnMember
	if c.consumer {
		gs, err := c.adm.DescribeConsumerGroups(ctx, churnGroup)
		if err != nil {
			return err.Error(), nil
		}
		g := gs[churnGroup]
		for _, m := range g.Members {
			cm := churnMember{id: m.MemberID}
			if m.InstanceID != nil {
				cm.instance = *m.InstanceID
			}
			// kfake names the assignment by topic ID only: one topic.
			for _, ps := range m.Assignment {
				cm.partitions += len(ps)
			}
			out = append(out, cm)
		}
		return g.State, out
	}
	gs, err := c.adm.DescribeGroups(ctx, churnGroup)
	if err != nil {
		return err.Error(), nil
	}
	g := gs[churnGroup]
	for _, m := range g.Members {
		cm := churnMember{id: m.MemberID}
		if m.InstanceID != nil {
			cm.instance = *m.InstanceID
		}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				cm.partitions += len(t.Partitions)
			}
		}
		out = append(out, cm)
	}
	return g.State, out
}

// waitGone waits until member id is out of the group and every partition
// assigned to the others, and returns how long after at that was; -1 if
// not within churnSettle.
func (c *churn) waitGone(ctx context.Context, id string, at time.Time) time.Duration {
	for time.Since(at) < churnSettle {
		_, ms := c.members(ctx)
		held, gone := 0, true
		for _, m := range ms {
			gone = gone && m.id != id
			held += m.partitions
		}
		if gone && held == churnParts {
			return time.Since(at)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return -1
}

// describe returns the group's state and its members as the broker sees
// them: [instance/]member-id-suffix:partitions.
func (c *churn) describe(ctx context.Context) string {
	state, members := c.members(ctx)
	var ms []string
	for _, m := range members {
		id := m.id[max(0, len(m.id)-6):]
		if m.instance != "" {
			id = m.instance + "/" + id
		}
		ms = append(ms, fmt.Sprintf("%s:%d", id, m.partitions))
	}
	return fmt.Sprintf("%s, %d members [%s]", state, len(members), strings.Join(ms, " "))
}

// prefixWriter prefixes each kgo log line with the virtual time and the
// member's name.
type prefixWriter struct {
	w    io.Writer
	name string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	fmt.Fprintf(p.w, "%s %s %s", time.Now().UTC().Format("15:04:05.000"), p.name, b)
	return len(b), nil
}
