package generate

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks/stats"

	"github.com/medgym/medgym/tasks"
)

// BiostatDataset is the name of the generated biostatistics task set.
const BiostatDataset = "biostat"

// biostatInstruction is the dataset-level instruction.
const biostatInstruction = "You are a biostatistician. The data sets are CSV files under /data/biostat (read them " +
	"with pandas; missing values are empty cells). Write Python code that performs the requested analysis " +
	"exactly as specified (column names, groups, subsets, missing-value handling) and print only the final " +
	"answer, as a single number on the last line of output. You may use pandas, numpy, scipy and statsmodels."

// bsReport is the answer format every numeric biostat question ends with.
const bsReport = " Print only the number, with at least 4 significant digits (relative tolerance 0.1%)."

// bsTolerance is the relative tolerance of numeric biostat answers.
const bsTolerance = 1e-3

// bsPerCell caps the tasks of one category drawn from one file.
const bsPerCell = 4

// bsActions are the actions a biostat or npowerai agent may use.
var bsActions = []string{"validate_code", "debug", "terminal", "answer"}

// bsIDLike matches identifier columns that make no sense as variables.
var bsIDLike = regexp.MustCompile(`(?i)^(rowname|id|pid|obs|patient|patientid|subject|seqno|study|pair|litter|inst|instit|enum)$`)

// survSpec says how a survival data set encodes time and event.
type survSpec struct {
	File, Time, Event string
	EventVal          level
	EventText         string
	// Sub, when set, keeps only rows with Sub == SubVal.
	Sub    string
	SubVal level
	// Skip lists other outcome columns not to use as covariates.
	Skip []string
}

func num(v float64) level  { return level{kind: kindNumber, num: v} }
func strLv(s string) level { return level{kind: kindString, str: s} }
func boolLv(b bool) level {
	if b {
		return level{kind: kindBool, num: 1}
	}
	return level{kind: kindBool}
}

