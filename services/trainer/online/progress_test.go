package online_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/medgym/medgym/services/trainer/online"
)

// svgStats is what the tests read back from a progress chart.
type svgStats struct {
	points map[string]int // series class → circles with class "point"
	bars   []string       // data-iteration of each bar group, in order
	rects  map[string]int // bar group iteration → segments
}

// parseSVG decodes the chart with encoding/xml, failing on malformed XML
// or a non-numeric coordinate.
func parseSVG(t *testing.T, b []byte) svgStats {
	t.Helper()
	st := svgStats{points: map[string]int{}, rects: map[string]int{}}
	dec := xml.NewDecoder(bytes.NewReader(b))
	var stack []string // class of each open <g>
	var root bool
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not XML: %v\n%s", err, b)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			attr := map[string]string{}
			for _, a := range e.Attr {
				attr[a.Name.Local] = a.Value
			}
			for _, k := range []string{"x", "y", "width", "height", "cx", "cy", "x1", "y1", "x2", "y2"} {
				if v, ok := attr[k]; ok {
					if _, err := strconv.ParseFloat(v, 64); err != nil {
						t.Fatalf("<%s %s=%q>: not a number", e.Name.Local, k, v)
					}
				}
			}
			switch e.Name.Local {
			case "svg":
				root = e.Name.Space == "http://www.w3.org/2000/svg"
			case "g":
				stack = append(stack, attr["class"])
				if attr["class"] == "bar" {
					st.bars = append(st.bars, attr["data-iteration"])
				}
			case "circle":
				if len(stack) > 0 && attr["class"] == "point" {
					st.points[strings.TrimPrefix(stack[len(stack)-1], "series ")]++
				}
			case "rect":
				if len(stack) > 0 && stack[len(stack)-1] == "bar" {
					st.rects[st.bars[len(st.bars)-1]]++
				}
			}
		case xml.EndElement:
			if e.Name.Local == "g" {
				stack = stack[:len(stack)-1]
			}
		}
	}
	if !root {
		t.Fatal("root element is not an SVG <svg>")
	}
	return st
}

func TestWriteProgress(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	reps := []online.Report{
		{Iteration: 0, RunID: "rl-it0000", FromVersion: 0, ToVersion: 1, Episodes: 12, MeanReward: 0.25, SuccessRate: 0.25,
			Samples: 12, Groups: 3, SamplingS: 4.25, WaitingS: 0.5, TrainingS: 12, LoadingS: 0.25, ModelLoadS: 8, GPUIdle: 0.75},
		{Iteration: 1, RunID: "rl-it0001", FromVersion: 1, ToVersion: 2, Episodes: 12, MeanReward: -0.5, SuccessRate: 0.5,
			Samples: 24, Groups: 6, SamplingS: 3, WaitingS: 1, TrainingS: 20, LoadingS: 1, GPUIdle: 0.2, Overlapped: true,
			Eval: &online.EvalResult{RunID: "rl-ev0001", Scored: 8, SuccessRate: 0.375}},
		{Iteration: 2, RunID: "rl-it0002", FromVersion: 2, ToVersion: 3, Episodes: 12, MeanReward: 1.5, SuccessRate: 0.75,
			Samples: 24, Groups: 6, StaleDropped: 12, Reweighted: 2, SamplingS: 2.5, WaitingS: 0.75, TrainingS: 30.5, LoadingS: 0.5},
	}
	// Written out of order, as after a resume; a directory without a
	// report (an interrupted iteration) is skipped.
	for _, i := range []int{2, 0, 1} {
		dir := filepath.Join(work, fmt.Sprintf("iter-%04d", i))
		b, _ := json.Marshal(reps[i])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(work, "iter-0003"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := online.WriteProgress(work); err != nil {
		t.Fatal(err)
	}

	md, err := os.ReadFile(filepath.Join(work, online.ProgressMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "](progress.svg)") {
		t.Fatalf("progress.md does not embed the chart:\n%s", md)
	}
	var rows [][]string
	for line := range strings.Lines(string(md)) {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| iteration") {
			cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			rows = append(rows, cells)
		}
	}
	want := [][]string{
		// iteration, version, run, episodes, reward, success, samples, groups, stale, re-weighted, sampling, waiting, training, loading, total,
		// model load, GPU idle, overlapped, held-out success
		{"0", "v0→v1", "rl-it0000", "12", "0.250", "25.0%", "12", "3", "0", "0", "4.2", "0.5", "12.0", "0.2", "17.0", "8.0", "75%", "no", ""},
		{"1", "v1→v2", "rl-it0001", "12", "-0.500", "50.0%", "24", "6", "0", "0", "3.0", "1.0", "20.0", "1.0", "25.0", "0.0", "20%", "yes", "37.5% of 8"},
		{"2", "v2→v3", "rl-it0002", "12", "1.500", "75.0%", "24", "6", "12", "2", "2.5", "0.8", "30.5", "0.5", "34.2", "0.0", "0%", "no", ""},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d table rows, want %d:\n%s", len(rows), len(want), md)
	}
	for i := range want {
		if !slices.Equal(rows[i], want[i]) {
			t.Fatalf("row %d:\n got %q\nwant %q", i, rows[i], want[i])
		}
	}

	svg, err := os.ReadFile(filepath.Join(work, online.ProgressSVG))
	if err != nil {
		t.Fatal(err)
	}
	st := parseSVG(t, svg)
	if st.points["reward"] != 3 || st.points["success"] != 3 {
		t.Fatalf("points per series %v, want 3 reward and 3 success", st.points)
	}
	if !slices.Equal(st.bars, []string{"0", "1", "2"}) {
		t.Fatalf("bar groups %v, want one per iteration", st.bars)
	}
	for _, it := range st.bars {
		if st.rects[it] != 4 {
			t.Fatalf("bar %s has %d segments, want 4 (sampling, waiting, training, loading)", it, st.rects[it])
		}
	}
	for _, label := range []string{"mean reward", "success rate", "sampling", "waiting", "training", "loading", "iteration", "seconds"} {
		if !strings.Contains(string(svg), ">"+label+"<") {
			t.Fatalf("chart lacks the label %q", label)
		}
	}
}

func TestProgressChartEdgeCases(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 60} {
		reps := make([]online.Report, n)
		for i := range reps {
			reps[i] = online.Report{Iteration: i, MeanReward: float64(i % 3), SuccessRate: 0.5, TrainingS: float64(i)}
		}
		st := parseSVG(t, online.ProgressChart(reps))
		if st.points["reward"] != n || st.points["success"] != n || len(st.bars) != n {
			t.Fatalf("%d reports: points %v, %d bars", n, st.points, len(st.bars))
		}
	}
}
