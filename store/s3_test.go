package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/store/miniotest"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func TestS3Store(t *testing.T) {
	endpoint, ak, sk, stop, restart := miniotest.Start(t)
	opt := store.Options{Endpoint: "http://" + endpoint, AccessKey: ak, SecretKey: sk, MaxRetries: 1}
	open := func(t *testing.T) *store.Store {
		st, err := store.Open(t.Context(), "s3://trajectories-test/some/prefix", opt)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	t.Run("conformance", func(t *testing.T) { testStore(t, open) })
	t.Run("create", func(t *testing.T) { testCreate(t, open(t)) })
	t.Run("claims", func(t *testing.T) { testClaims(t, open) })

	t.Run("env fallback", func(t *testing.T) {
		t.Setenv("AWS_ENDPOINT_URL", "http://"+endpoint)
		t.Setenv("AWS_ACCESS_KEY_ID", ak)
		t.Setenv("AWS_SECRET_ACCESS_KEY", sk)
		t.Setenv("AWS_REGION", "")
		st, err := store.Open(t.Context(), "s3://trajectories-test/some/prefix", store.Options{})
		if err != nil {
			t.Fatalf("open from env: %v", err)
		}
		if ok, err := st.Has(t.Context(), "r1", "e1"); err != nil || !ok {
			t.Errorf("store opened from env does not see r1/e1: %v, %v", ok, err)
		}
		if got := st.Locate("trajectories/x"); got != "s3://trajectories-test/some/prefix/trajectories/x" {
			t.Errorf("locate = %q", got)
		}
	})

	t.Run("wrong credentials", func(t *testing.T) {
		bad := opt
		bad.SecretKey = "wrong-secret"
		_, err := store.Open(t.Context(), "s3://trajectories-test/x", bad)
		if err == nil || !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
			t.Errorf("open with a wrong secret: %v; want an error naming the endpoint and the fix", err)
		}
	})

	t.Run("multipart", func(t *testing.T) {
		if testing.Short() {
			t.Skip("writes a 19 MiB object")
		}
		st := open(t)
		// 24 rows × 1 MiB of poorly compressible text: a file over the 16 MiB part size.
		rows := randomRows("big", 24, 1<<20)
		keys, err := st.Write(t.Context(), rows)
		if err != nil {
			t.Fatalf("write big file: %v", err)
		}
		if len(keys) != 1 {
			t.Fatalf("keys = %v", keys)
		}
		dir := t.TempDir()
		if err := st.CopyLocal(t.Context(), "big", dir); err != nil {
			t.Fatal(err)
		}
		size := fileSize(t, dir+"/"+keys[0])
		if size <= 16<<20 {
			t.Fatalf("file is %d bytes; the test needs more than 16 MiB to use multipart", size)
		}
		// A multipart upload's ETag ends in -<number of parts>.
		mc, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4(ak, sk, "")})
		if err != nil {
			t.Fatal(err)
		}
		info, err := mc.StatObject(t.Context(), "trajectories-test", "some/prefix/"+keys[0], minio.StatObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info.ETag, "-") {
			t.Errorf("etag %q: object was not uploaded in parts", info.ETag)
		}
		got, err := st.ReadRun(t.Context(), "big")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(rows) {
			t.Fatalf("read %d rows, want %d", len(got), len(rows))
		}
		gm := byEpisode(got)
		for _, r := range rows {
			if gm[r.EpisodeID].Turns[0].Stdout != r.Turns[0].Stdout {
				t.Fatalf("episode %s: stdout differs after multipart round trip", r.EpisodeID)
			}
		}
	})

	t.Run("outage", func(t *testing.T) {
		st := open(t)
		if _, err := st.Write(t.Context(), []parquet.Row{row("outage", "e1", "mimic", "correct")}); err != nil {
			t.Fatal(err)
		}
		stop()
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		_, err := st.Write(ctx, []parquet.Row{row("outage", "e2", "mimic", "correct")})
		if err == nil {
			t.Fatal("write with the server down: want an error")
		}
		if !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("error %q should name the endpoint and say it is unreachable", err)
		}
		if err := st.Ping(ctx); err == nil {
			t.Error("ping with the server down: want an error")
		}
		restart()
		if err := st.Ping(t.Context()); err != nil {
			t.Fatalf("ping after restart: %v", err)
		}
		keys, err := st.Write(t.Context(), []parquet.Row{row("outage", "e2", "mimic", "correct")})
		if err != nil || len(keys) != 1 {
			t.Fatalf("write after restart: %v, %v", keys, err)
		}
		got, err := open(t).ReadRun(t.Context(), "outage")
		if err != nil || len(got) != 2 {
			t.Fatalf("read after restart: %d rows, %v; want 2", len(got), err)
		}
	})
}
