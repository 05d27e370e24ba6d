package systemtest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/bus"
	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
)

// dashboardExprs reads every PromQL expression and panel title of the
// Grafana dashboard in deploy/grafana.
func dashboardExprs(t *testing.T) (titles, exprs []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "grafana", "medgym-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	for _, p := range d.Panels {
		titles = append(titles, p.Title)
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	return titles, exprs
}

// TestDashboardMetricsExist (issue 17): every metric the Grafana dashboard
// queries is on a live /metrics scrape of the services after a run (the
// in-process services, which register the same metrics as the separate
// binaries), and the dashboard has the panels the issue asks for.
func TestDashboardMetricsExist(t *testing.T) {
	titles, exprs := dashboardExprs(t)
	for _, want := range []string{"Episodes scored per second", "Turn latency by stage", "Consumer lag", "Sandbox pool", "Outcomes"} {
		if !slices.ContainsFunc(titles, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("no %q panel in %q", want, titles)
		}
	}
	nameRE := regexp.MustCompile(`\bmedgym_[a-z_]+`)
	used := map[string]bool{}
	for _, e := range exprs {
		for _, n := range nameRE.FindAllString(e, -1) {
			used[n] = true
		}
	}
	if len(used) < 8 {
		t.Fatalf("the dashboard queries only %v", used)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := baseFlags(t)
	f.MetricsAddr = freeAddr(t)
	f.Sandbox.Sandbox.Warm = 1 // the pool's metrics
	f.Limit, f.RunID = 6, "dashboard"
	url, _ := startCluster(t, ctx, f.ServiceFlags, 0)
	f.NATS = url
	if _, err := cli.RunSpec(ctx, mustSpec(t, f), f, io.Discard); err != nil {
		t.Fatal(err)
	}
	// One junk message (what no handler can use) for the junk counter.
	conn, err := bus.Connect(ctx, url, "junk", cli.NewLogger(io.Discard, "error"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.PublishRaw(ctx, schemas.EpisodeScored.For("dashboard"), []byte("not a score")); err != nil {
		t.Fatal(err)
	}
	// The consumer gauges are polled every 2 s: wait for them.
	var page string
	for !strings.Contains(page, "medgym_queue_depth{") || !strings.Contains(page, "medgym_messages_junk_total{") {
		if ctx.Err() != nil {
			t.Fatalf("no consumer lag or junk count on /metrics:\n%s", page)
		}
		time.Sleep(200 * time.Millisecond)
		resp, err := http.Get("http://" + f.MetricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page = string(b)
	}
	onPage := map[string]bool{}
	for _, line := range strings.Split(page, "\n") {
		if n := nameRE.FindString(line); n != "" && strings.HasPrefix(line, n) {
			onPage[n] = true
		}
	}
	for n := range used {
		if !onPage[n] {
			t.Errorf("the dashboard queries %s, which no service exports (or none had a value after a run)", n)
		}
	}
}

func mustSpec(t *testing.T, f *cli.RunFlags) schemas.RunSpec {
	t.Helper()
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	return spec
}