// bsSurvival lists the survival data sets and their event definitions.
var bsSurvival = []survSpec{
	{File: "survival_lung.csv", Time: "time", Event: "status", EventVal: num(2), EventText: "death (status = 2; status = 1 is censored)"},
	{File: "survival_veteran.csv", Time: "time", Event: "status", EventVal: num(1), EventText: "death (status = 1; 0 is censored)"},
	{File: "survival_pbc.csv", Time: "time", Event: "status", EventVal: num(2), EventText: "death (status = 2; 0 censored and 1 transplant are treated as censored)"},
	{File: "survival_colon.csv", Time: "time", Event: "status", EventVal: num(1), EventText: "the event (status = 1)", Sub: "etype", SubVal: num(2)},
	{File: "survival_ovarian.csv", Time: "futime", Event: "fustat", EventVal: num(1), EventText: "death (fustat = 1)"},
	{File: "survival_aml.csv", Time: "time", Event: "status", EventVal: num(1), EventText: "relapse (status = 1)"},
	{File: "survival_gbsg.csv", Time: "rfstime", Event: "status", EventVal: num(1), EventText: "recurrence or death (status = 1)"},
	{File: "survival_rotterdam.csv", Time: "dtime", Event: "death", EventVal: num(1), EventText: "death (death = 1)", Skip: []string{"rtime", "recur"}},
	{File: "survival_mgus2.csv", Time: "futime", Event: "death", EventVal: num(1), EventText: "death (death = 1)", Skip: []string{"ptime", "pstat"}},
	{File: "survival_flchain.csv", Time: "futime", Event: "death", EventVal: num(1), EventText: "death (death = 1)", Skip: []string{"chapter"}},
	{File: "survival_myeloid.csv", Time: "futime", Event: "death", EventVal: num(1), EventText: "death (death = 1)", Skip: []string{"txtime", "crtime", "rltime"}},
	{File: "survival_udca1.csv", Time: "futime", Event: "status", EventVal: num(1), EventText: "treatment failure (status = 1)"},
	{File: "survival_transplant.csv", Time: "futime", Event: "event", EventVal: strLv("death"), EventText: `death (event = "death"; every other outcome is treated as censored)`},
	{File: "survival_stanford2.csv", Time: "time", Event: "status", EventVal: num(1), EventText: "death (status = 1)"},
	{File: "survival_kidney.csv", Time: "time", Event: "status", EventVal: num(1), EventText: "infection (status = 1)"},
	{File: "survival_rats.csv", Time: "time", Event: "status", EventVal: num(1), EventText: "tumour (status = 1)"},
	{File: "survival_diabetic.csv", Time: "time", Event: "status", EventVal: num(1), EventText: "vision loss (status = 1)"},
	{File: "survival_retinopathy.csv", Time: "futime", Event: "status", EventVal: num(1), EventText: "vision loss (status = 1)"},
	{File: "KMsurv_bmt.csv", Time: "t2", Event: "d3", EventVal: num(1), EventText: "death or relapse (d3 = 1)", Skip: []string{"t1", "d1", "d2", "ta", "da", "tc", "dc", "tp", "dp"}},
	{File: "KMsurv_larynx.csv", Time: "time", Event: "delta", EventVal: num(1), EventText: "death (delta = 1)"},
	{File: "KMsurv_tongue.csv", Time: "time", Event: "delta", EventVal: num(1), EventText: "death (delta = 1)"},
	{File: "KMsurv_kidtran.csv", Time: "time", Event: "delta", EventVal: num(1), EventText: "death (delta = 1)"},
	{File: "KMsurv_hodg.csv", Time: "time", Event: "delta", EventVal: num(1), EventText: "death or relapse (delta = 1)"},
	{File: "KMsurv_btrial.csv", Time: "time", Event: "death", EventVal: num(1), EventText: "death (death = 1)"},
	{File: "KMsurv_alloauto.csv", Time: "time", Event: "delta", EventVal: num(1), EventText: "death or relapse (delta = 1)"},
	{File: "KMsurv_kidney.csv", Time: "time", Event: "delta", EventVal: num(1), EventText: "infection (delta = 1)"},
	{File: "KMsurv_bfeed.csv", Time: "duration", Event: "delta", EventVal: num(1), EventText: "completed breast feeding (delta = 1)"},
	{File: "KMsurv_burn.csv", Time: "T3", Event: "D3", EventVal: num(1), EventText: "staphylococcus infection (D3 = 1)", Skip: []string{"T1", "D1", "T2", "D2"}},
	{File: "MASS_Melanoma.csv", Time: "time", Event: "status", EventVal: num(1), EventText: "death from melanoma (status = 1; 2 alive and 3 other deaths are censored)", Skip: []string{"year"}},
	{File: "MASS_VA.csv", Time: "stime", Event: "status", EventVal: num(1), EventText: "death (status = 1)"},
	{File: "MASS_gehan.csv", Time: "time", Event: "cens", EventVal: num(1), EventText: "relapse (cens = 1)"},
	{File: "HSAUR3_mastectomy.csv", Time: "time", Event: "event", EventVal: boolLv(true), EventText: "death (event = TRUE)"},
}

// pairedSpec is a pair of repeated measurements in one file.
type pairedSpec struct {
	File, X1, X2, Desc string
	Group              string // optional grouping column for per-level tests
}

var bsPaired = []pairedSpec{
	{File: "MASS_anorexia.csv", X1: "Prewt", X2: "Postwt", Desc: "weight before and after treatment", Group: "Treat"},
	{File: "HSAUR3_BtheB.csv", X1: "bdi.pre", X2: "bdi.2m", Desc: "Beck Depression Inventory before and at 2 months", Group: "treatment"},
	{File: "HSAUR3_BtheB.csv", X1: "bdi.pre", X2: "bdi.3m", Desc: "Beck Depression Inventory before and at 3 months", Group: "treatment"},
	{File: "HSAUR3_BtheB.csv", X1: "bdi.2m", X2: "bdi.8m", Desc: "Beck Depression Inventory at 2 and at 8 months", Group: "drug"},
	{File: "HSAUR3_CHFLS.csv", X1: "A_height", X2: "R_height", Desc: "heights of partner and respondent", Group: "R_region"},
	{File: "KMsurv_drug6mp.csv", X1: "t1", X2: "t2", Desc: "remission times of placebo (t1) and 6-MP (t2) patients in matched pairs", Group: "remstat"},
}

