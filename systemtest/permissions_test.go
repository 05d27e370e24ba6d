package systemtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
)

// The users of deploy/nats, in the order SECURITY.md's matrix shows them
// (admin, which may do everything, last).
var matrixRoles = []string{"dispatcher", "llm-worker", "sandbox-worker", "verifier", "env-server", "client", "trainer"}

// services are the roles that move payloads through the blob store.
var services = []string{"dispatcher", "llm-worker", "sandbox-worker", "verifier", "env-server"}

// permCase is one row of the permission matrix: a request (a JetStream API
// verb, or a publish on a stream's or bucket's subject) and the users of
// deploy/nats it is allowed to (admin: every row). The bodies of allowed
// rows do no harm (a filter that matches nothing, a probe key).
type permCase struct {
	What    string
	Subject string
	Body    string
	Allowed []string
}

const (
	scores  = schemas.StreamScores
	forgeTx = `{"name":"MEDGYM_SCORES","subjects":["medgym.episode.scored.>"],"storage":"file","retention":"limits",` +
		`"sources":[{"name":"MEDGYM_RUNS",` +
		`"subject_transforms":[{"src":"medgym.run.submitted.forge.*","dest":"medgym.episode.scored.{{wildcard(1)}}"}]}]}`
	fetchNoWait = `{"batch":1,"no_wait":true}`
)

