package online

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Progress files, written into the work directory after every completed
// iteration and rebuilt from all iter-NNNN/report.json files, so a resumed
// loop's chart also covers the iterations from before the restart.
const (
	ProgressMarkdown = "progress.md"
	ProgressSVG      = "progress.svg"
)

// WriteProgress reads every iteration report under workDir and (re)writes
// progress.md (a table of all iterations, embedding the chart) and
// progress.svg (reward and success rate per iteration; the time split as
// stacked bars).
func WriteProgress(workDir string) error {
	reps, err := ReadReports(workDir)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(workDir, ProgressSVG), ProgressChart(reps)); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(workDir, ProgressMarkdown), ProgressTable(reps))
}

// ReadReports returns the reports in workDir's iter-*/report.json files,
// ordered by iteration.
func ReadReports(workDir string) ([]Report, error) {
	paths, err := filepath.Glob(filepath.Join(workDir, "iter-*", "report.json"))
	if err != nil {
		return nil, fmt.Errorf("reports: %w", err)
	}
	reps := make([]Report, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read report: %w", err)
		}
		var r Report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("decode %s: %w", p, err)
		}
		reps = append(reps, r)
	}
	slices.SortFunc(reps, func(a, b Report) int { return a.Iteration - b.Iteration })
	return reps, nil
}

