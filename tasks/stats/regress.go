package stats

import (
	"fmt"
	"math"
)

// solveLinear solves a·x = b for a small dense symmetric system by
// Gaussian elimination with partial pivoting; a and b are not modified.
func solveLinear(a [][]float64, b []float64) ([]float64, error) {
	n := len(b)
	m := make([][]float64, n)
	for i := range a {
		m[i] = append(append([]float64(nil), a[i]...), b[i])
	}
	for c := range n {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(m[r][c]) > math.Abs(m[p][c]) {
				p = r
			}
		}
		if math.Abs(m[p][c]) < 1e-300 {
			return nil, fmt.Errorf("solve: %w: singular matrix", ErrDegenerate)
		}
		m[c], m[p] = m[p], m[c]
		for r := c + 1; r < n; r++ {
			f := m[r][c] / m[c][c]
			for k := c; k <= n; k++ {
				m[r][k] -= f * m[c][k]
			}
		}
	}
	x := make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		s := m[r][n]
		for k := r + 1; k < n; k++ {
			s -= m[r][k] * x[k]
		}
		x[r] = s / m[r][r]
	}
	return x, nil
}

// inverse returns the inverse of a small square matrix.
func inverse(a [][]float64) ([][]float64, error) {
	n := len(a)
	inv := make([][]float64, n)
	for i := range inv {
		inv[i] = make([]float64, n)
	}
	for j := range n {
		e := make([]float64, n)
		e[j] = 1
		col, err := solveLinear(a, e)
		if err != nil {
			return nil, err
		}
		for i := range n {
			inv[i][j] = col[i]
		}
	}
	return inv, nil
}

// Fit is a fitted regression: coefficients (intercept first when the
// design has one), their standard errors and two-sided p-values.
type Fit struct {
	Coef, SE, P []float64
	// R2 and AdjR2 are set for linear models; LogLik for logistic ones.
	R2, AdjR2, LogLik float64
}

// OLS fits y = Xβ by least squares; x holds the design rows (include a 1
// column for an intercept). P-values use the t distribution.
func OLS(x [][]float64, y []float64) (Fit, error) {
	n, p := len(y), len(x[0])
	if n <= p {
		return Fit{}, fmt.Errorf("ols: %w: %d rows for %d coefficients", ErrDegenerate, n, p)
	}
	xtx := make([][]float64, p)
	xty := make([]float64, p)
	for i := range xtx {
		xtx[i] = make([]float64, p)
	}
	for r := range n {
		for i := range p {
			xty[i] += x[r][i] * y[r]
			for j := range p {
				xtx[i][j] += x[r][i] * x[r][j]
			}
		}
	}
	inv, err := inverse(xtx)
	if err != nil {
		return Fit{}, fmt.Errorf("ols: %w", err)
	}
	beta := make([]float64, p)
	for i := range p {
		for j := range p {
			beta[i] += inv[i][j] * xty[j]
		}
	}
	my := Mean(y)
	rss, tss := 0.0, 0.0
	for r := range n {
		f := 0.0
		for i := range p {
			f += x[r][i] * beta[i]
		}
		rss += (y[r] - f) * (y[r] - f)
		tss += (y[r] - my) * (y[r] - my)
	}
	df := float64(n - p)
	s2 := rss / df
	fit := Fit{Coef: beta, SE: make([]float64, p), P: make([]float64, p)}
	for i := range p {
		fit.SE[i] = math.Sqrt(s2 * inv[i][i])
		fit.P[i] = TTwoSidedP(beta[i]/fit.SE[i], df)
	}
	fit.R2 = 1 - rss/tss
	fit.AdjR2 = 1 - (1-fit.R2)*float64(n-1)/df
	return fit, nil
}

// Logistic fits a logistic regression of the 0/1 outcome y on the design
// rows x by Newton–Raphson (IRLS); p-values are Wald z tests.
func Logistic(x [][]float64, y []float64) (Fit, error) {
	n, p := len(y), len(x[0])
	beta := make([]float64, p)
	ll := math.Inf(-1)
	for iter := 0; ; iter++ {
		if iter == 100 {
			return Fit{}, fmt.Errorf("logistic: %w: no convergence", ErrDegenerate)
		}
		h := make([][]float64, p)
		for i := range h {
			h[i] = make([]float64, p)
		}
		g := make([]float64, p)
		newLL := 0.0
		for r := range n {
			eta := 0.0
			for i := range p {
				eta += x[r][i] * beta[i]
			}
			mu := 1 / (1 + math.Exp(-eta))
			if y[r] == 1 {
				newLL += -math.Log1p(math.Exp(-eta))
			} else {
				newLL += -math.Log1p(math.Exp(eta))
			}
			w := mu * (1 - mu)
			for i := range p {
				g[i] += x[r][i] * (y[r] - mu)
				for j := range p {
					h[i][j] += w * x[r][i] * x[r][j]
				}
			}
		}
		if math.Abs(newLL-ll) < 1e-12*(math.Abs(newLL)+1e-3) {
			inv, err := inverse(h)
			if err != nil {
				return Fit{}, fmt.Errorf("logistic: %w", err)
			}
			fit := Fit{Coef: beta, SE: make([]float64, p), P: make([]float64, p), LogLik: newLL}
			for i := range p {
				fit.SE[i] = math.Sqrt(inv[i][i])
				z := beta[i] / fit.SE[i]
				fit.P[i] = math.Erfc(math.Abs(z) / math.Sqrt2)
			}
			return fit, nil
		}
		ll = newLL
		step, err := solveLinear(h, g)
		if err != nil {
			return Fit{}, fmt.Errorf("logistic: %w", err)
		}
		for i := range p {
			beta[i] += step[i]
		}
	}
}
