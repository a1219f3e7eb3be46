// Package devkafka runs franz-go's kfake as one embedded Kafka broker for
// local work and the demo (`outbox-relay dev kafka`): it listens on the
// address given, keeps its data in memory or in a directory, and allows
// transactions as long as a relay's longest kafka.transaction_timeout. It is
// a test broker, never for production; the caller owns the returned cluster
// and closes it.
package devkafka

import (
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
)

// MaxTransactionTimeout is the broker's transaction.max.timeout.ms, Apache
// Kafka's default (15 minutes): a relay's kafka.transaction_timeout up to it
// is accepted.
const MaxTransactionTimeout = "900000"

// Start starts the broker on host:port (port 0: any free port; see the
// cluster's ListenAddrs) with its data in dataDir, or in memory when dataDir
// is empty.
func Start(host string, port int, dataDir string) (*kfake.Cluster, error) {
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
		}),
		kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": MaxTransactionTimeout}),
	}
	if dataDir != "" {
		opts = append(opts, kfake.DataDir(dataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded kafka on %s: %w", net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	return c, nil
}
