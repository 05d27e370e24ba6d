package systemtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/schemas"
)

// deployAccountLimit reads one of the limits deploy/nats/permissions.conf
// sets for the accounts of auth.conf and auth-nkeys.conf.
func deployAccountLimit(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "nats", "permissions.conf"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*` + name + `:\s*(\d+)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("deploy/nats/permissions.conf sets no %s", name)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestDeployNATSLimits runs nats-server with deploy/nats's config and
// checks the MEDGYM account's limits hold against a client: it may create
// consumers on MEDGYM_SCORES until the stream holds max_consumers (the
// provisioned durables included) and no more, may not delete another
// follower's consumer, may open connections until the account holds
// max_connections and no more, and subscriptions until max_subscriptions.
// The limits of one stream leave the others' alone: a service still reads
// the blob store once MEDGYM_SCORES is full.
func TestDeployNATSLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, pw := startDeployNATS(t, false)
	log := slog.New(slog.NewTextHandler(&syncBuffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conns := provisionAndConnect(t, ctx, url, pw, log, "client", "trainer", "verifier")

	// The account reports the configured consumer limit.
	maxConsumers := deployAccountLimit(t, "max_consumers")
	info, err := conns["client"].Request(ctx, "$JS.API.INFO", nil)
	if err != nil {
		t.Fatal(err)
	}
	var acct struct {
		Limits struct {
			MaxConsumers int `json:"max_consumers"`
			MaxStreams   int `json:"max_streams"`
		} `json:"limits"`
	}
	if err := json.Unmarshal(info, &acct); err != nil || acct.Limits.MaxConsumers != maxConsumers {
		t.Fatalf("account info %s (%v): want max_consumers %d", info, err, maxConsumers)
	}
	if want := deployAccountLimit(t, "max_streams"); acct.Limits.MaxStreams != want {
		t.Fatalf("account max_streams %d, want %d", acct.Limits.MaxStreams, want)
	}

	// The trainer follows a run; the client may not delete its consumer.
	follower, err := bus.Follow[schemas.Score](ctx, conns["trainer"], schemas.StreamScores, schemas.EpisodeScored.For("r1"))
	if err != nil {
		t.Fatalf("trainer: follow: %v", err)
	}
	names := consumerNames(t, ctx, conns["admin"], schemas.StreamScores)
	var theirs string
	for _, n := range names {
		if !strings.HasPrefix(n, "dispatcher-") && !strings.HasPrefix(n, "env-") {
			theirs = n
		}
	}
	if theirs == "" {
		t.Fatalf("no follower consumer on %s: %v", schemas.StreamScores, names)
	}
	if _, err := conns["client"].Request(ctx, "$JS.API.CONSUMER.DELETE."+schemas.StreamScores+"."+theirs, nil); !errors.Is(err, bus.ErrRefused) {
		t.Fatalf("client deleting the trainer's consumer %s: %v, want refused", theirs, err)
	}
	score := schemas.Score{RunID: "r1", EpisodeID: "r1--e1", Outcome: schemas.OutcomeCorrect, Reward: 1}
	if err := conns["verifier"].Publish(ctx, schemas.EpisodeScored.For("r1"), "s1", score); err != nil {
		t.Fatal(err)
	}
	if m, ok, err := follower.Next(10 * time.Second); err != nil || !ok || m.Value.EpisodeID != score.EpisodeID {
		t.Fatalf("the trainer's follower after the client's delete: %+v %v %v", m, ok, err)
	}

	// Consumers: the stream fills up to the limit, then refuses.
	created := len(consumerNames(t, ctx, conns["admin"], schemas.StreamScores))
	var refusal error
	for i := 0; created < maxConsumers+1; i++ {
		name := fmt.Sprintf("flood-%d", i)
		body := fmt.Sprintf(`{"stream_name":%q,"config":{"name":%q,"filter_subject":"medgym.episode.scored.flood",`+
			`"ack_policy":"none","mem_storage":true,"inactive_threshold":60000000000}}`, schemas.StreamScores, name)
		reply, err := conns["client"].Request(ctx, "$JS.API.CONSUMER.CREATE."+schemas.StreamScores+"."+name+".medgym.episode.scored.flood", []byte(body))
		if err != nil {
			t.Fatalf("consumer %d: %v", i, err)
		}
		var r struct {
			Error *struct {
				Code int    `json:"err_code"`
				Desc string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(reply, &r); err != nil {
			t.Fatal(err)
		}
		if r.Error != nil {
			refusal = fmt.Errorf("%d %s", r.Error.Code, r.Error.Desc)
			break
		}
		created++
	}
	if created != maxConsumers || refusal == nil || !strings.Contains(refusal.Error(), "maximum consumers limit") {
		t.Fatalf("%s holds %d consumers, then %v; want %d, then the maximum consumers limit", schemas.StreamScores, created, refusal, maxConsumers)
	}
	// Another stream's readers are not held up: a blob put and read back.
	blob := make([]byte, 2<<20)
	if err := conns["verifier"].PutBlob(ctx, "limits-probe", blob); err != nil {
		t.Fatalf("verifier: put a blob with %s full: %v", schemas.StreamScores, err)
	}
	if got, err := conns["verifier"].GetBlob(ctx, "limits-probe"); err != nil || len(got) != len(blob) {
		t.Fatalf("verifier: read a blob with %s full: %v (%d bytes)", schemas.StreamScores, err, len(got))
	}

	// Subscriptions: one connection may not hold more than the account's.
	maxSubs := deployAccountLimit(t, "max_subscriptions")
	nc, err := bustest.DialRaw(url, "client", pw["client"].Password)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for i := range maxSubs + 1 {
		if err := nc.Subscribe(fmt.Sprintf("%s.flood.%d", bus.InboxPrefix("client"), i)); err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
	}
	_ = nc.Flush()
	select {
	case err := <-nc.Errors():
		if !strings.Contains(strings.ToLower(err.Error()), "maximum subscriptions exceeded") {
			t.Fatalf("past max_subscriptions: %v", err)
		}
	case <-ctx.Done():
		t.Fatalf("%d subscriptions accepted past max_subscriptions %d", maxSubs+1, maxSubs)
	}
	nc.Close()

	// Connections: the account's limit, then refused. The three users'
	// connections this test holds count (nc is closed; admin logs into the
	// account that holds JetStream).
	maxConns := deployAccountLimit(t, "max_connections")
	var open []*bustest.Raw
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	var connErr error
	for range maxConns + 1 {
		c, err := bustest.DialRaw(url, "client", pw["client"].Password)
		if err != nil {
			connErr = err
			break
		}
		open = append(open, c)
	}
	if connErr == nil || !strings.Contains(strings.ToLower(connErr.Error()), "maximum account active connections exceeded") {
		t.Fatalf("connection %d past max_connections %d: %v", len(open)+len(conns), maxConns, connErr)
	}
	if held := len(open) + len(conns) - 1; held != maxConns {
		t.Fatalf("the account held %d connections, want max_connections %d", held, maxConns)
	}
}

// consumerNames lists a stream's consumers (as admin).
func consumerNames(t *testing.T, ctx context.Context, admin *bus.Conn, stream string) []string {
	t.Helper()
	reply, err := admin.Request(ctx, "$JS.API.CONSUMER.NAMES."+stream, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Consumers []string `json:"consumers"`
	}
	if err := json.Unmarshal(reply, &r); err != nil {
		t.Fatal(err)
	}
	return r.Consumers
}
