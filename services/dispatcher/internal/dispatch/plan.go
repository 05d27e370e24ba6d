package dispatch

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/tasks"
)

// DefaultMaxEpisodes bounds tasks × samples of one run unless configured.
const DefaultMaxEpisodes = 1_000_000

// ErrTooLarge is wrapped by Size and NewPlan when a run plans more episodes
// than allowed.
var ErrTooLarge = errors.New("run too large")

// ErrNoReferences is returned by CheckReferences.
var ErrNoReferences = errors.New("tasks without a reference solution")

// CheckReferences refuses a reference-policy run over selected tasks of
// which some have no reference solution: each of their episodes could
// only end as infra_failure. Other policies pass.
func CheckReferences(spec schemas.RunSpec, selected []tasks.Task) error {
	if spec.Policy.Name != schemas.PolicyReference {
		return nil
	}
	missing, first := 0, ""
	for i := range selected {
		if selected[i].Reference == "" {
			if missing == 0 {
				first = selected[i].View.ID
			}
			missing++
		}
	}
	if missing == 0 {
		return nil
	}
	return fmt.Errorf("run %s: policy reference: %w: %d of %d selected tasks (first %s); upstream task files carry none, so use policy openai",
		spec.RunID, ErrNoReferences, missing, len(selected), first)
}

// Size returns tasks × samples, or an error wrapping ErrTooLarge when it
// exceeds maxEpisodes (≤ 0: DefaultMaxEpisodes) or overflows.
func Size(tasks, samples, maxEpisodes int) (int, error) {
	if maxEpisodes <= 0 {
		maxEpisodes = DefaultMaxEpisodes
	}
	if samples < 1 || tasks < 0 {
		return 0, fmt.Errorf("plan %d tasks × %d samples: samples must be ≥ 1", tasks, samples)
	}
	if tasks > 0 && samples > math.MaxInt/tasks || tasks*samples > maxEpisodes {
		return 0, fmt.Errorf("%w: %d tasks × %d samples is more than the limit of %d episodes per run "+
			"(lower --samples or --limit, or raise the dispatcher's --max-episodes)", ErrTooLarge, tasks, samples, maxEpisodes)
	}
	return tasks * samples, nil
}

// Plan is a run's episodes, task-major and sample-minor: episode i is
// sample i mod K of task i div K. It is computed, not stored: a plan holds
// the selected tasks and an index of their ids, so its memory depends on
// the number of tasks, never on the number of samples.
type Plan struct {
	Spec  schemas.RunSpec
	tasks []schemas.TaskView
	// byToken maps a task's episode-id token (see EpisodeID) to its index.
	byToken map[string]int
	n       int
}

// NewPlan plans K samples of each selected task. It refuses a plan of more
// than maxEpisodes episodes (≤ 0: DefaultMaxEpisodes), and two tasks whose
// ids would name the same episodes.
func NewPlan(spec schemas.RunSpec, selected []tasks.Task, maxEpisodes int) (*Plan, error) {
	n, err := Size(len(selected), spec.Samples, maxEpisodes)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", spec.RunID, err)
	}
	p := &Plan{Spec: spec, tasks: make([]schemas.TaskView, len(selected)), byToken: make(map[string]int, len(selected)), n: n}
	for i, t := range selected {
		tok := taskToken(t.View.ID)
		if j, dup := p.byToken[tok]; dup {
			return nil, fmt.Errorf("run %s: tasks %q and %q name the same episodes (%s)", spec.RunID, p.tasks[j].ID, t.View.ID, tok)
		}
		p.byToken[tok] = i
		p.tasks[i] = t.View
	}
	return p, nil
}

// Len is the number of planned episodes.
func (p *Plan) Len() int { return p.n }

// Episode returns the task index and sample of episode i.
func (p *Plan) Episode(i int) (task, sample int) { return i / p.Spec.Samples, i % p.Spec.Samples }

// EpisodeID names sample k of a task in a run. It is unique across runs:
// workers key episode state and sandboxes by it. Task ids are made
// subject-safe.
func EpisodeID(runID, taskID string, k int) string { return schemas.EpisodeID(runID, taskID, k) }

