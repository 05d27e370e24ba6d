package worker_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/services/trainer/trainertest"
	"github.com/medgym/medgym/services/trainer/worker"
)

func intp(v int) *int { return &v }

// loss returns the first and last per-step loss of a step's metrics.
func loss(t *testing.T, m map[string]any) (first, last float64) {
	t.Helper()
	ls, ok := m["loss"].([]any)
	if !ok || len(ls) == 0 {
		t.Fatalf("metrics without losses: %v", m)
	}
	return ls[0].(float64), ls[len(ls)-1].(float64)
}

// TestResidentWorker: one process serves several steps (the model loaded
// once), keeps training where the last step ended, answers a malformed
// request and a bad batch with clear errors and goes on, and after a
// SIGKILL the supervisor restarts it from the last saved adapter and
// optimiser state.
func TestResidentWorker(t *testing.T) {
	py := trainertest.Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sup := &worker.Supervisor{Command: []string{py, "python/worker.py", "--backend", "tiny"}, Dir: ".."}
	defer sup.Close()
	req := func(mode, out string) worker.TrainRequest {
		return worker.TrainRequest{Mode: mode, Data: "testdata/toy_" + mode + ".jsonl", Out: filepath.Join(dir, out),
			Recipe: worker.Recipe{Steps: intp(5)}}
	}
	r1, err := sup.Train(ctx, req("sft", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := sup.Process(ctx)
	pid := p.Pid()
	r2, err := sup.Train(ctx, req("sft", "a2"))
	if err != nil {
		t.Fatal(err)
	}
	_, end1 := loss(t, r1.Metrics)
	start2, end2 := loss(t, r2.Metrics)
	if p2, _ := sup.Process(ctx); p2.Pid() != pid || sup.Restarts != 0 {
		t.Fatalf("a second step started a new worker")
	}
	if start2 > end1+1e-3 || end2 >= end1 {
		t.Fatalf("the second step did not continue the first: loss %v then %v → %v", end1, start2, end2)
	}
	rec, ok := r2.Metrics["recipe"].(map[string]any)
	if !ok || rec["steps"] != 5.0 || rec["lr"] == nil {
		t.Fatalf("metrics do not record the recipe: %v", r2.Metrics["recipe"])
	}

	// Malformed input: clear errors, the worker lives on.
	if ans, err := p.Send(ctx, `{"op": "train", "mode": `); err != nil || !strings.Contains(ans, `"ok": false`) || !strings.Contains(ans, "malformed") {
		t.Fatalf("malformed request: %q %v", ans, err)
	}
	bad := req("grpo", "bad")
	bad.Data = "testdata/toy_sft.jsonl" // SFT records lack the GRPO fields
	var rej *worker.RejectedError
	if _, err := sup.Train(ctx, bad); !errors.As(err, &rej) || !strings.Contains(rej.Msg, "lacks") {
		t.Fatalf("a batch of the wrong kind: %v", err)
	}
	if err := p.Ping(ctx); err != nil || sup.Restarts != 0 {
		t.Fatalf("worker gone after bad requests: %v", err)
	}

	// Crash: SIGKILL, then the next step restarts from a2 with its optimiser.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for p.Alive() {
		time.Sleep(10 * time.Millisecond)
	}
	r3, err := sup.Train(ctx, req("sft", "a3"))
	if err != nil {
		t.Fatal(err)
	}
	p3, _ := sup.Process(ctx)
	start3, _ := loss(t, r3.Metrics)
	if sup.Restarts != 1 || p3.Pid() == pid || !p3.Ready.OptimizerRestored || p3.Ready.Init != filepath.Join(dir, "a2") {
		t.Fatalf("restart: %d restarts, ready %+v", sup.Restarts, p3.Ready)
	}
	if start3 > end2+1e-3 {
		t.Fatalf("the restarted worker did not resume from the saved adapter: loss %v, the last step ended at %v", start3, end2)
	}
	for _, f := range []string{"model.pt", "optimizer.pt"} {
		if _, err := os.Stat(filepath.Join(dir, "a3", f)); err != nil {
			t.Fatal(err)
		}
	}
	if math.IsNaN(start3) {
		t.Fatal("NaN loss")
	}
}
