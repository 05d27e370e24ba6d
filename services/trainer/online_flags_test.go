package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/schemas"
)

// TestOnlineReplicasOnCluster: `trainer online` takes the contract every
// service does, --nats with a cluster's seed URLs (overriding the config
// file's nats) and --replicas N, and when it is the first process on a
// cluster the streams it creates have N replicas. The config's own URL
// points nowhere, so reaching the cluster at all proves --nats won.
func TestOnlineReplicasOnCluster(t *testing.T) {
	_, seeds := bustest.StartCluster(t, 3)
	path := onlineConfig(t, "nats://127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var stderr bytes.Buffer
	err := run(ctx, []string{"online", "--config", path, "--nats", seeds, "--replicas", "3", "--connect-timeout", "30s"}, &bytes.Buffer{}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "tls-it0000") || !strings.Contains(err.Error(), "scores") {
		t.Fatalf("err = %v, want the iteration's run waiting for its scores\n%s", err, stderr.String())
	}
	conn, err := bus.Connect(ctx, seeds, "replicas-check", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, stream := range []string{schemas.StreamEpisodes, schemas.StreamScores, schemas.StreamPolicy} {
		p, err := conn.StreamPlacement(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if p.Replicas != 3 || p.Cluster != "medgym" {
			t.Errorf("stream %s: %d replicas on cluster %q, want 3 on medgym", stream, p.Replicas, p.Cluster)
		}
	}
}

// TestOnlineReplicasRefused: a replica count out of range, from the flag
// or MEDGYM_REPLICAS, is a clear error before anything connects.
func TestOnlineReplicasRefused(t *testing.T) {
	path := onlineConfig(t, "nats://127.0.0.1:1")
	err := run(t.Context(), []string{"online", "--config", path, "--replicas", "9"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "from 1 to 5") {
		t.Errorf("--replicas 9: err = %v, want the range named", err)
	}
	t.Setenv("MEDGYM_REPLICAS", "three")
	err = run(t.Context(), []string{"online", "--config", path}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "MEDGYM_REPLICAS") {
		t.Errorf("MEDGYM_REPLICAS=three: err = %v, want the variable named", err)
	}
}
