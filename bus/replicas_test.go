package bus_test

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/schemas"
)

// allStreams are the streams behind every stream and bucket EnsureStreams
// creates.
func allStreams() []string {
	var names []string
	for name := range schemas.StreamSubjects {
		names = append(names, name)
	}
	for _, b := range []string{schemas.BucketRuns, schemas.BucketEpisodes, schemas.BucketCompletions} {
		names = append(names, "KV_"+b)
	}
	return append(names, "OBJ_"+schemas.BucketBlobs)
}

// TestReplicasOnCluster (issue 17): on a 3-node JetStream cluster, reached
// through three seed URLs, the first process creates every stream, bucket
// and consumer with --replicas 3; a later process started without it (R1)
// keeps them at R3; publishing rides through the loss of a stream's leader.
func TestReplicasOnCluster(t *testing.T) {
	servers, seeds := bustest.StartCluster(t, 3)
	if strings.Count(seeds, ",") != 2 {
		t.Fatalf("seeds %q: want three URLs", seeds)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	conn, err := bus.Connect(ctx, seeds, "first", log)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	later, err := bus.Connect(ctx, seeds, "later", log)
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	if err := bus.EnsureStreams(ctx, later, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range allStreams() {
		info := streamInfo(ctx, t, conn, name)
		if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("stream %s: replicas %d, cluster %+v; want R3 with two followers", name, info.Config.Replicas, info.Cluster)
		}
	}
	cons, err := bus.EnsureConsumer(ctx, conn, bus.ConsumerOptions{Stream: schemas.StreamScores, Durable: "replicas-test", Subject: schemas.EpisodeScored})
	if err != nil {
		t.Fatal(err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.Cluster == nil || len(ci.Cluster.Replicas) != 2 {
		t.Errorf("consumer: cluster %+v; want the stream's three replicas", ci.Cluster)
	}

	// The stream's leader goes away: a publish through the seeds still lands.
	info := streamInfo(ctx, t, conn, schemas.StreamScores)
	for _, ns := range servers {
		if ns.Name() == info.Cluster.Leader {
			ns.Shutdown()
		}
	}
	err = conn.Publish(ctx, schemas.EpisodeScored.For("r1"), "after-leader-loss", score("e1"))
	for err != nil && ctx.Err() == nil {
		// JetStream elects a new leader within seconds; until then a
		// publish has no responder (the services' handlers Nak and retry).
		time.Sleep(200 * time.Millisecond)
		err = conn.Publish(ctx, schemas.EpisodeScored.For("r1"), "after-leader-loss", score("e1"))
	}
	if err != nil {
		t.Fatalf("publish after the leader's loss: %v", err)
	}
	info = streamInfo(ctx, t, conn, schemas.StreamScores)
	if info.State.Msgs != 1 || info.Cluster.Leader == "" {
		t.Errorf("after the leader's loss: %d messages, leader %q; want 1 and a new leader", info.State.Msgs, info.Cluster.Leader)
	}
}

func streamInfo(ctx context.Context, t *testing.T, conn *bus.Conn, name string) *jetstream.StreamInfo {
	t.Helper()
	s, err := bus.JetStream(conn).Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return info
}

// TestReplicasKeptOnSingleServer: a stream that exists keeps its replica
// count, whatever a later process asks for (a single server refuses R3, so
// asking for it there fails only if the process would create the stream).
func TestReplicasKeptOnSingleServer(t *testing.T) {
	url := bustest.StartJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := bus.Connect(ctx, url, "t", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Positive control: creating R3 streams on one server is refused.
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{Replicas: 3}); err == nil {
		t.Fatal("a single server created R3 streams")
	}
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	// Now they exist at R1: asking for R3 keeps them (no error, still R1).
	if err := bus.EnsureStreams(ctx, conn, bus.StreamOptions{Replicas: 3}); err != nil {
		t.Fatalf("existing streams: %v", err)
	}
	s, err := bus.JetStream(conn).Stream(ctx, schemas.StreamScores)
	if err != nil {
		t.Fatal(err)
	}
	if r := s.CachedInfo().Config.Replicas; r != 1 {
		t.Errorf("replicas %d, want 1", r)
	}
}

func TestReplicasFlagAndEnv(t *testing.T) {
	for _, c := range []struct {
		env, arg string
		want     int
		err      string
	}{
		{"", "", 0, ""},
		{"3", "", 3, ""},
		{"3", "--replicas=1", 1, ""},
		{"three", "", 0, "MEDGYM_REPLICAS"},
		{"", "--replicas=9", 0, "from 1 to 5"},
		{"", "--replicas=0", 0, "from 1 to 5"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var o bus.StreamOptions
		o.RegisterFlags(fs, oneEnv("MEDGYM_REPLICAS", c.env))
		var args []string
		if c.arg != "" {
			args = []string{c.arg}
		}
		err := fs.Parse(args)
		if err == nil {
			err = o.Validate()
		}
		switch {
		case c.err == "" && err != nil:
			t.Errorf("env %q args %q: %v", c.env, c.arg, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("env %q args %q: err %v, want %q", c.env, c.arg, err, c.err)
		case c.err == "" && o.Replicas != c.want:
			t.Errorf("env %q args %q: replicas %d, want %d", c.env, c.arg, o.Replicas, c.want)
		}
	}
}

// oneEnv is an environment holding only k=v.
func oneEnv(k, v string) func(string) string {
	return func(key string) string {
		if key == k {
			return v
		}
		return ""
	}
}
