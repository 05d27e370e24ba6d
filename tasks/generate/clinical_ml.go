package generate

import (
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/medgym/medgym/schemas"

	"github.com/medgym/medgym/tasks"
)

const mlInstruction = "You are a machine-learning engineer working on clinical data. Each task has a folder under " +
	"/data/clinical_ml with train.csv (features, an id column and the binary label) and test_features.csv " +
	"(the same features and an id column, without the label). Write Python code that trains a model on " +
	"train.csv and writes predictions.csv into the current working directory with one row per test id. " +
	"Missing values are empty cells. Do not modify the data files. You may use pandas, numpy, scipy, " +
	"scikit-learn and statsmodels; print short progress messages only."

// mlOutputFile is the predictions file every clinical_ml task asks for.
const mlOutputFile = "predictions.csv"

// mlMargin is how far below the logistic-regression baseline (computed in
// Go, the same model as the reference) the thresholds are set.
const mlMargin = 0.05

// mlSource is one data set and its binary outcome.
type mlSource struct {
	Name, File, TestFile string // TestFile: a natural test split; else a seeded stratified 30 %
	Label, LabelText     string // label column written to train.csv and its meaning
	Positive             func(t *bsTable, i int) (pos, ok bool)
	Subsets              [][]string
	Desc                 string
}

func mlEq(col string, v float64) func(t *bsTable, i int) (bool, bool) {
	return func(t *bsTable, i int) (bool, bool) {
		c := t.col[col]
		if c == nil || c.Missing[i] || c.Kind == kindString {
			return false, false
		}
		return c.Num[i] == v, true
	}
}

func mlStr(col, v string) func(t *bsTable, i int) (bool, bool) {
	return func(t *bsTable, i int) (bool, bool) {
		c := t.col[col]
		if c == nil || c.Missing[i] {
			return false, false
		}
		return c.Str[i] == v, true
	}
}

func bcCols(kind string) []string {
	var out []string
	for _, f := range []string{"radius", "texture", "perimeter", "area", "smoothness", "compactness", "concavity", "concave points", "symmetry", "fractal dimension"} {
		switch kind {
		case "error":
			out = append(out, f+" error")
		default:
			out = append(out, kind+" "+f)
		}
	}
	return out
}

var mlSources = []mlSource{
	{Name: "pima", File: "MASS_Pima_tr.csv", TestFile: "MASS_Pima_te.csv", Label: "diabetes",
		LabelText: "diabetes by WHO criteria (1 = yes)", Positive: mlStr("type", "Yes"),
		Desc:    "Pima Indian women aged 21 or over (MASS Pima.tr / Pima.te: the published train/test split)",
		Subsets: [][]string{{"npreg", "glu", "bp", "skin", "bmi", "ped", "age"}, {"glu", "bmi", "ped", "age"}, {"glu", "bmi"}, {"npreg", "bp", "skin", "age"}}},
	{Name: "breast_cancer", File: "sklearn_breast_cancer.csv", Label: "malignant",
		LabelText: "malignant tumour (1) versus benign (0)", Positive: mlEq("target", 0),
		Desc:    "fine-needle aspirates of breast masses (Wisconsin Diagnostic Breast Cancer)",
		Subsets: [][]string{bcCols("mean"), bcCols("worst"), bcCols("error"), {"mean radius", "mean texture", "mean smoothness"}}},
	{Name: "biopsy", File: "MASS_biopsy.csv", Label: "malignant",
		LabelText: "malignant tumour (1) versus benign (0)", Positive: mlStr("class", "malignant"),
		Desc:    "breast tumour biopsies scored 1-10 on nine cytological features V1-V9 (MASS biopsy)",
		Subsets: [][]string{{"V1", "V2", "V3", "V4", "V5", "V6", "V7", "V8", "V9"}, {"V1", "V2", "V3"}, {"V4", "V5", "V7", "V8", "V9"}}},
	{Name: "gbsg", File: "survival_gbsg.csv", Label: "event",
		LabelText: "recurrence or death observed during follow-up (1)", Positive: mlEq("status", 1),
		Desc:    "German Breast Cancer Study Group patients with primary node-positive breast cancer (survival gbsg)",
		Subsets: [][]string{{"age", "meno", "size", "grade", "nodes", "pgr", "er", "hormon"}, {"size", "grade", "nodes"}}},
	{Name: "pbc", File: "survival_pbc.csv", Label: "death",
		LabelText: "death observed during follow-up (1; transplant and censored are 0)", Positive: mlEq("status", 2),
		Desc:    "Mayo Clinic primary biliary cholangitis patients (survival pbc)",
		Subsets: [][]string{{"age", "bili", "albumin", "protime", "edema"}, {"bili", "albumin"}}},
	{Name: "nwtco", File: "survival_nwtco.csv", Label: "relapse",
		LabelText: "relapse (1)", Positive: mlEq("rel", 1),
		Desc:    "children with Wilms' tumour, National Wilms Tumor Study (survival nwtco; age in months)",
		Subsets: [][]string{{"histol", "stage", "age"}, {"instit", "stage", "age"}}},
	{Name: "birthwt", File: "MASS_birthwt.csv", Label: "low",
		LabelText: "birth weight below 2.5 kg (1)", Positive: mlEq("low", 1),
		Desc:    "births at Baystate Medical Center, 1986 (MASS birthwt; the birth weight itself is not given)",
		Subsets: [][]string{{"age", "lwt", "race", "smoke", "ptl", "ht", "ui", "ftv"}, {"lwt", "smoke", "ht", "ui"}}},
	{Name: "flchain", File: "survival_flchain.csv", Label: "death",
		LabelText: "death observed during follow-up (1)", Positive: mlEq("death", 1),
		Desc:    "residents of Olmsted County aged 50 or more with serum free light chain assays (survival flchain)",
		Subsets: [][]string{{"age", "kappa", "lambda", "creatinine", "mgus"}, {"age", "kappa", "lambda"}}},
}