// bsCand is one candidate biostat task before splitting.
type bsCand struct {
	cat, file, question string
	params              [][2]string // Python name, literal
	body                string
	surv                bool
	value               float64
	integer             bool
}

// generateBiostat is the biostat Generator.
func generateBiostat(ctx context.Context, dataRoot, dir string) error {
	src := filepath.Join(dataRoot, "biostat")
	ents, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("biostat: %w", err)
	}
	survOf := map[string]survSpec{}
	for _, s := range bsSurvival {
		survOf[s.File] = s
	}
	var cands []bsCand
	var files []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".rst") {
			files = append(files, e.Name()) // data set descriptions
		}
		if !strings.HasSuffix(e.Name(), ".csv") {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		files = append(files, e.Name())
		t, err := readBSTable(filepath.Join(src, e.Name()), e.Name())
		if err != nil {
			return fmt.Errorf("biostat: %w", err)
		}
		var cs []bsCand
		if s, ok := survOf[e.Name()]; ok {
			cs = survivalCands(t, s)
		} else {
			cs = generalCands(t)
		}
		for _, p := range bsPaired {
			if p.File == e.Name() {
				cs = append(cs, pairedCands(t, p)...)
			}
		}
		cands = append(cands, capCells(cs, bsPerCell)...)
	}
	train, test := splitByCategory(BiostatDataset, cands, biostatTask)
	if err := tasks.WriteTasks(filepath.Join(dir, "train.jsonl"), train); err != nil {
		return fmt.Errorf("biostat: %w", err)
	}
	if err := tasks.WriteTasks(filepath.Join(dir, "test.jsonl"), test); err != nil {
		return fmt.Errorf("biostat: %w", err)
	}
	for _, f := range append(files, "PROVENANCE.md") {
		if err := copyFile(filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
			return fmt.Errorf("biostat: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "LICENSE.md"), []byte(biostatLicense), 0o644); err != nil {
		return fmt.Errorf("biostat: %w", err)
	}
	return nil
}

const biostatLicense = `# biostat task set: sources and licences

The CSV files are R and scikit-learn data sets as shipped in Debian (see PROVENANCE.md):

- survival_*.csv: R package survival 3.5-3 (Therneau), LGPL (>= 2).
- KMsurv_*.csv: R package KMsurv 0.1-5 (Klein & Moeschberger), GPL (>= 3).
- MASS_*.csv: R package MASS 7.3-58.2 (Venables & Ripley), GPL-2 | GPL-3.
- HSAUR3_*.csv: R package HSAUR3 1.0-13 (Everitt & Hothorn), GPL-2.
- sklearn_*.csv: scikit-learn 1.2.1 bundled data, BSD-3-Clause.

The questions, answers and reference solutions are generated by medgym.
`

// copyFile copies src to dst.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// seededRand returns a generator seeded from the key, so orders do not
// depend on map iteration or on other cells.
func seededRand(key string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(key))
	return rand.New(rand.NewPCG(h.Sum64(), 20250604))
}

// capCells keeps at most n candidates per category of one file, a seeded
// random choice that keeps the original order.
func capCells(cs []bsCand, n int) []bsCand {
	byCat := map[string][]int{}
	var cats []string
	for i, c := range cs {
		if _, ok := byCat[c.cat]; !ok {
			cats = append(cats, c.cat)
		}
		byCat[c.cat] = append(byCat[c.cat], i)
	}
	keep := map[int]bool{}
	seen := map[string]bool{}
	for _, cat := range cats {
		idx := byCat[cat]
		r := seededRand(cs[idx[0]].file + "/" + cat)
		r.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		k := 0
		for _, i := range idx {
			if k == n {
				break
			}
			if seen[cs[i].question] {
				continue
			}
			seen[cs[i].question] = true
			keep[i] = true
			k++
		}
	}
	var out []bsCand
	for i, c := range cs {
		if keep[i] {
			out = append(out, c)
		}
	}
	return out
}

