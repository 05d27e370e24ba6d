package schemas

import "testing"

// The outcome set grew in contract 1.2 (abstained_correctly,
// abstained_wrongly) and 1.3 (abandoned, excluded like infra_failure): a score written under 1.1 still decodes and
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
	for _, o := range []Outcome{OutcomeInfraFailure, OutcomeAbandoned} {
		if _, ok := o.Reliability(); ok || !o.Excluded() || o.Solved() || !o.Valid() {
			t.Errorf("%s: has a reliability score, or is not excluded", o)
		}
	}
	for o := range want {
		if o.Excluded() {
			t.Errorf("%s is excluded from rates", o)
		}
	}
	if len(want)+2 != len(Outcomes) {
		t.Errorf("%d outcomes, the test covers %d", len(Outcomes), len(want)+2)
	}
}

func TestPolicyVersionValidate(t *testing.T) {
	for _, tc := range []struct {
		pv PolicyVersion
		ok bool
	}{
		{PolicyVersion{Version: 1, Model: "m"}, true},
		{PolicyVersion{Version: 0, Model: "m"}, false},
		{PolicyVersion{Version: 2}, false},
	} {
		if err := tc.pv.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok %v", tc.pv, err, tc.ok)
		}
	}
}
