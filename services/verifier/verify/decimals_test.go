package verify

import (
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// TestDecimalsAsTheBenchmarkScores: an ehrsql2024 truth compares numbers
// rounded to 3 decimals, as EHRSQL 2024's scorer does, so the gold answer
// as the benchmark prints it (rounded) is accepted where a relative
// tolerance of 1e-4 rejected it (values below 5), in both modes and in
// lists; a value that rounds elsewhere is rejected.
func TestDecimalsAsTheBenchmarkScores(t *testing.T) {
	t.Parallel()
	num := tasks.Truth{Type: schemas.AnswerNumber, Answer: "1.23456", Values: []string{"1.23456"},
		Decimals: tasks.EHRSQL2024Decimals, Abstention: true}
	list := tasks.Truth{Type: schemas.AnswerList, Answer: `["2.0001", "1.23456", "-0.0001"]`, Values: []string{"2.0001", "1.23456", "-0.0001"},
		Decimals: tasks.EHRSQL2024Decimals, Abstention: true}
	cases := []struct {
		name   string
		truth  tasks.Truth
		stdout string
		want   bool
	}{
		{"printed gold", num, "1.235", true},
		{"exact", num, "1.23456", true},
		{"rounds elsewhere", num, "1.234", false},
		{"float noise at a tie", tasks.Truth{Type: schemas.AnswerNumber, Answer: "2314.3225", Decimals: 3, Abstention: true}, "2314.3225000000016", true},
		{"list printed gold, any order", list, "[1.235, 0.0, 2.0]", true},
		{"list negative zero", list, "[1.235, -0.0, 2.0]", true},
		{"list one value off", list, "[1.236, 0.0, 2.0]", false},
	}
	for _, c := range cases {
		for _, mode := range []Mode{Strict, Upstream} {
			res := schemas.ExecResult{Status: schemas.StatusOK, Stdout: c.stdout + "\n"}
			chk, detail := CheckOutputDetail(mode, tasks.EHRSQL2024Dataset, c.truth, res)
			if chk.Accepted != c.want {
				t.Errorf("%s (%s): accepted %v, want %v: %s", c.name, mode, chk.Accepted, c.want, detail)
			}
		}
	}
	// The same printed gold under the tolerance the tasks had before.
	old := num
	old.Decimals, old.Tolerance = 0, tasks.EHRSQLTolerance
	if chk := CheckOutput(Strict, tasks.EHRSQL2024Dataset, old, schemas.ExecResult{Status: schemas.StatusOK, Stdout: "1.235\n"}); chk.Accepted {
		t.Fatal("the positive control: a 1e-4 relative tolerance accepted 1.235 for 1.23456")
	}
}
