package report

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"fmt"
	"slices"
	"strings"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
)

// DefaultOOD are the datasets the paper evaluates out of distribution
// (Table 5: N-PowerAI among its external sets); every other dataset counts
// as in distribution (Table 3).
var DefaultOOD = []string{"npowerai"}

// Board is the paper's Table 3 shape over several runs: one row per model,
// its success rate on each dataset (infra failures excluded), the average
// over the datasets it has, and the averages over the in-distribution and
// out-of-distribution groups.
type Board struct {
	Datasets []string // columns, in-distribution first, each group sorted
	OOD      map[string]bool
	Rows     []BoardRow
}

// BoardRow is one model's line.
type BoardRow struct {
	Model   string
	Runs    []string
	Rate    map[string]float64 // by dataset; absent: no scored episode
	Scored  map[string]int
	Avg     float64
	AvgID   float64
	AvgOOD  float64
	HaveID  bool
	HaveOOD bool
}

// Leaderboard builds the board of rows (any number of runs); a model is
// the row's model name, or its policy when it has none (the reference
// policy).
func Leaderboard(rows []parquet.Row, ood []string) Board {
	b := Board{OOD: map[string]bool{}}
	for _, d := range ood {
		b.OOD[d] = true
	}
	type acc struct {
		runs          map[string]bool
		scored, right map[string]int
	}
	by := map[string]*acc{}
	datasets := map[string]bool{}
	for _, r := range rows {
		if schemas.Outcome(r.Outcome).Excluded() {
			continue
		}
		m := cmp.Or(r.Model, r.Policy)
		a := by[m]
		if a == nil {
			a = &acc{runs: map[string]bool{}, scored: map[string]int{}, right: map[string]int{}}
			by[m] = a
		}
		a.runs[r.RunID] = true
		a.scored[r.Dataset]++
		if schemas.Outcome(r.Outcome).Solved() {
			a.right[r.Dataset]++
		}
		datasets[r.Dataset] = true
	}
	for _, d := range sortedKeys(datasets) {
		if !b.OOD[d] {
			b.Datasets = append(b.Datasets, d)
		}
	}
	for _, d := range sortedKeys(datasets) {
		if b.OOD[d] {
			b.Datasets = append(b.Datasets, d)
		}
	}
	for _, m := range sortedKeys(by) {
		a := by[m]
		row := BoardRow{Model: m, Runs: sortedKeys(a.runs), Rate: map[string]float64{}, Scored: a.scored}
		var all, id, od []float64
		for _, d := range b.Datasets {
			if a.scored[d] == 0 {
				continue
			}
			r := ratio(a.right[d], a.scored[d])
			row.Rate[d] = r
			all = append(all, r)
			if b.OOD[d] {
				od = append(od, r)
			} else {
				id = append(id, r)
			}
		}
		row.Avg, row.AvgID, row.AvgOOD = avg(all), avg(id), avg(od)
		row.HaveID, row.HaveOOD = len(id) > 0, len(od) > 0
		b.Rows = append(b.Rows, row)
	}
	slices.SortStableFunc(b.Rows, func(x, y BoardRow) int { return cmp.Compare(y.Avg, x.Avg) })
	return b
}

func avg(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func (b Board) cells(r BoardRow) []string {
	out := []string{r.Model}
	for _, d := range b.Datasets {
		if _, ok := r.Rate[d]; ok {
			out = append(out, fmt.Sprintf("%.2f", 100*r.Rate[d]))
		} else {
			out = append(out, "")
		}
	}
	opt := func(ok bool, v float64) string {
		if !ok {
			return ""
		}
		return fmt.Sprintf("%.2f", 100*v)
	}
	return append(out, opt(r.HaveID, r.AvgID), opt(r.HaveOOD, r.AvgOOD), fmt.Sprintf("%.2f", 100*r.Avg))
}

func (b Board) header() []string {
	h := []string{"model"}
	for _, d := range b.Datasets {
		if b.OOD[d] {
			h = append(h, d+" (OOD)")
		} else {
			h = append(h, d)
		}
	}
	return append(h, "avg in-distribution", "avg out-of-distribution", "avg")
}

// Markdown renders the board as a table (success rates in %).
func (b Board) Markdown() string {
	var s strings.Builder
	s.WriteString("# Leaderboard\n\nSuccess rate (%) per dataset, infra failures excluded; averages are unweighted over the datasets a model has. ")
	fmt.Fprintf(&s, "Out of distribution: %s.\n\n", strings.Join(sortedKeys(b.OOD), ", "))
	h := b.header()
	s.WriteString("| " + strings.Join(h, " | ") + " |\n|---|" + strings.Repeat("---:|", len(h)-1) + "\n")
	for _, r := range b.Rows {
		s.WriteString("| " + strings.Join(b.cells(r), " | ") + " |\n")
	}
	return s.String()
}

// CSV renders the board with the same columns as Markdown.
func (b Board) CSV() ([]byte, error) {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	if err := w.Write(b.header()); err != nil {
		return nil, fmt.Errorf("leaderboard csv: %w", err)
	}
	for _, r := range b.Rows {
		if err := w.Write(b.cells(r)); err != nil {
			return nil, fmt.Errorf("leaderboard csv: %w", err)
		}
	}
	w.Flush()
	return buf.Bytes(), w.Error()
}
