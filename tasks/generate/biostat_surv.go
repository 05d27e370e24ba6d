package generate

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/medgym/medgym/tasks/stats"
)

// survivalCands enumerates the survival tasks of a survival data set, plus
// its general (non-survival) tasks.
func survivalCands(t *bsTable, s survSpec) []bsCand {
	tc, ec := t.col[s.Time], t.col[s.Event]
	if tc == nil || ec == nil {
		return generalCands(t)
	}
	skip := map[string]bool{s.Time: true, s.Event: true, s.Sub: true}
	for _, k := range s.Skip {
		skip[k] = true
	}
	conts, groups := colVars(t, skip)
	inSub := func(i int) bool { return s.Sub == "" || t.col[s.Sub].is(i, s.SubVal) }
	rowsWith := func(cols ...*bsColumn) []int {
		var out []int
		for _, i := range t.complete(append([]*bsColumn{tc, ec}, cols...)...) {
			if inSub(i) {
				out = append(out, i)
			}
		}
		return out
	}
	timeEvent := func(rows []int) ([]float64, []bool) {
		ts, es := make([]float64, len(rows)), make([]bool, len(rows))
		for k, i := range rows {
			ts[k], es[k] = tc.Num[i], ec.is(i, s.EventVal)
		}
		return ts, es
	}
	sub, subPy, subVal := "", "None", "None"
	if s.Sub != "" {
		sub = fmt.Sprintf(" Use only the rows with %s = %s.", q(s.Sub), s.SubVal.text())
		subPy, subVal = pyString(s.Sub), s.SubVal.py()
	}
	pre := fmt.Sprintf("treat column %s as the follow-up time and an event as %s; other rows are censored at that time.%s Exclude rows with a missing value in any column used.",
		q(s.Time), s.EventText, sub)
	params := func(cols []string, extra ...[2]string) [][2]string {
		lits := make([]string, len(cols))
		for i, c := range cols {
			lits[i] = pyString(c)
		}
		p := [][2]string{{"T", pyString(s.Time)}, {"E", pyString(s.Event)}, {"EV", s.EventVal.py()},
			{"SUB", subPy}, {"SV", subVal}, {"COLS", "[" + strings.Join(lits, ", ") + "]"}}
		return append(p, extra...)
	}
	var out []bsCand
	add := func(cat, body, question string, v float64, p [][2]string) {
		out = append(out, bsCand{cat: cat, file: t.File, body: body, surv: true, value: v, question: pre + " " + question, params: p})
	}

	// Kaplan–Meier: overall, per group level, and survival at fixed times.
	kmMedian := func(rows []int) (float64, bool) {
		ts, es := timeEvent(rows)
		m, exact, ok := stats.KMMedian(stats.KaplanMeier(ts, es))
		return m, ok && !exact
	}
	const medText = "Estimate the Kaplan-Meier survival curve%s and report the median survival time, i.e. the smallest event time at which the estimated survival probability is at or below 0.5."
	if m, ok := kmMedian(rowsWith()); ok {
		add("km_median", "km", fmt.Sprintf(medText, " of all subjects"), m, params(nil, [2]string{"WHAT", `"median"`}, [2]string{"G", "None"}, [2]string{"A", "None"}, [2]string{"AT", "None"}))
	}
	for _, g := range groups {
		ls, _ := g.levels()
		for _, a := range ls {
			var rows []int
			for _, i := range rowsWith(g) {
				if g.is(i, a) {
					rows = append(rows, i)
				}
			}
			if len(rows) < 10 {
				continue
			}
			if m, ok := kmMedian(rows); ok {
				add("km_median", "km", fmt.Sprintf(medText, fmt.Sprintf(" of the subjects with %s = %s", q(g.Name), a.text())), m,
					params([]string{g.Name}, [2]string{"WHAT", `"median"`}, [2]string{"G", pyString(g.Name)}, [2]string{"A", a.py()}, [2]string{"AT", "None"}))
			}
		}
	}
	if rows := rowsWith(); len(rows) >= 10 {
		ts, es := timeEvent(rows)
		km := stats.KaplanMeier(ts, es)
		sorted := append([]float64(nil), ts...)
		sort.Float64s(sorted)
		for _, frac := range []float64{0.25, 0.5, 0.75} {
			at := math.Round(sorted[int(frac*float64(len(sorted)))])
			v := stats.KMSurvAt(km, at)
			if v <= 0 || v >= 1 {
				continue
			}
			add("km_surv_at", "km", fmt.Sprintf("Estimate the Kaplan-Meier survival curve of all subjects and report the estimated survival probability at time %g (the curve is right-continuous: events at exactly that time count).", at), v,
				params(nil, [2]string{"WHAT", `"surv"`}, [2]string{"G", "None"}, [2]string{"A", "None"}, [2]string{"AT", fmt.Sprintf("%g", at)}))
		}
	}

	// Log-rank tests across the levels of each grouping column.
	for _, g := range groups {
		rows := rowsWith(g)
		ls, _ := g.levels()
		gi := make([]int, len(rows))
		counts := make([]int, len(ls))
		for k, i := range rows {
			for j, l := range ls {
				if g.is(i, l) {
					gi[k] = j
					counts[j]++
				}
			}
		}
		if slicesMin(counts) < 5 {
			continue
		}
		ts, es := timeEvent(rows)
		r, err := stats.LogRank(ts, es, gi, len(ls))
		if err != nil || !finite(r.Stat) {
			continue
		}
		text := fmt.Sprintf("Run the log-rank test comparing survival across the %d levels of %s", len(ls), q(g.Name))
		p := params([]string{g.Name}, [2]string{"G", pyString(g.Name)})
		add("logrank_chisq", "logrank", text+" and report its chi-square statistic.", r.Stat, withParams(p, [2]string{"WHAT", `"stat"`}))
		if pOK(r.P) {
			add("logrank_p", "logrank", text+" and report its p-value.", r.P, withParams(p, [2]string{"WHAT", `"p"`}))
		}
	}

	// Cox models with one covariate: continuous, or a binary indicator.
	type cov struct {
		col  *bsColumn
		b    *level
		text string
	}
	var covs []cov
	for _, x := range conts {
		covs = append(covs, cov{x, nil, fmt.Sprintf("the numeric covariate %s", q(x.Name))})
	}
	for _, g := range groups {
		if ls, _ := g.levels(); len(ls) == 2 {
			covs = append(covs, cov{g, &ls[1], fmt.Sprintf("the indicator %s = %s (1 if equal, else 0)", q(g.Name), ls[1].text())})
		}
	}
	for _, c := range covs {
		rows := rowsWith(c.col)
		if len(rows) < 20 {
			continue
		}
		ts, es := timeEvent(rows)
		x := make([][]float64, len(rows))
		for k, i := range rows {
			v := c.col.Num[i]
			if c.b != nil {
				v = 0
				if c.col.is(i, *c.b) {
					v = 1
				}
			}
			x[k] = []float64{v}
		}
		fit, err := stats.Cox(ts, es, x)
		if err != nil {
			continue
		}
		// A Wald z beyond 25 (p < 1e-130) comes from huge risk sets where
		// statsmodels' PHReg overflows to nan: not a fair question.
		// A Wald z beyond 25 (p < 1e-130), or a risk set as large as
		// flchain's (~7,900 rows), makes statsmodels' PHReg (the Python
		// the agent has) overflow to nan: not a fair question.
		if fit.SE[0] <= 0 || math.Abs(fit.Coef[0]/fit.SE[0]) > 25 || len(ts) > 5000 {
			continue
		}
		bp := "None"
		if c.b != nil {
			bp = c.b.py()
		}
		text := "Fit a Cox proportional hazards model (Efron ties, as R's coxph default) on " + c.text
		p := params([]string{c.col.Name}, [2]string{"X", pyString(c.col.Name)}, [2]string{"B", bp})
		add("cox_hr", "cox", text+" and report its hazard ratio.", math.Exp(fit.Coef[0]), withParams(p, [2]string{"WHAT", `"hr"`}))
		if pOK(fit.P[0]) {
			add("cox_p", "cox", text+" and report the Wald test p-value of its coefficient.", fit.P[0], withParams(p, [2]string{"WHAT", `"p"`}))
		}
	}
	return append(out, generalCands(t)...)
}

// withParams returns a copy of p with extra appended (never aliasing p).
func withParams(p [][2]string, extra ...[2]string) [][2]string {
	return append(append([][2]string(nil), p...), extra...)
}
