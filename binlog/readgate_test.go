package binlog

import (
	"encoding/binary"
	"math/rand"
	"net"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/packet"
)

// A model of go-mysql's stream over the gate: packet.Conn (bufio, packets
// split at 16 MB) reading through gatedConn into a channel of 512, a reader
// that marks waiting around its take and is busy for random times. Every
// packet must arrive once, in order, whatever the sizes.
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
		ahead := newReadAhead(readAheadBytes)
		var w watchdog
		c := packet.NewConn(gatedConn{Conn: cli, reads: &w.reads, ahead: ahead})
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
		ch := make(chan []byte, eventCacheCount)
		go func() {
			for {
				p, err := c.ReadPacket()
				if err != nil {
					close(ch)
					return
				}
				ch <- p
			}
		}()
		done := make(chan struct{})
		go func() {
			defer close(done)
			next := 0
			for next < len(sizes) {
				ahead.waiting(true)
				p, ok := <-ch
				ahead.waiting(false)
				if !ok {
					t.Errorf("seed %d: stream ended at %d", seed, next)
					return
				}
				batch := [][]byte{p}
				for len(ch) > 0 {
					batch = append(batch, <-ch)
				}
				for _, p := range batch {
					if got := int(binary.LittleEndian.Uint32(p)); got != next || len(p) != sizes[next] {
						t.Errorf("seed %d: packet %d (%d bytes) where %d (%d) was due", seed, got, len(p), next, sizes[next])
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
			t.Fatalf("seed %d: stalled (held %v)", seed, ahead.held())
		}
		ahead.release()
		cli.Close()
		srv.Close()
	}
}
