package binlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/klauspost/compress/zstd"
)

// MySQL's compressed transactions (binlog_transaction_compression): one
// Transaction_payload event holds a transaction's events, zstd-compressed.
// The packet bound (loginguard.go) counts the compressed bytes; what they
// inflate to is bounded here, by the same bound: a compressed transaction
// is held in memory whole, decompressed and decoded, as one event of that
// size would be. The event declares its uncompressed size; the relay
// refuses a declared size over the bound before decompressing anything,
// decompresses into a buffer of the declared size and no more, and refuses
// a payload that produces more (or fewer) bytes than it declared. Either
// refusal stops the relay at that transaction, for good: reading it again
// would meet the same event.

var (
	// ErrPayloadBound: a compressed transaction (or a MariaDB compressed
	// rows event) inflates past the relay's bound (source.max_packet_bytes,
	// or the bound derived from the server's max_allowed_packet). Fatal: the same transaction comes
	// back. Fix: raise source.max_packet_bytes (the relay holds the
	// transaction in memory, decompressed, whole), or log such
	// transactions uncompressed (SET binlog_transaction_compression=OFF
	// in the session that writes them).
	ErrPayloadBound = errors.New("compressed binlog event inflates past the relay's bound")
	// ErrPayloadCorrupt: a compressed transaction is not what it declares
	// (its zstd data is invalid, it inflates to another size than the one
	// it declares, its events run past it, or it names a compression the
	// relay does not read). Fatal: the same transaction comes back.
	ErrPayloadCorrupt = errors.New("compressed transaction payload is corrupt")
)

// Fields of a Transaction_payload event's header (MySQL's
// binary_log::codecs::binary::Transaction_payload): each a type, a length
// and a value, the type and length packed integers, the value a packed
// integer of that length; the header ends at type 0.
const (
	payloadFieldEnd              = 0
	payloadFieldSize             = 1
	payloadFieldCompressionType  = 2
	payloadFieldUncompressedSize = 3
	payloadCompressionZstd       = 0
)

// maxZstdWindow is the largest zstd window accepted, below the bound: the
// reference decoder's default limit (ZSTD_WINDOWLOG_LIMIT_DEFAULT, 2^27),
// the window of zstd's highest level (22), which MySQL's
// binlog_transaction_compression_level_zstd allows (its default, 3, writes
// 2 MiB windows). The window is held in memory besides the output.
const maxZstdWindow = 128 << 20

// payloadHeader is what a Transaction_payload event says of its payload.
type payloadHeader struct {
	compression  uint64
	uncompressed uint64
	declared     bool // the uncompressed size field is present
	payload      []byte
}

// readPayloadHeader reads the fields of body (the event without its
// common header and checksum).
func readPayloadHeader(body []byte) (payloadHeader, error) {
	var h payloadHeader
	compression := false
	for {
		typ, n, ok := packedInt(body)
		if !ok {
			return h, fmt.Errorf("%w: header field runs past the event", ErrPayloadCorrupt)
		}
		body = body[n:]
		if typ == payloadFieldEnd {
			break
		}
		length, n, ok := packedInt(body)
		if !ok || uint64(len(body)-n) < length {
			return h, fmt.Errorf("%w: header field %d runs past the event", ErrPayloadCorrupt, typ)
		}
		value := body[n : n+int(length)]
		body = body[n+int(length):]
		if typ != payloadFieldCompressionType && typ != payloadFieldUncompressedSize {
			continue // the payload's size, and fields later versions may add
		}
		v, m, ok := packedInt(value)
		if !ok || m != len(value) {
			return h, fmt.Errorf("%w: header field %d is not one packed integer", ErrPayloadCorrupt, typ)
		}
		if typ == payloadFieldCompressionType {
			h.compression, compression = v, true
		} else {
			h.uncompressed, h.declared = v, true
		}
	}
	if !compression {
		return h, fmt.Errorf("%w: no compression type", ErrPayloadCorrupt)
	}
	h.payload = body
	return h, nil
}

// packedInt reads a MySQL packed (length-encoded) integer.
func packedInt(b []byte) (v uint64, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	switch b[0] {
	case 0xfc:
		n = 3
	case 0xfd:
		n = 4
	case 0xfe:
		n = 9
	case 0xfb, 0xff:
		return 0, 0, false
	default:
		return uint64(b[0]), 1, true
	}
	if len(b) < n {
		return 0, 0, false
	}
	for i := n - 1; i >= 1; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, n, true
}

