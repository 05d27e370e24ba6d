package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Metrics are the Prometheus metrics of one process. Handlers registered on
// a Router with Metrics set are measured: duration and result per handler,
// messages in flight, and each durable consumer's backlog.
type Metrics struct {
	Registry *prometheus.Registry

	handled  *prometheus.CounterVec
	junk     *prometheus.CounterVec
	full     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
	pending  *prometheus.GaugeVec
	ackPend  *prometheus.GaugeVec

	mu        sync.Mutex
	consumers map[string]consumerRef

	// starting: Start has not connected and ensured the streams yet, so
	// /healthz answers 503 even once the connection is up.
	starting atomic.Bool
}

type consumerRef struct{ stream, durable string }

// NewMetrics creates a registry with Go runtime and process collectors and
// the bus metrics.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: r,
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "medgym_messages_handled_total",
			Help: "Messages handled, by handler and result (ack, retry, dead, junk)."}, []string{"handler", "result"}),
		junk: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "medgym_messages_junk_total",
			Help: "Messages no handler could ever use (undecodable, invalid, unknown run or episode, unusable dead letter): acked and dropped, never dead-lettered."},
			[]string{"handler", "reason"}),
		full: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "medgym_jetstream_storage_full_total",
			Help: "Handler attempts refused because JetStream's store is full (insufficient resources, no space left); the handler retries in place with a backoff."},
			[]string{"handler"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "medgym_handler_duration_seconds",
			Help:    "Time to handle one message (an LLM step, a sandbox action, a scoring).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12)}, []string{"handler"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "medgym_messages_in_flight",
			Help: "Messages being handled now."}, []string{"handler"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "medgym_queue_depth",
			Help: "Messages waiting on a durable consumer (not yet delivered)."}, []string{"stream", "consumer"}),
		ackPend: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "medgym_queue_unacked",
			Help: "Messages delivered and not yet acked on a durable consumer."}, []string{"stream", "consumer"}),
		consumers: map[string]consumerRef{},
	}
	r.MustRegister(m.handled, m.junk, m.full, m.duration, m.inflight, m.pending, m.ackPend)
	return m
}

func (m *Metrics) observe(handler string, d time.Duration, err error) {
	if m == nil {
		return
	}
	res := "ack"
	switch {
	case IsJunk(err):
		res = "junk"
	case IsPermanent(err):
		res = "dead"
	case err != nil:
		res = "retry"
	}
	m.handled.WithLabelValues(handler, res).Inc()
	m.duration.WithLabelValues(handler).Observe(d.Seconds())
}

func (m *Metrics) countJunk(handler, reason string) {
	if m == nil {
		return
	}
	m.junk.WithLabelValues(handler, reason).Inc()
}

func (m *Metrics) countStorageFull(handler string) {
	if m == nil {
		return
	}
	m.full.WithLabelValues(handler).Inc()
}

// StorageFull counts the attempts of a handler JetStream refused for a full
// store (medgym_jetstream_storage_full_total{handler}).
func (m *Metrics) StorageFull(handler string) float64 {
	if m == nil {
		return 0
	}
	var out dto.Metric
	if err := m.full.WithLabelValues(handler).Write(&out); err != nil {
		return 0
	}
	return out.GetCounter().GetValue()
}

// Junk counts the junk a handler dropped for reason (see Junk). It is what
// medgym_messages_junk_total{handler,reason} exports.
func (m *Metrics) Junk(handler, reason string) float64 {
	if m == nil {
		return 0
	}
	var out dto.Metric
	if err := m.junk.WithLabelValues(handler, reason).Write(&out); err != nil {
		return 0
	}
	return out.GetCounter().GetValue()
}

func (m *Metrics) track(stream, durable string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.consumers[stream+"/"+durable] = consumerRef{stream, durable}
	m.mu.Unlock()
}

// poll refreshes the backlog gauges from the server.
func (m *Metrics) poll(ctx context.Context, conn *Conn) {
	m.mu.Lock()
	refs := make([]consumerRef, 0, len(m.consumers))
	for _, c := range m.consumers {
		refs = append(refs, c)
	}
	m.mu.Unlock()
	for _, c := range refs {
		info, err := consumerInfo(ctx, conn, c)
		if err != nil {
			continue
		}
		m.pending.WithLabelValues(c.stream, c.durable).Set(float64(info.NumPending))
		m.ackPend.WithLabelValues(c.stream, c.durable).Set(float64(info.NumAckPending))
	}
}

// Serve serves /metrics and /healthz on addr until ctx is done. /healthz
// answers 200 while the NATS connection is up, 503 otherwise (and while
// Start is still waiting for its first server or creating the streams). An empty
// addr serves nothing.
func (m *Metrics) Serve(ctx context.Context, addr string, conn *Conn, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if conn.nc == nil || !conn.nc.IsConnected() {
			http.Error(w, "nats: not connected", http.StatusServiceUnavailable)
			return
		}
		if m.starting.Load() {
			http.Error(w, "starting: streams and buckets not ensured yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
				return
			case <-t.C:
				m.poll(ctx, conn)
			}
		}
	}()
	log.Info("metrics and health", "addr", ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	return nil
}

// consumerInfo reads c's state, bounded by requestTimeout: a poll must
// not wait on a reply lost with the connection.
func consumerInfo(ctx context.Context, conn *Conn, c consumerRef) (*jetstream.ConsumerInfo, error) {
	ctx, cancel := bounded(ctx, requestTimeout)
	defer cancel()
	cons, err := conn.js.Consumer(ctx, c.stream, c.durable)
	if err != nil {
		return nil, err
	}
	return cons.Info(ctx)
}
