package stats

import (
	"fmt"
	"math"
	"sort"
)

// KMStep is one step of a Kaplan–Meier curve: the survival just after an
// event time.
type KMStep struct {
	Time, Surv float64
}

// KaplanMeier returns the Kaplan–Meier curve of right-censored data
// (event[i] true for an observed event), one step per distinct event time.
func KaplanMeier(time []float64, event []bool) []KMStep {
	idx := make([]int, len(time))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return time[idx[a]] < time[idx[b]] })
	var out []KMStep
	s := 1.0
	atRisk := len(time)
	for i := 0; i < len(idx); {
		t := time[idx[i]]
		d, c := 0, 0
		for i < len(idx) && time[idx[i]] == t {
			if event[idx[i]] {
				d++
			}
			c++
			i++
		}
		if d > 0 {
			s *= 1 - float64(d)/float64(atRisk)
			out = append(out, KMStep{t, s})
		}
		atRisk -= c
	}
	return out
}

// KMSurvAt is S(t) of a Kaplan–Meier curve (right-continuous).
func KMSurvAt(km []KMStep, t float64) float64 {
	s := 1.0
	for _, st := range km {
		if st.Time > t {
			break
		}
		s = st.Surv
	}
	return s
}

// KMMedian is the median survival time as R's survfit reports it: the
// first time the curve falls to 0.5 or below; when it equals 0.5 exactly
// (within 1e-10) on a step, the midpoint of that time and the next event
// time. ok is false when the curve never reaches 0.5. exact reports that
// the midpoint rule applied.
func KMMedian(km []KMStep) (median float64, exact, ok bool) {
	for i, st := range km {
		if math.Abs(st.Surv-0.5) < 1e-10 {
			if i+1 < len(km) {
				return (st.Time + km[i+1].Time) / 2, true, true
			}
			return st.Time, true, true
		}
		if st.Surv < 0.5 {
			return st.Time, false, true
		}
	}
	return 0, false, false
}

// LogRank is the k-sample log-rank test (R's survdiff, rho = 0). group
// holds each subject's group index in [0, k).
func LogRank(time []float64, event []bool, group []int, k int) (TestResult, error) {
	type obs struct {
		t float64
		e bool
		g int
	}
	o := make([]obs, len(time))
	for i := range time {
		o[i] = obs{time[i], event[i], group[i]}
	}
	sort.Slice(o, func(a, b int) bool { return o[a].t < o[b].t })
	nRisk := make([]float64, k)
	for _, x := range o {
		nRisk[x.g]++
	}
	oe := make([]float64, k)
	v := make([][]float64, k)
	for i := range v {
		v[i] = make([]float64, k)
	}
	for i := 0; i < len(o); {
		t := o[i].t
		d := make([]float64, k)
		c := make([]float64, k)
		for i < len(o) && o[i].t == t {
			if o[i].e {
				d[o[i].g]++
			}
			c[o[i].g]++
			i++
		}
		n, dt := 0.0, 0.0
		for g := range k {
			n += nRisk[g]
			dt += d[g]
		}
		if dt > 0 {
			for g := range k {
				oe[g] += d[g] - dt*nRisk[g]/n
			}
			if n > 1 {
				f := dt * (n - dt) / (n - 1)
				for g := range k {
					for h := range k {
						delta := 0.0
						if g == h {
							delta = 1
						}
						v[g][h] += f * nRisk[g] / n * (delta - nRisk[h]/n)
					}
				}
			}
		}
		for g := range k {
			nRisk[g] -= c[g]
		}
	}
	m := k - 1
	sub := make([][]float64, m)
	for i := range sub {
		sub[i] = v[i][:m]
	}
	x, err := solveLinear(sub, oe[:m])
	if err != nil {
		return TestResult{}, fmt.Errorf("log-rank: %w", err)
	}
	chi := 0.0
	for i := range m {
		chi += oe[i] * x[i]
	}
	df := float64(m)
	return TestResult{chi, df, ChiSqSF(chi, df)}, nil
}

// CoxFit is a fitted Cox proportional hazards model.
type CoxFit struct {
	Coef, SE, P []float64
	LogLik      float64
}

