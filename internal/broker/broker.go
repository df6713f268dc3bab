// Package broker runs the embedded Kafka broker (kfake) that the processor
// starts when no --brokers are given. It speaks the Kafka protocol, so kcat
// and upstream services can produce to it, and it keeps records and
// committed offsets in a data directory across restarts. It is a
// development and test broker with no replication.
//
// It serves both consumer group protocols. A KIP-848 group's session is the
// broker's: GroupConfigs, a 6 s session and a 1 s heartbeat, so that a
// crashed member's partitions move in seconds (Kafka's defaults are 45 s
// and 5 s, and its group.consumer.min.session.timeout.ms is 45 s).
package broker

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Config of the embedded broker.
type Config struct {
	// Addr is the host:port to listen on.
	Addr string
	// DataDir keeps the broker's state; empty keeps it in memory only.
	DataDir string
	// Partitions is the default partition count of auto-created topics.
	Partitions int
	// TLS, when set, serves TLS (the processor's embedded broker never
	// does: it is plaintext on loopback; tests use it).
	TLS *tls.Config
	// Users turns on SASL with these principals: method (PLAIN,
	// SCRAM-SHA-256, SCRAM-SHA-512), user, pass. Default: no SASL.
	Users []User
	// Listen overrides net.Listen (tests with an in-memory network).
	Listen func(network, address string) (net.Listener, error)
	// Configs are broker-level configs (kfake.BrokerConfigs), for example
	// "message.max.bytes", over GroupConfigs and kfake's defaults.
	Configs map[string]string
}

// GroupConfigs are the embedded broker's KIP-848 group session settings.
var GroupConfigs = map[string]string{
	"group.consumer.session.timeout.ms":    "6000",
	"group.consumer.heartbeat.interval.ms": "1000",
}

// User is a SASL principal of the embedded broker.
type User struct{ Method, Name, Password string }

// Start starts the broker; Close the returned cluster to stop it.
func Start(cfg Config, log *slog.Logger) (*kfake.Cluster, error) {
	host, portS, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("--embedded-addr %q: %w", cfg.Addr, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("--embedded-addr %q: bad port", cfg.Addr)
	}
	listen := cfg.Listen
	if listen == nil {
		listen = net.Listen
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ClusterID("tierpush-embedded"),
		// kfake listens on 127.0.0.1:port; honour the host asked for.
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
		}),
	}
	if cfg.Partitions > 0 {
		opts = append(opts, kfake.DefaultNumPartitions(cfg.Partitions))
	}
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
			return nil, fmt.Errorf("--data-dir: %w", err)
		}
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	if cfg.TLS != nil {
		opts = append(opts, kfake.TLS(cfg.TLS))
	}
	configs := maps.Clone(GroupConfigs)
	maps.Copy(configs, cfg.Configs)
	opts = append(opts, kfake.BrokerConfigs(configs))
	if len(cfg.Users) > 0 {
		opts = append(opts, kfake.EnableSASL())
		for _, u := range cfg.Users {
			opts = append(opts, kfake.Superuser(u.Method, u.Name, u.Password))
		}
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded broker on %s: %w", cfg.Addr, err)
	}
	log.Info("embedded broker listening", "addr", c.ListenAddrs(), "data_dir", cfg.DataDir)
	return c, nil
}
