package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/tierpush/tierpush/internal/consume"
	"github.com/tierpush/tierpush/internal/pipeline"
)

// membership is how the processor is a member of its consumer group: the
// protocol, and the classic protocol's session (internal/consume). Under
// KIP-848 the broker sets the session: group.consumer.session.timeout.ms
// and group.consumer.heartbeat.interval.ms (README, "Consumer group").
type membership struct {
	Protocol          string
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
	RemoveSilentAfter time.Duration
}

func defaultMembership(pc pipeline.Config) membership {
	return membership{Protocol: pc.GroupProtocol, SessionTimeout: pc.SessionTimeout, HeartbeatInterval: pc.HeartbeatInterval, RemoveSilentAfter: pc.RemoveSilentAfter}
}

func (m *membership) register(fs *flag.FlagSet) {
	fs.StringVar(&m.Protocol, "group-protocol", m.Protocol, "consumer group protocol: consumer (KIP-848, Kafka 4.0+: the brokers' group.consumer.* settings set the session), classic, or auto (consumer where the brokers serve it, classic for a static member: --instance-id)")
	fs.DurationVar(&m.SessionTimeout, "session-timeout", m.SessionTimeout, "classic protocol: how long the group waits for a member that stopped heartbeating, so how long a crashed processor's partitions wait; within the brokers' group.min/max.session.timeout.ms")
	fs.DurationVar(&m.HeartbeatInterval, "heartbeat-interval", m.HeartbeatInterval, "classic protocol: how often the member heartbeats; below --session-timeout")
	fs.DurationVar(&m.RemoveSilentAfter, "remove-silent-after", m.RemoveSilentAfter, "both protocols: remove from the group a processor whose beats on push.members stopped this long ago, so a killed processor's partitions wait this long rather than its session; 0 leaves it to the session")
}

// validate names each flag out of range.
func (m *membership) validate() []error {
	var errs []error
	switch m.Protocol {
	case consume.ProtocolAuto, consume.ProtocolClassic, consume.ProtocolConsumer:
	default:
		errs = append(errs, fmt.Errorf("--group-protocol: %q, want consumer, classic or auto", truncateFlag(m.Protocol)))
	}
	if m.SessionTimeout < time.Second || m.SessionTimeout > time.Hour {
		errs = append(errs, fmt.Errorf("--session-timeout: %s, want 1s..1h", m.SessionTimeout))
	}
	if m.HeartbeatInterval < 10*time.Millisecond || m.HeartbeatInterval >= m.SessionTimeout {
		errs = append(errs, fmt.Errorf("--heartbeat-interval: %s, want 10ms or more and below --session-timeout (%s)", m.HeartbeatInterval, m.SessionTimeout))
	}
	if m.RemoveSilentAfter != 0 && (m.RemoveSilentAfter < time.Second || m.RemoveSilentAfter > time.Hour) {
		errs = append(errs, fmt.Errorf("--remove-silent-after: %s, want 0 (never) or 1s..1h", m.RemoveSilentAfter))
	}
	return errs
}

// apply sets the pipeline's membership.
func (m *membership) apply(pc *pipeline.Config, instanceID string) {
	pc.GroupInstanceID = instanceID
	pc.GroupProtocol = m.Protocol
	pc.SessionTimeout = m.SessionTimeout
	pc.HeartbeatInterval = m.HeartbeatInterval
	pc.RemoveSilentAfter = m.RemoveSilentAfter
}