// ProgressTable renders the Markdown summary: the chart, then one table
// row per report.
func ProgressTable(reps []Report) []byte {
	var b bytes.Buffer
	b.WriteString("# Online GRPO progress\n\n")
	fmt.Fprintf(&b, "%d iterations.\n\n![reward, success rate and time split per iteration](%s)\n\n", len(reps), ProgressSVG)
	b.WriteString("| iteration | version | run | episodes | mean reward | success rate | samples used | groups | stale dropped | re-weighted | sampling s | waiting s | training s | loading s | total s | model load s | GPU idle | overlapped | held-out success |\n")
	b.WriteString("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
	for _, r := range reps {
		fmt.Fprintf(&b, "| %d | v%d→v%d | %s | %d | %.3f | %.1f%% | %d | %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f%% | %s | %s |\n",
			r.Iteration, r.FromVersion, r.ToVersion, strings.ReplaceAll(r.RunID, "|", `\|`), r.Episodes,
			r.MeanReward, 100*r.SuccessRate, r.Samples, r.Groups, r.StaleDropped, r.Reweighted,
			r.SamplingS, r.WaitingS, r.TrainingS, r.LoadingS, r.SamplingS+r.WaitingS+r.TrainingS+r.LoadingS,
			r.ModelLoadS, 100*r.GPUIdle, map[bool]string{true: "yes", false: "no"}[r.Overlapped], evalCell(r.Eval))
	}
	return b.Bytes()
}

// Chart geometry: two panels, one above the other, sharing the x layout.
const (
	chartW      = 760.0
	chartH      = 600.0
	plotLeft    = 60.0
	plotRight   = 600.0 // the legends sit right of the plots
	panel1Top   = 40.0
	panel1Bot   = 250.0
	panel2Top   = 330.0
	panel2Bot   = 540.0
	legendX     = 615.0
	maxXLabels  = 20
	phaseColors = "#4e79a7 #f28e2b #59a14f #b07aa1"
)

// ProgressChart renders the SVG: the top panel has mean reward and success
// rate per iteration (lines with a point per iteration), the bottom panel
// the per-iteration time split as stacked bars (class "bar", one group per
// iteration).
func ProgressChart(reps []Report) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="11">`+"\n",
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="white"/>`+"\n", chartW, chartH)
	n := len(reps)
	// x: iterations are evenly spaced slots; a point or bar sits in the
	// middle of its slot.
	slot := (plotRight - plotLeft) / float64(max(n, 1))
	xAt := func(i int) float64 { return plotLeft + slot*(float64(i)+0.5) }
	xLabels := func(bottom float64) {
		every := (n + maxXLabels - 1) / maxXLabels
		for i, r := range reps {
			if i%max(every, 1) == 0 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", xAt(i), bottom+15, r.Iteration)
			}
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">iteration</text>`+"\n", (plotLeft+plotRight)/2, bottom+32)
	}

	// Panel 1: mean reward and success rate on one axis; the range always
	// covers [0, 1] and stretches for rewards outside it.
	lo, hi := 0.0, 1.0
	for _, r := range reps {
		lo, hi = math.Min(lo, finite(r.MeanReward)), math.Max(hi, finite(r.MeanReward))
	}
	lo, hi, step := niceRange(lo, hi)
	y1 := func(v float64) float64 { return panel1Bot - (finite(v)-lo)/(hi-lo)*(panel1Bot-panel1Top) }
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="13" font-weight="bold">Mean reward and success rate</text>`+"\n", plotLeft, panel1Top-15)
	yAxis(&b, lo, hi, step, y1, "%.2f", "reward / success", panel1Top, panel1Bot)
	xLabels(panel1Bot)
	series := []struct {
		class, label, color string
		value               func(Report) float64
	}{
		{"reward", "mean reward", "#4e79a7", func(r Report) float64 { return r.MeanReward }},
		{"success", "success rate", "#e15759", func(r Report) float64 { return r.SuccessRate }},
	}
	for k, s := range series {
		fmt.Fprintf(&b, `<g class="series %s">`+"\n", s.class)
		if n > 1 {
			pts := make([]string, n)
			for i, r := range reps {
				pts[i] = fmt.Sprintf("%.1f,%.1f", xAt(i), y1(s.value(r)))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
		}
		for i, r := range reps {
			fmt.Fprintf(&b, `<circle class="point" cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>iteration %d: %s %.3f</title></circle>`+"\n",
				xAt(i), y1(s.value(r)), s.color, r.Iteration, s.label, s.value(r))
		}
		b.WriteString("</g>\n")
		ly := panel1Top + 10 + 20*float64(k)
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"/><circle cx="%g" cy="%g" r="3.5" fill="%s"/>`+
			`<text x="%g" y="%g">%s</text>`+"\n", legendX, ly, legendX+24, ly, s.color, legendX+12, ly, s.color, legendX+30, ly+4, s.label)
	}

	// Panel 2: the time split, stacked from the bottom in loop order.
	phases := []struct {
		label string
		value func(Report) float64
	}{
		{"sampling", func(r Report) float64 { return r.SamplingS }},
		{"waiting", func(r Report) float64 { return r.WaitingS }},
		{"training", func(r Report) float64 { return r.TrainingS }},
		{"loading", func(r Report) float64 { return r.LoadingS }},
	}
	colors := strings.Fields(phaseColors)
	total := 0.0
	for _, r := range reps {
		t := 0.0
		for _, p := range phases {
			t += math.Max(finite(p.value(r)), 0)
		}
		total = math.Max(total, t)
	}
	_, top, tstep := niceRange(0, math.Max(total, 1))
	y2 := func(v float64) float64 { return panel2Bot - v/top*(panel2Bot-panel2Top) }
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="13" font-weight="bold">Time per iteration</text>`+"\n", plotLeft, panel2Top-15)
	yAxis(&b, 0, top, tstep, y2, "%g", "seconds", panel2Top, panel2Bot)
	xLabels(panel2Bot)
	barW := math.Min(slot*0.7, 40)
	for i, r := range reps {
		fmt.Fprintf(&b, `<g class="bar" data-iteration="%d">`+"\n", r.Iteration)
		base := 0.0
		for k, p := range phases {
			v := math.Max(finite(p.value(r)), 0)
			fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>iteration %d: %s %.1fs</title></rect>`+"\n",
				p.label, xAt(i)-barW/2, y2(base+v), barW, y2(base)-y2(base+v), colors[k], r.Iteration, p.label, v)
			base += v
		}
		b.WriteString("</g>\n")
	}
	for k, p := range phases {
		ly := panel2Top + 10 + 20*float64(k)
		fmt.Fprintf(&b, `<rect x="%g" y="%g" width="12" height="12" fill="%s"/><text x="%g" y="%g">%s</text>`+"\n",
			legendX, ly-6, colors[k], legendX+18, ly+4, p.label)
	}
	if n == 0 {
		fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">no completed iterations yet</text>`+"\n", (plotLeft+plotRight)/2, (panel1Top+panel1Bot)/2)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// yAxis draws a panel's frame, horizontal grid lines with tick labels from
// lo to hi, and the rotated axis title.
func yAxis(b *bytes.Buffer, lo, hi, step float64, y func(float64) float64, format, title string, top, bottom float64) {
	for v := lo; v <= hi+step/2; v += step {
		yy := y(v)
		fmt.Fprintf(b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/><text x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n",
			plotLeft, yy, plotRight, yy, plotLeft-6, yy+4, fmt.Sprintf(format, cleanZero(v)))
	}
	fmt.Fprintf(b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#333"/>`+"\n", plotLeft, top, plotRight-plotLeft, bottom-top)
	cy := (top + bottom) / 2
	fmt.Fprintf(b, `<text x="15" y="%g" text-anchor="middle" transform="rotate(-90 15 %g)">%s</text>`+"\n", cy, cy, title)
}

// niceRange widens [lo, hi] to multiples of a 1/2/5×10^k step giving about
// five intervals.
func niceRange(lo, hi float64) (float64, float64, float64) {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if raw <= m*mag {
			step = m * mag
			break
		}
	}
	return math.Floor(lo/step) * step, math.Ceil(hi/step) * step, step
}

// finite maps NaN and ±Inf to 0, so a bad value cannot break the SVG.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// cleanZero turns float noise around zero (-1e-17) into 0 for labels.
func cleanZero(v float64) float64 {
	if math.Abs(v) < 1e-9 {
		return 0
	}
	return math.Round(v*1e9) / 1e9
}

// writeFileAtomic writes via a temp file and a rename, so a reader never
// sees a half-written file.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

func evalCell(e *EvalResult) string {
	if e == nil {
		return ""
	}
	return fmt.Sprintf("%.1f%% of %d", 100*e.SuccessRate, e.Scored)
}