// splitByCategory numbers each category's candidates and sends a seeded
// 20 % of every category to test, the rest to train.
func splitByCategory[C any](dataset string, cs []C, build func(c C, id, split string) tasks.Task) (train, test []tasks.Task) {
	byCat := map[string][]C{}
	var cats []string
	for _, c := range cs {
		cat := build(c, "", "").View.Category
		if _, ok := byCat[cat]; !ok {
			cats = append(cats, cat)
		}
		byCat[cat] = append(byCat[cat], c)
	}
	sort.Strings(cats)
	for _, cat := range cats {
		list := byCat[cat]
		order := seededRand(dataset + "/split/" + cat).Perm(len(list))
		nTest := (len(list) + 2) / 5
		isTest := map[int]bool{}
		for _, i := range order[:nTest] {
			isTest[i] = true
		}
		for i, c := range list {
			id := fmt.Sprintf("%s-%s-%04d", dataset, cat, i)
			if isTest[i] {
				test = append(test, build(c, id, "test"))
			} else {
				train = append(train, build(c, id, "train"))
			}
		}
	}
	return train, test
}

// biostatTask turns a candidate into a Task.
func biostatTask(c bsCand, id, split string) tasks.Task {
	var ref strings.Builder
	ref.WriteString("FILE = " + pyString(c.file) + "\n")
	for _, p := range c.params {
		ref.WriteString(p[0] + " = " + p[1] + "\n")
	}
	ref.WriteString("\n" + bsPrelude)
	if c.surv {
		ref.WriteString(bsSurvPrelude)
	}
	ref.WriteString("\n" + bsBodies[c.body])
	q := "Using the data file /data/biostat/" + c.file + ": " + c.question
	tr := tasks.Truth{Type: schemas.AnswerNumber, Answer: strconv.FormatFloat(c.value, 'g', 10, 64), Tolerance: bsTolerance}
	if c.integer {
		tr = tasks.Truth{Type: schemas.AnswerInteger, Answer: strconv.FormatFloat(c.value, 'f', 0, 64)}
	} else {
		q += bsReport
	}
	return tasks.Task{
		View: schemas.TaskView{
			ID: id, Dataset: BiostatDataset, Category: c.cat, Split: split,
			Instruction: biostatInstruction, Question: q,
			AnswerType: tr.Type, Resources: []string{BiostatDataset}, PermittedActions: bsActions,
		},
		Truth:     tr,
		Reference: ref.String(),
	}
}

// colVars classifies a table's usable columns: continuous numeric
// variables and grouping variables (2–6 levels, each with ≥ 5 rows).
func colVars(t *bsTable, skip map[string]bool) (conts, groups []*bsColumn) {
	for _, c := range t.Cols {
		if skip[c.Name] || bsIDLike.MatchString(c.Name) {
			continue
		}
		ls, ns := c.levels()
		nonMissing := 0
		for _, n := range ns {
			nonMissing += n
		}
		if c.Kind == kindNumber && len(ls) >= 10 && nonMissing >= 20 {
			conts = append(conts, c)
		}
		if len(ls) >= 2 && len(ls) <= 6 && slicesMin(ns) >= 5 {
			groups = append(groups, c)
		}
	}
	return conts, groups
}

func slicesMin(ns []int) int {
	m := math.MaxInt
	for _, n := range ns {
		m = min(m, n)
	}
	return m
}

// q quotes a column name for a question.
func q(name string) string { return "`" + name + "`" }

func pyCol(c *bsColumn) string { return pyString(c.Name) }

