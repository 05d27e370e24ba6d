package systemtest

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/big"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/cmd/medgym/cli"
	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
	"github.com/medgym/medgym/services/llm-worker/fakellm"
	"github.com/medgym/medgym/store/query"
)

// queriesDoc is the guide whose SQL TestQueryGuide runs.
const queriesDoc = "docs/how-to/query-trajectories.md"

// guideQueries returns the ```sql blocks of the how-to guide on querying
// trajectories (docs/how-to/query-trajectories.md), in order.
func guideQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), queriesDoc))
	if err != nil {
		t.Fatal(err)
	}
	sec := string(b)
	var out []string
	for {
		_, rest, ok := strings.Cut(sec, "```sql\n")
		if !ok {
			return out
		}
		q, after, ok := strings.Cut(rest, "```")
		if !ok {
			t.Fatal("unterminated ```sql block in " + queriesDoc)
		}
		out = append(out, q)
		sec = after
	}
}

// num reads a DuckDB numeric value.
func num(t *testing.T, v any) float64 {
	t.Helper()
	switch x := v.(type) {
	case int64:
		return float64(x)
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		return f
	case int32:
		return float64(x)
	case float64:
		return x
	case float32:
		return float64(x)
	}
	t.Fatalf("value %v (%T) is not a number", v, v)
	return 0
}

