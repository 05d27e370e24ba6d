package verify

import (
	"math"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

func predTruth(minAcc, minAUC string) tasks.Truth {
	tr := tasks.Truth{Type: schemas.AnswerPredictions,
		Values: []string{"1=1", "2=0", "3=1", "4=0", "5=1", "6=0", "7=1", "8=0", "9=1", "10=0"},
		Extra: map[string]string{tasks.ExtraIDColumn: "id", tasks.ExtraPredictionColumn: "prediction",
			tasks.ExtraScoreColumn: "score", tasks.ExtraMinAccuracy: minAcc}}
	if minAUC != "" {
		tr.Extra[tasks.ExtraMinAUROC] = minAUC
	}
	return tr
}

func predRun(csv string) schemas.ExecResult {
	return schemas.ExecResult{Status: schemas.StatusOK, Files: map[string]string{"predictions.csv": csv}}
}

func TestPredictionsMetrics(t *testing.T) {
	t.Parallel()
	tr := predTruth("0.5", "")
	cases := []struct {
		name     string
		csv      string
		acc, auc float64
		noAUC    bool
	}{
		{"perfect", "id,prediction,score\n1,1,.9\n2,0,.1\n3,1,.8\n4,0,.2\n5,1,.7\n6,0,.3\n7,1,.6\n8,0,.4\n9,1,.55\n10,0,.45\n", 1, 1, false},
		{"bool labels, float ids, BOM, case, column order", "\ufeffScore,ID,Prediction\n.9,1.0,True\n.1,2.0,False\n.5,3,false\n.5,4,false\n", 0.3, 3.5 / 25, false},
		{"missing rows count wrong", "id,prediction\n1,1\n2,0\n", 0.2, 0, true},
		{"unknown ids and duplicates ignored, first row counts", "id,prediction\n99,1\n1,1\n1,0\n2,1\n", 0.1, 0, true},
		{"all ties", "id,prediction,score\n1,1,.5\n2,1,.5\n3,1,.5\n4,1,.5\n5,1,.5\n6,1,.5\n7,1,.5\n8,1,.5\n9,1,.5\n10,1,.5\n", 0.5, 0.5, false},
		{"nan and text scores are missing", "id,prediction,score\n1,1,nan\n2,0,x\n3,1,.9\n4,0,.1\n", 0.4, 1.0 / 25, false},
	}
	for _, c := range cases {
		m, err := strictPredictions(tr, c.csv)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if math.Abs(m.accuracy-c.acc) > 1e-12 {
			t.Errorf("%s: accuracy %v, want %v", c.name, m.accuracy, c.acc)
		}
		if m.haveAUROC == c.noAUC || (!c.noAUC && math.Abs(m.auroc-c.auc) > 1e-12) {
			t.Errorf("%s: AUROC %v (have %t), want %v", c.name, m.auroc, m.haveAUROC, c.auc)
		}
	}
	for _, bad := range []string{"", "a,b\n1,2\n", "id,prediction\n\"1,0\n"} {
		if _, err := strictPredictions(tr, bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestPredictionsThresholdsAndVerdict(t *testing.T) {
	t.Parallel()
	good := "id,prediction,score\n1,1,.9\n2,0,.1\n3,1,.8\n4,0,.2\n5,1,.7\n6,0,.3\n7,1,.6\n8,0,.4\n9,0,.35\n10,1,.45\n"
	c := checkOutput(Strict, "clinical_ml", predTruth("0.8", "0.9"), predRun(good))
	if !c.Accepted || !strings.Contains(c.Verdict, "accuracy 0.8000 (8 of 10 gold rows) ≥ 0.8000") || !strings.Contains(c.Verdict, "AUROC 0.9200 ≥ 0.9000") {
		t.Fatalf("got %+v", c)
	}
	if c := checkOutput(Strict, "clinical_ml", predTruth("0.9", ""), predRun(good)); c.Accepted {
		t.Fatalf("accuracy below threshold accepted: %+v", c)
	}
	if c := checkOutput(Strict, "clinical_ml", predTruth("0.5", "0.97"), predRun(good)); c.Accepted || !strings.Contains(c.Verdict, "AUROC 0.9200 < 0.9700") {
		t.Fatalf("AUROC below threshold accepted: %+v", c)
	}
	noScore := "id,prediction\n1,1\n2,0\n3,1\n4,0\n5,1\n6,0\n7,1\n8,0\n9,1\n10,0\n"
	if c := checkOutput(Strict, "clinical_ml", predTruth("0.5", "0.5"), predRun(noScore)); c.Accepted || !strings.Contains(c.Verdict, "AUROC missing") {
		t.Fatalf("required AUROC without a score column accepted: %+v", c)
	}
	if c := checkOutput(Strict, "clinical_ml", predTruth("", ""), predRun(noScore)); c.Accepted {
		t.Fatalf("truth without min_accuracy accepted: %+v", c)
	}
	if c := CheckAnswer(Strict, "clinical_ml", predTruth("0.5", ""), "1,1"); c.Accepted {
		t.Fatalf("answer text accepted: %+v", c)
	}
	// Other file names are not read.
	tr := predTruth("0.5", "")
	tr.Extra[tasks.ExtraOutputFile] = "out/p.csv"
	if c := checkOutput(Strict, "clinical_ml", tr, predRun(noScore)); c.Accepted {
		t.Fatalf("wrong file read: %+v", c)
	}
}

// TestPredictionsUpstreamFalsePositive pins upstream's bug: one correct
// prediction out of ten gold rows scores 1.0 upstream, 0.1 strict.
func TestPredictionsUpstreamFalsePositive(t *testing.T) {
	t.Parallel()
	tr := predTruth("0.7", "")
	one := "id,prediction\n1,1\n"
	_, okU, vU, accU := checkPredictions(Upstream, tr, predRun(one))
	_, okS, vS, accS := checkPredictions(Strict, tr, predRun(one))
	if !okU || accU != 1 || okS || accS != 0.1 {
		t.Fatalf("upstream %t %v (%s); strict %t %v (%s)", okU, accU, vU, okS, accS, vS)
	}
	// Unknown ids count wrong upstream (denominator = predicted rows).
	if _, _, _, acc := checkPredictions(Upstream, tr, predRun("id,prediction\n1,1\n77,1\n2,1.0\n3,0.9\n")); acc != 0.25 {
		t.Fatalf("upstream accuracy %v, want 0.25 (int(0.9) = 0)", acc)
	}
}

func TestScorePredictions(t *testing.T) {
	t.Parallel()
	tr := predTruth("0.7", "")
	half := "id,prediction\n1,1\n2,0\n3,1\n4,0\n5,1\n"
	ep := func(term schemas.Termination, files map[string]string) schemas.EpisodeResult {
		return schemas.EpisodeResult{Request: schemas.EpisodeRequest{Task: schemas.TaskView{Dataset: "clinical_ml"}}, Termination: term,
			Turns: []schemas.Turn{
				{Index: 0, ActionName: schemas.ActionValidateCode, ExecStatus: "ok", Files: files, Accepted: term == schemas.EndAccepted},
				{Index: 1, ActionName: schemas.ActionTerminal, ExecStatus: "ok"},
			}}
	}
	for _, c := range []struct {
		name    string
		opt     Options
		term    schemas.Termination
		csv     string
		outcome schemas.Outcome
		reward  float64
	}{
		{"strict 1/0 below threshold", Options{}, schemas.EndAnswered, half, schemas.OutcomeIncorrect, 0},
		{"strict graded", Options{GradedML: true}, schemas.EndAnswered, half, schemas.OutcomeIncorrect, 0.5},
		{"upstream graded accepts the half file", Options{Mode: Upstream, GradedML: true}, schemas.EndAccepted, "id,prediction\n1,1\n2,1\n", schemas.OutcomeCorrect, 0.5},
		{"upstream 1/0", Options{Mode: Upstream}, schemas.EndAccepted, "id,prediction\n1,1\n2,1\n", schemas.OutcomeCorrect, 1},
		{"turn limit with a good file", Options{}, schemas.EndTurnLimit, "id,prediction\n1,1\n2,0\n3,1\n4,0\n5,1\n6,0\n7,1\n8,0\n", schemas.OutcomeCorrect, 1},
		{"turn limit with a bad file", Options{GradedML: true}, schemas.EndTurnLimit, half, schemas.OutcomeTurnLimit, 0.5},
		{"closed by the client with a good file", Options{GradedML: true}, schemas.EndClosed, "id,prediction\n1,1\n2,0\n3,1\n4,0\n5,1\n6,0\n7,1\n8,0\n", schemas.OutcomeTurnLimit, 0},
	} {
		o, r, v := Score(c.opt, tr, ep(c.term, map[string]string{"predictions.csv": c.csv}))
		if o != c.outcome || math.Abs(r-c.reward) > 1e-12 {
			t.Errorf("%s: %s %v (%s), want %s %v", c.name, o, r, v, c.outcome, c.reward)
		}
	}
	if o, r, _ := Score(Options{GradedML: true}, tr, schemas.EpisodeResult{Termination: schemas.EndLoop}); o != schemas.OutcomeLoop || r != 0 {
		t.Errorf("loop: %s %v", o, r)
	}
}
