package bus_test

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/schemas"
)

// TestProvisionModeFromCredentials: auto creates without credentials and
// verifies with them (options or a user in the URL); --provision and
// MEDGYM_PROVISION force either, and a bad value is an error.
func TestProvisionModeFromCredentials(t *testing.T) {
	url := bustest.StartJetStream(t)
	ctx := t.Context()
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		name string
		url  string
		opts []bus.ConnectOption
		want bool
	}{
		{"no credentials", url, nil, true},
		{"forced verify", url, []bus.ConnectOption{bus.WithProvision(bus.ProvisionVerify)}, false},
		{"user in the URL", strings.Replace(url, "nats://", "nats://u:p@", 1), nil, false},
		{"user in the URL, forced create", strings.Replace(url, "nats://", "nats://u:p@", 1), []bus.ConnectOption{bus.WithProvision(bus.ProvisionCreate)}, true},
	} {
		conn, err := bus.Connect(ctx, c.url, "mode", log, c.opts...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if conn.Creates() != c.want {
			t.Errorf("%s: creates %v, want %v", c.name, conn.Creates(), c.want)
		}
		conn.Close()
	}
	var sf bus.StartFlags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	sf.RegisterFlags(fs, func(k string) string {
		if k == bus.EnvProvision {
			return "sometimes"
		}
		return ""
	})
	if _, err := sf.Options(); err == nil || !strings.Contains(err.Error(), bus.EnvProvision) {
		t.Errorf("MEDGYM_PROVISION=sometimes: %v, want an error naming it", err)
	}
	if err := fs.Parse([]string{"--provision", "verify"}); err != nil || sf.Provision != bus.ProvisionVerify {
		t.Errorf("--provision verify: %v, %q", err, sf.Provision)
	}
	if _, err := sf.Options(); err != nil {
		t.Errorf("the flag replaces a bad environment value: %v", err)
	}
}