func finite(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// pOK says a p-value is representable well enough to be checked relatively.
func pOK(p float64) bool { return finite(p) && p > 1e-300 }

// values returns c's numbers at rows.
func values(c *bsColumn, rows []int) []float64 {
	out := make([]float64, len(rows))
	for i, r := range rows {
		out[i] = c.Num[r]
	}
	return out
}

// generalCands enumerates the non-survival tasks of a table.
func generalCands(t *bsTable) []bsCand {
	conts, groups := colVars(t, nil)
	var out []bsCand
	out = append(out, describeCands(t, conts, groups)...)
	out = append(out, twoSampleCands(t, conts, groups)...)
	out = append(out, anovaCands(t, conts, groups)...)
	out = append(out, tableCands(t, groups)...)
	out = append(out, regressionCands(t, conts)...)
	out = append(out, logisticCands(t, conts, groups)...)
	return out
}

const missingNote = " Exclude rows with a missing value in any column used."

func describeCands(t *bsTable, conts, groups []*bsColumn) []bsCand {
	var out []bsCand
	for _, y := range conts {
		rows := t.complete(y)
		v := values(y, rows)
		for _, w := range []struct{ what, cat, text string }{
			{"mean", "desc_mean", "the mean"},
			{"median", "desc_median", "the median"},
			{"sd", "desc_sd", "the sample standard deviation (denominator n − 1)"},
		} {
			var val float64
			switch w.what {
			case "mean":
				val = stats.Mean(v)
			case "median":
				val = stats.Median(v)
			default:
				val = stats.SD(v)
			}
			if val == 0 {
				continue
			}
			out = append(out, bsCand{
				cat: w.cat, file: t.File, body: "describe", value: val,
				question: fmt.Sprintf("what is %s of column %s over all rows with a non-missing value?", w.text, q(y.Name)),
				params:   [][2]string{{"WHAT", pyString(w.what)}, {"Y", pyCol(y)}, {"G", "None"}, {"A", "None"}},
			})
		}
		for _, g := range groups {
			ls, _ := g.levels()
			for _, a := range ls {
				var v []float64
				for i := range t.N {
					if g.is(i, a) && !y.Missing[i] {
						v = append(v, y.Num[i])
					}
				}
				if len(v) < 3 {
					continue
				}
				out = append(out, bsCand{
					cat: "desc_group_mean", file: t.File, body: "describe", value: stats.Mean(v),
					question: fmt.Sprintf("what is the mean of column %s among rows with %s = %s (ignoring missing values of %s)?", q(y.Name), q(g.Name), a.text(), q(y.Name)),
					params:   [][2]string{{"WHAT", `"mean"`}, {"Y", pyCol(y)}, {"G", pyCol(g)}, {"A", a.py()}},
				})
			}
		}
	}
	for _, g := range groups {
		ls, ns := g.levels()
		for i, a := range ls {
			out = append(out, bsCand{
				cat: "desc_count", file: t.File, body: "describe", value: float64(ns[i]), integer: true,
				question: fmt.Sprintf("how many rows have %s = %s? Print only the integer count.", q(g.Name), a.text()),
				params:   [][2]string{{"WHAT", `"count"`}, {"Y", "None"}, {"G", pyCol(g)}, {"A", a.py()}},
			})
		}
	}
	return out
}

// groupValues splits y by the levels a and b of g (rows with both present).
func groupValues(t *bsTable, y, g *bsColumn, a, b level) (va, vb []float64) {
	for i := range t.N {
		if y.Missing[i] {
			continue
		}
		switch {
		case g.is(i, a):
			va = append(va, y.Num[i])
		case g.is(i, b):
			vb = append(vb, y.Num[i])
		}
	}
	return va, vb
}

func twoSampleCands(t *bsTable, conts, groups []*bsColumn) []bsCand {
	var out []bsCand
	for _, g := range groups {
		ls, _ := g.levels()
		for ia := range ls {
			for ib := ia + 1; ib < len(ls); ib++ {
				a, b := ls[ia], ls[ib]
				for _, y := range conts {
					va, vb := groupValues(t, y, g, a, b)
					if len(va) < 5 || len(vb) < 5 {
						continue
					}
					cmp := fmt.Sprintf("comparing column %s between rows with %s = %s (first group) and rows with %s = %s (second group).",
						q(y.Name), q(g.Name), a.text(), q(g.Name), b.text())
					base := [][2]string{{"Y", pyCol(y)}, {"G", pyCol(g)}, {"A", a.py()}, {"B", b.py()}}
					add := func(cat, test, what, text string, v float64) {
						if !finite(v) || (what == "p" && !pOK(v)) {
							return
						}
						out = append(out, bsCand{
							cat: cat, file: t.File, body: "two_sample", value: v, question: text + " " + cmp + missingNote,
							params: append([][2]string{{"TEST", pyString(test)}, {"WHAT", pyString(what)}}, base...),
						})
					}
					if r, err := stats.WelchT(va, vb); err == nil {
						add("ttest_welch_t", "welch", "stat", "Perform a Welch two-sample t-test (unequal variances, two-sided) and report the t statistic (first minus second group),", r.Stat)
						add("ttest_welch_p", "welch", "p", "Perform a Welch two-sample t-test (unequal variances, two-sided) and report its p-value,", r.P)
					}
					if r, err := stats.StudentT(va, vb); err == nil {
						add("ttest_student_t", "student", "stat", "Perform a Student two-sample t-test (pooled variance, two-sided) and report the t statistic (first minus second group),", r.Stat)
						add("ttest_student_p", "student", "p", "Perform a Student two-sample t-test (pooled variance, two-sided) and report its p-value,", r.P)
					}
					if r, err := stats.MannWhitney(va, vb); err == nil {
						add("mannwhitney_u", "mw", "stat", "Perform a Wilcoxon rank-sum (Mann-Whitney U) test and report the U statistic of the first group (R's W: rank sum of the first group minus n1(n1+1)/2),", r.Stat)
						add("mannwhitney_p", "mw", "p", "Perform a two-sided Wilcoxon rank-sum (Mann-Whitney U) test with the normal approximation, tie correction and continuity correction (R's wilcox.test(exact=FALSE)), and report its p-value,", r.P)
					}
				}
			}
		}
	}
	return out
}

func anovaCands(t *bsTable, conts, groups []*bsColumn) []bsCand {
	var out []bsCand
	for _, g := range groups {
		ls, _ := g.levels()
		if len(ls) < 3 {
			continue
		}
		for _, y := range conts {
			gs := make([][]float64, len(ls))
			for i := range t.N {
				if y.Missing[i] {
					continue
				}
				for k, l := range ls {
					if g.is(i, l) {
						gs[k] = append(gs[k], y.Num[i])
					}
				}
			}
			ok := true
			for _, v := range gs {
				ok = ok && len(v) >= 2
			}
			if !ok {
				continue
			}
			r, err := stats.OneWayAnova(gs)
			// F ≈ 0 means identical group means (e.g. a baseline repeated
			// per period): a degenerate question scipy answers with nan.
			if err != nil || !finite(r.Stat) || r.Stat < 1e-9 {
				continue
			}
			text := fmt.Sprintf("perform a one-way ANOVA of column %s across all %d levels of %s.%s", q(y.Name), len(ls), q(g.Name), missingNote)
			base := [][2]string{{"Y", pyCol(y)}, {"G", pyCol(g)}}
			out = append(out, bsCand{cat: "anova_f", file: t.File, body: "anova", value: r.Stat,
				question: text + " Report the F statistic.", params: append([][2]string{{"WHAT", `"stat"`}}, base...)})
			if pOK(r.P) {
				out = append(out, bsCand{cat: "anova_p", file: t.File, body: "anova", value: r.P,
					question: text + " Report the p-value of the F test.", params: append([][2]string{{"WHAT", `"p"`}}, base...)})
			}
		}
	}
	return out
}

func tableCands(t *bsTable, groups []*bsColumn) []bsCand {
	var out []bsCand
	for i, r := range groups {
		for _, c := range groups[i+1:] {
			rl, _ := r.levels()
			cl, _ := c.levels()
			tab := make([][]float64, len(rl))
			for k := range tab {
				tab[k] = make([]float64, len(cl))
			}
			for row := range t.N {
				for a, la := range rl {
					for b, lb := range cl {
						if r.is(row, la) && c.is(row, lb) {
							tab[a][b]++
						}
					}
				}
			}
			if emptyMargin(tab) {
				continue
			}
			base := [][2]string{{"R", pyCol(r)}, {"C", pyCol(c)}}
			desc := fmt.Sprintf("cross-tabulate %s (rows) against %s (columns), using rows where both are present,", q(r.Name), q(c.Name))
			if res, err := stats.ChiSq(tab, true); err == nil {
				corr := ""
				if len(rl) == 2 && len(cl) == 2 {
					corr = " with Yates' continuity correction (R's chisq.test default for 2x2 tables)"
				}
				text := desc + " and run Pearson's chi-square test of independence" + corr + "."
				out = append(out, bsCand{cat: "chisq_stat", file: t.File, body: "chisq", value: res.Stat,
					question: text + " Report the chi-square statistic.", params: append([][2]string{{"TEST", `"chisq"`}, {"WHAT", `"stat"`}}, base...)})
				if pOK(res.P) {
					out = append(out, bsCand{cat: "chisq_p", file: t.File, body: "chisq", value: res.P,
						question: text + " Report its p-value.", params: append([][2]string{{"TEST", `"chisq"`}, {"WHAT", `"p"`}}, base...)})
				}
			}
			if len(rl) == 2 && len(cl) == 2 {
				p := stats.FisherP(int(tab[0][0]), int(tab[0][1]), int(tab[1][0]), int(tab[1][1]))
				if pOK(p) && p < 0.999999 {
					out = append(out, bsCand{cat: "fisher_p", file: t.File, body: "chisq", value: p,
						question: desc + " a 2x2 table, and run Fisher's exact test (two-sided). Report its p-value.",
						params:   append([][2]string{{"TEST", `"fisher"`}, {"WHAT", `"p"`}}, base...)})
				}
			}
		}
	}
	return out
}

func emptyMargin(tab [][]float64) bool {
	cols := make([]float64, len(tab[0]))
	for _, row := range tab {
		s := 0.0
		for j, v := range row {
			s += v
			cols[j] += v
		}
		if s == 0 {
			return true
		}
	}
	return slicesMinF(cols) == 0
}

func slicesMinF(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = math.Min(m, x)
	}
	return m
}

