package relay

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Settling after a commit.
//
// Apache Kafka answers EndTxn once the coordinator has logged PrepareCommit;
// it writes the commit markers and CompleteCommit afterwards (about 1-2 ms on
// a local broker). A produce that adds a partition to the next transaction
// before that is answered CONCURRENT_TRANSACTIONS: under transaction protocol
// v2 (KIP-890 part 2, the default of Kafka 4 clusters) the broker retries it
// itself after add.partitions.to.txn.retry.backoff.ms (20 ms by default),
// under v1 franz-go retries AddPartitionsToTxn after its
// ConcurrentTransactionsBackoff (20 ms). Either way a relay that begins its
// next transaction at once pays 20 ms per transaction (measured with
// `bench txn -back-to-back`: 22.5 ms per one-record transaction, 2.1 ms when
// the next produce waits for the coordinator to complete the commit).
//
// So after each commit the sink asks the coordinator (DescribeTransactions,
// one cheap request) until the transaction is CompleteCommit (or Empty), at
// most settleMax, in a goroutine; the next transaction's first produce waits
// for that answer. This only moves when the next produce is sent: the
// commit's outcome is already known, and a failed or slow answer (an old
// broker, no DESCRIBE permission on the transactional id) only means the
// produce goes out unwaited, as before. Kafka's own retry keeps it correct.

// settleMax bounds one settle wait: the broker's retry backoff tops out at
// 100 ms (add.partitions.to.txn.retry.backoff.max.ms).
const settleMax = 50 * time.Millisecond

// settleAfterCommit starts asking the coordinator whether the transaction
// just committed is complete; begin waits for the answer.
func (s *sink) settleAfterCommit() {
	if !s.txn || s.settleOff {
		return
	}
	if s.txnID == "" {
		id, _ := s.cl.OptValue(kgo.TransactionalID).(string)
		if id == "" {
			s.settleOff = true
			return
		}
		s.txnID = id
	}
	done := make(chan bool, 1)
	s.settled = done
	go func() {
		ctx, cancel := context.WithTimeout(s.pctx, settleMax)
		defer cancel()
		for {
			d, err := s.adm.DescribeTransactions(ctx, s.txnID)
			if err != nil {
				// Unsupported, not allowed, or out of time: stop asking
				// when it is not the deadline (ctx) that ended it.
				done <- ctx.Err() == nil
				return
			}
			t, ok := d[s.txnID]
			if !ok || t.Err != nil {
				done <- t.Err != nil && ctx.Err() == nil
				return
			}
			switch t.State {
			case "CompleteCommit", "CompleteAbort", "Empty":
				done <- false
				return
			}
			select {
			case <-ctx.Done():
				done <- false
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
}

// awaitSettled waits for the answer settleAfterCommit started asking for,
// if any; it is bounded by settleMax.
func (s *sink) awaitSettled() {
	if s.settled == nil {
		return
	}
	if off := <-s.settled; off {
		s.settleOff = true // the broker cannot answer: never ask again
	}
	s.settled = nil
	s.settleWaits.Add(1)
}
