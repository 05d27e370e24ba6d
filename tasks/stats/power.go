package stats

import (
	"errors"
	"math"
)

// TDesign is the design of a t test in a power calculation.
type TDesign int

// The t-test designs of N-PowerAI.
const (
	OneSample TDesign = iota
	Paired
	TwoSample
)

// ErrNoSolution says a sample size cannot reach the requested power.
var ErrNoSolution = errors.New("no sample size reaches the requested power")

// TTestPower is the power of a t test with n subjects (per group for
// TwoSample, pairs for Paired), standardized effect d (mean difference /
// SD), significance level alpha, two- or one-sided. Two-sided power counts
// both rejection tails (as pwr::pwr.t.test does).
func TTestPower(design TDesign, n, d, alpha float64, twoSided bool) float64 {
	df, ncp := n-1, d*math.Sqrt(n)
	if design == TwoSample {
		df, ncp = 2*(n-1), d*math.Sqrt(n/2)
	}
	if !twoSided {
		return NCTSF(TQuantile(1-alpha, df), df, ncp)
	}
	tc := TQuantile(1-alpha/2, df)
	return NCTSF(tc, df, ncp) + NCTCDF(-tc, df, ncp)
}

// TTestN is the (fractional) n at which TTestPower reaches power.
func TTestN(design TDesign, d, alpha, power float64, twoSided bool) (float64, error) {
	return sizeFor(func(n float64) float64 { return TTestPower(design, n, d, alpha, twoSided) }, 2, power)
}

// AnovaPower is the power of a one-way ANOVA F test with k groups of n,
// Cohen's effect size f and level alpha (pwr::pwr.anova.test).
func AnovaPower(k, n, f, alpha float64) float64 {
	d1, d2 := k-1, k*(n-1)
	return NCFSF(FQuantile(1-alpha, d1, d2), d1, d2, k*n*f*f)
}

// AnovaN is the per-group n at which AnovaPower reaches power.
func AnovaN(k, f, alpha, power float64) (float64, error) {
	return sizeFor(func(n float64) float64 { return AnovaPower(k, n, f, alpha) }, 2, power)
}

// ChiSqPower is the power of a χ² test with df degrees of freedom, total
// sample size n, Cohen's effect size w and level alpha (pwr::pwr.chisq.test).
func ChiSqPower(w, n, df, alpha float64) float64 {
	return NCChiSqSF(ChiSqQuantile(1-alpha, df), df, n*w*w)
}

// ChiSqN is the total n at which ChiSqPower reaches power.
func ChiSqN(w, df, alpha, power float64) (float64, error) {
	return sizeFor(func(n float64) float64 { return ChiSqPower(w, n, df, alpha) }, 1+df, power)
}

// CoxEvents is Schoenfeld's number of events for a two-sided level-alpha
// test of hazard ratio hr with power, when a fraction p of subjects is in
// the first group: (z_{1−α/2} + z_power)² / (p(1−p) log(hr)²).
func CoxEvents(hr, alpha, power, p float64) float64 {
	z := NormQuantile(1-alpha/2) + NormQuantile(power)
	l := math.Log(hr)
	return z * z / (p * (1 - p) * l * l)
}

// CoxPower is the power of the Cox (log-rank) test with the given number
// of events, by inverting Schoenfeld's formula.
func CoxPower(hr, alpha, events, p float64) float64 {
	return NormCDF(math.Sqrt(events*p*(1-p))*math.Abs(math.Log(hr)) - NormQuantile(1-alpha/2))
}

// PropTestPower is stats::power.prop.test's power (two-sided, strict=FALSE).
func PropTestPower(n, p1, p2, alpha float64) float64 {
	qu := NormQuantile(1 - alpha/2)
	q1, q2 := 1-p1, 1-p2
	return NormCDF((math.Sqrt(n)*math.Abs(p1-p2) - qu*math.Sqrt((p1+p2)*(q1+q2)/2)) / math.Sqrt(p1*q1+p2*q2))
}

// PropTestN is the per-group n at which PropTestPower reaches power.
func PropTestN(p1, p2, alpha, power float64) (float64, error) {
	return sizeFor(func(n float64) float64 { return PropTestPower(n, p1, p2, alpha) }, 2, power)
}

// sizeFor solves pow(n) = target for n ≥ lo.
func sizeFor(pow func(float64) float64, lo, target float64) (float64, error) {
	f := func(n float64) float64 { return pow(n) - target }
	if f(lo) >= 0 {
		return lo, nil
	}
	hi := lo * 2
	for f(hi) < 0 {
		hi *= 2
		if hi > 1e8 {
			return 0, ErrNoSolution
		}
	}
	n, ok := solve(f, lo, hi)
	if !ok {
		return 0, ErrNoSolution
	}
	return n, nil
}

// TTestPowerR is stats::power.t.test's two-sided power with its default
// strict = FALSE: only the upper rejection tail is counted.
func TTestPowerR(design TDesign, n, d, alpha float64) float64 {
	df, ncp := n-1, d*math.Sqrt(n)
	if design == TwoSample {
		df, ncp = 2*(n-1), d*math.Sqrt(n/2)
	}
	return NCTSF(TQuantile(1-alpha/2, df), df, ncp)
}

// TTestNR is the n at which TTestPowerR reaches power.
func TTestNR(design TDesign, d, alpha, power float64) (float64, error) {
	return sizeFor(func(n float64) float64 { return TTestPowerR(design, n, d, alpha) }, 2, power)
}
