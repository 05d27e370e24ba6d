package stats

import (
	"math"

	"gonum.org/v1/gonum/integrate/quad"
	"gonum.org/v1/gonum/mathext"
	"gonum.org/v1/gonum/stat/distuv"
)

// NormCDF is the standard normal distribution function.
func NormCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// NormQuantile is the standard normal quantile function.
func NormQuantile(p float64) float64 { return distuv.UnitNormal.Quantile(p) }

// TTwoSidedP is the two-sided p-value of a t statistic with df degrees of
// freedom, accurate far into the tails.
func TTwoSidedP(t, df float64) float64 {
	return mathext.RegIncBeta(df/2, 0.5, df/(df+t*t))
}

// TQuantile is the p-quantile of Student's t with df degrees of freedom.
func TQuantile(p, df float64) float64 {
	return distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Quantile(p)
}

// FSF is the upper tail P(F > f) of the F distribution.
func FSF(f, d1, d2 float64) float64 {
	if f <= 0 {
		return 1
	}
	return mathext.RegIncBeta(d2/2, d1/2, d2/(d2+d1*f))
}

// FQuantile is the p-quantile of the F distribution.
func FQuantile(p, d1, d2 float64) float64 {
	return distuv.F{D1: d1, D2: d2}.Quantile(p)
}

// ChiSqSF is the upper tail P(X > x) of the χ² distribution with k degrees
// of freedom.
func ChiSqSF(x, k float64) float64 {
	if x <= 0 {
		return 1
	}
	return mathext.GammaIncRegComp(k/2, x/2)
}

// ChiSqQuantile is the p-quantile of the χ² distribution.
func ChiSqQuantile(p, k float64) float64 {
	return distuv.ChiSquared{K: k}.Quantile(p)
}

// poissonRange returns the index range [lo, hi] holding all but a
// negligible mass of a Poisson(mu) distribution.
func poissonRange(mu float64) (lo, hi int) {
	sd := math.Sqrt(mu)
	lo = max(0, int(mu-12*sd-10))
	hi = int(mu+12*sd) + 40
	return lo, hi
}

func poissonPMF(j int, mu float64) float64 {
	if mu == 0 {
		if j == 0 {
			return 1
		}
		return 0
	}
	lg, _ := math.Lgamma(float64(j) + 1)
	return math.Exp(float64(j)*math.Log(mu) - mu - lg)
}

// NCChiSqSF is the upper tail of the noncentral χ² distribution with k
// degrees of freedom and noncentrality lambda (a Poisson mixture).
func NCChiSqSF(x, k, lambda float64) float64 {
	if x <= 0 {
		return 1
	}
	lo, hi := poissonRange(lambda / 2)
	s := 0.0
	for j := lo; j <= hi; j++ {
		s += poissonPMF(j, lambda/2) * mathext.GammaIncRegComp(k/2+float64(j), x/2)
	}
	return min(1, s)
}

// NCFSF is the upper tail of the noncentral F distribution with d1, d2
// degrees of freedom and noncentrality lambda.
func NCFSF(f, d1, d2, lambda float64) float64 {
	if f <= 0 {
		return 1
	}
	lo, hi := poissonRange(lambda / 2)
	y := d2 / (d2 + d1*f)
	s := 0.0
	for j := lo; j <= hi; j++ {
		s += poissonPMF(j, lambda/2) * mathext.RegIncBeta(d2/2, d1/2+float64(j), y)
	}
	return min(1, s)
}

// NCTSF is the upper tail P(T > t) of the noncentral t distribution with
// df degrees of freedom and noncentrality delta:
// ∫ f_χ²(v) Φ(delta − t·√(v/df)) dv, integrated numerically.
func NCTSF(t, df, delta float64) float64 {
	chi := distuv.ChiSquared{K: df}
	lo, hi := chi.Quantile(1e-15), chi.Quantile(1-1e-15)
	f := func(v float64) float64 {
		return chi.Prob(v) * NormCDF(delta-t*math.Sqrt(v/df))
	}
	const pieces = 32
	w := (hi - lo) / pieces
	s := 0.0
	for i := range pieces {
		a := lo + float64(i)*w
		s += quad.Fixed(f, a, a+w, 24, quad.Legendre{}, 0)
	}
	return min(1, max(0, s))
}

// NCTCDF is P(T ≤ t) for the noncentral t distribution.
func NCTCDF(t, df, delta float64) float64 {
	// P(T ≤ t) = P(−T ≥ −t) and −T is noncentral t with −delta.
	return NCTSF(-t, df, -delta)
}

// solve finds x in [lo, hi] with f(x) = 0 by bisection refined with the
// secant step (Brent-like); f(lo) and f(hi) must differ in sign.
func solve(f func(float64) float64, lo, hi float64) (float64, bool) {
	flo, fhi := f(lo), f(hi)
	if math.IsNaN(flo) || math.IsNaN(fhi) || (flo > 0) == (fhi > 0) {
		return math.NaN(), false
	}
	for range 200 {
		mid := lo + (hi-lo)/2
		if hi-lo <= 1e-9*max(1, math.Abs(mid)) {
			return mid, true
		}
		fm := f(mid)
		if fm == 0 {
			return mid, true
		}
		if (fm > 0) == (flo > 0) {
			lo, flo = mid, fm
		} else {
			hi = mid
		}
	}
	return lo + (hi-lo)/2, true
}
