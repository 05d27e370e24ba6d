package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/trainer/online"
	"github.com/medgym/medgym/services/trainer/trainertest"
	"github.com/medgym/medgym/services/trainer/worker"
	"github.com/medgym/medgym/store"
	"github.com/medgym/medgym/systemtest/testenv"
)

// TestOnlineLoopServesItsOwnPolicy: with python/serve.py as the serving
// engine (no vLLM), the loop samples from the model it trains: iteration 0
// from the base, iteration 1 from the adapter iteration 0 wrote, loaded
// over /v1/load_lora_adapter; every turn carries the server's token ids and
// logprobs.
func TestOnlineLoopServesItsOwnPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	py := trainertest.Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	env := testenv.Start(t, 2)
	srv := exec.CommandContext(ctx, py, filepath.Join("..", "..", "services", "trainer", "python", "serve.py"), "--backend", "tiny", "--port", "0")
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	var ready struct {
		Port int `json:"port"`
	}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &ready) != nil || ready.Port == 0 {
		t.Fatalf("serve.py ready line %q: %v", line, err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d/v1", ready.Port)
	work := t.TempDir()
	script, _ := filepath.Abs(filepath.Join("..", "..", "services", "trainer", "python", "worker.py"))
	steps, temp, seed := 1, 0.6, int64(0)
	cfg := online.Config{NATS: env.NATSURL, Store: env.Store, WorkDir: work, RunPrefix: "srv", Iterations: 2,
		Datasets: []string{"medcalcbench"}, Split: "test", TaskIDs: env.TaskIDs(), Samples: 2, Temperature: &temp, Seed: &seed,
		Episode: &schemas.EpisodeOptions{MaxTurns: 1, EndOn: schemas.EndOnAccepted, ActionTimeoutSec: 30},
		Serving: online.Serving{BaseURL: base, BaseModel: "tiny", AdapterPrefix: "srv", Logprobs: true, MaxTokens: 16},
		Train:   online.TrainCommand{Resident: []string{py, script, "--backend", "tiny"}, Recipe: worker.Recipe{Steps: &steps}},
		Stale:   online.Staleness{MaxLag: 1}, WaitTimeout: online.Duration(4 * time.Minute)}
	st, err := store.Open(ctx, env.Store, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := online.New(cfg, env.Conn, st, &out, slog.New(slog.NewTextHandler(io.Discard, nil))).Run(ctx); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for it, model := range []string{"tiny", "srv-v1"} {
		rows, err := st.ReadRun(ctx, fmt.Sprintf("srv-it%04d", it))
		if err != nil || len(rows) != 4 {
			t.Fatalf("run %d: %d rows, %v", it, len(rows), err)
		}
		for _, r := range rows {
			if r.Model != model || len(r.Turns) == 0 {
				t.Fatalf("run %d row sampled by %q with %d turns, want %s", it, r.Model, len(r.Turns), model)
			}
			for _, tn := range r.Turns {
				if len(tn.CompletionTokenIDs) == 0 || len(tn.CompletionLogprobs) != len(tn.CompletionTokenIDs) {
					t.Fatalf("turn without the server's token ids/logprobs: %d ids, %d logprobs", len(tn.CompletionTokenIDs), len(tn.CompletionLogprobs))
				}
			}
		}
	}
	resp, err := http.Get(base + "/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), `"srv-v1"`) || !strings.Contains(string(b), `"srv-v2"`) {
		t.Fatalf("served models: %s", b)
	}
}
