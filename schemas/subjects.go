package schemas

import (
	"fmt"
	"strings"
)

// Subject is a NATS subject prefix owned by medgym. Concrete subjects carry the
// run id as their last token (see For) so that a client can follow one run.
type Subject string

// The subjects of the episode pipeline, in the order an episode crosses them.
const (
	// EpisodeRequested: dispatcher → llm-worker. Payload: EpisodeRequest.
	EpisodeRequested Subject = "medgym.episode.requested"
	// ActionRequested: llm-worker → sandbox-worker. Payload: ActionRequest.
	ActionRequested Subject = "medgym.action.requested"
	// ObservationProduced: sandbox-worker → verifier. Payload: Observation.
	ObservationProduced Subject = "medgym.observation.produced"
	// ObservationChecked: verifier → llm-worker. Payload: Observation with Check set.
	ObservationChecked Subject = "medgym.observation.checked"
	// EpisodeCompleted: llm-worker → verifier. Payload: EpisodeResult.
	EpisodeCompleted Subject = "medgym.episode.completed"
	// EpisodeScored: verifier → dispatcher, trainer, CLI. Payload: Score.
	// Published only after the episode's trajectory row is durably stored.
	EpisodeScored Subject = "medgym.episode.scored"
	// RunSubmitted: CLI/trainer → dispatcher. Payload: RunSpec.
	RunSubmitted Subject = "medgym.run.submitted"
	// PolicyUpdated: trainer → everyone. Payload: PolicyVersion.
	PolicyUpdated Subject = "medgym.policy.updated"
	// DeadLetter: bus → dispatcher. A message no handler could process
	// (undecodable, permanent error, or out of deliveries). Payload: the
	// original message; headers say why (see bus).
	DeadLetter Subject = "medgym.deadletter"
)

// For returns the concrete subject for a run: "<subject>.<runID>".
func (s Subject) For(runID string) string { return string(s) + "." + runID }

// Wildcard returns the subject filter matching every run: "<subject>.>".
func (s Subject) Wildcard() string { return string(s) + ".>" }

// Stream names. Each subject family has its own stream so that retention and
// limits can differ: work streams are replayable logs (limits retention).
const (
	StreamRuns         = "MEDGYM_RUNS"
	StreamEpisodes     = "MEDGYM_EPISODES"
	StreamActions      = "MEDGYM_ACTIONS"
	StreamObservations = "MEDGYM_OBSERVATIONS"
	StreamChecks       = "MEDGYM_CHECKS"
	StreamResults      = "MEDGYM_RESULTS"
	StreamScores       = "MEDGYM_SCORES"
	StreamPolicy       = "MEDGYM_POLICY"
	StreamDeadLetter   = "MEDGYM_DEADLETTER"
)

// StreamSubjects maps each stream to the subject family it stores.
var StreamSubjects = map[string]Subject{
	StreamRuns:         RunSubmitted,
	StreamEpisodes:     EpisodeRequested,
	StreamActions:      ActionRequested,
	StreamObservations: ObservationProduced,
	StreamChecks:       ObservationChecked,
	StreamResults:      EpisodeCompleted,
	StreamScores:       EpisodeScored,
	StreamPolicy:       PolicyUpdated,
	StreamDeadLetter:   DeadLetter,
}

// Durable consumer names, one per (service, subject) pair. Every process of a
// service binds to the same durable, so adding processes shares the work.
const (
	DurableDispatcherRuns   = "dispatcher-runs"
	DurableDispatcherScores = "dispatcher-scores"
	DurableLLMEpisodes      = "llm-worker-episodes"
	DurableLLMChecks        = "llm-worker-checks"
	DurableSandboxActions   = "sandbox-worker-actions"
	DurableVerifierObs      = "verifier-observations"
	DurableVerifierResults  = "verifier-results"
	DurableDispatcherDead   = "dispatcher-deadletters"
	// The environment server (services/env) plays the llm-worker's part
	// for episodes whose model is its HTTP client: it reads the checked
	// observations and the scores of its own sessions (others' are junk
	// to it, as its sessions' are to the llm-worker).
	DurableEnvChecks = "env-checks"
	DurableEnvScores = "env-scores"
)

// Key-value buckets.
const (
	// BucketRuns holds RunStatus by run id (dispatcher-owned).
	BucketRuns = "MEDGYM_RUNS"
	// BucketEpisodes holds EpisodeState by episode id (llm-worker-owned):
	// the state after each completed turn, so another worker can resume.
	BucketEpisodes = "MEDGYM_EPISODE_STATE"
	// BucketBlobs is the object store holding payloads too large for one
	// NATS message (over the server's max_payload less headroom): message
	// bodies, whose message then carries only the object's name in the
	// Medgym-Blob header, and large key-value values (see bus/blob.go).
	// A process that runs every service (medgym run, medgym serve) writes
	// here; each service on its own writes to BlobBucket(its name).
	BucketBlobs = "MEDGYM_BLOBS"
	// BucketCompletions holds which episodes of a run are scored
	// (dispatcher-owned): key "<run>.<chunk>", value a bitmap of
	// 8,192 episodes (bit i of chunk c: episode c·8192+i).
	BucketCompletions = "MEDGYM_RUN_DONE"
	// BucketEnvSessions holds the environment server's sessions
	// (services/env-owned): key "s.<session id>" a session (its episode
	// state and the stored answer of every step), "e.<episode id>" the
	// session id of an episode, "n.<run>.<task token>" the next sample
	// index of a task in a run.
	BucketEnvSessions = "MEDGYM_ENV_SESSIONS"
	// BucketStored holds which trajectory file holds each stored episode
	// (verifier-owned): key "<run>.<episode>", value the file's key in
	// the store (trajectories/run=…/dataset=…/part-….parquet), created
	// before the file is and moved only off a file that exists without
	// the episode, so two verifiers never store one episode twice (ADR 27).
	BucketStored = "MEDGYM_STORED"
)

// ValidToken reports whether s can be used as one subject token (run ids,
// episode ids): non-empty, ASCII letters, digits, '-' and '_' only.
func ValidToken(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
		default:
			return false
		}
	}
	return true
}

// MsgID builds a deterministic Nats-Msg-Id from its parts so that a
// re-published message is dropped by the stream's duplicate window.
func MsgID(parts ...any) string {
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, "/")
}

// BlobWriters are the services that offload payloads each to an object
// store of its own (BlobBucket), which only its NATS user may write to or
// purge: one service cannot drop or replace another's payloads.
var BlobWriters = []string{"dispatcher", "llm-worker", "sandbox-worker", "verifier", "env-server"}

// BlobBucket is the object store service offloads to: BucketBlobs_<SERVICE>
// (MEDGYM_BLOBS_LLM_WORKER for llm-worker), or BucketBlobs for "".
func BlobBucket(service string) string {
	if service == "" {
		return BucketBlobs
	}
	return BucketBlobs + "_" + strings.ToUpper(strings.ReplaceAll(service, "-", "_"))
}

// BlobBuckets are every object store: BucketBlobs and each writer's.
func BlobBuckets() []string {
	out := []string{BucketBlobs}
	for _, w := range BlobWriters {
		out = append(out, BlobBucket(w))
	}
	return out
}
