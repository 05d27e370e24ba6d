package systemtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"testing"
	"time"

	"github.com/medgym/medgym/bus/bustest"
	"github.com/medgym/medgym/schemas"
)

// TestDeployNATSBlobStores runs nats-server with deploy/nats's config: each
// service offloads payloads to an object store of its own, which another
// service may read but neither purge nor write a meta into (nats.go's
// Put replaces an object with a rollup on its meta subject and purges the
// old chunks; Delete does both), so a compromised sandbox-worker cannot
// drop or replace the verifier's payload; the verifier itself still
// replaces and deletes it.
func TestDeployNATSBlobStores(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, pw := startDeployNATS(t, false)
	log := slog.New(slog.NewTextHandler(&syncBuffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conns := provisionAndConnect(t, ctx, url, pw, log, "verifier", "dispatcher")
	store := conns["verifier"].BlobBucket()
	if store != schemas.BlobBucket("verifier") {
		t.Fatalf("the verifier writes to %s, want its own store %s", store, schemas.BlobBucket("verifier"))
	}
	blob := bytes.Repeat([]byte("trajectory "), 40_000) // several chunks
	if err := conns["verifier"].PutBlob(ctx, "payload", blob); err != nil {
		t.Fatal(err)
	}
	// Another service reads it.
	if b, err := conns["dispatcher"].GetBlobIn(ctx, store, "payload"); err != nil || !bytes.Equal(b, blob) {
		t.Fatalf("dispatcher reading the verifier's blob: %v (%d bytes of %d)", err, len(b), len(blob))
	}

	// The sandbox-worker tries to purge the store's chunks and to replace
	// the object's meta with a deleted one: both refused.
	sandbox, err := bustest.DialRaw(url, "sandbox-worker", pw["sandbox-worker"].Password)
	if err != nil {
		t.Fatal(err)
	}
	defer sandbox.Close()
	meta := "$O." + store + ".M." + base64.URLEncoding.EncodeToString([]byte("payload"))
	if err := sandbox.PublishHeaders(meta, map[string]string{"Nats-Rollup": "sub"},
		[]byte(`{"name":"payload","bucket":"`+store+`","deleted":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.PublishRequest("$JS.API.STREAM.PURGE.OBJ_"+store, "_INBOX.purge", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-sandbox.Errors():
			if !errorsIsPermission(err) {
				t.Fatalf("sandbox-worker: %v, want a permissions violation", err)
			}
		case <-ctx.Done():
			t.Fatal("the sandbox-worker's purge and meta were not refused")
		}
	}
	if b, err := conns["dispatcher"].GetBlobIn(ctx, store, "payload"); err != nil || !bytes.Equal(b, blob) {
		t.Fatalf("the verifier's blob after the sandbox-worker's purge and meta: %v (%d bytes of %d)", err, len(b), len(blob))
	}

	// Its writer replaces it (a purge of the old chunks) and deletes it.
	if err := conns["verifier"].PutBlob(ctx, "payload", blob[:1000]); err != nil {
		t.Fatalf("verifier: replace its blob: %v", err)
	}
	if err := conns["verifier"].DeleteBlob(ctx, "payload"); err != nil {
		t.Fatalf("verifier: delete its blob: %v", err)
	}
	if _, err := conns["dispatcher"].GetBlobIn(ctx, store, "payload"); err == nil {
		t.Fatal("the deleted blob still reads")
	}
}

func errorsIsPermission(err error) bool {
	return err != nil && bytes.Contains(bytes.ToLower([]byte(err.Error())), []byte("permissions violation"))
}