// permMatrix is the table TestDeployNATSPermissionMatrix checks against
// the deploy config and SECURITY.md shows (renderMatrix). Rows for each
// durable consumer are generated from bus.Durables.
func permMatrix() []permCase {
	all := append(slices.Clone(matrixRoles), "admin")
	followers := []string{"client", "trainer"}
	rows := []permCase{
		{"account and stream info (read)", "$JS.API.INFO", "", all},
		{"", "$JS.API.STREAM.INFO." + scores, "", all},
		{"read a run record", "$JS.API.DIRECT.GET.KV_" + schemas.BucketRuns + ".$KV." + schemas.BucketRuns + ".probe", "", all},
		{"create a memory stream capturing every reply", "$JS.API.STREAM.CREATE.MEDGYM_CAPTURE",
			`{"name":"MEDGYM_CAPTURE","subjects":["_INBOX.>"],"storage":"memory"}`, nil},
		{"re-create a medgym stream", "$JS.API.STREAM.CREATE." + scores, `{"name":"MEDGYM_SCORES","subjects":["medgym.episode.scored.>"]}`, nil},
		{"forge scores: source MEDGYM_RUNS into MEDGYM_SCORES with a subject transform", "$JS.API.STREAM.UPDATE." + scores, forgeTx, nil},
		{"keep one score (max_msgs 1)", "$JS.API.STREAM.UPDATE." + scores,
			`{"name":"MEDGYM_SCORES","subjects":["medgym.episode.scored.>"],"max_msgs":1}`, nil},
		{"expire run records (max_age 1 s)", "$JS.API.STREAM.UPDATE.KV_" + schemas.BucketRuns,
			`{"name":"KV_MEDGYM_RUNS","subjects":["$KV.MEDGYM_RUNS.>"],"max_age":1000000000,"max_msgs_per_subject":1}`, nil},
		{"seal a stream", "$JS.API.STREAM.UPDATE." + schemas.StreamRuns,
			`{"name":"MEDGYM_RUNS","subjects":["medgym.run.submitted.>"],"sealed":true}`, nil},
		{"delete a stream", "$JS.API.STREAM.DELETE." + scores, "", nil},
		{"purge a stream", "$JS.API.STREAM.PURGE." + scores, `{"filter":"medgym.episode.scored.probe"}`, nil},
		{"purge a run's unstarted requests (cancel --drop)", "$JS.API.STREAM.PURGE." + schemas.StreamEpisodes,
			`{"filter":"medgym.episode.requested.probe"}`, []string{"dispatcher"}},
		{"delete a message", "$JS.API.STREAM.MSG.DELETE." + scores, `{"seq":999999}`, nil},
		{"snapshot a stream", "$JS.API.STREAM.SNAPSHOT." + scores, `{"deliver_subject":"_INBOX.probe-snapshot"}`, nil},
		{"restore a stream", "$JS.API.STREAM.RESTORE.MEDGYM_RESTORED", `{"config":{"name":"MEDGYM_RESTORED"}}`, nil},
		{"step a stream's leader down", "$JS.API.STREAM.LEADER.STEPDOWN." + scores, "", nil},
		{"pause the dispatcher's score consumer", "$JS.API.CONSUMER.PAUSE." + scores + "." + schemas.DurableDispatcherScores,
			`{"pause_until":"2999-01-01T00:00:00Z"}`, nil},
		{"follow a run's scores (ordered consumer, filter in the subject)",
			"$JS.API.CONSUMER.CREATE." + scores + ".follow-probe." + schemas.EpisodeScored.For("probe"),
			`{"stream_name":"MEDGYM_SCORES","config":{"name":"follow-probe","filter_subject":"medgym.episode.scored.probe",` +
				`"ack_policy":"none","mem_storage":true,"inactive_threshold":60000000000}}`, followers},
		{"", "$JS.API.CONSUMER.MSG.NEXT." + scores + ".follow-probe", fetchNoWait, followers},
		{"delete a consumer (a follower's name is not its user's: it expires once inactive)", "$JS.API.CONSUMER.DELETE." + scores + ".follow-probe", "", nil},
		{"an ephemeral consumer without the filter in the subject", "$JS.API.CONSUMER.CREATE." + scores,
			`{"stream_name":"MEDGYM_SCORES","config":{"name":"follow-probe2","ack_policy":"none"}}`, nil},
		{"write a run record", "$KV." + schemas.BucketRuns + ".probe", `{}`, []string{"dispatcher", "env-server"}},
		{"write a run's completions", "$KV." + schemas.BucketCompletions + ".probe", `{}`, []string{"dispatcher"}},
		{"write episode state", "$KV." + schemas.BucketEpisodes + ".probe", `{}`, []string{"llm-worker"}},
		{"write an environment session", "$KV." + schemas.BucketEnvSessions + ".probe", `{}`, []string{"env-server"}},
		{"claim a stored episode's file", "$KV." + schemas.BucketStored + ".probe", `x`, []string{"verifier"}},
		{"expire stored-episode claims (max_age 1 s)", "$JS.API.STREAM.UPDATE.KV_" + schemas.BucketStored,
			`{"name":"KV_MEDGYM_STORED","subjects":["$KV.MEDGYM_STORED.>"],"max_age":1000000000,"max_msgs_per_subject":1}`, nil},
		{"read a blob's meta (any object store)", "$JS.API.DIRECT.GET.OBJ_" + schemas.BlobBucket("verifier") + ".$O." + schemas.BlobBucket("verifier") + ".M.probe",
			"", services},
		{"submit a run", schemas.RunSubmitted.For("probe"), `{}`, followers},
		{"request an episode", schemas.EpisodeRequested.For("probe"), `{}`, []string{"dispatcher"}},
		{"publish a score", schemas.EpisodeScored.For("probe"), `{}`, []string{"verifier"}},
		{"publish a dead letter (not a poison copy)", schemas.DeadLetter.For("probe"), `{}`, []string{"dispatcher"}},
		{"publish a poison copy without its stream", schemas.DeadLetter.For("poison"), `{}`, []string{"dispatcher"}},
	}
	// Object stores: each service writes to and purges only its own.
	for _, b := range schemas.BlobBuckets() {
		var writer []string
		if w := blobWriterOf(b); w != "" {
			writer = []string{w}
		}
		rows = append(rows,
			permCase{"write or replace an object of " + b, "$O." + b + ".M.probe", `{}`, writer},
			permCase{"purge " + b + "'s chunks (object put and delete)", "$JS.API.STREAM.PURGE.OBJ_" + b, `{"filter":"$O.` + b + `.C.probe"}`, writer},
		)
	}
	// Poison copies: each service of the messages of the streams it consumes.
	poisoners := map[string][]string{}
	for _, d := range bus.Durables {
		if !slices.Contains(poisoners[d.Stream], d.Owner) {
			poisoners[d.Stream] = append(poisoners[d.Stream], d.Owner)
		}
	}
	for _, stream := range slices.Sorted(maps.Keys(schemas.StreamSubjects)) {
		who := append([]string{"dispatcher"}, poisoners[stream]...)
		rows = append(rows, permCase{"publish a poison copy of a " + stream + " message", schemas.DeadLetter.For(bus.PoisonKind(stream)), `{}`, who})
	}
	for _, d := range bus.Durables {
		c := "$JS.API.CONSUMER."
		body := fmt.Sprintf(`{"stream_name":%q,"config":{"durable_name":%q,"filter_subject":%q,"ack_policy":"explicit","max_deliver":1}}`,
			d.Stream, d.Durable, d.Subject.Wildcard())
		rows = append(rows,
			permCase{"durable " + d.Durable + " (" + d.Owner + "): update or re-create", c + "CREATE." + d.Stream + "." + d.Durable + "." + d.Subject.Wildcard(), body, nil},
			permCase{"", c + "DURABLE.CREATE." + d.Stream + "." + d.Durable, body, nil},
			permCase{"", c + "DELETE." + d.Stream + "." + d.Durable, "", nil},
			permCase{"fetch (its owner only)", c + "MSG.NEXT." + d.Stream + "." + d.Durable, fetchNoWait, []string{d.Owner}},
		)
	}
	return rows
}