func regressionCands(t *bsTable, conts []*bsColumn) []bsCand {
	var out []bsCand
	for _, x := range conts {
		for _, y := range conts {
			if x == y {
				continue
			}
			rows := t.complete(x, y)
			if len(rows) < 10 {
				continue
			}
			xv, yv := values(x, rows), values(y, rows)
			design := make([][]float64, len(rows))
			for i := range rows {
				design[i] = []float64{1, xv[i]}
			}
			fit, err := stats.OLS(design, yv)
			if err != nil {
				continue
			}
			base := [][2]string{{"X", pyCol(x)}, {"Y", pyCol(y)}}
			lm := fmt.Sprintf("fit a simple linear regression (ordinary least squares with intercept) of %s on %s.%s", q(y.Name), q(x.Name), missingNote)
			add := func(cat, what, text string, v float64, isP bool) {
				if !finite(v) || (isP && !pOK(v)) {
					return
				}
				out = append(out, bsCand{cat: cat, file: t.File, body: "linreg", value: v, question: text,
					params: append([][2]string{{"WHAT", pyString(what)}}, base...)})
			}
			add("linreg_slope", "slope", lm+" Report the slope.", fit.Coef[1], false)
			add("linreg_intercept", "intercept", lm+" Report the intercept.", fit.Coef[0], false)
			add("linreg_r2", "r2", lm+" Report R-squared.", fit.R2, false)
			add("linreg_slope_p", "slope_p", lm+" Report the two-sided p-value of the slope's t test.", fit.P[1], true)
			if x.Name < y.Name {
				pair := fmt.Sprintf("between columns %s and %s.%s", q(x.Name), q(y.Name), missingNote)
				if r, err := stats.Pearson(xv, yv); err == nil {
					add("pearson_r", "pearson", "compute the Pearson correlation coefficient "+pair, r.Stat, false)
				}
				if rho, err := stats.Spearman(xv, yv); err == nil {
					add("spearman_rho", "spearman", "compute Spearman's rank correlation coefficient (average ranks for ties) "+pair, rho, false)
				}
			}
		}
	}
	return out
}

