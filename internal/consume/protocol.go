package consume

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The consumer group protocols (Config.Protocol).
const (
	// ProtocolAuto uses KIP-848 (ProtocolConsumer) where the brokers
	// serve it, for a dynamic member; a static member (InstanceID) stays
	// on the classic protocol, whose restart takes the old member's place
	// at once (under KIP-848 the broker refuses it, UNRELEASED_INSTANCE_ID,
	// until the killed member's session ends).
	ProtocolAuto = "auto"
	// ProtocolClassic is the classic protocol: JoinGroup and SyncGroup,
	// with SessionTimeout and HeartbeatInterval.
	ProtocolClassic = "classic"
	// ProtocolConsumer is KIP-848: the broker assigns the partitions,
	// and its group.consumer.session.timeout.ms and
	// group.consumer.heartbeat.interval.ms set the session. Run fails
	// when the brokers do not serve it.
	ProtocolConsumer = "consumer"
)

// groupOpts are the options of the group protocol and its session.
func (c *Consumer) groupOpts() []kgo.Opt {
	var opts []kgo.Opt
	if c.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(c.cfg.InstanceID))
	}
	if c.cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(c.cfg.SessionTimeout))
	}
	if c.cfg.HeartbeatInterval > 0 {
		opts = append(opts, kgo.HeartbeatInterval(c.cfg.HeartbeatInterval))
	}
	if c.wants848() {
		// kgo's default balancer is cooperative-sticky, which KIP-848
		// serves as its uniform assignor; where the brokers lack
		// KIP-848 kgo falls back to the classic protocol (Run tells).
		opts = append(opts, kgo.ServerSideBalancer())
	}
	return opts
}

// wants848 reports whether the member asks for KIP-848.
func (c *Consumer) wants848() bool {
	switch c.cfg.Protocol {
	case ProtocolConsumer:
		return true
	case ProtocolAuto:
		return c.cfg.InstanceID == ""
	}
	return false
}

// checkProtocol asks the brokers whether they serve KIP-848
// (ConsumerGroupHeartbeat v1, Kafka 4.0 and later): with ProtocolConsumer
// they must, and the protocol the member uses is logged.
func (c *Consumer) checkProtocol(ctx context.Context) error {
	if !c.wants848() {
		c.log.Info("consumer group protocol", "protocol", ProtocolClassic, "asked", c.cfg.Protocol, "static", c.cfg.InstanceID != "")
		c.protocol.Store(ProtocolClassic)
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(rctx, c.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		if c.cfg.Protocol == ProtocolConsumer {
			return fmt.Errorf("group protocol %s: asking the brokers what they serve: %w", ProtocolConsumer, err)
		}
		c.log.Warn("could not ask the brokers whether they serve KIP-848 consumer groups; kgo decides on joining", "err", err)
		return nil
	}
	serves := false
	for _, k := range resp.ApiKeys {
		if k.ApiKey == int16(kmsg.ConsumerGroupHeartbeat) && k.MaxVersion >= 1 {
			serves = true
		}
	}
	switch {
	case serves:
		c.log.Info("consumer group protocol", "protocol", ProtocolConsumer, "asked", c.cfg.Protocol)
		c.protocol.Store(ProtocolConsumer)
	case c.cfg.Protocol == ProtocolConsumer:
		return fmt.Errorf("group protocol %s: the brokers do not serve KIP-848 consumer groups (ConsumerGroupHeartbeat v1, Kafka 4.0 and later); use %s or %s", ProtocolConsumer, ProtocolClassic, ProtocolAuto)
	default:
		c.log.Info("consumer group protocol", "protocol", ProtocolClassic, "asked", c.cfg.Protocol, "why", "the brokers do not serve KIP-848")
		c.protocol.Store(ProtocolClassic)
	}
	return nil
}

// Member tells the group member this consumer is now ("" before it has
// joined) and the protocol it joined with ("" until Run has asked the
// brokers, or when it could not).
func (c *Consumer) Member() (id, protocol string) {
	id, _ = c.cl.GroupMetadata()
	protocol, _ = c.protocol.Load().(string)
	return id, protocol
}