// taskToken makes a task id subject-safe (schemas.TaskToken): the workers
// recompute episode ids with the same rule to refuse unplanned episodes.
func taskToken(taskID string) string { return schemas.TaskToken(taskID) }

// Request builds the request of episode i (0 ≤ i < Len).
func (p *Plan) Request(i int, now time.Time) schemas.EpisodeRequest {
	ti, k := p.Episode(i)
	task := p.tasks[ti]
	pol := p.Spec.Policy
	if ts := p.Spec.Temperatures; len(ts) > 0 {
		t := ts[min(k, len(ts)-1)]
		pol.Temperature = &t
	}
	if pol.Seed != nil {
		// Sample k gets Seed+k: with one seed for all K samples an engine
		// that honours it (vLLM) would sample K identical episodes.
		seed := *pol.Seed + int64(k)
		pol.Seed = &seed
	}
	return schemas.EpisodeRequest{
		RunID: p.Spec.RunID, EpisodeID: EpisodeID(p.Spec.RunID, task.ID, k), SampleIndex: k,
		Task: task, Policy: pol, Options: p.Spec.Options, RequestedAt: now,
	}
}

// Lookup finds a planned episode's index by id: it parses the id back into
// its task and sample, so an id of another run, of an unknown task, or of a
// sample beyond K is not found.
func (p *Plan) Lookup(episodeID string) (int, bool) {
	rest, ok := strings.CutPrefix(episodeID, p.Spec.RunID+"--")
	if !ok {
		return 0, false
	}
	j := strings.LastIndex(rest, "-k")
	if j < 0 {
		return 0, false
	}
	tok, num := rest[:j], rest[j+2:]
	if !canonical(num) {
		return 0, false // "+1", "01", "-1" and the like: one id per episode
	}
	k, err := strconv.Atoi(num)
	if err != nil || k >= p.Spec.Samples {
		return 0, false
	}
	ti, ok := p.byToken[tok]
	if !ok {
		return 0, false
	}
	return ti*p.Spec.Samples + k, true
}

// ChunkBits is the number of episodes one completion chunk records: a run's
// completion state is a bitmap (bit i set: episode i is scored), stored in
// chunks of ChunkBits bits (1 KiB), so that a score rewrites one small
// entry (a million-episode run writes about 0.5 GB of chunk versions in all,
// where 8 KiB chunks would write 4 GB) and a count re-reads only the few
// chunks still filling.
const ChunkBits = 1 << 13

// Chunks is the number of chunks of a plan of n episodes.
func Chunks(n int) int { return (n + ChunkBits - 1) / ChunkBits }

// ChunkLen is the number of episodes chunk c of a plan of n episodes holds.
func ChunkLen(n, c int) int { return min(ChunkBits, n-c*ChunkBits) }

// Mark sets the bit of episode i (of chunk i/ChunkBits) in chunk, growing
// it as needed, and reports whether the bit was clear.
func Mark(chunk []byte, i int) ([]byte, bool) {
	if Marked(chunk, i) {
		return chunk, false
	}
	bit := i % ChunkBits
	if need := bit/8 + 1; len(chunk) < need {
		chunk = append(chunk, make([]byte, need-len(chunk))...)
	}
	chunk[bit/8] |= byte(1) << (bit % 8)
	return chunk, true
}

// Marked reports whether the bit of episode i (of chunk i/ChunkBits) is
// set in chunk.
func Marked(chunk []byte, i int) bool {
	bit := i % ChunkBits
	return bit/8 < len(chunk) && chunk[bit/8]&(byte(1)<<(bit%8)) != 0
}

// Count returns the set bits among the first nbits bits of chunk.
func Count(chunk []byte, nbits int) int {
	n := 0
	for i, b := range chunk {
		if rest := nbits - 8*i; rest <= 0 {
			break
		} else if rest < 8 {
			b &= byte(1)<<rest - 1
		}
		n += bits.OnesCount8(b)
	}
	return n
}

// canonical reports whether s is a natural number written as Itoa does.
func canonical(s string) bool {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
