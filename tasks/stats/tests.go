package stats

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// ErrDegenerate says the data cannot support the statistic (too few
// observations, zero variance, an empty margin, no convergence).
var ErrDegenerate = errors.New("degenerate data")

// TestResult is a test statistic with its degrees of freedom and p-value.
type TestResult struct {
	Stat, DF, P float64
}

// Mean is the arithmetic mean.
func Mean(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// Var is the sample variance (n − 1 denominator).
func Var(x []float64) float64 {
	m := Mean(x)
	s := 0.0
	for _, v := range x {
		s += (v - m) * (v - m)
	}
	return s / float64(len(x)-1)
}

// SD is the sample standard deviation.
func SD(x []float64) float64 { return math.Sqrt(Var(x)) }

// Median is the sample median (mean of the middle pair for even n).
func Median(x []float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// WelchT is the Welch two-sample t test of mean(a) − mean(b).
func WelchT(a, b []float64) (TestResult, error) {
	if len(a) < 2 || len(b) < 2 {
		return TestResult{}, fmt.Errorf("welch t: %w: group sizes %d, %d", ErrDegenerate, len(a), len(b))
	}
	va, vb := Var(a)/float64(len(a)), Var(b)/float64(len(b))
	se := math.Sqrt(va + vb)
	if se == 0 {
		return TestResult{}, fmt.Errorf("welch t: %w: zero variance", ErrDegenerate)
	}
	t := (Mean(a) - Mean(b)) / se
	df := (va + vb) * (va + vb) / (va*va/float64(len(a)-1) + vb*vb/float64(len(b)-1))
	return TestResult{t, df, TTwoSidedP(t, df)}, nil
}

// StudentT is the pooled-variance two-sample t test of mean(a) − mean(b).
func StudentT(a, b []float64) (TestResult, error) {
	na, nb := float64(len(a)), float64(len(b))
	if len(a) < 2 || len(b) < 2 {
		return TestResult{}, fmt.Errorf("student t: %w: group sizes %d, %d", ErrDegenerate, len(a), len(b))
	}
	df := na + nb - 2
	sp := ((na-1)*Var(a) + (nb-1)*Var(b)) / df
	se := math.Sqrt(sp * (1/na + 1/nb))
	if se == 0 {
		return TestResult{}, fmt.Errorf("student t: %w: zero variance", ErrDegenerate)
	}
	t := (Mean(a) - Mean(b)) / se
	return TestResult{t, df, TTwoSidedP(t, df)}, nil
}

// PairedT is the paired t test of mean(x − y).
func PairedT(x, y []float64) (TestResult, error) {
	if len(x) != len(y) || len(x) < 2 {
		return TestResult{}, fmt.Errorf("paired t: %w: %d pairs", ErrDegenerate, len(x))
	}
	d := make([]float64, len(x))
	for i := range x {
		d[i] = x[i] - y[i]
	}
	se := SD(d) / math.Sqrt(float64(len(d)))
	if se == 0 {
		return TestResult{}, fmt.Errorf("paired t: %w: constant differences", ErrDegenerate)
	}
	t := Mean(d) / se
	df := float64(len(d) - 1)
	return TestResult{t, df, TTwoSidedP(t, df)}, nil
}

// Ranks returns average ranks (1-based) of x, ties sharing their mean rank,
// and the tie correction term Σ(t³ − t).
func Ranks(x []float64) ([]float64, float64) {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool { return x[idx[i]] < x[idx[j]] })
	r := make([]float64, len(x))
	ties := 0.0
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && x[idx[j+1]] == x[idx[i]] {
			j++
		}
		avg := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			r[idx[k]] = avg
		}
		t := float64(j - i + 1)
		ties += t*t*t - t
		i = j + 1
	}
	return r, ties
}

// MannWhitney is the Wilcoxon rank-sum test: W = U of a (R's wilcox.test
// statistic), two-sided p by the normal approximation with continuity and
// tie corrections (wilcox.test(exact=FALSE)).
func MannWhitney(a, b []float64) (TestResult, error) {
	na, nb := float64(len(a)), float64(len(b))
	if len(a) == 0 || len(b) == 0 {
		return TestResult{}, fmt.Errorf("mann-whitney: %w: empty group", ErrDegenerate)
	}
	all := append(append([]float64(nil), a...), b...)
	r, ties := Ranks(all)
	ra := 0.0
	for i := range a {
		ra += r[i]
	}
	w := ra - na*(na+1)/2
	n := na + nb
	sigma := math.Sqrt(na * nb / 12 * ((n + 1) - ties/(n*(n-1))))
	if sigma == 0 {
		return TestResult{}, fmt.Errorf("mann-whitney: %w: all values tied", ErrDegenerate)
	}
	z := w - na*nb/2
	z = (z - math.Copysign(0.5, z)) / sigma
	if math.Abs(w-na*nb/2) < 0.5 {
		z = 0
	}
	return TestResult{Stat: w, P: math.Erfc(math.Abs(z) / math.Sqrt2)}, nil
}