// Cox fits a Cox proportional hazards model with Efron's tie handling (R's
// coxph default) by Newton–Raphson. x holds one covariate row per subject
// (no intercept). P-values are Wald tests.
func Cox(time []float64, event []bool, x [][]float64) (CoxFit, error) {
	n, p := len(time), len(x[0])
	// Centre covariates for numerical stability (coefficients unchanged).
	means := make([]float64, p)
	for _, row := range x {
		for j, v := range row {
			means[j] += v / float64(n)
		}
	}
	xc := make([][]float64, n)
	for i, row := range x {
		xc[i] = make([]float64, p)
		for j, v := range row {
			xc[i][j] = v - means[j]
		}
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	// Descending time: risk sets accumulate as we walk.
	sort.SliceStable(idx, func(a, b int) bool { return time[idx[a]] > time[idx[b]] })
	beta := make([]float64, p)
	eval := func(beta []float64) (float64, []float64, [][]float64) {
		ll := 0.0
		g := make([]float64, p)
		h := make([][]float64, p)
		for i := range h {
			h[i] = make([]float64, p)
		}
		s0 := 0.0
		s1 := make([]float64, p)
		s2 := make([][]float64, p)
		for i := range s2 {
			s2[i] = make([]float64, p)
		}
		for a := 0; a < n; {
			t := time[idx[a]]
			d0 := 0.0
			d1 := make([]float64, p)
			d2 := make([][]float64, p)
			for i := range d2 {
				d2[i] = make([]float64, p)
			}
			nd := 0
			for a < n && time[idx[a]] == t {
				i := idx[a]
				eta := 0.0
				for j := range p {
					eta += xc[i][j] * beta[j]
				}
				r := math.Exp(eta)
				s0 += r
				for j := range p {
					s1[j] += r * xc[i][j]
					for k := range p {
						s2[j][k] += r * xc[i][j] * xc[i][k]
					}
				}
				if event[i] {
					nd++
					ll += eta
					d0 += r
					for j := range p {
						g[j] += xc[i][j]
						d1[j] += r * xc[i][j]
						for k := range p {
							d2[j][k] += r * xc[i][j] * xc[i][k]
						}
					}
				}
				a++
			}
			for l := range nd {
				f := float64(l) / float64(nd)
				den := s0 - f*d0
				ll -= math.Log(den)
				m := make([]float64, p)
				for j := range p {
					m[j] = (s1[j] - f*d1[j]) / den
					g[j] -= m[j]
				}
				for j := range p {
					for k := range p {
						h[j][k] += (s2[j][k]-f*d2[j][k])/den - m[j]*m[k]
					}
				}
			}
		}
		return ll, g, h // h is the information matrix (−Hessian)
	}
	ll, g, h := eval(beta)
	for iter := 0; ; iter++ {
		if iter == 50 {
			return CoxFit{}, fmt.Errorf("cox: %w: no convergence", ErrDegenerate)
		}
		step, err := solveLinear(h, g)
		if err != nil {
			return CoxFit{}, fmt.Errorf("cox: %w", err)
		}
		nb := make([]float64, p)
		for j := range p {
			nb[j] = beta[j] + step[j]
		}
		nll, ng, nh := eval(nb)
		for half := 0; nll < ll-1e-12 && half < 30; half++ { // step halving
			for j := range p {
				nb[j] = (beta[j] + nb[j]) / 2
			}
			nll, ng, nh = eval(nb)
		}
		conv := math.Abs(nll-ll) < 1e-13*(math.Abs(nll)+1)
		beta, ll, g, h = nb, nll, ng, nh
		if conv && iter > 0 {
			break
		}
	}
	for _, b := range beta {
		if math.IsNaN(b) || math.Abs(b) > 30 {
			return CoxFit{}, fmt.Errorf("cox: %w: coefficient diverges", ErrDegenerate)
		}
	}
	inv, err := inverse(h)
	if err != nil {
		return CoxFit{}, fmt.Errorf("cox: %w", err)
	}
	fit := CoxFit{Coef: beta, SE: make([]float64, p), P: make([]float64, p), LogLik: ll}
	for j := range p {
		fit.SE[j] = math.Sqrt(inv[j][j])
		fit.P[j] = math.Erfc(math.Abs(beta[j]/fit.SE[j]) / math.Sqrt2)
	}
	return fit, nil
}
