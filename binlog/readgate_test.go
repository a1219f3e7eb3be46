package binlog

import (
	"encoding/binary"
	"math/rand"
	"net"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/packet"
)

// A model of the reader over the gate: go-mysql's packet.Conn (bufio,
// packets split at 16 MB) reading through gatedConn on one goroutine that
// gathers the packets into a burst, handed on before each read of the
// socket or at batchBytes, as Run's streamHandler does; a reader that takes
// bursts and is busy for random times. Every packet must
// arrive once, in order, whatever the sizes, and the stream never stalls.
func TestReadGateModelStreamDeliversEveryPacketInOrder(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewSource(seed))
		sizes := make([]int, 0, 400)
		for range 400 {
			switch rng.Intn(5) {
			case 0:
				sizes = append(sizes, 100+rng.Intn(100))
			case 1:
				sizes = append(sizes, 10<<10)
			case 2:
				sizes = append(sizes, 300<<10+rng.Intn(1000))
			case 3:
				sizes = append(sizes, 1<<20+rng.Intn(1000))
			default:
				sizes = append(sizes, 40)
			}
		}
		sizes[200] = 17 << 20 // split across packets of 16 MB
		cli, srv := net.Pipe()
		gate := newReadGate()
		out := make(chan []Event, 2)
		var batch []Event
		size := 0
		handOnBurst := func() error {
			if len(batch) == 0 {
				return nil
			}
			err := handOn(gate, t.Context(), out, batch)
			batch, size = nil, 0
			return err
		}
		gate.before = handOnBurst
		var w watchdog
		c := packet.NewConn(gatedConn{Conn: cli, reads: &w.reads, gate: gate})
		go func() {
			seq := uint8(0)
			for i, n := range sizes {
				data := make([]byte, n)
				binary.LittleEndian.PutUint32(data, uint32(i))
				for off := 0; ; {
					chunk := min(len(data)-off, 1<<24-1)
					hdr := []byte{byte(chunk), byte(chunk >> 8), byte(chunk >> 16), seq}
					seq++
					if _, err := srv.Write(append(hdr, data[off:off+chunk]...)); err != nil {
						return
					}
					off += chunk
					if chunk < 1<<24-1 {
						break
					}
				}
			}
		}()
		go func() { // go-mysql's reading goroutine with the reader's handler
			for {
				p, err := c.ReadPacket()
				if err != nil {
					close(out)
					return
				}
				batch = append(batch, Event{Pos: binary.LittleEndian.Uint32(p), Size: len(p)})
				if size += len(p); size >= batchBytes {
					if handOnBurst() != nil {
						close(out)
						return
					}
				}
			}
		}()
		done := make(chan struct{})
		go func() {
			defer close(done)
			next := 0
			for next < len(sizes) {
				b, ok := <-out
				if !ok {
					t.Errorf("seed %d: stream ended at %d", seed, next)
					return
				}
				for _, ev := range b {
					if got := int(ev.Pos); got != next || ev.Size != sizes[next] {
						t.Errorf("seed %d: packet %d (%d bytes) where %d (%d) was due", seed, got, ev.Size, next, sizes[next])
						return
					}
					next++
				}
				time.Sleep(time.Duration(rng.Intn(2000)) * time.Microsecond)
			}
		}()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("seed %d: stalled (held %v)", seed, gate.held())
		}
		gate.release()
		cli.Close()
		srv.Close()
	}
}