// ChiSq is Pearson's χ² test of independence on a contingency table; with
// yates and a 2×2 table the continuity correction min(0.5, |O − E|) is
// applied (R's chisq.test default and scipy's chi2_contingency).
func ChiSq(tab [][]float64, yates bool) (TestResult, error) {
	rows, cols := len(tab), len(tab[0])
	if rows < 2 || cols < 2 {
		return TestResult{}, fmt.Errorf("chi-square: %w: %dx%d table", ErrDegenerate, rows, cols)
	}
	rs, cs := make([]float64, rows), make([]float64, cols)
	n := 0.0
	for i, row := range tab {
		for j, v := range row {
			rs[i] += v
			cs[j] += v
			n += v
		}
	}
	stat := 0.0
	for i := range tab {
		for j, o := range tab[i] {
			e := rs[i] * cs[j] / n
			if e == 0 {
				return TestResult{}, fmt.Errorf("chi-square: %w: empty margin", ErrDegenerate)
			}
			d := math.Abs(o - e)
			if yates && rows == 2 && cols == 2 {
				d -= min(0.5, d)
			}
			stat += d * d / e
		}
	}
	df := float64((rows - 1) * (cols - 1))
	return TestResult{stat, df, ChiSqSF(stat, df)}, nil
}

// FisherP is the two-sided p-value of Fisher's exact test on the 2×2 table
// [[a, b], [c, d]]: the total probability of tables no more likely than the
// observed one (relative tolerance 1e-7, as R's fisher.test).
func FisherP(a, b, c, d int) float64 {
	r1, c1, n := a+b, a+c, a+b+c+d
	lo, hi := max(0, r1+c1-n), min(r1, c1)
	lchoose := func(n, k int) float64 {
		x, _ := math.Lgamma(float64(n + 1))
		y, _ := math.Lgamma(float64(k + 1))
		z, _ := math.Lgamma(float64(n - k + 1))
		return x - y - z
	}
	logp := func(x int) float64 { return lchoose(c1, x) + lchoose(n-c1, r1-x) - lchoose(n, r1) }
	obs := logp(a)
	p := 0.0
	for x := lo; x <= hi; x++ {
		if lx := logp(x); lx <= obs+math.Log1p(1e-7) {
			p += math.Exp(lx)
		}
	}
	return min(1, p)
}

// OneWayAnova is the one-way ANOVA F test over groups.
func OneWayAnova(groups [][]float64) (TestResult, error) {
	k := len(groups)
	var all []float64
	for _, g := range groups {
		if len(g) == 0 {
			return TestResult{}, fmt.Errorf("anova: %w: empty group", ErrDegenerate)
		}
		all = append(all, g...)
	}
	n := len(all)
	if k < 2 || n-k < 1 {
		return TestResult{}, fmt.Errorf("anova: %w: %d groups, %d observations", ErrDegenerate, k, n)
	}
	gm := Mean(all)
	ssb, ssw := 0.0, 0.0
	for _, g := range groups {
		m := Mean(g)
		ssb += float64(len(g)) * (m - gm) * (m - gm)
		for _, v := range g {
			ssw += (v - m) * (v - m)
		}
	}
	if ssw == 0 {
		return TestResult{}, fmt.Errorf("anova: %w: no within-group variance", ErrDegenerate)
	}
	d1, d2 := float64(k-1), float64(n-k)
	f := (ssb / d1) / (ssw / d2)
	return TestResult{f, d1, FSF(f, d1, d2)}, nil
}

// Pearson is the Pearson correlation coefficient with its t-test p-value.
func Pearson(x, y []float64) (TestResult, error) {
	if len(x) != len(y) || len(x) < 3 {
		return TestResult{}, fmt.Errorf("pearson: %w: %d pairs", ErrDegenerate, len(x))
	}
	mx, my := Mean(x), Mean(y)
	sxy, sxx, syy := 0.0, 0.0, 0.0
	for i := range x {
		sxy += (x[i] - mx) * (y[i] - my)
		sxx += (x[i] - mx) * (x[i] - mx)
		syy += (y[i] - my) * (y[i] - my)
	}
	if sxx == 0 || syy == 0 {
		return TestResult{}, fmt.Errorf("pearson: %w: zero variance", ErrDegenerate)
	}
	r := sxy / math.Sqrt(sxx*syy)
	df := float64(len(x) - 2)
	t := r * math.Sqrt(df/(1-r*r))
	return TestResult{r, df, TTwoSidedP(t, df)}, nil
}

// Spearman is Spearman's rank correlation (Pearson on average ranks).
func Spearman(x, y []float64) (float64, error) {
	rx, _ := Ranks(x)
	ry, _ := Ranks(y)
	r, err := Pearson(rx, ry)
	if err != nil {
		return 0, fmt.Errorf("spearman: %w", err)
	}
	return r.Stat, nil
}
