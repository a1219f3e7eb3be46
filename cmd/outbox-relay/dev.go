package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

func devCmd(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: dev kafka|mariadb", errUsage)
	}
	switch args[0] {
	case "kafka":
		return devKafka(args[1:])
	case "mariadb":
		return devMariaDB(args[1:])
	}
	return fmt.Errorf("%w: unknown dev command %q", errUsage, args[0])
}

// devKafka runs franz-go's kfake as a single embedded broker until a signal.
func devKafka(args []string) error {
	fs := flag.NewFlagSet("dev kafka", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9092", "address to listen on")
	dataDir := fs.String("data-dir", "", "keep the broker's data here across restarts (default: in memory)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, portStr, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("%w: --listen %q: %v", errUsage, *listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("%w: --listen port %q", errUsage, portStr)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(host, portStr))
		}),
		kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "900000"}),
	}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("start embedded kafka: %w", err)
	}
	fmt.Printf("embedded kafka listening on %s\n", c.ListenAddrs()[0])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	c.Close()
	return nil
}

// devMariaDB runs a scratch MariaDB with the relay's settings until a signal.
func devMariaDB(args []string) error {
	fs := flag.NewFlagSet("dev mariadb", flag.ContinueOnError)
	port := fs.Int("port", 3307, "port on 127.0.0.1")
	dir := fs.String("data-dir", "", "server directory (created and initialised if new)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("%w: --data-dir DIR is required", errUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: *dir, Port: *port})
	if err != nil {
		return err
	}
	fmt.Printf("mariadb listening on %s (root password %q)\n", srv.Addr, devdb.RootPassword)
	<-ctx.Done()
	srv.Stop()
	return nil
}