// mlCand is one task before the split: a feature subset of a source (its
// data folder Key) with a metric requirement.
type mlCand struct {
	src          *mlSource
	key          string
	feats        []string
	nTrain       int
	testIDs      []int
	testY        []bool
	minAcc       float64
	minAUC       float64 // 0: accuracy only
	baseAcc, auc float64
}

// generateClinicalML is the clinical_ml Generator.
func generateClinicalML(ctx context.Context, dataRoot, dir string) error {
	src := filepath.Join(dataRoot, "biostat")
	var cands []mlCand
	for si := range mlSources {
		if err := ctx.Err(); err != nil {
			return err
		}
		s := &mlSources[si]
		cs, err := mlSourceCands(src, dir, s)
		if err != nil {
			return fmt.Errorf("clinical_ml %s: %w", s.Name, err)
		}
		cands = append(cands, cs...)
	}
	train, test := splitByCategory(tasks.ClinicalMLDataset, cands, clinicalMLTask)
	if err := tasks.WriteTasks(filepath.Join(dir, "train.jsonl"), train); err != nil {
		return fmt.Errorf("clinical_ml: %w", err)
	}
	if err := tasks.WriteTasks(filepath.Join(dir, "test.jsonl"), test); err != nil {
		return fmt.Errorf("clinical_ml: %w", err)
	}
	if err := copyFile(filepath.Join(src, "PROVENANCE.md"), filepath.Join(dir, "PROVENANCE.md")); err != nil {
		return fmt.Errorf("clinical_ml: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "LICENSE.md"), []byte(clinicalMLLicense), 0o644); err != nil {
		return fmt.Errorf("clinical_ml: %w", err)
	}
	return nil
}

const clinicalMLLicense = `# clinical_ml task set: sources and licences

Each task folder holds a train/test split of one of these data sets, as shipped in Debian (see PROVENANCE.md):

- pima-*: R package MASS 7.3-58.2 (Venables & Ripley), Pima.tr and Pima.te, GPL-2 | GPL-3.
- biopsy-*, birthwt-*: R package MASS 7.3-58.2, GPL-2 | GPL-3.
- gbsg-*, pbc-*, nwtco-*, flchain-*: R package survival 3.5-3 (Therneau), LGPL (>= 2).
- breast_cancer-*: scikit-learn 1.2.1 bundled data (UCI Wisconsin Diagnostic Breast Cancer), BSD-3-Clause.

The splits, questions, thresholds and reference solutions are generated by medgym.
`

// mlSourceCands reads a source, splits it, writes one folder per feature
// subset and returns the tasks of each.
func mlSourceCands(src, dir string, s *mlSource) ([]mlCand, error) {
	t, err := readBSTable(filepath.Join(src, s.File), s.File)
	if err != nil {
		return nil, err
	}
	var trRows, teRows []int
	tt := t
	if s.TestFile != "" {
		if tt, err = readBSTable(filepath.Join(src, s.TestFile), s.TestFile); err != nil {
			return nil, err
		}
		for i := range t.N {
			trRows = append(trRows, i)
		}
		for i := range tt.N {
			teRows = append(teRows, i)
		}
	} else {
		trRows, teRows = mlStratified(t, s)
	}
	var out []mlCand
	for _, feats := range s.Subsets {
		c, err := mlWriteSubset(dir, s, t, tt, trRows, teRows, feats)
		if err != nil {
			return nil, err
		}
		if c.baseAcc-mlMargin > majority(c.testY)+0.02 {
			a := c
			a.minAcc = floor2(c.baseAcc - mlMargin)
			out = append(out, a)
		}
		if c.auc-mlMargin >= 0.6 {
			a := c
			a.minAUC = floor2(c.auc - mlMargin)
			a.minAcc = floor2(math.Min(c.baseAcc, majority(c.testY)) - mlMargin)
			out = append(out, a)
		}
	}
	return out, nil
}

func floor2(v float64) float64 { return math.Floor(v*100) / 100 }

func majority(y []bool) float64 {
	n := 0
	for _, v := range y {
		if v {
			n++
		}
	}
	return math.Max(float64(n), float64(len(y)-n)) / float64(len(y))
}

// mlStratified sends a seeded 30 % of each class to test.
func mlStratified(t *bsTable, s *mlSource) (train, test []int) {
	var pos, neg []int
	for i := range t.N {
		p, ok := s.Positive(t, i)
		switch {
		case !ok:
		case p:
			pos = append(pos, i)
		default:
			neg = append(neg, i)
		}
	}
	r := seededRand(tasks.ClinicalMLDataset + "/split/" + s.Name)
	for _, cls := range [][]int{pos, neg} {
		r.Shuffle(len(cls), func(i, j int) { cls[i], cls[j] = cls[j], cls[i] })
		k := int(math.Round(0.3 * float64(len(cls))))
		test = append(test, cls[:k]...)
		train = append(train, cls[k:]...)
	}
	sort.Ints(train)
	sort.Ints(test)
	return train, test
}

// mlWriteSubset writes <dir>/<key>/{train.csv,test_features.csv} for one
// feature subset (complete cases only) and fits the baseline.
func mlWriteSubset(dir string, s *mlSource, t, tt *bsTable, trRows, teRows []int, feats []string) (mlCand, error) {
	c := mlCand{src: s, feats: feats, key: s.Name + "-" + mlSlug(feats)}
	rowsOf := func(tab *bsTable, rows []int) (keep []int, y []bool, err error) {
		for _, i := range rows {
			ok := true
			for _, f := range feats {
				col := tab.col[f]
				if col == nil || col.Kind == kindString {
					return nil, nil, fmt.Errorf("%s: feature %q is missing or not numeric", tab.File, f)
				}
				ok = ok && !col.Missing[i]
			}
			p, lok := s.Positive(tab, i)
			if ok && lok {
				keep = append(keep, i)
				y = append(y, p)
			}
		}
		return keep, y, nil
	}
	trKeep, trY, err := rowsOf(t, trRows)
	if err != nil {
		return c, err
	}
	teKeep, teY, err := rowsOf(tt, teRows)
	if err != nil {
		return c, err
	}
	// Test rows are shuffled and numbered, so the order tells nothing.
	order := seededRand(tasks.ClinicalMLDataset + "/ids/" + c.key).Perm(len(teKeep))
	c.testIDs = make([]int, len(teKeep))
	c.testY = make([]bool, len(teKeep))
	fdir := filepath.Join(dir, c.key)
	if err := os.MkdirAll(fdir, 0o755); err != nil {
		return c, err
	}
	header := append([]string{"id"}, feats...)
	var trainRecs, testRecs [][]string
	trainRecs = append(trainRecs, append(append([]string(nil), header...), s.Label))
	testRecs = append(testRecs, header)
	xTr := make([][]float64, len(trKeep))
	for k, i := range trKeep {
		rec := []string{strconv.Itoa(k + 1)}
		for _, f := range feats {
			rec = append(rec, t.col[f].Str[i])
			xTr[k] = append(xTr[k], t.col[f].Num[i])
		}
		trainRecs = append(trainRecs, append(rec, b01(trY[k])))
	}
	xTe := make([][]float64, len(teKeep))
	for pos, k := range order {
		i := teKeep[k]
		id := pos + 1
		c.testIDs[pos], c.testY[pos] = id, teY[k]
		rec := []string{strconv.Itoa(id)}
		for _, f := range feats {
			rec = append(rec, tt.col[f].Str[i])
			xTe[pos] = append(xTe[pos], tt.col[f].Num[i])
		}
		testRecs = append(testRecs, rec)
	}
	if err := writeCSV(filepath.Join(fdir, "train.csv"), trainRecs); err != nil {
		return c, err
	}
	if err := writeCSV(filepath.Join(fdir, "test_features.csv"), testRecs); err != nil {
		return c, err
	}
	c.nTrain = len(trKeep)
	p, err := ridgeLogistic(xTr, trY, xTe)
	if err != nil {
		return c, fmt.Errorf("%s baseline: %w", c.key, err)
	}
	c.baseAcc, c.auc = mlMetrics(p, c.testY)
	return c, nil
}

func b01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func mlSlug(feats []string) string {
	if len(feats) > 4 {
		return fmt.Sprintf("%s-%df", strings.ReplaceAll(strings.ToLower(feats[0]), " ", "_"), len(feats))
	}
	var parts []string
	for _, f := range feats {
		parts = append(parts, strings.NewReplacer(" ", "_", ".", "_").Replace(strings.ToLower(f)))
	}
	return strings.Join(parts, "-")
}

func writeCSV(path string, recs [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(recs); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// ridgeLogistic fits scikit-learn's default LogisticRegression (L2, C = 1,
// unpenalised intercept) on standardised features (StandardScaler:
// population standard deviation, scale 1 for a constant column) by Newton's
// method and returns P(y = 1) for xTest. The objective is strictly convex,
// so the reference solution reaches the same fit.
func ridgeLogistic(x [][]float64, y []bool, xTest [][]float64) ([]float64, error) {
	n, p := len(x), len(x[0])
	mean, sd := make([]float64, p), make([]float64, p)
	for j := range p {
		for i := range n {
			mean[j] += x[i][j]
		}
		mean[j] /= float64(n)
		for i := range n {
			d := x[i][j] - mean[j]
			sd[j] += d * d
		}
		sd[j] = math.Sqrt(sd[j] / float64(n))
		if sd[j] < 1e-12 {
			sd[j] = 1
		}
	}
	design := func(row []float64) []float64 {
		z := make([]float64, p+1)
		z[0] = 1
		for j := range p {
			z[j+1] = (row[j] - mean[j]) / sd[j]
		}
		return z
	}
	z := make([][]float64, n)
	for i := range n {
		z[i] = design(x[i])
	}
	beta := make([]float64, p+1)
	for iter := 0; iter < 200; iter++ {
		g := make([]float64, p+1)
		h := make([][]float64, p+1)
		for i := range h {
			h[i] = make([]float64, p+1)
		}
		for i := range n {
			eta := 0.0
			for j := range beta {
				eta += z[i][j] * beta[j]
			}
			mu := 1 / (1 + math.Exp(-eta))
			yi := 0.0
			if y[i] {
				yi = 1
			}
			w := mu * (1 - mu)
			for j := range beta {
				g[j] += z[i][j] * (yi - mu)
				for k := range beta {
					h[j][k] += w * z[i][j] * z[i][k]
				}
			}
		}
		for j := 1; j <= p; j++ { // the penalty 0.5·|β|², intercept excluded
			g[j] -= beta[j]
			h[j][j]++
		}
		step, err := solveSym(h, g)
		if err != nil {
			return nil, err
		}
		maxStep := 0.0
		for j := range beta {
			beta[j] += step[j]
			maxStep = math.Max(maxStep, math.Abs(step[j]))
		}
		if maxStep < 1e-10 {
			out := make([]float64, len(xTest))
			for i, row := range xTest {
				zr := design(row)
				eta := 0.0
				for j := range beta {
					eta += zr[j] * beta[j]
				}
				out[i] = 1 / (1 + math.Exp(-eta))
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("ridge logistic: no convergence")
}

// solveSym solves a·x = b by Gaussian elimination with partial pivoting.
func solveSym(a [][]float64, b []float64) ([]float64, error) {
	n := len(b)
	m := make([][]float64, n)
	for i := range n {
		m[i] = append(append([]float64(nil), a[i]...), b[i])
	}
	for c := range n {
		piv := c
		for r := c + 1; r < n; r++ {
			if math.Abs(m[r][c]) > math.Abs(m[piv][c]) {
				piv = r
			}
		}
		if math.Abs(m[piv][c]) < 1e-300 {
			return nil, fmt.Errorf("singular system")
		}
		m[c], m[piv] = m[piv], m[c]
		for r := c + 1; r < n; r++ {
			f := m[r][c] / m[c][c]
			for k := c; k <= n; k++ {
				m[r][k] -= f * m[c][k]
			}
		}
	}
	x := make([]float64, n)
	for i := n - 1; i >= 0; i-- {
		s := m[i][n]
		for k := i + 1; k < n; k++ {
			s -= m[i][k] * x[k]
		}
		x[i] = s / m[i][i]
	}
	return x, nil
}

// mlMetrics is accuracy (threshold 0.5) and the Mann-Whitney AUROC.
func mlMetrics(p []float64, y []bool) (acc, auc float64) {
	var pos, neg []float64
	for i := range p {
		if (p[i] > 0.5) == y[i] {
			acc++
		}
		if y[i] {
			pos = append(pos, p[i])
		} else {
			neg = append(neg, p[i])
		}
	}
	for _, a := range pos {
		for _, b := range neg {
			switch {
			case a > b:
				auc++
			case a == b:
				auc += 0.5
			}
		}
	}
	return acc / float64(len(p)), auc / float64(len(pos)*len(neg))
}

const mlReference = `import os
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

DATA = os.path.join(os.environ.get("MEDGYM_DATA_DIR", "/data/clinical_ml"), FOLDER)
train = pd.read_csv(os.path.join(DATA, "train.csv"))
test = pd.read_csv(os.path.join(DATA, "test_features.csv"))
features = [c for c in test.columns if c != "id"]
model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=10000))
model.fit(train[features], train[LABEL])
score = model.predict_proba(test[features])[:, 1]
out = pd.DataFrame({"id": test["id"], "prediction": (score > 0.5).astype(int), "score": score})
out.to_csv("predictions.csv", index=False)
print("wrote predictions.csv with", len(out), "rows")
`

// clinicalMLTask turns a candidate into a Task.
func clinicalMLTask(c mlCand, id, split string) tasks.Task {
	cat := c.src.Name
	folder := "/data/clinical_ml/" + c.key
	q := fmt.Sprintf("Data: %s. In %s, train.csv has %d patients with the features %s and the label column %q: %s. "+
		"test_features.csv has %d patients (columns id and the same features). Predict the label of every test patient and "+
		"write predictions.csv in the working directory with the columns id and prediction (0 or 1)",
		c.src.Desc, folder, c.nTrain, mlFeatureList(c.feats), c.src.Label, c.src.LabelText, len(c.testIDs))
	extra := map[string]string{
		tasks.ExtraOutputFile: mlOutputFile, tasks.ExtraIDColumn: "id", tasks.ExtraPredictionColumn: "prediction",
		tasks.ExtraScoreColumn: "score", tasks.ExtraPositiveLabel: "1",
		tasks.ExtraMinAccuracy: strconv.FormatFloat(c.minAcc, 'f', 2, 64),
	}
	if c.minAUC > 0 {
		extra[tasks.ExtraMinAUROC] = strconv.FormatFloat(c.minAUC, 'f', 2, 64)
		q += fmt.Sprintf(", plus a column score with the predicted probability that the label is 1. The task is solved when "+
			"the AUROC of score over all test patients is at least %.2f and the accuracy of prediction at least %.2f.", c.minAUC, c.minAcc)
	} else {
		q += fmt.Sprintf(" (an optional column score with the predicted probability of 1 is reported as AUROC). The task is solved "+
			"when the accuracy over all test patients is at least %.2f; a test patient without a prediction counts as wrong.", c.minAcc)
	}
	values := make([]string, len(c.testIDs))
	for i, tid := range c.testIDs {
		values[i] = strconv.Itoa(tid) + "=" + b01(c.testY[i])
	}
	sortIDValues(values)
	// Answer is a summary of what is required; the gold labels are Values.
	answer := "min_accuracy=" + extra[tasks.ExtraMinAccuracy]
	if c.minAUC > 0 {
		answer += " min_auroc=" + extra[tasks.ExtraMinAUROC]
	}
	tr := tasks.Truth{Type: schemas.AnswerPredictions, Answer: answer, Values: values, Extra: extra}
	ref := "FOLDER = " + pyString(c.key) + "\nLABEL = " + pyString(c.src.Label) + "\n\n" + mlReference
	return tasks.Task{
		View: schemas.TaskView{
			ID: id, Dataset: tasks.ClinicalMLDataset, Category: cat, Split: split,
			Instruction: mlInstruction, Question: q, AnswerType: schemas.AnswerPredictions,
			Resources: []string{tasks.ClinicalMLDataset + "/" + c.key}, PermittedActions: bsActions,
			OutputFiles: []string{mlOutputFile},
		},
		Truth:     tr,
		Reference: ref,
	}
}

func mlFeatureList(feats []string) string {
	q := make([]string, len(feats))
	for i, f := range feats {
		q[i] = strconv.Quote(f)
	}
	return strings.Join(q, ", ")
}

// sortIDValues orders "id=label" values by numeric id.
func sortIDValues(v []string) {
	id := func(s string) int {
		n, _ := strconv.Atoi(s[:strings.IndexByte(s, '=')])
		return n
	}
	sort.Slice(v, func(a, b int) bool { return id(v[a]) < id(v[b]) })
}
