package train

import (
	"math"
	"testing"
)

func TestAdvantagesMatchTRLAndVerl(t *testing.T) {
	// Rewards 1,1,1,0: mean 0.75, Bessel std sqrt(0.25) = 0.5.
	got := Advantages([]float64{1, 1, 1, 0}, 1e-6, "group")
	want := []float64{0.25 / (0.5 + 1e-6), 0.25 / (0.5 + 1e-6), 0.25 / (0.5 + 1e-6), -0.75 / (0.5 + 1e-6)}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Fatalf("advantage %d = %v, want %v", i, got[i], want[i])
		}
	}
	if got := Advantages([]float64{1, 0}, 0, "none"); got[0] != 0.5 || got[1] != -0.5 {
		t.Fatalf("Dr. GRPO advantages %v, want [0.5 -0.5]", got)
	}
	if got := Advantages([]float64{1, 1, 1}, 1e-6, "group"); got[0] != 0 || got[2] != 0 {
		t.Fatalf("zero-variance group: %v, want zeros", got)
	}
	// verl: a group of one has mean 0 and std 1.
	if got := Advantages([]float64{0.5}, 0, "group"); got[0] != 0.5 {
		t.Fatalf("group of one: %v, want [0.5]", got)
	}
}
