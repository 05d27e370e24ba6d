package systemtest

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/sandbox-worker/sandbox"
	"github.com/medgym/medgym/tasks"
	"github.com/medgym/medgym/tasks/generate"
)

// goldScanPy searches a file tree for the gold rows of prediction tasks
// (see the file's header).
//
//go:embed goldscan.py
var goldScanPy []byte

// goldRow is one held-out row: its feature values as the task's files
// write them, and its gold label.
type goldRow struct {
	F []string `json:"f"`
	Y string   `json:"y"`
}

// goldTask is one task folder's fingerprint, as goldscan.py reads it.
type goldTask struct {
	Task    string    `json:"task"`
	Header  []string  `json:"-"`
	Rows    []goldRow `json:"rows"`
	Doubles []float64 `json:"doubles"`
}

// Fingerprint sizes: enough rows and values that a quarter (a half) of
// them cannot match by chance, few enough for a fast scan.
const (
	goldRowsPerTask    = 100
	goldDoublesPerTask = 200
	goldMinRows        = 20
)

// goldCanon is goldscan.py's canon: 4 significant digits.
func goldCanon(s string) (string, bool) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return "", false
	}
	if v == 0 {
		return "0", true
	}
	return strconv.FormatFloat(v, 'g', 4, 64), true
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) < 2 {
		t.Fatalf("%s: %d records: %v", path, len(recs), err)
	}
	return recs
}

// goldPrints derives the fingerprints of every clinical_ml task folder of
// lib from the two trees: the test rows of test_features.csv (agent tree)
// with the labels of the task's truth (verifier tree). Rows whose feature
// tuple is also a training row, and values that also occur in train.csv,
// are left out: the agent has those, and they would match its own files;
// so are tuples shared by two test rows.
func goldPrints(t *testing.T, lib string) []goldTask {
	t.Helper()
	var out []goldTask
	seen := map[string]bool{}
	for _, split := range []string{"train", "test"} {
		ts, err := tasks.Load(t.Context(), tasks.Source{Dataset: tasks.ClinicalMLDataset, Split: split, LibraryDir: lib})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			if tk.Truth.Type != schemas.AnswerPredictions || len(tk.View.Resources) != 1 || seen[tk.View.Resources[0]] {
				continue
			}
			res := tk.View.Resources[0]
			seen[res] = true
			labels := map[string]string{}
			for _, v := range tk.Truth.Values {
				id, y, _ := strings.Cut(v, "=")
				labels[id] = y
			}
			dir := filepath.Join(tasks.AgentTree(lib), filepath.FromSlash(res))
			train, test := readCSV(t, filepath.Join(dir, "train.csv")), readCSV(t, filepath.Join(dir, "test_features.csv"))
			// tuples: how often a feature tuple is a row of either file.
			tuples, trainVals := map[string]int{}, map[float64]bool{}
			for _, r := range train[1:] {
				feats := r[1 : len(r)-1]
				var key []string
				for _, s := range feats {
					c, _ := goldCanon(s)
					key = append(key, c)
					if v, err := strconv.ParseFloat(s, 64); err == nil {
						trainVals[v] = true
					}
				}
				slices.Sort(key)
				tuples[strings.Join(key, ",")] += 2 // a training row: never gold
			}
			// The scan matches a row's values in any order, so a tuple is
			// its sorted values.
			tupleOf := func(r []string) string {
				var key []string
				for _, s := range r[1:] {
					c, _ := goldCanon(s)
					key = append(key, c)
				}
				slices.Sort(key)
				return strings.Join(key, ",")
			}
			for _, r := range test[1:] {
				tuples[tupleOf(r)]++
			}
			g := goldTask{Task: strings.TrimPrefix(res, tasks.ClinicalMLDataset+"/"), Header: test[0][1:]}
			dbl := map[float64]bool{}
			for _, r := range test[1:] {
				y, ok := labels[r[0]]
				if !ok {
					t.Fatalf("%s: test id %s has no gold label", res, r[0])
				}
				for _, s := range r[1:] {
					v, err := strconv.ParseFloat(s, 64)
					if err == nil && v != math.Trunc(v) && !trainVals[v] && !dbl[v] && len(g.Doubles) < goldDoublesPerTask {
						dbl[v] = true
						g.Doubles = append(g.Doubles, v)
					}
				}
				// A tuple that is also a training row, or two test rows
				// (whose labels may differ), tells nothing.
				if tuples[tupleOf(r)] == 1 && distinctive(r[1:]) && len(g.Rows) < goldRowsPerTask {
					g.Rows = append(g.Rows, goldRow{F: r[1:], Y: y})
				}
			}
			if len(g.Rows) < goldMinRows {
				t.Logf("%s: only %d distinctive gold rows; its text fingerprint is left out (its source is covered by the other tasks' and by the binary one)", res, len(g.Rows))
				g.Rows = nil
			}
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b goldTask) int { return strings.Compare(a.Task, b.Task) })
	return out
}

