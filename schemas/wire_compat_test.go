package schemas

import (
	"os"
	"path/filepath"
	"testing"
)

// decodeGolden decodes testdata/wire-v1.1/name.json as T, then checks
// that T encodes and decodes again (what a new worker does when it passes
// an old message on).
func decodeGolden[T Validator](t *testing.T, name string) T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "wire-v1.1", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := Decode[T](b)
	if err != nil {
		t.Fatalf("%s (schema 1.1) does not decode with schema %s: %v", name, Version, err)
	}
	again, err := Encode(v)
	if err != nil {
		t.Fatalf("%s: re-encode: %v", name, err)
	}
	if _, err := Decode[T](again); err != nil {
		t.Fatalf("%s: decode after re-encode: %v", name, err)
	}
	return v
}

// TestWireV11Golden (issue 17, rolling upgrades): messages written by the
// previous release (schema 1.1, encoded by that release's schemas package
// at commit aed6027^ and kept as golden files) decode, validate and keep
// their meaning under the current schema, so new workers take over the
// streams old ones filled without losing an episode.
func TestWireV11Golden(t *testing.T) {
	if Version == "1.1" {
		t.Fatal("the golden files are of the current schema: they prove nothing")
	}
	spec := decodeGolden[RunSpec](t, "run_spec")
	if spec.RunID != "v11run" || spec.Samples != 2 || len(spec.Temperatures) != 2 || spec.Options.Compat != "" {
		t.Errorf("run spec: %+v", spec)
	}
	req := decodeGolden[EpisodeRequest](t, "episode_request")
	if req.Task.ID != "medcalcbench/test/12" || req.Task.AnswerType != AnswerNumber || req.Task.Harness != "" || req.Options.MaxTurns != 15 {
		t.Errorf("episode request: %+v", req)
	}
	areq := decodeGolden[ActionRequest](t, "action_request")
	if areq.Action.Name != "validate_code" || !areq.Check || areq.Ref.EpisodeID != req.EpisodeID {
		t.Errorf("action request: %+v", areq)
	}
	obs := decodeGolden[Observation](t, "observation")
	if obs.Result.Stdout != "24.69\n" || !obs.CheckWanted {
		t.Errorf("observation: %+v", obs)
	}
	res := decodeGolden[EpisodeResult](t, "episode_result")
	if res.FinalAnswer != "24.69" || len(res.Turns) != 1 || !res.Turns[0].Accepted || res.Termination != EndAccepted {
		t.Errorf("episode result: %+v", res)
	}
	score := decodeGolden[Score](t, "score")
	if score.Outcome != OutcomeCorrect || !score.Outcome.Solved() || score.Reward != 1 {
		t.Errorf("score: %+v", score)
	}
}
