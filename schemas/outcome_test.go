package schemas

import "testing"

// The outcome set grew in contract 1.2 (abstained_correctly,
// abstained_wrongly): a score written under 1.1 still decodes and
// validates, the new outcomes validate, and an unknown one does not.
func TestOutcomesAcrossVersions(t *testing.T) {
	old := `{"run_id":"r1","episode_id":"e1","task_id":"t","dataset":"mimic_iii","sample_index":0,"outcome":"turn_limit","reward":0,"num_turns":3,"verifier_version":"1.0.0+strict.0","scored_at":"2026-11-30T00:00:00Z"}`
	if _, err := Decode[Score]([]byte(old)); err != nil {
		t.Fatalf("a 1.1 score: %v", err)
	}
	for _, o := range []Outcome{OutcomeAbstainedCorrectly, OutcomeAbstainedWrongly} {
		if !o.Valid() {
			t.Errorf("%s is not valid", o)
		}
	}
	if Outcome("abstained").Valid() {
		t.Error("an unknown outcome is valid")
	}
	want := map[Outcome][2]int{ // Solved (1/0), Reliability score
		OutcomeCorrect: {1, 1}, OutcomeAbstainedCorrectly: {1, 1}, OutcomeAbstainedWrongly: {0, 0},
		OutcomeIncorrect: {0, -1}, OutcomeTurnLimit: {0, -1}, OutcomeFormatError: {0, -1}, OutcomeTimeout: {0, -1},
		OutcomeLoop: {0, -1}, OutcomeSandboxError: {0, -1},
	}
	for o, w := range want {
		solved := 0
		if o.Solved() {
			solved = 1
		}
		sc, ok := o.Reliability()
		if solved != w[0] || !ok || sc != w[1] {
			t.Errorf("%s: solved %v, reliability %d (%v); want %v", o, o.Solved(), sc, ok, w)
		}
	}
	if _, ok := OutcomeInfraFailure.Reliability(); ok {
		t.Error("infra_failure has a reliability score")
	}
	if len(want)+1 != len(Outcomes) {
		t.Errorf("%d outcomes, the test covers %d", len(Outcomes), len(want)+1)
	}
}