// distinctive says whether a row's values, found together on one line,
// identify it: two non-integers of three or more significant digits, or
// three integers of three or more digits. Rows of small integers (biopsy's
// 1-10 scores, stage and grade codes) turn up in any file of numbers.
func distinctive(vals []string) bool {
	frac, ints := 0, 0
	for _, s := range vals {
		c, ok := goldCanon(s)
		if !ok {
			continue
		}
		digits := strings.TrimLeft(strings.NewReplacer(".", "", "-", "").Replace(strings.Split(c, "e")[0]), "0")
		switch {
		case len(digits) < 3:
		case strings.ContainsAny(c, ".e"):
			frac++
		default:
			ints++
		}
	}
	return frac >= 2 || ints >= 3
}

// goldScanResult is goldscan.py's report.
type goldScanResult struct {
	Hits []struct {
		Path     string `json:"path"`
		Task     string `json:"task"`
		How      string `json:"how"`
		Rows     int    `json:"rows"`
		Values   int    `json:"values"`
		Of       int    `json:"of"`
		Labelled *bool  `json:"labelled"`
	} `json:"hits"`
	Flagged   []string `json:"flagged"`
	Skipped   []string `json:"skipped"`
	Files     int      `json:"files"`
	ReadBytes int64    `json:"read_bytes"`
	Seconds   float64  `json:"seconds"`
	CPU       float64  `json:"cpu_seconds"`
}

// summary is one line a hit.
func (r goldScanResult) summary() string {
	var b strings.Builder
	for _, h := range r.Hits {
		fmt.Fprintf(&b, "  %s: %s (%s, %d rows, %d values of %d, labelled %v)\n", h.Path, h.Task, h.How, h.Rows, h.Values, h.Of, deref(h.Labelled))
	}
	return b.String()
}

func parseGoldScan(t *testing.T, out []byte) goldScanResult {
	t.Helper()
	var r goldScanResult
	line := out
	if i := bytes.LastIndexByte(bytes.TrimSpace(out), '\n'); i >= 0 {
		line = out[i+1:]
	}
	if err := json.Unmarshal(bytes.TrimSpace(line), &r); err != nil {
		t.Fatalf("goldscan output is not its report: %v\n%.2000s", err, out)
	}
	return r
}

