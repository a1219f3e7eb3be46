package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Consumer is a franz-go group consumer whose records go through a Store:
// each record is applied in one local transaction, and the group's offsets
// are committed only after the database commits of the records they cover.
type Consumer struct {
	Store  *Store
	Client *kgo.Client
	// OnRecord, when set, is told what happened to each record (for logs).
	OnRecord func(r *kgo.Record, o Outcome)
	// failed is Run's error: the client has read past records that were not
	// handled, so it must not go on.
	failed error
}

// ErrConsumerFailed is returned by Run on a consumer whose earlier Run
// failed: its client has read past records it did not handle. Close it and
// build a new Consumer; the group resumes from the last committed offset.
var ErrConsumerFailed = errors.New("consumer failed earlier")

// ClientOpts are the options the consumer needs, appended after the
// caller's so they win: read_committed (records of aborted Kafka
// transactions are never seen), no automatic offset commits, rebalances
// held while a polled batch is being handled, new groups start at the
// earliest offset.
func ClientOpts(group string, topics ...string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
}

// NewConsumer builds the Kafka client: opts (brokers, TLS, SASL, ...)
// followed by ClientOpts(group, topics...).
func NewConsumer(store *Store, group string, topics []string, opts ...kgo.Opt) (*Consumer, error) {
	if store == nil || store.DB == nil || store.Name == "" {
		return nil, errors.New("new consumer: a store with a database and a consumer name is required")
	}
	if group == "" || len(topics) == 0 {
		return nil, errors.New("new consumer: a group and at least one topic are required")
	}
	cl, err := kgo.NewClient(append(opts, ClientOpts(group, topics...)...)...)
	if err != nil {
		return nil, fmt.Errorf("new consumer: %w", err)
	}
	return &Consumer{Store: store, Client: cl}, nil
}

// Close leaves the group and closes the client.
func (c *Consumer) Close() { c.Client.Close() }

// Run polls and handles records until ctx ends (it then returns nil) or a
// record fails (it returns the error; the failed record's offset and those
// after it are not committed, so a new Consumer handles it again). After an
// error the Consumer is done: Run returns ErrConsumerFailed.
func (c *Consumer) Run(ctx context.Context, h Handler) error {
	if c.failed != nil {
		return fmt.Errorf("%w: %w", ErrConsumerFailed, c.failed)
	}
	err := c.run(ctx, h)
	if err != nil {
		c.failed = err
	}
	return err
}

func (c *Consumer) run(ctx context.Context, h Handler) error {
	for {
		fs := c.Client.PollFetches(ctx)
		if ctx.Err() != nil {
			c.Client.AllowRebalance()
			return nil
		}
		var fetchErr error
		fs.EachError(func(t string, p int32, err error) {
			if fetchErr == nil {
				fetchErr = fmt.Errorf("fetch %s partition %d: %w", t, p, err)
			}
		})
		if fetchErr != nil {
			c.Client.AllowRebalance()
			return fetchErr
		}
		if err := c.handle(ctx, fs, h); err != nil {
			c.Client.AllowRebalance()
			return err
		}
		c.Client.AllowRebalance()
	}
}

// handle applies the polled records in order, then commits the offsets of
// those applied (also when one fails: the ones before it are done).
func (c *Consumer) handle(ctx context.Context, fs kgo.Fetches, h Handler) error {
	var done []*kgo.Record
	var failed error
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		for _, r := range p.Records {
			if failed != nil {
				return
			}
			o, err := c.Store.Handle(ctx, r, h)
			if err != nil {
				failed = err
				return
			}
			if c.OnRecord != nil {
				c.OnRecord(r, o)
			}
			done = append(done, r)
		}
	})
	if len(done) > 0 {
		// A fresh context: the offsets of committed work are committed
		// even when ctx ended meanwhile.
		if err := c.Client.CommitRecords(context.WithoutCancel(ctx), done...); err != nil {
			return errors.Join(failed, fmt.Errorf("commit offsets: %w", err))
		}
	}
	return failed
}
