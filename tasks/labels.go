package tasks

import (
	"embed"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
)

// A label set is one version of a dataset's labels, named
// "<dataset>@<name>". Every built-in dataset has its base set, the labels
// its loader reads or computes (BaseLabelSet: "medcalcbench@v1.0",
// "treqs@source", ...). A set declared in tasks/labels/<id>.json changes
// some of the base set's labels, each change with its reason and its
// published source. The labels travel with the task (Task.Labels), the
// verifier scores an episode against the set its run chose (or the
// dataset's default for the verifier mode), and the trajectory row
// records the set it was scored against, so `medgym rescore --labels`
// can re-grade stored episodes under another one.

//go:embed labels/*.json
var labelFiles embed.FS

// LabelSet is one declared label set: the base set's labels with Labels
// replacing some of them.
type LabelSet struct {
	ID          string `json:"id"`
	Dataset     string `json:"dataset"`
	Base        string `json:"base"`
	Description string `json:"description"`
	Licence     string `json:"licence"`
	Rule        string `json:"rule"`
	// Default says the set is the dataset's default under the strict
	// verifier (the upstream-compatible verifier scores the base set,
	// which reproduces the benchmark's own numbers).
	Default bool    `json:"default"`
	Labels  []Label `json:"labels"`
}

// Label is one task's label in a set: the answer that replaces the base
// set's, and why.
type Label struct {
	TaskID string `json:"task_id"`
	Answer string `json:"answer"`
	// Lower and Upper replace the base truth's accepted range, when it has
	// one.
	Lower *float64 `json:"lower,omitempty"`
	Upper *float64 `json:"upper,omitempty"`
	// Was is the base set's answer (checked against the data on load).
	Was string `json:"was"`
	// Reason says what is wrong with the base label; Source cites the
	// published definition the answer follows.
	Reason string `json:"reason"`
	Source string `json:"source"`
	// MedCalc-Bench evidence: the row, its calculator and the row's own
	// Relevant Entities.
	RowNumber    int    `json:"row_number,omitempty"`
	CalculatorID int    `json:"calculator_id,omitempty"`
	Calculator   string `json:"calculator,omitempty"`
	Inputs       string `json:"inputs,omitempty"`
}

// baseLabelNames names the base set of datasets whose labels are a
// published release; every other built-in dataset's base set is
// "<dataset>@source" (the labels its loader computes from the data).
var baseLabelNames = map[string]string{MedCalcDataset: "v1.0"}

// BaseLabelSet returns the id of a built-in dataset's base label set.
func BaseLabelSet(dataset string) string {
	if n, ok := baseLabelNames[dataset]; ok {
		return dataset + "@" + n
	}
	return dataset + "@source"
}

// UpstreamLabelSet is the label set of tasks loaded from upstream
// MedAgentGym task files: their own labels, to which no declared set
// applies.
func UpstreamLabelSet(dataset string) string { return dataset + "@upstream-files" }

