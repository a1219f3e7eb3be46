package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/devkafka"
)

func newDevCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dev kafka|mariadb",
		Short: "embedded Kafka broker and scratch MariaDB for local work (not for production)",
		Example: `  outbox-relay dev kafka --listen 127.0.0.1:9092 --data-dir /tmp/kafka
  outbox-relay dev mariadb --port 3307 --data-dir /tmp/mariadb`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	kafka := &cobra.Command{
		Use:   "kafka [--listen ADDR] [--data-dir DIR]",
		Short: "run an embedded single-broker Kafka (franz-go kfake) until SIGINT/SIGTERM",
		Example: `  outbox-relay dev kafka
  outbox-relay dev kafka --listen 127.0.0.1:19092 --data-dir /tmp/kafka`,
		Args: noArgs,
	}
	listen := kafka.Flags().String("listen", "127.0.0.1:9092", "address to listen on (host:port)")
	kafkaDir := kafka.Flags().String("data-dir", "", "keep the broker's data here across restarts (default: in memory)")
	kafka.RunE = func(*cobra.Command, []string) error { return devKafka(*listen, *kafkaDir) }
	maria := &cobra.Command{
		Use:     "mariadb --data-dir DIR [--port P]",
		Short:   "run a scratch MariaDB with the relay's settings until SIGINT/SIGTERM (root password relay-dev)",
		Example: `  outbox-relay dev mariadb --port 3307 --data-dir /tmp/mariadb`,
		Args:    noArgs,
	}
	port := maria.Flags().Int("port", 3307, "port on 127.0.0.1")
	mariaDir := maria.Flags().String("data-dir", "", "server directory (created and initialised if new)")
	maria.RunE = func(*cobra.Command, []string) error { return devMariaDB(*port, *mariaDir) }
	cmd.AddCommand(kafka, maria)
	return cmd
}

// devKafka runs the embedded broker (internal/devkafka) until a signal.
func devKafka(listen, dataDir string) error {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return usageErr("--listen %q: want host:port, such as 127.0.0.1:9092", listen)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return usageErr("--listen %q: port %q is not a number from 0 to 65535", listen, portStr)
	}
	c, err := devkafka.Start(host, port, dataDir)
	if err != nil {
		return err
	}
	fmt.Printf("embedded kafka listening on %s\n", c.ListenAddrs()[0])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	c.Close()
	return nil
}

// devMariaDB runs a scratch MariaDB with the relay's settings until a signal.
func devMariaDB(port int, dir string) error {
	if dir == "" {
		return usageErr("--data-dir DIR is required")
	}
	if port < 1 || port > 65535 {
		return usageErr("--port %d: want a port from 1 to 65535", port)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: dir, Port: port})
	if err != nil {
		return err
	}
	fmt.Printf("mariadb listening on %s (root password %q)\n", srv.Addr, devdb.RootPassword)
	<-ctx.Done()
	srv.Stop()
	return nil
}