// TestDeployNATSPermissionMatrix runs nats-server with deploy/nats's
// config, provisions as admin with `medgym nats provision` (refused at
// once as a service's user; `medgym nats verify` as one then passes),
// and sends every request of permMatrix as every user: each is answered
// for the users the row allows and refused with a permissions violation
// for the others. The attacks among the rows (a source with a subject
// transform forging scores, max_msgs 1, max_age on a bucket, sealing, a
// memory stream on _INBOX.>, taking over the dispatcher's durable) then
// left nothing changed: everything is still as provisioned (bus.Verify),
// and a score body published on a run submission subject is not a score.
// SECURITY.md shows the same matrix.
func TestDeployNATSPermissionMatrix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, pw := startDeployNATS(t, false)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conns := map[string]*bus.Conn{}
	for _, u := range append(slices.Clone(matrixRoles), "admin") {
		conns[u] = connectAs(t, ctx, url, u, pw[u], log.With("user", u))
	}

	// Before provisioning, a service starting as its user says what is
	// missing and what to run.
	err := bus.PrepareStreams(ctx, conns["verifier"], bus.StreamOptions{})
	if !errors.Is(err, bus.ErrNotProvisioned) || !strings.Contains(err.Error(), "medgym nats provision") {
		t.Fatalf("a service verifying unprovisioned streams: %v, want ErrNotProvisioned naming `medgym nats provision`", err)
	}
	// `medgym nats provision` as a service's user is refused at once;
	// as admin it provisions, and `medgym nats verify` as a service's user
	// then passes.
	nats := func(user string, args ...string) (string, error) {
		t.Setenv(bus.EnvNATSUser, user)
		t.Setenv(bus.EnvNATSPassword, pw[user].Password)
		var out, errs strings.Builder
		err := cli.Run(ctx, append(append([]string{"nats"}, args...), "--nats", url), &out, &errs)
		return out.String() + errs.String(), err
	}
	if out, err := nats("verifier", "provision"); !errors.Is(err, bus.ErrNotProvisioned) {
		t.Fatalf("medgym nats provision as verifier: %v\n%s", err, out)
	}
	if out, err := nats("admin", "provision"); err != nil {
		t.Fatalf("medgym nats provision as admin: %v\n%s", err, out)
	}
	if out, err := nats("verifier", "verify"); err != nil || !strings.Contains(out, "as provisioned") {
		t.Fatalf("medgym nats verify as verifier: %v\n%s", err, out)
	}
	for _, u := range matrixRoles {
		if conns[u].Creates() {
			t.Fatalf("%s: a connection with credentials creates streams (want verify)", u)
		}
		verify := bus.Verify // streams and every durable
		if !slices.Contains(services, u) {
			verify = bus.PrepareStreams // followers may not read the durables on MEDGYM_SCORES
		}
		if err := verify(ctx, conns[u], bus.StreamOptions{}); err != nil {
			t.Fatalf("%s: verify after provisioning: %v", u, err)
		}
	}

	for _, c := range permMatrix() {
		for _, u := range matrixRoles {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			reply, err := conns[u].Request(rctx, c.Subject, []byte(c.Body))
			rcancel()
			want := slices.Contains(c.Allowed, u)
			switch {
			case err != nil && !errors.Is(err, bus.ErrRefused):
				t.Fatalf("%s %s: %v", u, c.Subject, err)
			case want && err != nil:
				t.Errorf("%s may %s (%s) but was refused", u, c.What, c.Subject)
			case !want && err == nil:
				t.Errorf("%s may not %s (%s) but the server answered: %.300s", u, c.What, c.Subject, reply)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Nothing the refused requests asked for happened.
	if err := bus.Verify(ctx, conns["admin"], bus.StreamOptions{}); err != nil {
		t.Fatalf("after the refused requests: %v", err)
	}
	for _, s := range []string{"MEDGYM_CAPTURE", "MEDGYM_RESTORED"} {
		if _, err := conns["admin"].StreamCount(ctx, s); err == nil {
			t.Errorf("stream %s exists", s)
		}
	}
	// The forge end to end: a Score body on a subject client may publish
	// stays a run submission.
	before := streamMsgsOf(t, ctx, conns["admin"], scores)
	forged := schemas.Score{RunID: "r1", EpisodeID: "r1--e1", Outcome: schemas.OutcomeCorrect, Reward: 1}
	if err := conns["client"].PublishRaw(ctx, schemas.RunSubmitted.For("forge.r1"), []byte(mustJSON(forged))); err != nil {
		t.Fatalf("client: publish on its own subject: %v", err)
	}
	if n := streamMsgsOf(t, ctx, conns["admin"], scores); n != before {
		t.Fatalf("MEDGYM_SCORES went from %d to %d messages after the client's forge", before, n)
	}

	// A service user cannot provision, and says so at once.
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	defer pcancel()
	if err := bus.Provision(pctx, conns["verifier"], bus.StreamOptions{}); !errors.Is(err, bus.ErrNotProvisioned) {
		t.Fatalf("the verifier's user provisioning: %v, want a refusal naming `medgym nats provision`", err)
	}
	checkSecurityMatrix(t)
}

// blobWriterOf is the service whose object store b is ("" for
// schemas.BucketBlobs, which only admin writes to).
func blobWriterOf(b string) string {
	for _, w := range schemas.BlobWriters {
		if schemas.BlobBucket(w) == b {
			return w
		}
	}
	return ""
}

const (
	matrixBegin = "<!-- permission-matrix: generated from systemtest/permissions_test.go; MEDGYM_UPDATE_SECURITY=1 rewrites it -->"
	matrixEnd   = "<!-- permission-matrix end -->"
)

// renderMatrix is permMatrix as the Markdown table SECURITY.md shows.
func renderMatrix() string {
	var b strings.Builder
	b.WriteString(matrixBegin + "\n\n| request | subject |")
	for _, u := range matrixRoles {
		b.WriteString(" " + u + " |")
	}
	b.WriteString(" admin |\n|---|---|" + strings.Repeat("---|", len(matrixRoles)+1) + "\n")
	for _, c := range permMatrix() {
		fmt.Fprintf(&b, "| %s | `%s` |", c.What, c.Subject)
		for _, u := range matrixRoles {
			if slices.Contains(c.Allowed, u) {
				b.WriteString(" ✓ |")
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString(" ✓ |\n")
	}
	b.WriteString("\n" + matrixEnd)
	return b.String()
}

// checkSecurityMatrix fails unless SECURITY.md shows renderMatrix between
// the markers (MEDGYM_UPDATE_SECURITY=1 writes it there).
func checkSecurityMatrix(t *testing.T) {
	t.Helper()
	p := filepath.Join(repoRoot(t), "SECURITY.md")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, matrixBegin), strings.Index(doc, matrixEnd)
	if i < 0 || j < i {
		t.Fatalf("SECURITY.md has no permission matrix between %q and %q", matrixBegin, matrixEnd)
	}
	want := renderMatrix()
	if doc[i:j+len(matrixEnd)] == want {
		return
	}
	if os.Getenv("MEDGYM_UPDATE_SECURITY") == "1" {
		if err := os.WriteFile(p, []byte(doc[:i]+want+doc[j+len(matrixEnd):]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("SECURITY.md's permission matrix is not the test's (MEDGYM_UPDATE_SECURITY=1 rewrites it):\n%s", want)
}