// hostGoldScan runs goldscan.py on the host over roots.
func hostGoldScan(t *testing.T, prints string, roots ...string) goldScanResult {
	t.Helper()
	script := filepath.Join(t.TempDir(), "goldscan.py")
	if err := os.WriteFile(script, goldScanPy, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("/usr/bin/python3", append([]string{script, prints}, roots...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("goldscan on the host: %v\n%s", err, out)
	}
	return parseGoldScan(t, out)
}

// plantGold writes copies of g's gold rows as a public package might ship
// them: a gzipped CSV with the columns in another order, the numbers in
// another format and the label as words; and, when g has non-integer
// values, an R-lazy-load-like data base (a length, then a zlib stream of
// big-endian doubles, column by column).
func plantGold(t *testing.T, dir string, g goldTask) (csvPath, rdbPath string) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	w := csv.NewWriter(zw)
	head := []string{"outcome"}
	for i := len(g.Header) - 1; i >= 0; i-- {
		head = append(head, g.Header[i])
	}
	_ = w.Write(append(head, "site"))
	for _, r := range g.Rows {
		rec := []string{map[string]string{"1": "yes", "0": "no"}[r.Y]}
		for i := len(r.F) - 1; i >= 0; i-- {
			v, _ := strconv.ParseFloat(r.F[i], 64)
			rec = append(rec, strconv.FormatFloat(v, 'e', 6, 64))
		}
		_ = w.Write(append(rec, "A"))
	}
	w.Flush()
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	csvPath = filepath.Join(dir, g.Task+".csv.gz")
	if err := os.WriteFile(csvPath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if len(g.Doubles) < 10 {
		return csvPath, ""
	}
	var raw bytes.Buffer
	raw.WriteString("X\n\x00\x00\x00\x03")
	for _, v := range g.Doubles {
		_ = binary.Write(&raw, binary.BigEndian, v)
	}
	var z bytes.Buffer
	zz := zlib.NewWriter(&z)
	_, _ = zz.Write(raw.Bytes())
	_ = zz.Close()
	var rdb bytes.Buffer
	_ = binary.Write(&rdb, binary.BigEndian, uint32(raw.Len()))
	rdb.Write(z.Bytes())
	rdbPath = filepath.Join(dir, g.Task, "data", "Rdata.rdb")
	if err := os.MkdirAll(filepath.Dir(rdbPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rdbPath, rdb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return csvPath, rdbPath
}

// generatedClinicalML generates the clinical_ml task set into a temporary
// library readable by the sandbox user.
func generatedClinicalML(t *testing.T) string {
	t.Helper()
	data := tasks.DataRoot()
	if _, err := os.Stat(filepath.Join(data, "biostat")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no shared data at %s", data)
		}
		t.Skipf("no shared data at %s", data)
	}
	lib, err := os.MkdirTemp("", "medgym-goldrows-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(lib) })
	if err := os.Chmod(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := generate.Generate(t.Context(), data, lib, []string{tasks.ClinicalMLDataset}); err != nil {
		t.Fatal(err)
	}
	return lib
}

// TestGoldRowsUnreachable is the ground-truth canary for prediction tasks:
// no file a sandbox can read holds the held-out rows of a clinical_ml task
// with their labels. Debian's python3-sklearn ships the Wisconsin breast
// cancer data with the diagnosis (every breast_cancer-* test label), and
// the bwrap backend binds the host's /usr; R's MASS and survival packages
// hold the other sources. The test fingerprints every task's gold rows
// (test_features.csv joined with the verifier's labels) and runs
// goldscan.py inside a real sandbox over its whole file tree but /proc,
// /sys and /dev (text, gzip/bzip2/xz, zip, R data bases, raw doubles). It
// must find the mounted task's own test_features.csv, unlabelled (the scan
// reaches the data and the label check can tell), and nothing else. The
// positive controls run the same scan on the host: over planted copies of
// every task's gold rows (each found, labelled) and over scikit-learn's
// data folder, unmasked there (found, when the host has it). The list of
// masked paths is the sandbox package's masked_paths.txt; the scan, not the
// list, decides.
func TestGoldRowsUnreachable(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bwrap missing in CI")
		}
		t.Skip("bwrap not installed")
	}
	lib := generatedClinicalML(t)
	golds := goldPrints(t, lib)
	if len(golds) < 8 {
		t.Fatalf("%d clinical_ml task folders, want one or more per source", len(golds))
	}
	agent := tasks.AgentTree(lib)
	scanDir := filepath.Join(agent, "goldscan")
	if err := os.MkdirAll(scanDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"tasks": golds})
	prints := filepath.Join(scanDir, "prints.json")
	if err := os.WriteFile(prints, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(scanDir, "goldscan.py"), goldScanPy, 0o644); err != nil {
		t.Fatal(err)
	}
	var mounted string // a breast_cancer task: the source /usr holds
	for _, g := range golds {
		if strings.HasPrefix(g.Task, "breast_cancer-") && len(g.Rows) > 0 {
			mounted = g.Task
			break
		}
	}
	if mounted == "" {
		t.Fatal("no breast_cancer task with gold rows")
	}

	t.Run("positive controls", func(t *testing.T) {
		plant := t.TempDir()
		want := map[string]string{} // planted path -> task
		for _, g := range golds {
			if len(g.Rows) == 0 && len(g.Doubles) < 10 {
				continue
			}
			c, r := plantGold(t, plant, g)
			if len(g.Rows) > 0 {
				want[c+"!inflated"] = g.Task
			}
			if r != "" {
				want[r+"!0"] = g.Task
			}
		}
		got := hostGoldScan(t, prints, plant)
		for p, task := range want {
			ok := false
			for _, h := range got.Hits {
				if h.Path == p && h.Task == task && (h.How == "binary" || (h.Labelled != nil && *h.Labelled)) {
					ok = true
				}
			}
			if !ok {
				t.Errorf("positive control: the scan missed the planted gold rows of %s in %s (hits:\n%s)", task, p, got.summary())
			}
		}
		// The task's own files: the test features are found, unlabelled;
		// the training rows are not the gold.
		own := hostGoldScan(t, prints, filepath.Join(agent, tasks.ClinicalMLDataset, mounted))
		ownFound := false
		for _, h := range own.Hits {
			ownFound = ownFound || h.Task == mounted
			if filepath.Base(h.Path) != "test_features.csv" || h.Labelled == nil || *h.Labelled {
				t.Errorf("the task's own folder: hits\n%s\nwant test_features.csv only, unlabelled", own.summary())
			}
		}
		if !ownFound {
			t.Errorf("the task's own folder: hits\n%s\nwant its test_features.csv", own.summary())
		}
		sk := "/usr/lib/python3/dist-packages/sklearn/datasets/data"
		if _, err := os.Stat(filepath.Join(sk, "breast_cancer.csv")); err != nil {
			t.Logf("no %s/breast_cancer.csv on this host: that control is skipped", sk)
			return
		}
		pub := hostGoldScan(t, prints, sk)
		found := false
		for _, h := range pub.Hits {
			if strings.HasSuffix(h.Path, "/breast_cancer.csv") && h.Task == mounted && h.Labelled != nil && *h.Labelled {
				found = true
			}
		}
		if !found {
			t.Errorf("positive control: the scan missed %s's gold rows in the host's %s (hits:\n%s)", mounted, sk, pub.summary())
		}
	})

	backends := []string{sandbox.BackendBwrap}
	if os.Getenv("MEDGYM_DOCKER") == "1" {
		backends = append(backends, sandbox.BackendDocker)
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			work, err := os.MkdirTemp("", "medgym-goldrows-work-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(work) })
			if err := os.Chmod(work, 0o755); err != nil {
				t.Fatal(err)
			}
			lim := sandbox.DefaultLimits()
			lim.WallTimeout, lim.CPUSeconds, lim.OutputBytes = 5*time.Minute, 300, 1<<20
			// MEDGYM_SANDBOX_IMAGE: the docker backend's image (default
			// medgym/sandbox:latest), e.g. one just built with a new list.
			cfg := sandbox.Config{Backend: backend, DataRoot: agent, WorkRoot: filepath.Join(work, "w"), Limits: lim,
				DockerImage: os.Getenv("MEDGYM_SANDBOX_IMAGE")}
			s, err := sandbox.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				if backend == sandbox.BackendDocker && os.Getenv("CI") != "true" {
					t.Skipf("docker backend unavailable: %v", err)
				}
				t.Fatal(err)
			}
			defer s.Close()
			src := `import runpy, sys
sys.argv = ["goldscan", "/data/goldscan/prints.json", "/"]
runpy.run_path("/data/goldscan/goldscan.py", run_name="__main__")
`
			p, _ := json.Marshal(map[string]string{"code": src})
			ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
			defer cancel()
			res, err := s.Execute(ctx, schemas.ActionRequest{
				Ref:    schemas.EpisodeRef{RunID: "goldrows", EpisodeID: "goldrows-" + backend, TaskID: mounted, Dataset: tasks.ClinicalMLDataset},
				Action: schemas.Action{Name: schemas.ActionValidateCode, Params: p}, TimeoutSec: 300,
				Resources: []string{tasks.ClinicalMLDataset + "/" + mounted, "goldscan"},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != schemas.StatusOK {
				t.Fatalf("the scan did not run: %s %q\n%s", res.Status, res.Message, res.Stderr)
			}
			got := parseGoldScan(t, []byte(res.Stdout))
			t.Logf("%s: read %d files (%d MB) in %.1f s (%.1f s CPU); %d dataset-like by name, %d over the size limit %v",
				backend, got.Files, got.ReadBytes>>20, got.Seconds, got.CPU, len(got.Flagged), len(got.Skipped), got.Skipped)
			own := filepath.Join(sandbox.DataDir, tasks.ClinicalMLDataset, mounted, "test_features.csv")
			sawOwn := false
			for _, h := range got.Hits {
				// The task's own test features (also those of its source's
				// other tasks, the same rows): found, unlabelled.
				if h.Path == own && h.Labelled != nil && !*h.Labelled {
					sawOwn = sawOwn || h.Task == mounted
					continue
				}
				t.Errorf("gold rows of %s readable in the sandbox at %s (%s, %d/%d rows, %d/%d values, labelled %v): mask it in %s",
					h.Task, h.Path, h.How, h.Rows, h.Of, h.Values, h.Of, deref(h.Labelled), "services/sandbox-worker/sandbox/masked_paths.txt")
			}
			if !sawOwn {
				t.Errorf("the scan did not find the task's own test features at %s: it proves nothing (hits:\n%s)", own, got.summary())
			}
		})
	}
}

func deref(b *bool) any {
	if b == nil {
		return "n/a"
	}
	return *b
}
