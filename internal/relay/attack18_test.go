package relay

import (
	"fmt"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// Live traffic at the head whose transactions fill a batch exactly
// (rows == kafka.batch.max_records, or the halved limit after ack
// time-outs, or large rows reaching max_bytes): the reader is caught up
// after every transaction, yet no batch asks the coordinator, so every
// next transaction meets the broker's 20 ms CONCURRENT_TRANSACTIONS
// back-off: the head latency issue 17 fixed comes back.
func TestAttack18SettleSkippedAtHeadWhenBatchFull(t *testing.T) {
	s := newScript("mariadb")
	for i := range 10 {
		s.tx(s.insert("order", fmt.Sprint(i), 10)) // exactly max_records rows
	}
	h := newHarness(t, s, maxRecords(10))
	h.batch = 0
	asked := countDescribeTxn(h)
	a := h.start()
	for i := 1; i <= 10; i++ {
		a.feed(s.through(i))
		want := int64(10 * i)
		h.waitCheckpoint(fmt.Sprint(want, " events"), func(cp *checkpoint.Checkpoint) bool { return cp.Events >= want })
	}
	a.finish()
	h.verify()
	if n := asked.Load(); n < 10 {
		t.Fatalf("reader caught up after each of 10 transactions, but DescribeTransactions asked only %d times: no settle at the head", n)
	}
}
