package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/medgym/medgym/schemas"
)

// Session is one episode played through the API, as stored.
type Session struct {
	ID    string               `json:"id"`
	State schemas.EpisodeState `json:"state"`
	// Steps holds the answer of every finished step, by turn.
	Steps []StepResult      `json:"steps"`
	Tags  map[string]string `json:"tags,omitempty"`
	// Score is the verifier's, once the episode is scored and stored.
	Score *schemas.Score `json:"score,omitempty"`
	// Final is the answer of the step that ended the episode, waiting for
	// the verifier's score (its reward and outcome) to be appended to Steps.
	Final     *StepResult `json:"final,omitempty"`
	CreatedAt time.Time   `json:"created_at"`
	LastSeen  time.Time   `json:"last_seen"`
}

// Done reports whether the episode is over (finished or abandoned).
func (s *Session) Done() bool { return s.State.Result != nil }

// Executing reports whether a step is out at the sandbox or the verifier.
func (s *Session) Executing() bool {
	return s.State.PendingAction != nil || (s.State.Result != nil && s.Score == nil)
}

// StepResult is a step's answer (the API's step response).
type StepResult struct {
	Observation string   `json:"observation"`
	Reward      float64  `json:"reward"`
	Done        bool     `json:"done"`
	Truncated   bool     `json:"truncated"`
	Info        StepInfo `json:"info"`
	// ReplyIgnored marks the answer to a step whose reply differs from
	// the one its turn was played with (a retry that changed it): the
	// turn keeps its first reply and this is that reply's answer. Set on
	// the answer returned, never stored.
	ReplyIgnored bool `json:"reply_ignored,omitempty"`
}

// StepInfo says what a step did.
type StepInfo struct {
	Turn        int    `json:"turn"`
	Action      string `json:"action"`
	ParseError  string `json:"parse_error,omitempty"`
	ExecStatus  string `json:"exec_status,omitempty"`
	Verdict     string `json:"verdict,omitempty"`
	Accepted    bool   `json:"accepted,omitempty"`
	Outcome     string `json:"outcome,omitempty"`
	Termination string `json:"termination,omitempty"`
	Row         *Row   `json:"row,omitempty"`
}

// Row names where an episode's trajectory row is stored.
type Row struct {
	RunID           string `json:"run_id"`
	EpisodeID       string `json:"episode_id"`
	Dataset         string `json:"dataset"`
	Store           string `json:"store,omitempty"`
	VerifierVersion string `json:"verifier_version,omitempty"`
}

func rowOf(sc schemas.Score) *Row {
	return &Row{RunID: sc.RunID, EpisodeID: sc.EpisodeID, Dataset: sc.Dataset, Store: sc.Store, VerifierVersion: sc.VerifierVersion}
}

// Errors the API maps to its codes.
var (
	ErrUnknownSession = errors.New("unknown session")
	ErrUnknownTask    = errors.New("unknown task")
	ErrUnknownDataset = errors.New("unknown dataset")
	ErrAmbiguousTask  = errors.New("ambiguous task id")
	ErrDone           = errors.New("session is done")
	ErrTooMany        = errors.New("too many live sessions")
	ErrStepTimeout    = errors.New("step still executing")
	ErrInvalid        = errors.New("invalid request")
	// ErrRunExists: a session's run id names a run this server did not
	// start (medgym run's, the trainer's, or rows already in the store).
	ErrRunExists = errors.New("run exists")
	// ErrNotFound and ErrConflict are what a Store returns for a missing
	// key and a stale revision (or a key that exists, on Create).
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("revision conflict")
	// ErrUnknownEpisode: a message for an episode no session holds (another
	// driver's, e.g. the llm-worker's): junk to this server.
	ErrUnknownEpisode = errors.New("not an episode of this environment server")
)

// TurnError is a step whose turn is not the one the session expects.
type TurnError struct{ Got, Want int }

func (e *TurnError) Error() string {
	return fmt.Sprintf("turn %d is out of order: the session expects turn %d (a step with an earlier turn returns that step's stored answer)", e.Got, e.Want)
}

// Store keeps sessions (the key-value bucket). Get fails with ErrNotFound;
// Create with ErrConflict when the id exists; Update with ErrConflict when
// the session moved on since rev. Create also indexes the session by its
// episode id (ByEpisode). NextSample hands out a task's sample indices in
// a run, 0, 1, ..., each once.
type Store interface {
	Get(ctx context.Context, id string) (Session, uint64, error)
	Create(ctx context.Context, s Session) error
	Update(ctx context.Context, s Session, rev uint64) (uint64, error)
	Delete(ctx context.Context, s Session) error
	List(ctx context.Context) ([]string, error)
	ByEpisode(ctx context.Context, episodeID string) (string, error)
	NextSample(ctx context.Context, runID, taskID string) (int, error)
}

// Catalog holds the agent-visible task views the server offers: never
// ground truth.
type Catalog interface {
	// Find returns the task with id (dataset and split narrow it when not
	// empty): ErrUnknownTask, or ErrAmbiguousTask when several match.
	Find(id, dataset, split string) (schemas.TaskView, error)
	// List returns a page of the tasks of dataset and split ("" for all)
	// in a stable order and how many match; ErrUnknownDataset for a
	// dataset it does not hold.
	List(dataset, split string, limit, offset int) ([]schemas.TaskView, int, error)
	// Datasets lists the datasets it holds.
	Datasets() []string
}

// PublishFunc publishes v on subject, deduplicated by msgID.
type PublishFunc func(ctx context.Context, subject, msgID string, v schemas.Validator) error

// RunRegistry makes a run known to the workers before its first message
// (they refuse messages of runs nobody accepted): spec is the run's
// record; registering a run that exists is not an error.
type RunRegistry func(ctx context.Context, spec schemas.RunSpec) error
