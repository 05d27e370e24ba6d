package systemtest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/schemas"
)

// TestDeployNATSInboxes runs nats-server with deploy/nats's config and has
// the client user listen for other users' replies while the dispatcher
// reads: a key (a direct get's answer), the keys of its bucket (an ordered
// push consumer's deliveries), a blob the verifier wrote (its meta and its
// chunks) and a score from its durable (a pull delivery). Every answer travels to an inbox in MEDGYM_USERS, under the
// requester's prefix (_INBOX.<user>.); the client may subscribe to its own
// only: every inbox, every subject, any user's by wildcard or the
// dispatcher's by name are refused, and so is the client that takes the
// dispatcher's prefix for its own inboxes. Nothing of the dispatcher's
// reaches the client, while the services' own requests, pull deliveries
// and ordered consumers work.
func TestDeployNATSInboxes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, pw := startDeployNATS(t, false)
	log := slog.New(slog.NewTextHandler(&syncBuffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conns := provisionAndConnect(t, ctx, url, pw, log, "dispatcher", "verifier")
	client, err := bustest.DialRaw(url, "client", pw["client"].Password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)

	// The impostor: the client's user with the dispatcher's inbox prefix.
	impostor, err := bustest.DialRawInbox(url, "client", pw["client"].Password, bus.InboxPrefix("dispatcher"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(impostor.Close)

	const marker = "secret-7f3a"
	var captures []func() []string
	listen := func(nc *bustest.Raw, subjects ...string) {
		t.Helper()
		for _, subject := range subjects {
			got, err := nc.Capture(subject)
			if err != nil {
				t.Fatalf("subscribe %s: %v", subject, err)
			}
			captures = append(captures, got)
			if err := refusal(nc, subject); err != nil {
				t.Fatal(err)
			}
		}
	}
	listen(client, "_INBOX.>", ">", "_INBOX.*.>", "_INBOX.dispatcher.>", "_INBOX.*.*.*", "_INBOX.*.*.*.*", "_INBOX.dispatcher.*.*")
	listen(impostor, bus.InboxPrefix("dispatcher")+".*.*")
	// Its request subscribes to an inbox under the prefix first: refused,
	// so the answer finds no one; closing the connection ends the wait.
	answered := make(chan error, 1)
	go func() {
		_, err := impostor.Request("$JS.API.INFO", nil, time.Minute)
		answered <- err
	}()
	if err := refusalUnder(impostor, bus.InboxPrefix("dispatcher")+"."); err != nil {
		t.Fatal(err)
	}
	impostor.Close()
	if err := <-answered; err == nil {
		t.Fatal("a client with the dispatcher's inbox prefix was answered")
	}

	done, err := bus.OpenBucket[[]byte](ctx, conns["dispatcher"], schemas.BucketCompletions)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := done.Put(ctx, "run-"+marker, []byte("bitmap "+marker)); err != nil {
		t.Fatal(err)
	}
	if v, _, err := done.Get(ctx, "run-"+marker); err != nil || !bytes.Contains(v, []byte(marker)) {
		t.Fatalf("the dispatcher's own key: %q, %v", v, err)
	}
	if keys, err := done.Keys(ctx); err != nil || len(keys) == 0 {
		t.Fatalf("the dispatcher's keys: %v, %v", keys, err)
	}
	blob := bytes.Repeat([]byte(marker+" "), 1<<17)
	if err := conns["verifier"].PutBlob(ctx, "inbox-"+marker, blob); err != nil {
		t.Fatal(err)
	}
	if b, err := conns["dispatcher"].GetBlobIn(ctx, conns["verifier"].BlobBucket(), "inbox-"+marker); err != nil || !bytes.Equal(b, blob) {
		t.Fatalf("the dispatcher's blob read: %v (%d bytes of %d)", err, len(b), len(blob))
	}

	// A pull delivery: a score the verifier published, fetched from the
	// dispatcher's durable by a pull request of the dispatcher's.
	run := "r-" + marker
	if err := conns["verifier"].Publish(ctx, schemas.EpisodeScored.For(run), "s-"+marker, schemas.Score{RunID: run, EpisodeID: run + "--e1", Outcome: schemas.OutcomeIncorrect}); err != nil {
		t.Fatal(err)
	}
	puller, err := bustest.DialRaw(url, "dispatcher", pw["dispatcher"].Password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(puller.Close)
	if m, err := puller.Request("$JS.API.CONSUMER.MSG.NEXT."+schemas.StreamScores+"."+schemas.DurableDispatcherScores, []byte(`{"batch":1}`), 10*time.Second); err != nil || !bytes.Contains(m, []byte(marker)) {
		t.Fatalf("the dispatcher's pull: %q, %v", m, err)
	}

	// The client's own request, answered after all of the above: what was
	// sent to the client before it has been read.
	if _, err := client.Request("$JS.API.INFO", nil, 10*time.Second); err != nil {
		t.Fatalf("the client's own request: %v", err)
	}
	for _, got := range captures {
		for _, m := range got() {
			if strings.Contains(m, marker) {
				t.Fatalf("the client read the dispatcher's traffic: %.200s", m)
			}
		}
	}
}

// refusal waits for the server's refusal of a subscription to subject on
// nc (a permissions violation arrives asynchronously).
func refusal(nc *bustest.Raw, subject string) error {
	return refusalOf(nc, fmt.Sprintf("subscription to %q", subject))
}

// refusalUnder waits for the refusal of a subscription to a subject that
// begins with prefix.
func refusalUnder(nc *bustest.Raw, prefix string) error {
	return refusalOf(nc, fmt.Sprintf("subscription to %q", prefix)[:len("subscription to \"")+len(prefix)])
}

func refusalOf(nc *bustest.Raw, want string) error {
	for {
		select {
		case err := <-nc.Errors():
			if strings.Contains(strings.ToLower(err.Error()), strings.ToLower(want)) {
				return nil
			}
		case <-time.After(10 * time.Second):
			return fmt.Errorf("the server did not refuse a %s", want)
		}
	}
}

// TestDeployNATSInboxesPerUser: the deploy config with a second client
// user, alice, added as deploy/nats's comments say (a copy of CLIENT whose
// subscribe permission names her own prefix). Her inboxes are
// _INBOX.alice., the client's _INBOX.client.: each reads its own answers
// (a medgym connection as alice verifies the streams), and neither may
// listen under the other's prefix nor receives the other's answers.
func TestDeployNATSInboxesPerUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	edit := func(file, text string) string {
		switch file {
		case "auth.conf":
			client := regexp.MustCompile(`(?m)^(\s*)\{ user: client,.*$`)
			if !client.MatchString(text) {
				t.Fatal("deploy/nats/auth.conf has no client user to add alice beside")
			}
			return client.ReplaceAllString(text, "$0\n${1}{ user: alice, password: $$MEDGYM_NATS_PASSWORD_ALICE, permissions: $$ALICE }")
		case "permissions.conf":
			block := regexp.MustCompile(`(?s)\nCLIENT = \{.*?\n\}\n`).FindString(text)
			if !strings.Contains(block, `"_INBOX.client.>"`) {
				t.Fatalf("deploy/nats/permissions.conf's CLIENT does not subscribe to _INBOX.client.>: %q", block)
			}
			alice := strings.Replace(strings.Replace(block, "CLIENT = {", "ALICE = {", 1), `"_INBOX.client.>"`, `"_INBOX.alice.>"`, 1)
			return text + alice
		}
		return text
	}
	url, pw := startDeployNATSEdited(t, false, edit, map[string]string{"alice": "MEDGYM_NATS_PASSWORD_ALICE"})
	log := slog.New(slog.NewTextHandler(&syncBuffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	provisionAndConnect(t, ctx, url, pw, log)
	raws := map[string]*bustest.Raw{}
	for _, u := range []string{"client", "alice"} {
		nc, err := bustest.DialRaw(url, u, pw[u].Password)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		t.Cleanup(nc.Close)
		raws[u] = nc
	}
	for user, other := range map[string]string{"client": "alice", "alice": "client"} {
		got, err := raws[user].Capture(bus.InboxPrefix(other) + ".>")
		if err != nil {
			t.Fatal(err)
		}
		if err := refusal(raws[user], bus.InboxPrefix(other)+".>"); err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		// The other's request, then the user's own: the user has read all
		// that was sent to it before its own answer.
		if _, err := raws[other].Request("$JS.API.STREAM.INFO."+schemas.StreamScores, nil, 10*time.Second); err != nil {
			t.Fatalf("%s's own request: %v", other, err)
		}
		if _, err := raws[user].Request("$JS.API.INFO", nil, 10*time.Second); err != nil {
			t.Fatalf("%s's own request: %v", user, err)
		}
		if m := got(); len(m) != 0 {
			t.Fatalf("%s read %s's answers: %.200q", user, other, m)
		}
	}
	// alice's medgym connection: its requests are answered under her prefix.
	conn := connectAs(t, ctx, url, "alice", pw["alice"], log)
	if err := bus.PrepareStreams(ctx, conn, bus.StreamOptions{}); err != nil {
		t.Fatalf("alice: verify streams: %v", err)
	}
}

// TestDeployNATSDeadLettersUnderOwnInbox: the max-deliveries advisory
// still reaches the dispatcher (a stream import), which reads the message
// it names and dead-letters it, its requests answered under its prefix.
// The durable, the fetches and the naks are admin's.
func TestDeployNATSDeadLettersUnderOwnInbox(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, pw := startDeployNATS(t, false)
	log := slog.New(slog.NewTextHandler(&syncBuffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conns := provisionAndConnect(t, ctx, url, pw, log, "dispatcher", "verifier")
	stop, err := bus.WatchMaxDeliveries(ctx, conns["dispatcher"], log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	cons, err := bus.EnsureConsumer(ctx, conns["admin"], bus.ConsumerOptions{Stream: schemas.StreamScores, Durable: "giveup",
		Subject: schemas.EpisodeScored, MaxDeliver: 2, AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	before := streamMsgsOf(t, ctx, conns["admin"], schemas.StreamDeadLetter)
	if err := conns["verifier"].Publish(ctx, schemas.EpisodeScored.For("r1"), "giveup-e1", schemas.Score{RunID: "r1", EpisodeID: "r1--e1", Outcome: schemas.OutcomeIncorrect}); err != nil {
		t.Fatal(err)
	}
	if err := bustest.NakUntilGivenUp(cons, 2); err != nil {
		t.Fatal(err)
	}
	for streamMsgsOf(t, ctx, conns["admin"], schemas.StreamDeadLetter) == before {
		select {
		case <-ctx.Done():
			t.Fatal("the dispatcher dead-lettered nothing after the max-deliveries advisory")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