func logisticCands(t *bsTable, conts, groups []*bsColumn) []bsCand {
	var out []bsCand
	for _, g := range groups {
		ls, _ := g.levels()
		if len(ls) != 2 {
			continue
		}
		b := ls[1]
		for _, x := range conts {
			rows := t.complete(g, x)
			design := make([][]float64, len(rows))
			y := make([]float64, len(rows))
			for i, r := range rows {
				design[i] = []float64{1, x.Num[r]}
				if g.is(r, b) {
					y[i] = 1
				}
			}
			fit, err := stats.Logistic(design, y)
			if err != nil || !finite(fit.Coef[1]) || math.Abs(fit.Coef[1]*stats.SD(values(x, rows))) > 5 {
				continue
			}
			text := fmt.Sprintf("fit a logistic regression (maximum likelihood, with intercept) of the binary outcome %s = %s (1) versus %s = %s (0) on %s.%s",
				q(g.Name), b.text(), q(g.Name), ls[0].text(), q(x.Name), missingNote)
			base := [][2]string{{"X", pyCol(x)}, {"G", pyCol(g)}, {"B", b.py()}}
			out = append(out,
				bsCand{cat: "logreg_coef", file: t.File, body: "logreg", value: fit.Coef[1],
					question: text + " Report the coefficient (log odds ratio) of " + q(x.Name) + ".", params: append([][2]string{{"WHAT", `"coef"`}}, base...)},
				bsCand{cat: "logreg_or", file: t.File, body: "logreg", value: math.Exp(fit.Coef[1]),
					question: text + " Report the odds ratio per one-unit increase of " + q(x.Name) + ".", params: append([][2]string{{"WHAT", `"or"`}}, base...)})
		}
	}
	return out
}

