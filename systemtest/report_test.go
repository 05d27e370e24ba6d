package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
)

// byTemperature routes each chat request to one of the fakes by the
// request's temperature, so the K samples of a task (one temperature each)
// get different replies: one fake alone answers a conversation the same way
// every time.
func byTemperature(temps []float64, fakes []http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct{ Temperature *float64 }
		_ = json.Unmarshal(body, &req)
		i := 0
		for j, t := range temps {
			if req.Temperature != nil && *req.Temperature == t {
				i = j
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		fakes[i].ServeHTTP(w, r)
	})
}

// TestReportOnRealRun runs 8 tasks × K=3 samples through the whole pipeline
// (fake model answering with the reference solution part of the time, some
// garbage, some 500s with no retries (-1) for infra failures), writes the report
// with `medgym report`, and checks its numbers against the stored rows,
// computed here independently, and that every SVG is well-formed XML.
func TestReportOnRealRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := baseFlags(t)
	refs, err := cli.ReferenceIndex(ctx, f.Data, []string{"medcalcbench"})
	if err != nil {
		t.Fatal(err)
	}
	temps := []float64{0, 0.5, 1}
	var fakes []http.Handler
	for i := range temps {
		fakes = append(fakes, fakellm.New(fakellm.Config{Policy: "reference", PCorrect: 0.5, GarbageRate: 0.4,
			ErrorRate500: 0.08, Seed: int64(11 + i), References: refs, Model: "fake"}))
	}
	// Its 500s say x-should-retry: false, so each is an infra_failure
	// whatever the other episodes' calls get (the llm-worker waits out an
	// endpoint that fails every call).
	srv := httptest.NewServer(noRetry(byTemperature(temps, fakes)))
	defer srv.Close()
	f.Policy, f.LLMURL, f.Model, f.RunID = "openai", srv.URL+"/v1", "fake", "report-e2e"
	f.Limit, f.Seed, f.Samples, f.Temperatures, f.MaxTurns, f.LLM.LLM.MaxRetries = 8, 3, 3, "0,0.5,1", 3, 0
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err != nil {
		t.Fatal(err)
	}
	rows := readRun(t, ctx, f.Store, f.RunID)
	if len(rows) != 24 {
		t.Fatalf("%d rows, want 24", len(rows))
	}

	out := filepath.Join(t.TempDir(), "report")
	var stdout bytes.Buffer
	if err := cli.Run(ctx, []string{"report", "--store", f.Store, "--run", f.RunID, "--out", out,
		"--price-in", "2.5", "--price-out", "10"}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	mdb, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(mdb)
	want := func(line string) {
		t.Helper()
		if !strings.Contains(md, "\n"+line+"\n") {
			t.Errorf("report.md lacks the line %q", line)
		}
	}
	pct := func(a, b int) string {
		if b == 0 {
			return "0.0%"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
	}

	// Outcomes, success per dataset and category, tokens, turns, actions.
	outcomes := map[string]int{}
	type grp struct{ n, scored, correct int }
	ds, cat := map[string]*grp{}, map[string]*grp{}
	turns, actions := map[int32]int{}, map[string]int{}
	var pt, ct int64
	for _, r := range rows {
		outcomes[r.Outcome]++
		for _, g := range []*grp{get(ds, r.Dataset), get(cat, r.Dataset+"/"+r.Category)} {
			g.n++
			if r.Outcome != "infra_failure" {
				g.scored++
			}
			if r.Outcome == "correct" {
				g.correct++
			}
		}
		turns[r.NumTurns]++
		for _, tr := range r.Turns {
			pt += int64(tr.PromptTokens)
			ct += int64(tr.CompletionTokens)
			switch {
			case tr.ParseError != "":
				actions["parse_error"]++
			case tr.Action == "":
				actions["other"]++
			default:
				actions[tr.Action]++
			}
		}
	}
	if outcomes["correct"] == 0 || outcomes["infra_failure"] == 0 || outcomes["correct"]+outcomes["infra_failure"] == len(rows) {
		t.Fatalf("outcomes %v: the run should mix correct, infra_failure and other outcomes", outcomes)
	}
	for _, o := range schemas.Outcomes {
		want(fmt.Sprintf("| %s | %d | %s |", o, outcomes[string(o)], pct(outcomes[string(o)], len(rows))))
	}
	for name, g := range ds {
		want(fmt.Sprintf("| %s | %d | %d | %d | %s |", name, g.n, g.scored, g.correct, pct(g.correct, g.scored)))
	}
	for name, g := range cat {
		want(fmt.Sprintf("| %s | %d | %d | %d | %s |", name, g.n, g.scored, g.correct, pct(g.correct, g.scored)))
	}
	for n, c := range turns {
		want(fmt.Sprintf("| %d | %d |", n, c))
	}
	for _, a := range []string{"validate_code", "request_info", "terminal", "debug", "answer", "parse_error", "other"} {
		want(fmt.Sprintf("| %s | %d |", a, actions[a]))
	}
	if actions["validate_code"] == 0 || actions["parse_error"] == 0 {
		t.Errorf("action mix %v: want code runs and parse errors", actions)
	}
	if pt == 0 || ct == 0 {
		t.Fatalf("no tokens in the rows: %d/%d", pt, ct)
	}
	want(fmt.Sprintf("| tokens | %d | %d | %d |", pt, ct, pt+ct))
	want(fmt.Sprintf("| per episode (mean) | %.1f | %.1f | %.1f |", float64(pt)/24, float64(ct)/24, float64(pt+ct)/24))
	want(fmt.Sprintf("Cost: $%.4f at $2.5 per 1M prompt tokens and $10 per 1M completion tokens.", float64(pt)/1e6*2.5+float64(ct)/1e6*10))

	// Pass@k by brute force over every k-subset of each task's scored
	// samples; Best@k by the documented selector over the first k.
	type key struct{ ds, id string }
	samples := map[key][]parquet.Row{}
	for _, r := range rows {
		if r.Outcome != "infra_failure" {
			samples[key{r.Dataset, r.TaskID}] = append(samples[key{r.Dataset, r.TaskID}], r)
		}
	}
	for k := 1; k <= 3; k++ {
		tasks, pass, best := 0, 0.0, 0.0
		for _, s := range samples {
			if len(s) < k {
				continue
			}
			tasks++
			hit, all := 0, 0
			for mask := 0; mask < 1<<len(s); mask++ {
				if bitCount(mask) != k {
					continue
				}
				all++
				for i := range s {
					if mask&(1<<i) != 0 && s[i].Outcome == "correct" {
						hit++
						break
					}
				}
			}
			pass += float64(hit) / float64(all)
			first := map[int32]parquet.Row{}
			for _, r := range s {
				first[r.SampleIndex] = r
			}
			var pick *parquet.Row
			for idx, taken := int32(0), 0; taken < k; idx++ {
				r, ok := first[idx]
				if !ok {
					continue
				}
				taken++
				ends := r.Termination == "accepted" || r.Termination == "answered"
				if pick == nil {
					pick = &r
					continue
				}
				pe := pick.Termination == "accepted" || pick.Termination == "answered"
				if (ends && !pe) || (ends == pe && r.NumTurns < pick.NumTurns) {
					pick = &r
				}
			}
			if pick.Outcome == "correct" {
				best++
			}
		}
		want(fmt.Sprintf("| %d | %d | %.3f | %.3f |", k, tasks, pass/math.Max(1, float64(tasks)), best/math.Max(1, float64(tasks))))
	}

	// Every SVG the report links is there and well-formed.
	svgs, _ := filepath.Glob(filepath.Join(out, "*.svg"))
	if len(svgs) != 6 {
		t.Fatalf("%d SVG files, want 6", len(svgs))
	}
	for _, p := range svgs {
		if !strings.Contains(md, "]("+filepath.Base(p)+")") {
			t.Errorf("report.md does not link %s", filepath.Base(p))
		}
		checkSVG(t, p)
	}
	if os.Getenv("MEDGYM_REPORT_KEEP") != "" {
		_ = os.CopyFS(os.Getenv("MEDGYM_REPORT_KEEP"), os.DirFS(out))
	}
	if !strings.Contains(stdout.String(), "24 episodes") {
		t.Errorf("stdout %q", stdout.String())
	}
}

func get[T any](m map[string]*T, k string) *T {
	if m[k] == nil {
		m[k] = new(T)
	}
	return m[k]
}

func bitCount(x int) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// checkSVG parses path as XML to the end and checks the root is <svg>.
func checkSVG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: not well-formed XML: %v", filepath.Base(path), err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
			if se.Name.Space != "http://www.w3.org/2000/svg" {
				t.Errorf("%s: namespace %q", filepath.Base(path), se.Name.Space)
			}
		}
	}
	if root != "svg" {
		t.Errorf("%s: root element %q, want svg", filepath.Base(path), root)
	}
}

func TestReportNeedsRun(t *testing.T) {
	err := cli.Run(context.Background(), []string{"report", "--store", t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--run") {
		t.Fatalf("err = %v, want one naming --run", err)
	}
}

// noRetry marks h's 5xx answers x-should-retry: false.
func noRetry(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(noRetryWriter{w}, r)
	})
}

type noRetryWriter struct{ http.ResponseWriter }

func (w noRetryWriter) WriteHeader(status int) {
	if status >= 500 {
		w.Header().Set("x-should-retry", "false")
	}
	w.ResponseWriter.WriteHeader(status)
}
