package tasks

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/medgym/medgym/schemas"
)

// Truth is a task's ground truth, as the verifier needs it.
type Truth struct {
	Type schemas.AnswerType `json:"type"`
	// Answer is the canonical answer text (e.g. "25.238", "03/14/2021",
	// "(4, 2)", "true", or a JSON list for AnswerList).
	Answer string `json:"answer"`
	// Lower and Upper bound an accepted numeric answer (inclusive), when set.
	Lower *float64 `json:"lower,omitempty"`
	Upper *float64 `json:"upper,omitempty"`
	// Tolerance is a relative tolerance for numbers when no bounds are set.
	Tolerance float64 `json:"tolerance,omitempty"`
	// Decimals, when set, replaces Tolerance: numbers (answers and list
	// cells) are equal when both, rounded to this many decimals, are the
	// same (EHRSQL 2024's scorer rounds numeric cells to 3 decimals).
	Decimals int `json:"decimals,omitempty"`
	// Ordered says whether list order matters (AnswerList).
	Ordered bool `json:"ordered,omitempty"`
	// Values holds list answers (AnswerList) or upstream's gold list.
	Values []string `json:"values,omitempty"`
	// Abstention says the task offers abstention: an answer equal to
	// schemas.AbstainAnswer is an abstention, scored abstained_correctly
	// when Unanswerable, abstained_wrongly otherwise (EHRSQL 2024).
	Abstention bool `json:"abstention,omitempty"`
	// Unanswerable says the data cannot answer the question: the only
	// correct outcome is an abstention.
	Unanswerable bool `json:"unanswerable,omitempty"`
	// Extra carries dataset-specific fields used by upstream-compat rules.
	Extra map[string]string `json:"extra,omitempty"`
	// LabelSet names the label set this truth belongs to
	// ("medcalcbench@medgym-1"; see labels.go).
	LabelSet string `json:"label_set,omitempty"`
}

// Task is one task instance.
type Task struct {
	View  schemas.TaskView `json:"view"`
	Truth Truth            `json:"truth"`
	// Labels holds the task's truth under its dataset's other label sets,
	// where it differs from Truth (the default set's); see TruthFor.
	Labels map[string]Truth `json:"labels,omitempty"`
	// Reference is Python code that solves the task from the data the agent
	// sees; the reference policy runs it through the sandbox.
	Reference string `json:"reference"`
}

// Source says where tasks come from.
type Source struct {
	Dataset string
	Split   string
	// DataRoot is the shared data directory (e.g. ../shared/data).
	DataRoot string
	// TasksDir, when set, is an upstream MedAgentGym data directory.
	TasksDir string
	// LibraryDir holds generated task sets and their data resources
	// (databases, CSVs): <LibraryDir>/<dataset>/... It is built from
	// DataRoot by Generate (`medgym tasks generate`, run by `make library`).
	// The sandbox mounts task resources from here.
	LibraryDir string
}

// The generated datasets' names (package generate builds them).
const (
	// ClinicalMLDataset is the generated clinical prediction task set:
	// binary classification on real clinical data sets, scored from a
	// predictions file over every test row (AnswerPredictions).
	ClinicalMLDataset = "clinical_ml"
	// EHRSQL2024Dataset is the EHRSQL 2024 task set.
	EHRSQL2024Dataset = "ehrsql2024"
	// TREQSDataset is the TREQS task set.
	TREQSDataset = "treqs"
	// NPowerDataset is the N-PowerAI-style power/sample-size set.
	NPowerDataset = "npowerai"
)

// ErrUnknownDataset is returned for a dataset name no loader knows.
var ErrUnknownDataset = errors.New("unknown dataset")

// Loader loads one dataset's tasks for a split.
type Loader func(ctx context.Context, src Source) ([]Task, error)

// loaders lists the built-in datasets explicitly.
var loaders = map[string]Loader{
	MedCalcDataset: loadMedCalc,
	"mimic_iii":    loadLibrary,
	"eicu":         loadLibrary,
	"treqs":        loadLibrary,
	"biostat":      loadLibrary,
	"npowerai":     loadLibrary,

	EHRSQL2024Dataset: loadLibrary,

	ClinicalMLDataset: loadLibrary,
}

// Datasets lists the built-in dataset names.
func Datasets() []string {
	return slices.Sorted(maps.Keys(loaders))
}

// Load returns the tasks of src, in a stable order.
func Load(ctx context.Context, src Source) ([]Task, error) {
	if src.TasksDir != "" {
		return LoadUpstream(ctx, src)
	}
	l, ok := loaders[src.Dataset]
	if !ok {
		return nil, fmt.Errorf("load tasks: %w %q (built-in: %v)", ErrUnknownDataset, src.Dataset, Datasets())
	}
	ts, err := l(ctx, src)
	if err == nil {
		err = applyLabelSets(src.Dataset, ts)
	}
	if err != nil {
		return nil, fmt.Errorf("load tasks %s/%s: %w", src.Dataset, src.Split, err)
	}
	return ts, nil
}

// Index maps task id to task for fast lookup by the verifier.
type Index map[string]*Task

// NewIndex builds an index over ts.
func NewIndex(ts []Task) Index {
	ix := make(Index, len(ts))
	for i := range ts {
		ix[ts[i].View.ID] = &ts[i]
	}
	return ix
}
