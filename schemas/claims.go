package schemas

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// EpisodeID names sample k of a task in a run: "<run>--<task>-k<k>", the
// task id made subject-safe. It is unique across runs: workers key episode
// state and sandboxes by it, and RunSpec.Admits recomputes it to tell a
// planned episode from a forged one.
func EpisodeID(runID, taskID string, k int) string {
	return runID + "--" + TaskToken(taskID) + "-k" + strconv.Itoa(k)
}

// TaskToken makes a task id subject-safe: every rune other than ASCII
// letters, digits, '-' and '_' becomes one '_'.
func TaskToken(taskID string) string {
	var b strings.Builder
	b.Grow(len(taskID))
	for _, r := range taskID {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// EpisodeClaim is what a message says about the episode it belongs to.
type EpisodeClaim struct {
	RunID     string
	EpisodeID string
	TaskID    string
	Dataset   string
	// Category is checked when set (messages carrying a TaskView).
	Category string
	// Sample is the sample index, or -1 when the message does not carry
	// one (an EpisodeRef).
	Sample int
}

// ClaimOf returns what an episode request claims.
func ClaimOf(r EpisodeRequest) EpisodeClaim {
	return EpisodeClaim{RunID: r.RunID, EpisodeID: r.EpisodeID, TaskID: r.Task.ID, Dataset: r.Task.Dataset,
		Category: r.Task.Category, Sample: r.SampleIndex}
}

// ClaimOfRef returns what an episode reference claims.
func ClaimOfRef(r EpisodeRef) EpisodeClaim {
	return EpisodeClaim{RunID: r.RunID, EpisodeID: r.EpisodeID, TaskID: r.TaskID, Dataset: r.Dataset, Sample: -1}
}

// Admits reports whether the run this spec describes can have planned the
// claimed episode: same run, a dataset, category and task the spec
// selects, a sample below Samples, and the episode id the dispatcher
// gives that task and sample (EpisodeID). It is the one check workers
// apply to refuse messages for episodes no dispatcher planned; it does not
// load the task library, so a task the spec's filters admit is taken as
// planned.
func (s RunSpec) Admits(c EpisodeClaim) error {
	switch {
	case c.RunID != s.RunID:
		return fmt.Errorf("episode %s: run %q is not run %q", c.EpisodeID, c.RunID, s.RunID)
	case !slices.Contains(s.Datasets, c.Dataset):
		return fmt.Errorf("episode %s: dataset %q is not one of run %s's %v", c.EpisodeID, c.Dataset, s.RunID, s.Datasets)
	case c.Category != "" && len(s.Categories) > 0 && !slices.Contains(s.Categories, c.Category):
		return fmt.Errorf("episode %s: category %q is not selected by run %s", c.EpisodeID, c.Category, s.RunID)
	case len(s.TaskIDs) > 0 && !slices.Contains(s.TaskIDs, c.TaskID):
		return fmt.Errorf("episode %s: task %q is not selected by run %s", c.EpisodeID, c.TaskID, s.RunID)
	case c.Sample < -1:
		return fmt.Errorf("episode %s: negative sample %d", c.EpisodeID, c.Sample)
	case c.Sample >= s.Samples:
		return fmt.Errorf("episode %s: sample %d of a run with %d samples", c.EpisodeID, c.Sample, s.Samples)
	case c.TaskID == "":
		return errors.New("episode " + c.EpisodeID + ": no task id")
	}
	if c.Sample >= 0 {
		if want := EpisodeID(s.RunID, c.TaskID, c.Sample); c.EpisodeID != want {
			return fmt.Errorf("episode %s: task %s sample %d of run %s is episode %s", c.EpisodeID, c.TaskID, c.Sample, s.RunID, want)
		}
		return nil
	}
	prefix := strings.TrimSuffix(EpisodeID(s.RunID, c.TaskID, 0), "0")
	k, err := strconv.Atoi(strings.TrimPrefix(c.EpisodeID, prefix))
	if !strings.HasPrefix(c.EpisodeID, prefix) || err != nil || k < 0 || k >= s.Samples || EpisodeID(s.RunID, c.TaskID, k) != c.EpisodeID {
		return fmt.Errorf("episode %s is not a planned episode of task %s in run %s", c.EpisodeID, c.TaskID, s.RunID)
	}
	return nil
}