var declaredLabelSets = sync.OnceValues(func() (map[string]*LabelSet, error) {
	ents, err := labelFiles.ReadDir("labels")
	if err != nil {
		return nil, fmt.Errorf("label sets: %w", err)
	}
	out := map[string]*LabelSet{}
	for _, e := range ents {
		b, err := labelFiles.ReadFile(path.Join("labels", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("label sets: %w", err)
		}
		var ls LabelSet
		if err := json.Unmarshal(b, &ls); err != nil {
			return nil, fmt.Errorf("label set %s: %w", e.Name(), err)
		}
		if err := ls.validate(e.Name()); err != nil {
			return nil, err
		}
		if out[ls.ID] != nil {
			return nil, fmt.Errorf("label set %s: declared twice", ls.ID)
		}
		out[ls.ID] = &ls
	}
	defaults := map[string]string{}
	for _, ls := range out {
		if ls.Default {
			if d := defaults[ls.Dataset]; d != "" {
				return nil, fmt.Errorf("label sets %s and %s: both the default of %s", d, ls.ID, ls.Dataset)
			}
			defaults[ls.Dataset] = ls.ID
		}
	}
	return out, nil
})

func (ls *LabelSet) validate(file string) error {
	if ls.ID+".json" != file {
		return fmt.Errorf("label set file %s: id %q (want the file's name)", file, ls.ID)
	}
	ds, name, ok := strings.Cut(ls.ID, "@")
	if !ok || ds != ls.Dataset || name == "" {
		return fmt.Errorf("label set %s: id must be %s@<name>", ls.ID, ls.Dataset)
	}
	if ls.Base != BaseLabelSet(ls.Dataset) {
		return fmt.Errorf("label set %s: base %q (want %s)", ls.ID, ls.Base, BaseLabelSet(ls.Dataset))
	}
	if ls.Licence == "" || ls.Description == "" {
		return fmt.Errorf("label set %s: no licence or description", ls.ID)
	}
	seen := map[string]bool{}
	for _, l := range ls.Labels {
		switch {
		case l.TaskID == "" || l.Answer == "":
			return fmt.Errorf("label set %s: a label without task_id or answer", ls.ID)
		case seen[l.TaskID]:
			return fmt.Errorf("label set %s: task %s labelled twice", ls.ID, l.TaskID)
		case l.Reason == "" || l.Source == "":
			return fmt.Errorf("label set %s: task %s: a label needs its reason and source", ls.ID, l.TaskID)
		case (l.Lower == nil) != (l.Upper == nil) || (l.Lower != nil && *l.Lower > *l.Upper):
			return fmt.Errorf("label set %s: task %s: lower and upper go together, lower <= upper", ls.ID, l.TaskID)
		}
		seen[l.TaskID] = true
	}
	return nil
}

// DeclaredLabelSets returns the declared label sets, by id.
func DeclaredLabelSets() ([]LabelSet, error) {
	m, err := declaredLabelSets()
	if err != nil {
		return nil, err
	}
	out := make([]LabelSet, 0, len(m))
	for _, ls := range m {
		out = append(out, *ls)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// LabelSetsOf returns the ids of a built-in dataset's label sets: its base
// set first, then the declared ones.
func LabelSetsOf(dataset string) []string {
	out := []string{BaseLabelSet(dataset)}
	m, err := declaredLabelSets()
	if err != nil {
		return out
	}
	var more []string
	for id, ls := range m {
		if ls.Dataset == dataset {
			more = append(more, id)
		}
	}
	sort.Strings(more)
	return append(out, more...)
}

// StrictLabelSet returns the id of a built-in dataset's default label set
// under the strict verifier: the declared set marked default, else its
// base set. (The upstream-compatible verifier's default is the base set.)
func StrictLabelSet(dataset string) string {
	m, err := declaredLabelSets()
	if err == nil {
		for id, ls := range m {
			if ls.Dataset == dataset && ls.Default {
				return id
			}
		}
	}
	return BaseLabelSet(dataset)
}

// CheckLabelSets validates a run's label set choice: each id names a
// label set of a built-in dataset, at most one per dataset.
func CheckLabelSets(ids []string) error {
	if len(ids) > 64 {
		return fmt.Errorf("label sets: %d named (at most 64)", len(ids))
	}
	per := map[string]string{}
	for _, id := range ids {
		ds, _, ok := strings.Cut(id, "@")
		if !ok {
			return fmt.Errorf("label set %q: want <dataset>@<name>", id)
		}
		if _, known := loaders[ds]; !known {
			return fmt.Errorf("label set %q: %w %q", id, ErrUnknownDataset, ds)
		}
		if !slices.Contains(LabelSetsOf(ds), id) {
			return fmt.Errorf("label set %q: unknown (%s has %s)", id, ds, strings.Join(LabelSetsOf(ds), ", "))
		}
		if prev := per[ds]; prev != "" {
			return fmt.Errorf("label sets %s and %s: one per dataset", prev, id)
		}
		per[ds] = id
	}
	return nil
}

// applyLabelSets gives built-in tasks their label sets: Truth becomes the
// dataset's default set (the base set unless a declared set is the
// default) and Labels every other set whose labels differ from it.
func applyLabelSets(dataset string, ts []Task) error {
	m, err := declaredLabelSets()
	if err != nil {
		return err
	}
	var sets []*LabelSet
	for _, ls := range m {
		if ls.Dataset == dataset {
			sets = append(sets, ls)
		}
	}
	sort.Slice(sets, func(i, j int) bool { return sets[i].ID < sets[j].ID })
	return applySets(dataset, ts, sets)
}

// applySets applies sets, the label sets of dataset, to ts.
func applySets(dataset string, ts []Task, sets []*LabelSet) error {
	base := BaseLabelSet(dataset)
	byID := make(map[string]*Task, len(ts))
	for i := range ts {
		ts[i].Truth.LabelSet = base
		byID[ts[i].View.ID] = &ts[i]
	}
	for _, ls := range sets {
		for _, l := range ls.Labels {
			t := byID[l.TaskID]
			if t == nil {
				continue // another split's task
			}
			if t.Truth.Answer != l.Was {
				return fmt.Errorf("label set %s: task %s: the data's label is %q, the set says it was %q", ls.ID, l.TaskID, t.Truth.Answer, l.Was)
			}
			if t.Labels == nil {
				t.Labels = map[string]Truth{}
			}
			t.Labels[ls.ID] = l.truth(t.Truth, ls.ID)
		}
	}
	// The default set's truth becomes Truth; the base set's then moves to
	// Labels for the tasks whose label differs.
	for _, ls := range sets {
		if !ls.Default {
			continue
		}
		for i := range ts {
			t := &ts[i]
			tr, changed := t.Labels[ls.ID]
			if !changed {
				t.Truth.LabelSet = ls.ID
				continue
			}
			delete(t.Labels, ls.ID)
			t.Labels[base] = t.Truth
			t.Truth = tr
		}
	}
	return nil
}

func (l Label) truth(base Truth, set string) Truth {
	tr := base
	tr.Answer = l.Answer
	tr.LabelSet = set
	if l.Lower != nil {
		lo, hi := *l.Lower, *l.Upper
		tr.Lower, tr.Upper = &lo, &hi
	}
	return tr
}

// TruthFor returns the task's truth under the label set chosen for its
// dataset in sets (ids; at most one per dataset, see CheckLabelSets), or
// else the default for the verifier mode: the base set for the
// upstream-compatible verifier (the benchmark's own labels, so numbers
// compare), the dataset's default set for the strict one.
func (t *Task) TruthFor(upstream bool, sets []string) (Truth, error) {
	prefix := t.View.Dataset + "@"
	for _, id := range sets {
		if !strings.HasPrefix(id, prefix) {
			continue
		}
		if id == t.Truth.LabelSet || t.Truth.LabelSet == "" {
			return t.Truth, nil
		}
		if tr, ok := t.Labels[id]; ok {
			return tr, nil
		}
		if t.Truth.LabelSet == UpstreamLabelSet(t.View.Dataset) || !slices.Contains(LabelSetsOf(t.View.Dataset), id) {
			return Truth{}, fmt.Errorf("task %s has no labels in set %s (it has %s)", t.View.ID, id, strings.Join(t.labelSetIDs(), ", "))
		}
		// A set that leaves this task's label as it is.
		tr := t.Truth
		tr.LabelSet = id
		return tr, nil
	}
	if upstream {
		if tr, ok := t.Labels[BaseLabelSet(t.View.Dataset)]; ok {
			return tr, nil
		}
		if t.Truth.LabelSet != "" && t.Truth.LabelSet != UpstreamLabelSet(t.View.Dataset) {
			tr := t.Truth
			tr.LabelSet = BaseLabelSet(t.View.Dataset)
			return tr, nil
		}
	}
	return t.Truth, nil
}

// CheckRunLabels checks a run's label set choice against the tasks it
// selected: every id names a label set of a built-in dataset, and every
// task has a truth under the choice (tasks of upstream files have only
// their own labels).
func CheckRunLabels(ts []Task, upstream bool, sets []string) error {
	if len(sets) == 0 {
		return nil
	}
	if err := CheckLabelSets(sets); err != nil {
		return err
	}
	for i := range ts {
		if _, err := ts[i].TruthFor(upstream, sets); err != nil {
			return err
		}
	}
	return nil
}

func (t *Task) labelSetIDs() []string {
	ids := []string{t.Truth.LabelSet}
	for id := range t.Labels {
		ids = append(ids, id)
	}
	sort.Strings(ids[1:])
	return ids
}
