package stats

import (
	"math"
	"testing"
)

func TestNoncentralTails(t *testing.T) {
	// Central limits agree with the central distributions.
	if got, want := NCTSF(2.0, 10, 0), TTwoSidedP(2.0, 10)/2; math.Abs(got-want) > 1e-10 {
		t.Errorf("NCTSF central = %.12g, want %.12g", got, want)
	}
	if got, want := NCChiSqSF(3.84, 1, 0), ChiSqSF(3.84, 1); math.Abs(got-want) > 1e-12 {
		t.Errorf("NCChiSqSF central = %.12g, want %.12g", got, want)
	}
	if got, want := NCFSF(3.0, 2, 20, 0), FSF(3.0, 2, 20); math.Abs(got-want) > 1e-12 {
		t.Errorf("NCFSF central = %.12g, want %.12g", got, want)
	}
	// Values from scipy 1.10: nct.sf(2, 10, 1.5), ncx2.sf(5, 2, 3),
	// ncf.sf(2, 3, 30, 4).
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"nct", NCTSF(2, 10, 1.5), 0.3408459276},
		{"ncx2", NCChiSqSF(5, 2, 3), 0.4059391969},
		{"ncf", NCFSF(2, 3, 30, 4), 0.5164009399},
	} {
		if math.Abs(c.got-c.want) > 2e-6 {
			t.Errorf("%s = %.10g, want %.10g", c.name, c.got, c.want)
		}
	}
}
