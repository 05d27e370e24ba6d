package systemtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/schemas"
)

// TestDeployNATSReplySubjects runs nats-server with deploy/nats's config
// and points the server's own answers at medgym's streams and buckets: the
// reply subject of a request is checked by no permission, so with the
// users in the account holding JetStream every user could have an API
// answer, a direct get or a pull delivery stored in any stream or bucket
// (a run record replaced by `$JS.API.INFO`'s answer; a score body the
// dispatcher wrote in its own bucket copied into MEDGYM_SCORES), and a
// push consumer delivered into a stream as soon as someone subscribed to
// its deliver subject. With JetStream in an account of its own, reached
// through service imports, each answer goes back to the requester (a
// subscriber on the chosen subject receives it: the barrier each case
// waits on) and nothing is stored; a push consumer has no interest to
// deliver to.
func TestDeployNATSReplySubjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, pw := startDeployNATS(t, false)
	log := slog.New(slog.NewTextHandler(&syncBuffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conns := provisionAndConnect(t, ctx, url, pw, log, "dispatcher", "verifier", "sandbox-worker")
	raw := func(user string) *bustest.Raw {
		nc, err := bustest.DialRaw(url, user, pw[user].Password)
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	client, dispatcher, trainer, sandbox := raw("client"), raw("dispatcher"), raw("trainer"), raw("sandbox-worker")
	count := func(stream string) uint64 { return streamMsgsOf(t, ctx, conns["admin"], stream) }
	// answered waits for a request's answer on reply, which next (a
	// listener on reply) receives.
	answered := func(nc *bustest.Raw, subject, reply string, body []byte, next func(time.Duration) ([]byte, error)) []byte {
		t.Helper()
		if err := nc.PublishRequest(subject, reply, body); err != nil {
			t.Fatal(err)
		}
		m, err := next(10 * time.Second)
		if err != nil {
			t.Fatalf("%s answered to %s: %v", subject, reply, err)
		}
		return m
	}
	// settled sends a request of nc's to its own inbox and waits for the
	// answer: the requests nc sent before it have been answered.
	settled := func(nc *bustest.Raw) {
		t.Helper()
		if _, err := nc.Request("$JS.API.INFO", nil, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// A run record, and a trainer listening on a score subject of another
	// run (it may subscribe to every score subject).
	record := []byte(`{"run_id":"victim"}`)
	if _, err := dispatcher.Request("$KV."+schemas.BucketRuns+".victim", record, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	listener, err := trainer.Listen(schemas.EpisodeScored.For("r9"))
	if err != nil {
		t.Fatal(err)
	}
	scoresBefore := count(schemas.StreamScores)

	// client: an API answer into a run record.
	if err := client.PublishRequest("$JS.API.INFO", "$KV."+schemas.BucketRuns+".victim", nil); err != nil {
		t.Fatal(err)
	}
	settled(client)
	got, err := conns["admin"].Request(ctx, "$JS.API.DIRECT.GET.KV_"+schemas.BucketRuns+".$KV."+schemas.BucketRuns+".victim", nil)
	if err != nil || !bytes.Equal(got, record) {
		t.Fatalf("the run record after the client's API answer to it: %.200s (%v), want %s", got, err, record)
	}

	// dispatcher: a score body written in its own bucket, read back with
	// a direct get answered to a score subject.
	forged := mustJSON(schemas.Score{RunID: "r9", EpisodeID: "r9--e1", Outcome: schemas.OutcomeCorrect, Reward: 1})
	if _, err := dispatcher.Request("$KV."+schemas.BucketCompletions+".forge", []byte(forged), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	m := answered(dispatcher, "$JS.API.DIRECT.GET.KV_"+schemas.BucketCompletions+".$KV."+schemas.BucketCompletions+".forge",
		schemas.EpisodeScored.For("r9"), nil, listener)
	if string(m) != forged {
		t.Fatalf("the direct get's answer: %q", m)
	}
	if n := count(schemas.StreamScores); n != scoresBefore {
		t.Fatalf("%s went from %d to %d messages after the dispatcher's direct get answered to a score subject", schemas.StreamScores, scoresBefore, n)
	}

	// client: a real score, pulled by its own consumer to a score subject
	// of another run.
	if err := conns["verifier"].Publish(ctx, schemas.EpisodeScored.For("r1"), "s1", schemas.Score{RunID: "r1", EpisodeID: "r1--e1", Outcome: schemas.OutcomeIncorrect}); err != nil {
		t.Fatal(err)
	}
	scoresBefore = count(schemas.StreamScores)
	create := `{"stream_name":"MEDGYM_SCORES","config":{"name":"pull-forge","filter_subject":"medgym.episode.scored.r1",` +
		`"ack_policy":"none","mem_storage":true,"inactive_threshold":60000000000}}`
	if _, err := client.Request("$JS.API.CONSUMER.CREATE."+schemas.StreamScores+".pull-forge."+schemas.EpisodeScored.For("r1"), []byte(create), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	answered(client, "$JS.API.CONSUMER.MSG.NEXT."+schemas.StreamScores+".pull-forge", schemas.EpisodeScored.For("r9"), []byte(`{"batch":1}`), listener)
	if n := count(schemas.StreamScores); n != scoresBefore {
		t.Fatalf("%s went from %d to %d messages after a pull delivered to a score subject", schemas.StreamScores, scoresBefore, n)
	}

	// sandbox-worker: a result body written as a blob chunk, pushed by its
	// own consumer to a result subject it listens on.
	chunks := schemas.BlobBucket("sandbox-worker")
	if _, err := sandbox.Request("$O."+chunks+".C.forge", []byte(`{"run_id":"r9","episode_id":"r9--e1"}`), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.Listen(schemas.EpisodeCompleted.For("r9")); err != nil {
		t.Fatal(err)
	}
	resultsBefore := count(schemas.StreamResults)
	push := `{"stream_name":"OBJ_` + chunks + `","config":{"name":"push-forge","filter_subject":"$O.` + chunks + `.C.forge",` +
		`"deliver_subject":"` + schemas.EpisodeCompleted.For("r9") + `","ack_policy":"none"}}`
	reply, err := sandbox.Request("$JS.API.CONSUMER.CREATE.OBJ_"+chunks+".push-forge.$O."+chunks+".C.forge", []byte(push), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ci struct {
		PushBound bool `json:"push_bound"`
		Error     any  `json:"error"`
	}
	if err := json.Unmarshal(reply, &ci); err != nil {
		t.Fatal(err)
	}
	if ci.Error == nil && ci.PushBound {
		t.Fatalf("a push consumer into %s is bound to a subscriber: %s", schemas.EpisodeCompleted.For("r9"), reply)
	}
	settled(sandbox)
	if n := count(schemas.StreamResults); n != resultsBefore {
		t.Fatalf("%s went from %d to %d messages after a push consumer delivered to a result subject", schemas.StreamResults, resultsBefore, n)
	}

	// Any user: an API answer over a blob's meta.
	blob := bytes.Repeat([]byte("payload "), 1<<17)
	if err := conns["verifier"].PutBlob(ctx, "victim", blob); err != nil {
		t.Fatal(err)
	}
	meta := "$O." + conns["verifier"].BlobBucket() + ".M." + base64.URLEncoding.EncodeToString([]byte("victim"))
	if err := client.PublishRequest("$JS.API.INFO", meta, nil); err != nil {
		t.Fatal(err)
	}
	settled(client)
	if b, err := conns["dispatcher"].GetBlobIn(ctx, conns["verifier"].BlobBucket(), "victim"); err != nil || !bytes.Equal(b, blob) {
		t.Fatalf("the blob after an API answer over its meta: %v (%d bytes of %d)", err, len(b), len(blob))
	}
}