// TestVerifyFindsWhatProvisionDidNot: a verifying connection creates
// nothing and names what is missing; after Provision it passes; then each
// change an attacker with stream or consumer rights could have made (a
// source with a subject transform, max_msgs 1, an expiring bucket, a
// sealed stream, a deleted or paused durable) makes it fail, naming the
// stream or consumer, and a verifying handler refuses to start on it.
func TestVerifyFindsWhatProvisionDidNot(t *testing.T) {
	url := bustest.StartJetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	conn, err := bus.Connect(ctx, url, "verify", log, bus.WithProvision(bus.ProvisionVerify))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = bus.PrepareStreams(ctx, conn, bus.StreamOptions{})
	if !errors.Is(err, bus.ErrNotProvisioned) || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "medgym nats provision") {
		t.Fatalf("verify before provisioning: %v", err)
	}
	if _, err := bus.JetStream(conn).Stream(ctx, schemas.StreamScores); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("verifying created %s (%v)", schemas.StreamScores, err)
	}
	if err := bus.Provision(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if err := bus.Verify(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatalf("verify after provisioning: %v", err)
	}
	js := bus.JetStream(conn)
	scores, err := js.Stream(ctx, schemas.StreamScores)
	if err != nil {
		t.Fatal(err)
	}
	good := scores.CachedInfo().Config
	runsKV, err := js.Stream(ctx, "KV_"+schemas.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	goodKV := runsKV.CachedInfo().Config
	for _, c := range []struct {
		name, want string
		change     func() error
		restore    func() error
	}{
		{"forge: a source with a subject transform", "sources", func() error {
			cfg := good
			cfg.Sources = []*jetstream.StreamSource{{Name: schemas.StreamRuns,
				SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: "medgym.run.submitted.forge.*", Destination: "medgym.episode.scored.{{wildcard(1)}}"}}}}
			_, err := js.UpdateStream(ctx, cfg)
			return err
		}, func() error { _, err := js.UpdateStream(ctx, good); return err }},
		{"max_msgs 1", schemas.StreamScores, func() error {
			cfg := good
			cfg.MaxMsgs = 1
			_, err := js.UpdateStream(ctx, cfg)
			return err
		}, func() error { _, err := js.UpdateStream(ctx, good); return err }},
		{"an expiring run bucket", "KV_" + schemas.BucketRuns, func() error {
			cfg := goodKV
			cfg.MaxAge, cfg.Duplicates = time.Second, time.Second
			_, err := js.UpdateStream(ctx, cfg)
			return err
		}, func() error { _, err := js.UpdateStream(ctx, goodKV); return err }},
		{"expiring stored-episode claims", "KV_" + schemas.BucketStored, func() error {
			s, err := js.Stream(ctx, "KV_"+schemas.BucketStored)
			if err != nil {
				return err
			}
			cfg := s.CachedInfo().Config
			cfg.MaxAge, cfg.Duplicates = time.Second, time.Second
			_, err = js.UpdateStream(ctx, cfg)
			return err
		}, func() error { return bus.Provision(ctx, conn, bus.StreamOptions{}) }},
		{"a deleted durable", schemas.DurableDispatcherScores, func() error {
			return js.DeleteConsumer(ctx, schemas.StreamScores, schemas.DurableDispatcherScores)
		}, func() error { return bus.Provision(ctx, conn, bus.StreamOptions{}) }},
		{"a paused durable", "paused", func() error {
			_, err := js.PauseConsumer(ctx, schemas.StreamScores, schemas.DurableDispatcherScores, time.Now().Add(time.Hour))
			return err
		}, func() error {
			_, err := js.ResumeConsumer(ctx, schemas.StreamScores, schemas.DurableDispatcherScores)
			return err
		}},
		{"bounded deliveries of the dispatcher's scores", "deliveries", func() error {
			cons, err := js.Consumer(ctx, schemas.StreamScores, schemas.DurableDispatcherScores)
			if err != nil {
				return err
			}
			cfg := cons.CachedInfo().Config
			cfg.MaxDeliver = 5
			_, err = js.UpdateConsumer(ctx, schemas.StreamScores, cfg)
			return err
		}, func() error { return bus.Provision(ctx, conn, bus.StreamOptions{}) }},
		{"sealed", "sealed", func() error {
			cfg := good
			cfg.Sealed = true
			_, err := js.UpdateStream(ctx, cfg)
			return err
		}, nil},
	} {
		if err := c.change(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		err := bus.Verify(ctx, conn, bus.StreamOptions{})
		if !errors.Is(err, bus.ErrNotProvisioned) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: verify says %v, want ErrNotProvisioned naming %q", c.name, err, c.want)
		}
		if c.name == "a deleted durable" {
			rt, err := bus.NewRouter(conn, log)
			if err != nil {
				t.Fatal(err)
			}
			err = bus.Handle(rt, "scores", bus.HandlerOptions{ConsumerOptions: bus.ConsumerOptions{Stream: schemas.StreamScores,
				Durable: schemas.DurableDispatcherScores, Subject: schemas.EpisodeScored}}, func(context.Context, schemas.Score) error { return nil })
			if !errors.Is(err, bus.ErrNotProvisioned) {
				t.Errorf("a verifying handler on a deleted durable: %v, want ErrNotProvisioned", err)
			}
			if _, err := js.Consumer(ctx, schemas.StreamScores, schemas.DurableDispatcherScores); !errors.Is(err, jetstream.ErrConsumerNotFound) {
				t.Errorf("the verifying handler created the durable (%v)", err)
			}
		}
		if c.restore != nil {
			if err := c.restore(); err != nil {
				t.Fatalf("%s: restore: %v", c.name, err)
			}
			if err := bus.Verify(ctx, conn, bus.StreamOptions{}); err != nil {
				t.Fatalf("%s: restored, verify: %v", c.name, err)
			}
		}
	}
}

// TestPoisonFrom: a poison copy published on a stream's poison subject
// (the only ones a service's user may publish, for the streams it
// consumes) counts only when it names a subject of that stream, so a
// sandbox-worker cannot fail an episode by "dead-lettering" its request
// or its result; the dispatcher's own dead letters are not checked.
func TestPoisonFrom(t *testing.T) {
	poison := func(stream string) string { return schemas.DeadLetter.For(bus.PoisonKind(stream)) }
	for _, c := range []struct {
		subject, dead string
		want          bool
	}{
		{poison(schemas.StreamActions), schemas.ActionRequested.For("r1"), true},
		{poison(schemas.StreamActions), schemas.EpisodeRequested.For("r1"), false},
		{poison(schemas.StreamActions), schemas.EpisodeCompleted.For("r1"), false},
		{poison(schemas.StreamActions), "", false},
		{poison(schemas.StreamResults), schemas.EpisodeCompleted.For("r1"), true},
		{poison("NOT_A_STREAM"), schemas.ActionRequested.For("r1"), false},
		{schemas.DeadLetter.For("poison"), schemas.EpisodeRequested.For("r1"), true},
		{schemas.DeadLetter.For("maxdeliveries"), schemas.EpisodeRequested.For("r1"), true},
	} {
		if got := bus.PoisonFrom(c.subject, c.dead); got != c.want {
			t.Errorf("PoisonFrom(%s, %q) = %v, want %v", c.subject, c.dead, got, c.want)
		}
	}
}
