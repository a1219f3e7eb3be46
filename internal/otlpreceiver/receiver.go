// Package otlpreceiver is an in-process OTLP trace receiver, over HTTP
// (protobuf) and gRPC, that keeps the spans it is sent in memory: for the
// tests and the demo that follow one trace through the relay. It is not
// part of the relay's binary.
//
// Start listens on two loopback ports; Close stops both servers and joins
// their goroutines.
package otlpreceiver

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is a received span, its ids in hex.
type Span struct {
	Service      string // the resource's service.name
	Scope        string // the instrumentation scope
	Name         string
	TraceID      string
	SpanID       string
	ParentSpanID string // "" for a root span
	Kind         int32  // OTLP's SpanKind: 4 producer, 5 consumer
	Start, End   time.Time
	Attributes   map[string]string // every value as text
	Error        string            // the status message of a span whose status is error
}

// Receiver keeps the spans sent to HTTPURL or GRPCURL.
type Receiver struct {
	HTTPURL string // http://127.0.0.1:port, for tracing.otlp_endpoint (http/protobuf)
	GRPCURL string // http://127.0.0.1:port, for tracing.otlp_endpoint with otlp_protocol grpc

	mu    sync.Mutex
	spans []Span

	httpSrv *http.Server
	grpcSrv *grpc.Server
	served  sync.WaitGroup
}

// Start starts both servers on loopback ports.
func Start() (*Receiver, error) {
	r := &Receiver{}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen otlp http: %w", err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		hl.Close()
		return nil, fmt.Errorf("listen otlp grpc: %w", err)
	}
	r.HTTPURL, r.GRPCURL = "http://"+hl.Addr().String(), "http://"+gl.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serveHTTP)
	r.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	r.grpcSrv = grpc.NewServer()
	collector.RegisterTraceServiceServer(r.grpcSrv, traceService{r: r})
	r.served.Add(2)
	go func() { defer r.served.Done(); _ = r.httpSrv.Serve(hl) }()
	go func() { defer r.served.Done(); _ = r.grpcSrv.Serve(gl) }()
	return r, nil
}

// Close stops both servers (within 5 s) and joins them.
func (r *Receiver) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.httpSrv.Shutdown(ctx)
	stopped := make(chan struct{})
	go func() { r.grpcSrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		r.grpcSrv.Stop()
		<-stopped
	}
	r.served.Wait()
}

// Spans returns the spans received so far, in the order received.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in collector.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.take(&in)
	out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

type traceService struct {
	collector.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(_ context.Context, in *collector.ExportTraceServiceRequest) (*collector.ExportTraceServiceResponse, error) {
	if in == nil {
		return nil, errors.New("no request")
	}
	s.r.take(in)
	return &collector.ExportTraceServiceResponse{}, nil
}

// take keeps the spans of in.
func (r *Receiver) take(in *collector.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range in.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s := Span{Service: service, Scope: ss.GetScope().GetName(), Name: sp.GetName(),
					TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					Kind:  int32(sp.GetKind()),
					Start: time.Unix(0, int64(sp.GetStartTimeUnixNano())), End: time.Unix(0, int64(sp.GetEndTimeUnixNano())),
					Attributes: attrs(sp.GetAttributes())}
				if p := sp.GetParentSpanId(); len(p) > 0 {
					s.ParentSpanID = hex.EncodeToString(p)
				}
				if sp.GetStatus().GetCode() == 2 { // STATUS_CODE_ERROR
					s.Error = sp.GetStatus().GetMessage()
				}
				got = append(got, s)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
}

// attrs renders OTLP attributes as text.
func attrs(kvs []*common.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *common.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *common.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(x.IntValue, 10)
		case *common.AnyValue_BoolValue:
			m[kv.GetKey()] = strconv.FormatBool(x.BoolValue)
		case *common.AnyValue_DoubleValue:
			m[kv.GetKey()] = strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}