// TestQueryGuide runs the query guide's four queries (success rate by
// dataset and model, Pass@K per task, turn-count distribution, EHRSQL
// 2024's reliability score) over a
// store holding two real runs, one with the reference policy and one with
// a fake model that is right half the time over three samples, and checks
// every number against the rows.
func TestQueryGuide(t *testing.T) {
	qs := guideQueries(t)
	if len(qs) != 4 {
		t.Fatalf("the query guide has %d SQL blocks, want 4", len(qs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	f := baseFlags(t)
	f.Limit, f.Seed, f.Samples, f.RunID = 3, 11, 2, "q-ref"
	spec, err := f.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RunSpec(ctx, spec, f, io.Discard); err != nil {
		t.Fatal(err)
	}
	refs, err := cli.ReferenceIndex(ctx, f.Data, []string{"medcalcbench"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(fakellm.New(fakellm.Config{Policy: fakellm.PolicyReference, PCorrect: 0.5, GarbageRate: 0.3,
		Seed: 5, References: refs, Model: "fake-model"}))
	defer srv.Close()
	g := baseFlags(t)
	g.Store = f.Store
	g.Limit, g.Seed, g.Samples, g.MaxTurns, g.RunID = 4, 11, 3, 3, "q-fake"
	g.Policy, g.LLMURL, g.Model = "openai", srv.URL+"/v1", "fake-model"
	spec, err = g.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RunSpec(ctx, spec, g, io.Discard); err != nil {
		t.Fatal(err)
	}
	rows := append(readRun(t, ctx, f.Store, "q-ref"), readRun(t, ctx, f.Store, "q-fake")...)
	if len(rows) != 6+12 {
		t.Fatalf("%d rows, want 18", len(rows))
	}
	outcomes, turnCounts := map[string]bool{}, map[int32]bool{}
	for _, r := range rows {
		outcomes[r.Outcome], turnCounts[r.NumTurns] = true, true
	}
	if len(outcomes) < 2 || len(turnCounts) < 2 {
		t.Logf("weak fixture: outcomes %v, turn counts %v", outcomes, turnCounts)
	}
	scored := rows[:0:0]
	for _, r := range rows {
		if r.Outcome != "infra_failure" {
			scored = append(scored, r)
		}
	}
	correct := func(r parquet.Row) float64 {
		if r.Outcome == "correct" {
			return 1
		}
		return 0
	}
	run := func(t *testing.T, q string) ([]string, [][]any) {
		t.Helper()
		cols, res, err := query.Query(ctx, f.Store, q)
		if err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
		return cols, res
	}
	near := func(t *testing.T, what string, got any, want float64, tol float64) {
		t.Helper()
		if g := num(t, got); math.Abs(g-want) > tol {
			t.Errorf("%s = %v, want %v", what, g, want)
		}
	}

	t.Run("success rate by dataset and model", func(t *testing.T) {
		type key struct{ dataset, model string }
		type agg struct{ n, c float64 }
		want := map[key]*agg{}
		for _, r := range scored {
			k := key{r.Dataset, r.Model}
			if want[k] == nil {
				want[k] = &agg{}
			}
			want[k].n++
			want[k].c += correct(r)
		}
		cols, res := run(t, qs[0])
		if strings.Join(cols, ",") != "dataset,model,episodes,correct,success_rate" {
			t.Fatalf("columns %v", cols)
		}
		if len(res) != len(want) || len(res) != 2 {
			t.Fatalf("%d groups, want %d (two models)", len(res), len(want))
		}
		for _, r := range res {
			k := key{fmt.Sprint(r[0]), fmt.Sprint(r[1])}
			w := want[k]
			if w == nil {
				t.Fatalf("unexpected group %v", k)
			}
			near(t, fmt.Sprint(k, " episodes"), r[2], w.n, 0)
			near(t, fmt.Sprint(k, " correct"), r[3], w.c, 0)
			near(t, fmt.Sprint(k, " success_rate"), r[4], w.c/w.n, 1e-9)
		}
	})

	t.Run("pass at k per task", func(t *testing.T) {
		type key struct{ run, task string }
		type agg struct{ n, c float64 }
		want := map[key]*agg{}
		var order []key
		for _, r := range scored {
			k := key{r.RunID, r.TaskID}
			if want[k] == nil {
				want[k] = &agg{}
				order = append(order, k)
			}
			want[k].n++
			want[k].c += correct(r)
		}
		sort.Slice(order, func(i, j int) bool {
			if order[i].run != order[j].run {
				return order[i].run < order[j].run
			}
			return order[i].task < order[j].task
		})
		cols, res := run(t, qs[1])
		if strings.Join(cols, ",") != "run_id,task_id,k,correct,pass_at_k,pass_at_1" {
			t.Fatalf("columns %v", cols)
		}
		if len(res) != len(order) || len(res) != 3+4 {
			t.Fatalf("%d tasks, want %d", len(res), len(order))
		}
		for i, r := range res {
			k := key{fmt.Sprint(r[0]), fmt.Sprint(r[1])}
			if k != order[i] {
				t.Fatalf("row %d is %v, want %v (ORDER BY run_id, task_id)", i, k, order[i])
			}
			w := want[k]
			pass := 0.0
			if w.c > 0 {
				pass = 1
			}
			near(t, fmt.Sprint(k, " k"), r[2], w.n, 0)
			near(t, fmt.Sprint(k, " correct"), r[3], w.c, 0)
			near(t, fmt.Sprint(k, " pass_at_k"), r[4], pass, 0)
			near(t, fmt.Sprint(k, " pass_at_1"), r[5], w.c/w.n, 1e-9)
		}
	})

	t.Run("turn count distribution", func(t *testing.T) {
		want := map[int32]float64{}
		for _, r := range rows {
			want[r.NumTurns]++
		}
		cols, res := run(t, qs[2])
		if strings.Join(cols, ",") != "num_turns,episodes,pct" {
			t.Fatalf("columns %v", cols)
		}
		if len(res) != len(want) {
			t.Fatalf("%d turn counts, want %d", len(res), len(want))
		}
		prev, total := -1.0, 0.0
		for _, r := range res {
			n := num(t, r[0])
			if n <= prev {
				t.Fatalf("turn counts not in ascending order: %v after %v", n, prev)
			}
			prev = n
			w := want[int32(n)]
			near(t, fmt.Sprintf("episodes with %v turns", n), r[1], w, 0)
			near(t, fmt.Sprintf("pct with %v turns", n), r[2], math.Round(1000*w/float64(len(rows)))/10, 1e-9)
			total += num(t, r[1])
		}
		if total != float64(len(rows)) {
			t.Fatalf("distribution covers %v episodes, want %d", total, len(rows))
		}
	})

	t.Run("reliability score", func(t *testing.T) {
		type key struct{ run, dataset string }
		type agg struct{ n, plus, minus float64 }
		want := map[key]*agg{}
		for _, r := range scored {
			k := key{r.RunID, r.Dataset}
			if want[k] == nil {
				want[k] = &agg{}
			}
			want[k].n++
			sc, _ := schemas.Outcome(r.Outcome).Reliability()
			switch sc {
			case 1:
				want[k].plus++
			case -1:
				want[k].minus++
			}
		}
		cols, res := run(t, qs[3])
		if strings.Join(cols, ",") != "run_id,dataset,n,success_rate,rs_0,rs_5,rs_10,rs_n" {
			t.Fatalf("columns %v", cols)
		}
		if len(res) != len(want) || len(res) != 2 {
			t.Fatalf("%d groups, want %d (two runs)", len(res), len(want))
		}
		for _, r := range res {
			k := key{fmt.Sprint(r[0]), fmt.Sprint(r[1])}
			w := want[k]
			if w == nil {
				t.Fatalf("unexpected group %v", k)
			}
			near(t, fmt.Sprint(k, " n"), r[2], w.n, 0)
			near(t, fmt.Sprint(k, " success_rate"), r[3], w.plus/w.n, 1e-9)
			for i, c := range []float64{0, 5, 10, w.n} {
				near(t, fmt.Sprint(k, " rs ", c), r[4+i], (w.plus-c*w.minus)/w.n, 1e-9)
			}
		}
		if w := want[key{"q-fake", "medcalcbench"}]; w == nil || w.minus == 0 {
			t.Logf("weak fixture: no wrong answers to penalise in %+v", w)
		}
	})
}