func pairedCands(t *bsTable, p pairedSpec) []bsCand {
	x1, x2, g := t.col[p.X1], t.col[p.X2], t.col[p.Group]
	if x1 == nil || x2 == nil {
		return nil
	}
	var out []bsCand
	run := func(sub *level) {
		var a, b []float64
		for i := range t.N {
			if x1.Missing[i] || x2.Missing[i] || (sub != nil && !g.is(i, *sub)) {
				continue
			}
			a, b = append(a, x2.Num[i]), append(b, x1.Num[i])
		}
		r, err := stats.PairedT(a, b)
		if err != nil {
			return
		}
		scope, gp, ap := "all rows", "None", "None"
		if sub != nil {
			scope = fmt.Sprintf("rows with %s = %s", q(g.Name), sub.text())
			gp, ap = pyCol(g), sub.py()
		}
		text := fmt.Sprintf("columns %s and %s hold %s. Over %s with both values present, perform a paired t-test (two-sided) of %s − %s.",
			q(p.X1), q(p.X2), p.Desc, scope, q(p.X2), q(p.X1))
		base := [][2]string{{"X1", pyString(p.X1)}, {"X2", pyString(p.X2)}, {"G", gp}, {"A", ap}}
		out = append(out, bsCand{cat: "ttest_paired_t", file: t.File, body: "paired", value: r.Stat,
			question: text + " Report the t statistic.", params: append([][2]string{{"WHAT", `"stat"`}}, base...)})
		if pOK(r.P) {
			out = append(out, bsCand{cat: "ttest_paired_p", file: t.File, body: "paired", value: r.P,
				question: text + " Report its p-value.", params: append([][2]string{{"WHAT", `"p"`}}, base...)})
		}
	}
	run(nil)
	if g != nil {
		ls, _ := g.levels()
		for i := range ls {
			run(&ls[i])
		}
	}
	return out
}
