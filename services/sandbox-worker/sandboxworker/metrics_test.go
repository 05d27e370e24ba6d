package sandboxworker

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/sandbox-worker/sandbox"
)

// TestSandboxMetrics: a scrape shows the sandbox's backend and limits and
// its actions by status, as Execute returned them.
func TestSandboxMetrics(t *testing.T) {
	root := sandboxRoot(t)
	sb, err := sandbox.New(t.Context(), sandbox.Config{WorkRoot: filepath.Join(root, "work")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(newSandboxCollector(sb))
	var earlier []schemas.Action
	for i, src := range []string{"print(1)", "raise SystemExit(2)", "print(3)"} {
		p, _ := json.Marshal(map[string]string{"code": src})
		a := schemas.Action{Name: schemas.ActionValidateCode, Params: p}
		// The third episode's first request is its turn 2: it replays the
		// two earlier actions (run on another worker).
		req := schemas.ActionRequest{Ref: schemas.EpisodeRef{RunID: "r", EpisodeID: "ep-" + string(rune('a'+i)), TaskID: "t", Dataset: "d"},
			Action: a, TimeoutSec: 20}
		if i == 2 {
			req.Ref.Turn, req.Replay = 2, earlier
		}
		earlier = append(earlier, a)
		if _, err := sb.Execute(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]*dto.Metric{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()
	}
	byStatus := map[string]float64{}
	for _, m := range got["medgym_sandbox_actions_total"] {
		byStatus[label(m, "status")] = m.GetCounter().GetValue()
	}
	if byStatus["ok"] != 2 || byStatus["error"] != 1 {
		t.Fatalf("medgym_sandbox_actions_total by status = %v, want ok 2, error 1", byStatus)
	}
	info := got["medgym_sandbox_info"]
	if len(info) != 1 || label(info[0], "backend") != "bwrap" || label(info[0], "limits") != sb.Stats().Limits ||
		label(info[0], "seccomp") != "true" || label(info[0], "disk_quota") != sb.Stats().DiskQuota {
		t.Fatalf("medgym_sandbox_info = %v", info)
	}
	if eps := got["medgym_sandbox_episodes"]; len(eps) != 1 || eps[0].GetGauge().GetValue() != 3 {
		t.Fatalf("medgym_sandbox_episodes = %v, want 3", eps)
	}
	if r := got["medgym_sandbox_replayed_actions_total"]; len(r) != 1 || r[0].GetCounter().GetValue() != 2 {
		t.Fatalf("medgym_sandbox_replayed_actions_total = %v, want 2", r)
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