// payload decodes a Transaction_payload event within the bound, into the
// TransactionPayloadEvent go-mysql would have made (its events decoded
// with the stream's options, the GTID set on its XID or Query event).
func (ep *eventParser) payload(ev *replication.BinlogEvent) (*replication.BinlogEvent, error) {
	h := ev.Header
	fail := func(err error) (*replication.BinlogEvent, error) { return nil, eventError(h, ev.RawData, err) }
	if ep.fde == nil {
		return fail(fmt.Errorf("%w: before any format description event", ErrPayloadCorrupt))
	}
	body := ev.RawData[replication.EventHeaderSize:]
	if ep.checksum {
		if len(body) < replication.BinlogChecksumLength {
			return fail(fmt.Errorf("%w: shorter than its checksum", ErrPayloadCorrupt))
		}
		body = body[:len(body)-replication.BinlogChecksumLength]
	}
	ph, err := readPayloadHeader(body)
	if err != nil {
		return fail(err)
	}
	if ph.compression != payloadCompressionZstd {
		return fail(fmt.Errorf("%w: compression type %d: the relay reads zstd (0) only", ErrPayloadCorrupt, ph.compression))
	}
	limit, how := ep.limit()
	if ph.declared && ph.uncompressed > uint64(limit) {
		return fail(fmt.Errorf("%w: it declares %d bytes uncompressed, over the bound of %d (%s): raise source.max_packet_bytes "+
			"and the memory limit together (the relay holds a compressed transaction whole, decompressed), or write such "+
			"transactions with binlog_transaction_compression=OFF", ErrPayloadBound, ph.uncompressed, limit, how))
	}
	if ep.inflater == nil {
		ep.inflater = &inflater{}
	}
	plain, err := ep.inflater.inflate(ph, limit, how)
	if err != nil {
		return fail(err)
	}
	inner, err := ep.innerEvents(plain)
	if err != nil {
		return fail(err)
	}
	// Positions as go-mysql gives them: the payload's start for the
	// events inside, its end for the last (resuming there skips the
	// transaction).
	if h.LogPos >= h.EventSize {
		for _, e := range inner {
			e.Header.LogPos = h.LogPos - h.EventSize
		}
		if len(inner) > 0 {
			inner[len(inner)-1].Header.LogPos = h.LogPos
		}
	}
	return &replication.BinlogEvent{RawData: ev.RawData, Header: h, Event: &replication.TransactionPayloadEvent{
		Size: uint64(len(ph.payload)), UncompressedSize: uint64(len(plain)), CompressionType: ph.compression,
		Payload: ph.payload, Events: inner,
	}}, nil
}

// innerEvents decodes the events of a decompressed payload, with a parser
// of their own (they carry no checksum; their table ids are the
// payload's).
func (ep *eventParser) innerEvents(plain []byte) ([]*replication.BinlogEvent, error) {
	p := ep.newParser(rowsDecoder(ep.captured, ep.limit))
	fde := append([]byte(nil), ep.fde...)
	if ep.checksum {
		// the events inside carry no checksum: the format description says so
		fde[len(fde)-replication.BinlogChecksumLength-1] = byte(replication.BINLOG_CHECKSUM_ALG_OFF)
	}
	if _, err := p.Parse(fde); err != nil {
		return nil, fmt.Errorf("%w: format description for its events: %v", ErrPayloadCorrupt, err)
	}
	var out []*replication.BinlogEvent
	for off := 0; off < len(plain); {
		n, ok := eventLength(plain[off:])
		if !ok || n < replication.EventHeaderSize || n > len(plain)-off {
			return nil, fmt.Errorf("%w: an event at offset %d of its %d bytes runs past them", ErrPayloadCorrupt, off, len(plain))
		}
		e, err := ep.decode(p, plain[off:off+n])
		if err != nil {
			return nil, fmt.Errorf("event at offset %d of its payload: %w", off, err)
		}
		if err := ep.track(e); err != nil {
			return nil, err
		}
		out = append(out, e)
		off += n
	}
	return out, nil
}

// inflater decompresses payloads; its decoder is reused while the window
// bound stays.
type inflater struct {
	dec    *zstd.Decoder
	window uint64
}

// inflate decompresses ph's payload: into a buffer of its declared size,
// refusing more or fewer bytes; without a declared size, into a buffer
// that grows up to limit. The zstd window may be at most limit, and
// maxZstdWindow.
func (f *inflater) inflate(ph payloadHeader, limit int64, how string) ([]byte, error) {
	src := bytes.NewReader(ph.payload)
	zerr := func(err error) error {
		if errors.Is(err, zstd.ErrWindowSizeExceeded) {
			return fmt.Errorf("%w: its zstd window is larger than %d bytes (the bound: %s; or zstd's largest window): raise "+
				"source.max_packet_bytes and the memory limit together, or lower binlog_transaction_compression_level_zstd",
				ErrPayloadBound, f.window, how)
		}
		return fmt.Errorf("%w: zstd: %v", ErrPayloadCorrupt, err)
	}
	if window := min(uint64(limit), maxZstdWindow); f.dec == nil || f.window != window {
		if f.dec != nil {
			f.dec.Close()
		}
		dec, err := zstd.NewReader(src, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(window))
		if err != nil {
			return nil, zerr(err)
		}
		f.dec, f.window = dec, window
	} else if err := f.dec.Reset(src); err != nil {
		return nil, zerr(err)
	}
	if !ph.declared {
		out, err := io.ReadAll(io.LimitReader(f.dec, limit+1))
		switch {
		case err != nil:
			return nil, zerr(err)
		case int64(len(out)) > limit:
			return nil, fmt.Errorf("%w: it inflates past the bound of %d bytes (%s), declaring no size: raise source.max_packet_bytes "+
				"and the memory limit together, or write such transactions with binlog_transaction_compression=OFF", ErrPayloadBound, limit, how)
		}
		return out, nil
	}
	out := make([]byte, ph.uncompressed)
	if n, err := io.ReadFull(f.dec, out); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: it inflates to %d bytes, not the %d it declares", ErrPayloadCorrupt, n, ph.uncompressed)
		}
		return nil, zerr(err)
	}
	var one [1]byte
	switch n, err := f.dec.Read(one[:]); {
	case n > 0:
		return nil, fmt.Errorf("%w: it inflates past the %d bytes it declares", ErrPayloadCorrupt, ph.uncompressed)
	case err != nil && !errors.Is(err, io.EOF):
		return nil, zerr(err)
	}
	return out, nil
}

// appliedBound is a packet bound and where it comes from.
type appliedBound struct {
	limit int64
	how   string
}

// packetBound is the bound the guard applied to its last connection,
// maxPacketCap before any.
func (lg *loginGuard) packetBound() (int64, string) {
	if b := lg.applied.Load(); b != nil {
		return b.limit, b.how
	}
	return maxPacketCap, "the relay's cap"
}
