package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strings"
)

// The charts are hand-written SVG 1.1: a few rectangles, lines and text
// elements, no dependency and byte-for-byte reproducible output.

const (
	chartW, chartH = 720.0, 360.0
	padL, padR     = 60.0, 20.0
	padT, padB     = 40.0, 90.0
)

var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1"}

type svg struct{ b bytes.Buffer }

func newSVG(title string) *svg {
	s := &svg{}
	fmt.Fprintf(&s.b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n",
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(&s.b, `<rect width="%g" height="%g" fill="white"/>`+"\n", chartW, chartH)
	s.text(chartW/2, 22, "middle", 15, title)
	return s
}

func (s *svg) text(x, y float64, anchor string, size float64, txt string) {
	fmt.Fprintf(&s.b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-size="%g">%s</text>`+"\n", x, y, anchor, size, esc(txt))
}

func (s *svg) rotated(x, y float64, txt string) {
	fmt.Fprintf(&s.b, `<text x="%.1f" y="%.1f" text-anchor="end" transform="rotate(-35 %.1f %.1f)">%s</text>`+"\n", x, y, x, y, esc(txt))
}

func (s *svg) line(x1, y1, x2, y2 float64, stroke string, width float64) {
	fmt.Fprintf(&s.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%g"/>`+"\n", x1, y1, x2, y2, stroke, width)
}

func (s *svg) bytes() []byte {
	s.b.WriteString("</svg>\n")
	return s.b.Bytes()
}

func esc(t string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(t)) // writes to a strings.Builder: never fails
	return b.String()
}

// axes draws the y axis from 0 to ymax with ticks formatted by fmtY.
func (s *svg) axes(ymax float64, fmtY func(float64) string, ylabel string) {
	x0, y0, y1 := padL, chartH-padB, padT
	s.line(x0, y0, chartW-padR, y0, "#333", 1)
	s.line(x0, y0, x0, y1, "#333", 1)
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		y := y0 - (y0-y1)*float64(i)/4
		s.line(x0-4, y, chartW-padR, y, "#ddd", 0.5)
		s.text(x0-6, y+4, "end", 11, fmtY(v))
	}
	fmt.Fprintf(&s.b, `<text x="14" y="%.1f" text-anchor="middle" transform="rotate(-90 14 %.1f)">%s</text>`+"\n",
		(y0+y1)/2, (y0+y1)/2, esc(ylabel))
}

// barChart draws one bar per label; values are in [0, ymax].
func barChart(title, ylabel string, labels []string, values []float64, ymax float64, fmtV func(float64) string) []byte {
	s := newSVG(title)
	if ymax <= 0 {
		ymax = 1
	}
	s.axes(ymax, fmtV, ylabel)
	n := max(1, len(labels))
	slot := (chartW - padL - padR) / float64(n)
	bw := math.Min(60, slot*0.7)
	y0, h := chartH-padB, chartH-padB-padT
	for i, v := range values {
		x := padL + slot*float64(i) + (slot-bw)/2
		bh := h * math.Max(0, math.Min(v, ymax)) / ymax
		fmt.Fprintf(&s.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %s</title></rect>`+"\n",
			x, y0-bh, bw, bh, palette[0], esc(labels[i]), esc(fmtV(v)))
		s.text(x+bw/2, y0-bh-4, "middle", 11, fmtV(v))
		s.rotated(x+bw/2, y0+14, shorten(labels[i], 28))
	}
	return s.bytes()
}

// series is one line of a line chart.
type series struct {
	name string
	ys   []float64
}

// lineChart draws series over xs = 1..len(ys); y in [0, 1].
func lineChart(title, xlabel, ylabel string, ss []series) []byte {
	s := newSVG(title)
	s.axes(1, func(v float64) string { return fmt.Sprintf("%.2f", v) }, ylabel)
	n := 0
	for _, se := range ss {
		n = max(n, len(se.ys))
	}
	y0, h := chartH-padB, chartH-padB-padT
	xw := chartW - padL - padR - 40
	xAt := func(i int) float64 {
		if n <= 1 {
			return padL + 20 + xw/2
		}
		return padL + 20 + xw*float64(i)/float64(n-1)
	}
	for i := range n {
		s.text(xAt(i), y0+16, "middle", 11, fmt.Sprint(i+1))
	}
	s.text(padL+(chartW-padL-padR)/2, y0+36, "middle", 12, xlabel)
	for si, se := range ss {
		color := palette[si%len(palette)]
		var pts []string
		for i, v := range se.ys {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xAt(i), y0-h*v))
		}
		fmt.Fprintf(&s.b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color)
		for i, v := range se.ys {
			fmt.Fprintf(&s.b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s@%d = %.3f</title></circle>`+"\n",
				xAt(i), y0-h*v, color, esc(se.name), i+1, v)
		}
		ly := y0 + 58 // the legend is one row
		lx := padL + float64(si)*140
		fmt.Fprintf(&s.b, `<rect x="%.1f" y="%.1f" width="14" height="4" fill="%s"/>`+"\n", lx, ly-4, color)
		s.text(lx+20, ly, "start", 12, se.name)
	}
	return s.bytes()
}

// shorten cuts a long axis label (the bar's <title> keeps the full name).
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
