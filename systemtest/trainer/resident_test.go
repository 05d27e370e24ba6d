package trainer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/trainer/online"
	"github.com/medgym/medgym/services/trainer/trainertest"
	"github.com/medgym/medgym/services/trainer/worker"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/systemtest/testenv"
)

// TestOnlineLoopResidentOverlap runs three iterations through one resident
// worker with overlap on: the model is loaded once (and once more after
// the test SIGKILLs the worker in iteration 1, when the loop restarts it
// from the last adapter), iterations 1 and 2 are sampled from the previous
// policy while the one before trains, and the reports carry the time split,
// the model-load time, the GPU-idle share and the recipe.
func TestOnlineLoopResidentOverlap(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	py := trainertest.Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	env := testenv.Start(t, 6)
	work := t.TempDir()
	script, err := filepath.Abs(filepath.Join("..", "..", "services", "trainer", "python", "worker.py"))
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(work, "worker.pid")
	steps := 3
	temp := 0.6
	cfg := online.Config{NATS: env.NATSURL, Store: env.Store, WorkDir: work, RunPrefix: "res", Iterations: 3,
		Datasets: []string{"medcalcbench"}, Split: "test", TaskIDs: env.TaskIDs(), TasksPerIteration: 2, Samples: 4,
		Temperature: &temp, Episode: &schemas.EpisodeOptions{MaxTurns: 2, EndOn: schemas.EndOnAccepted, ActionTimeoutSec: 30},
		Serving: online.Serving{BaseURL: env.ModelURL, BaseModel: testenv.BaseModel, AdapterPrefix: "res", Logprobs: true},
		Train: online.TrainCommand{Resident: []string{"/bin/sh", "-c",
			fmt.Sprintf(`echo $$ >> %s; exec %s %s --backend tiny "$@"`, pidFile, py, script), "sh"},
			Recipe: worker.Recipe{Steps: &steps}},
		Stale: online.Staleness{Replay: 0, MaxLag: 1}, Overlap: true, WaitTimeout: online.Duration(2 * time.Minute),
		Eval: &online.Eval{Every: 2, TaskIDs: env.TaskIDs()[:2]}}
	seed := int64(0)
	cfg.Seed = &seed
	st, err := store.Open(ctx, env.Store, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Kill the worker once iteration 1's batch is written.
	killed := make(chan int, 1)
	go func() {
		for ctx.Err() == nil {
			if _, err := os.Stat(filepath.Join(work, "iter-0001", "batch.jsonl")); err == nil {
				b, _ := os.ReadFile(pidFile)
				pid, _ := strconv.Atoi(strings.TrimSpace(strings.Split(string(b), "\n")[0]))
				if pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				killed <- pid
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var out bytes.Buffer
	reps, err := online.New(cfg, env.Conn, st, &out, slog.New(slog.NewTextHandler(io.Discard, nil))).Run(ctx)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if pid := <-killed; pid <= 0 {
		t.Fatal("no worker pid to kill")
	}
	if len(reps) != 3 {
		t.Fatalf("%d reports", len(reps))
	}
	pids, _ := os.ReadFile(pidFile)
	if n := len(strings.Fields(string(pids))); n != 2 {
		t.Fatalf("%d workers started, want 2 (one, and one after the kill)", n)
	}
	if reps[0].ModelLoadS <= 0 || reps[2].ModelLoadS != 0 || reps[0].WorkerRestarts+reps[1].WorkerRestarts+reps[2].WorkerRestarts != 1 {
		t.Fatalf("model loads %v/%v/%v s, restarts %d/%d/%d: want a load in iteration 0, a restart after the kill, none in 2",
			reps[0].ModelLoadS, reps[1].ModelLoadS, reps[2].ModelLoadS, reps[0].WorkerRestarts, reps[1].WorkerRestarts, reps[2].WorkerRestarts)
	}
	for i, r := range reps {
		if r.Overlapped != (i > 0) || r.GPUIdle < 0 || r.GPUIdle > 1 || r.TrainingS <= 0 {
			t.Fatalf("iteration %d: overlapped %v, GPU idle %v, training %vs", i, r.Overlapped, r.GPUIdle, r.TrainingS)
		}
		rec, _ := r.Train["recipe"].(map[string]any)
		if r.Train["backend"] != "tiny" || rec["steps"] != 3.0 || r.Recipe.FormatWeight != online.DefaultFormatWeight || r.Recipe.Temperature != 0.6 {
			t.Fatalf("iteration %d: train %v recipe %+v", i, r.Train, r.Recipe)
		}
	}
	// Overlap: run i (i ≥ 1) was sampled while iteration i−1 trained, from
	// policy version i−1; its rows are one version behind and kept.
	for it := range 3 {
		rows, err := st.ReadRun(ctx, fmt.Sprintf("res-it%04d", it))
		if err != nil || len(rows) != 8 {
			t.Fatalf("run %d: %d rows, %v", it, len(rows), err)
		}
		want := max(it-1, 0)
		for _, r := range rows {
			if int(r.PolicyVersion) != want {
				t.Fatalf("run %d row sampled at v%d, want v%d", it, r.PolicyVersion, want)
			}
		}
		if reps[it].StaleDropped != 0 || reps[it].BatchRows != 8 {
			t.Fatalf("iteration %d: %d rows, %d stale dropped", it, reps[it].BatchRows, reps[it].StaleDropped)
		}
	}
	if got := env.Model.Loads(); !slices.Equal(got, []string{"res-v1", "res-v2", "res-v3"}) {
		t.Fatalf("adapter loads %v", got)
	}
	// The held-out evaluation runs every 2 iterations: after iteration 1,
	// with the adapter it produced, on the evaluation tasks.
	if reps[0].Eval != nil || reps[2].Eval != nil || reps[1].Eval == nil || reps[1].Eval.Episodes != 2 || reps[1].Eval.Model != "res-v2" {
		t.Fatalf("evaluations %+v / %+v / %+v", reps[0].Eval, reps[1].Eval, reps[2].Eval)
	}
	evRows, err := st.ReadRun(ctx, "res-ev0001")
	if err != nil || len(evRows) != 2 || evRows[0].Model != "res-v2" || evRows[0].PolicyVersion != 2 {
		t.Fatalf("evaluation rows %d, %v", len(evRows), err)
	}
	md, err := os.ReadFile(filepath.Join(work, online.ProgressMarkdown))
	if err != nil || !strings.Contains(string(md), "GPU idle") || !strings.Contains(string(md), "held-out success") ||
		!strings.Contains(out.String(), "model load") || !strings.Contains(out.String(), "held-out eval res-ev0001") {
		t.Fatalf("progress:\n%s\n%s", md, out.String())
	}
}
