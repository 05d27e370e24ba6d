package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/trainer/online"
	"github.com/medgym/medgym/services/trainer/train"
	"github.com/medgym/medgym/services/trainer/trainertest"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/systemtest/testenv"
)

const childEnv = "MEDGYM_TRAINER_ONLINE_CHILD"

// TestMain lets the test binary play the trainer process: with childEnv
// set it runs the online loop from that config file and exits.
func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		cfg, err := online.LoadConfig(path)
		if err == nil {
			_, err = online.Run(context.Background(), cfg, bus.StreamOptions{}, os.Stdout, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestOnlineLoopResumesAfterKill runs three GRPO iterations against the
// fake model server with the real CPU training step. The trainer is a
// subprocess, SIGKILLed by its own training command in the third
// iteration and restarted; the test then checks versions, row tags, the
// staleness bound, adapter loads and the policy announcements.
func TestOnlineLoopResumesAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	py := trainertest.Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	env := testenv.Start(t, 9)
	work := t.TempDir()
	script, err := filepath.Abs(filepath.Join("..", "..", "services", "trainer", "python", "train_step.py"))
	if err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(work, "killed")
	step := fmt.Sprintf(`if [ "{version}" = 3 ] && [ ! -e %[1]s ]; then touch %[1]s; kill -9 $PPID; sleep 10; fi; `+
		`exec %[3]s %[2]s --mode grpo --data {batch} --out {out} --init={init} --metrics {metrics} --steps 3`, mark, script, py)
	cfg := map[string]any{
		"nats": env.NATSURL, "store": env.Store, "work_dir": work, "run_prefix": "rl", "iterations": 3,
		"datasets": []string{"medcalcbench"}, "split": "test", "task_ids": env.TaskIDs(), "tasks_per_iteration": 3,
		"samples": 4, "seed": 0, "episode": map[string]any{"max_turns": 2, "end_on": "accepted", "action_timeout_sec": 30},
		"serving":      map[string]any{"base_url": env.ModelURL, "base_model": testenv.BaseModel, "adapter_prefix": "pol", "logprobs": true},
		"train":        map[string]any{"command": []string{"/bin/sh", "-c", step}, "timeout": "5m"},
		"staleness":    map[string]any{"replay": 2, "max_lag": 1, "mode": "drop"},
		"wait_timeout": "2m",
	}
	b, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(work, "online.json")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	child := func() (string, error) {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+cfgPath)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := child()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != -1 || !strings.Contains(ee.String(), "killed") {
		t.Fatalf("first trainer should die by SIGKILL in iteration 2: %v\n%s", err, out)
	}
	st, err := online.LoadState(work)
	if err != nil || st.Iteration != 2 || st.Version != 2 || st.Adapter != "pol-v2" {
		t.Fatalf("state after the kill: %+v %v", st, err)
	}
	out2, err := child()
	if err != nil {
		t.Fatalf("resumed trainer: %v\n%s", err, out2)
	}
	if !strings.Contains(out2, "iter 2 v2→v3 rl-it0002") || strings.Contains(out2, "iter 1 ") {
		t.Fatalf("resumed trainer should run iteration 2 only:\n%s", out2)
	}
	for _, want := range []string{"reward", "success", "sampling", "waiting", "training", "loading"} {
		if !strings.Contains(out2, want) {
			t.Fatalf("iteration line lacks %q:\n%s", want, out2)
		}
	}
	if st, _ = online.LoadState(work); st.Iteration != 3 || st.Version != 3 || st.Adapter != "pol-v3" {
		t.Fatalf("final state %+v", st)
	}
	if got := env.Model.Loads(); !slices.Equal(got, []string{"pol-v1", "pol-v2", "pol-v3"}) {
		t.Fatalf("adapter loads %v", got)
	}
	v3, _ := env.Model.Adapter("pol-v3")
	if _, err := os.Stat(filepath.Join(v3, "model.pt")); err != nil {
		t.Fatalf("adapter v3 not written by the training step: %v", err)
	}

	// Rows are tagged with the version they were sampled under and the
	// adapter that served them.
	s, err := store.Open(ctx, env.Store, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for it := range 3 {
		rows, err := s.ReadRun(ctx, fmt.Sprintf("rl-it%04d", it))
		if err != nil {
			t.Fatal(err)
		}
		model := testenv.BaseModel
		if it > 0 {
			model = fmt.Sprintf("pol-v%d", it)
		}
		if len(rows) != 12 {
			t.Fatalf("iteration %d: %d rows, want 12 (3 tasks × K 4, no duplicates after the resume)", it, len(rows))
		}
		for _, r := range rows {
			if int(r.PolicyVersion) != it || r.Model != model {
				t.Fatalf("iteration %d row tagged v%d model %s", it, r.PolicyVersion, r.Model)
			}
		}
		if n := env.Model.Stats().ByModel[model]; n == 0 {
			t.Fatalf("model %s never sampled", model)
		}
	}

	// Staleness: iteration 2 (policy v2) replays iterations 0 and 1; the
	// v0 rows are 2 versions behind (> max_lag 1) and dropped.
	var reps [3]online.Report
	for it := range 3 {
		b, err := os.ReadFile(filepath.Join(work, fmt.Sprintf("iter-%04d", it), "report.json"))
		if err != nil || json.Unmarshal(b, &reps[it]) != nil {
			t.Fatalf("report %d: %v", it, err)
		}
		if reps[it].Train["backend"] != "tiny" || reps[it].Train["steps"] != 3.0 {
			t.Fatalf("iteration %d training metrics %v", it, reps[it].Train)
		}
	}
	if reps[0].BatchRows != 12 || reps[1].BatchRows != 24 || reps[1].StaleDropped != 0 ||
		reps[2].BatchRows != 24 || reps[2].StaleDropped != 12 {
		t.Fatalf("batch rows/stale dropped: %d/%d %d/%d %d/%d", reps[0].BatchRows, reps[0].StaleDropped,
			reps[1].BatchRows, reps[1].StaleDropped, reps[2].BatchRows, reps[2].StaleDropped)
	}
	// The progress table is rebuilt from every report, so after the resume
	// it still lists the iterations the first trainer ran.
	md, err := os.ReadFile(filepath.Join(work, online.ProgressMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	for it := range 3 {
		row := fmt.Sprintf("| %d | v%d→v%d | rl-it%04d | 12 |", it, it, it+1, it)
		if !strings.Contains(string(md), row) {
			t.Fatalf("progress.md lacks iteration %d (%q):\n%s", it, row, md)
		}
	}
	if _, err := os.Stat(filepath.Join(work, online.ProgressSVG)); err != nil {
		t.Fatal(err)
	}
	batch, err := train.ReadJSONL[train.GRPORecord](filepath.Join(work, "iter-0002", "batch.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{}
	for _, r := range batch {
		if r.PolicyVersion < 1 {
			t.Fatalf("stale v%d sample in the v2 batch", r.PolicyVersion)
		}
		sums[r.GroupID] += r.Advantage
	}
	for g, s := range sums {
		if math.Abs(s) > 1e-9 {
			t.Fatalf("group %s advantages sum to %v", g, s)
		}
	}

	// One announcement per version, despite the resume.
	follow, err := bus.Follow[schemas.PolicyVersion](ctx, env.Conn, schemas.StreamPolicy, "")
	if err != nil {
		t.Fatal(err)
	}
	var versions []int
	for m, err := range follow.Available() {
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, m.Value.Version)
	}
	if follow.Skipped() > 0 {
		t.Fatalf("%d policy announcements do not decode", follow.Skipped())
	}
	if !slices.Equal(versions, []int{1, 2, 3}) {
		t.Fatalf("policy announcements %v, want [1 2 3]", versions)
	}
}
