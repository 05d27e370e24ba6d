package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/schemas/parquet"
)

// Root is the key prefix of every trajectory object.
const Root = "trajectories/"

// ManifestName is the file name of a run's manifest.
const ManifestName = "_manifest.json"

// Options configure an S3 store; a directory store ignores them. Empty
// fields fall back to the AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_REGION environment variables; the two
// credentials also to the files named by AWS_ACCESS_KEY_ID_FILE and
// AWS_SECRET_ACCESS_KEY_FILE (Docker and Kubernetes secrets).
type Options struct {
	// Endpoint is host:port or a URL (http://host:port); a URL's scheme
	// overrides UseSSL.
	Endpoint  string
	AccessKey string
	SecretKey string
	// Region defaults to us-east-1.
	Region string
	// CAFile is a PEM file of CA certificates trusted for an HTTPS endpoint
	// besides the system's (default $AWS_CA_BUNDLE, as the AWS CLI reads it).
	CAFile string
	UseSSL bool
	// MaxRetries bounds minio-go's retries of one request (0: 3). Keep it
	// small: a caller that cannot write naks its messages and JetStream
	// redelivers them later.
	MaxRetries int
	// RowGroupLength is the Parquet row-group length (0: the schema's default).
	RowGroupLength int64
}

func (o Options) withEnv(getenv func(string) string) (Options, error) {
	fill := func(v *string, env string) {
		if *v == "" {
			*v = getenv(env)
		}
	}
	// Credentials: the variable, or the file its _FILE variable names.
	secret := func(v *string, env string) error {
		if *v != "" {
			return nil
		}
		s, err := schemas.Secret(getenv, env)
		*v = s
		return err
	}
	fill(&o.Endpoint, "AWS_ENDPOINT_URL")
	if err := errors.Join(secret(&o.AccessKey, "AWS_ACCESS_KEY_ID"), secret(&o.SecretKey, "AWS_SECRET_ACCESS_KEY")); err != nil {
		return o, fmt.Errorf("s3 credentials: %w", err)
	}
	fill(&o.Region, "AWS_REGION")
	fill(&o.CAFile, "AWS_CA_BUNDLE")
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = 3
	}
	return o, nil
}

// Store reads and writes trajectory files. It is safe for concurrent use.
type Store struct {
	url         string
	be          backend
	rowGroupLen int64

	// claims, when set, decide which file holds each episode (WithClaims).
	claims Claims

	// writeMu serialises Write so the check for stored episodes and the
	// recording of new ones cannot interleave.
	writeMu sync.Mutex
	mu      sync.Mutex                     // guards seen and sealed
	seen    map[string]map[string]struct{} // run id → stored episode ids
	// sealed is, per part file this Store found already created by
	// another writer, the episode ids it holds.
	sealed map[string]map[string]struct{}
}

// Claims record which part file holds each episode's row, shared by every
// process that writes to the store (the verifier's are a JetStream
// key-value bucket). With them, a Store writes each episode once whatever
// the number of writers and wherever one of them stops: see WithClaims.
type Claims interface {
	// Claim records part (a key Write chose) as the file of the run's
	// episode unless one is recorded already. It returns the recorded
	// part (part itself when this call recorded it, or an earlier call
	// whose reply was lost) and its revision.
	Claim(ctx context.Context, runID, episodeID, part string) (cur string, rev uint64, err error)
	// Move records part in place of the claim at revision rev; an error
	// wrapping ErrClaimMoved when the claim is no longer at rev.
	Move(ctx context.Context, runID, episodeID, part string, rev uint64) error
}

// ErrClaimMoved is returned by Claims.Move when the claim changed since
// it was read.
var ErrClaimMoved = errors.New("claim moved")

// WithClaims makes Write decide each row's file through c (ADR 0027):
//
//   - it claims the episode for a new file name (create-only), and
//     creates the file (a create, never a replacement: S3 If-None-Match,
//     a hard link in a directory);
//   - an episode claimed by another writer whose file is not there yet
//     (that writer stopped or is slow) goes into that same file name,
//     so of the two writers exactly one creates it; the loser reads the
//     file and counts the rows in it as stored;
//   - an episode whose claimed file exists without it moves its claim
//     (compare-and-set) to a new file.
//
// A file is only ever written under a name an episode's claim held when
// the file was created, and a claim moves off a file only once that file
// exists without the episode, so no episode is in two files. Call it
// before the first Write.
func (s *Store) WithClaims(c Claims) *Store {
	s.claims = c
	return s
}

// Open opens the store at url: a directory path (created if missing) or
// s3://bucket/prefix (the bucket is created if missing). An S3 store checks
// the endpoint at once, so a wrong endpoint or wrong credentials fail here
// with an error that names the endpoint.
func Open(ctx context.Context, url string, opt Options) (*Store, error) {
	opt, err := opt.withEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", url, err)
	}
	s := newStore(url, nil)
	s.rowGroupLen = opt.RowGroupLength
	switch {
	case url == "":
		return nil, errors.New("open store: empty url (want a directory or s3://bucket/prefix)")
	case strings.HasPrefix(url, "s3://"):
		be, err := newS3Backend(ctx, url, opt)
		if err != nil {
			return nil, err
		}
		s.be = be
	case strings.Contains(url, "://"):
		return nil, fmt.Errorf("open store %s: unsupported scheme (want a directory or s3://bucket/prefix)", url)
	default:
		be, err := newDirBackend(url)
		if err != nil {
			return nil, err
		}
		s.be = be
	}
	return s, nil
}

func newStore(url string, be backend) *Store {
	return &Store{url: url, be: be, seen: map[string]map[string]struct{}{}, sealed: map[string]map[string]struct{}{}}
}

// String returns the store's url, for logs.
func (s *Store) String() string { return s.url }

// Location names the store for another process: a directory's absolute
// path, or the s3:// URL. Open(Location()) opens the same store.
func (s *Store) Location() string {
	if d, ok := s.be.(*dirBackend); ok {
		return d.root
	}
	return s.url
}

// Locate turns a key returned by Write into a full locator: a file path for
// a directory store, s3://bucket/key for S3.
func (s *Store) Locate(key string) string { return s.be.locate(key) }

// Ping checks that the store is reachable.
func (s *Store) Ping(ctx context.Context) error { return s.be.ping(ctx) }

// probeKey is the object CheckWritable writes (over itself each time),
// beside the runs and outside every run's prefix.
const probeKey = Root + "_write-probe"

// CheckWritable writes a small object where trajectories go, so a store
// that cannot take them (permissions, a file in the way, a read-only bucket
// policy) fails at start with the reason instead of every episode retrying
// its write forever.
func (s *Store) CheckWritable(ctx context.Context) error {
	msg := []byte("medgym checks that it can write here; this object may be deleted\n")
	if err := s.be.put(ctx, probeKey, msg); err != nil {
		return fmt.Errorf("store %s is not writable: %w", s.url, err)
	}
	return nil
}

func runPrefix(runID string) string { return Root + "run=" + runID + "/" }

// Write stores rows durably and returns the keys of the files written (one
// per run and dataset present among the new rows, and one per file another
// writer claimed but did not write; see WithClaims). Rows whose episode is
// already stored for their run, or repeated within rows, are skipped; if
// nothing is new, no file is written and the result is empty. Every row
// needs a valid run id, episode id and dataset (letters, digits, - and _).
// Files are created, never replaced.
//
// On error, the keys of the files already written are returned with it;
// their rows count as stored, so retrying the same rows writes only the
// rest.
func (s *Store) Write(ctx context.Context, rows []parquet.Row) ([]string, error) {
	for i := range rows {
		r := &rows[i]
		if !schemas.ValidToken(r.RunID) || !schemas.ValidToken(r.EpisodeID) || !schemas.ValidToken(r.Dataset) {
			return nil, fmt.Errorf("write trajectories: row %d: run_id %q, episode_id %q and dataset %q must be valid tokens",
				i, r.RunID, r.EpisodeID, r.Dataset)
		}
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()

	var todo []parquet.Row
	fresh := map[string]map[string]struct{}{} // episodes taken in this call
	for _, r := range rows {
		stored, err := s.has(ctx, r.RunID, r.EpisodeID)
		if err != nil {
			return nil, err
		}
		if stored {
			continue
		}
		if _, ok := fresh[r.RunID][r.EpisodeID]; ok {
			continue
		}
		if fresh[r.RunID] == nil {
			fresh[r.RunID] = map[string]struct{}{}
		}
		fresh[r.RunID][r.EpisodeID] = struct{}{}
		todo = append(todo, r)
	}
	if s.claims == nil {
		return s.writeUnclaimed(ctx, todo)
	}
	var keys []string
	for attempt := 0; len(todo) > 0; attempt++ {
		if attempt == maxClaimRounds {
			return keys, fmt.Errorf("write trajectories: episode %s of run %s: its claim kept moving (%d rounds); retry later",
				todo[0].EpisodeID, todo[0].RunID, maxClaimRounds)
		}
		plan, again, err := s.claim(ctx, todo)
		if err != nil {
			return keys, err
		}
		todo = again
		for _, key := range plan.order {
			part := plan.rows[key]
			err := s.create(ctx, key, part)
			switch {
			case err == nil:
				keys = append(keys, key)
				s.markStored(part)
			case errors.Is(err, ErrExists):
				// Another writer created the file first (or this one,
				// its reply lost): the rows it holds are stored, the
				// others go round again and find the file sealed.
				ids, err := s.partIDs(ctx, key)
				if err != nil {
					return keys, err
				}
				for _, r := range part {
					if _, ok := ids[r.EpisodeID]; ok {
						s.markStored([]parquet.Row{r})
					} else {
						todo = append(todo, r)
					}
				}
			default:
				return keys, err
			}
		}
	}
	return keys, nil
}

// maxClaimRounds bounds Write's rounds of claiming and writing: a round
// ends with every row stored or its claim moved on by another writer.
const maxClaimRounds = 4

// writeUnclaimed is Write without Claims: one new file per run and dataset.
func (s *Store) writeUnclaimed(ctx context.Context, rows []parquet.Row) ([]string, error) {
	var keys []string
	plan := newPlan()
	for _, r := range rows {
		plan.add(plan.fresh(r), r)
	}
	for _, key := range plan.order {
		part := plan.rows[key]
		if err := s.create(ctx, key, part); err != nil {
			// The object may have landed although the call failed (the
			// reply was lost): forget what we know of this run, so the
			// retry re-reads the stored episode ids and writes no row twice.
			s.mu.Lock()
			delete(s.seen, part[0].RunID)
			s.mu.Unlock()
			return keys, err
		}
		s.markStored(part)
		keys = append(keys, key)
	}
	return keys, nil
}

// plan is the files one round of Write creates: key → rows, in order.
type plan struct {
	order  []string
	rows   map[string][]parquet.Row
	byRunD map[[2]string]string // (run, dataset) → this round's new file
}

func newPlan() *plan { return &plan{rows: map[string][]parquet.Row{}, byRunD: map[[2]string]string{}} }

// fresh returns this round's new file for r's run and dataset.
func (p *plan) fresh(r parquet.Row) string {
	g := [2]string{r.RunID, r.Dataset}
	key, ok := p.byRunD[g]
	if !ok {
		key = partDir(r.RunID, r.Dataset) + partName()
		p.byRunD[g] = key
	}
	return key
}

func (p *plan) add(key string, r parquet.Row) {
	if _, ok := p.rows[key]; !ok {
		p.order = append(p.order, key)
	}
	p.rows[key] = append(p.rows[key], r)
}

// claim decides the file of every row: this round's new file when the
// row's claim is new (or moved here from a file known to lack it), the
// claimed file when another writer claimed it but the file is not known to
// exist (written here, the other writer's create then fails), or none when
// the claimed file holds the row (stored). Rows whose claim moved while
// being decided are returned in again.
func (s *Store) claim(ctx context.Context, rows []parquet.Row) (*plan, []parquet.Row, error) {
	p := newPlan()
	var again []parquet.Row
	for _, r := range rows {
		mine := p.fresh(r)
		cur, rev, err := s.claims.Claim(ctx, r.RunID, r.EpisodeID, mine)
		if err != nil {
			return nil, nil, fmt.Errorf("write trajectories: claim episode %s of run %s: %w", r.EpisodeID, r.RunID, err)
		}
		if cur == mine {
			p.add(mine, r)
			continue
		}
		if !validPart(cur, r) {
			return nil, nil, fmt.Errorf("write trajectories: episode %s of run %s is claimed by %q, not a part file of its run and dataset",
				r.EpisodeID, r.RunID, cur)
		}
		ids, sealed := s.sealedIDs(cur)
		if !sealed {
			p.add(cur, r)
			continue
		}
		if _, ok := ids[r.EpisodeID]; ok {
			s.markStored([]parquet.Row{r})
			continue
		}
		// The claimed file exists without the row (its writer lost the
		// race for it): the row needs a new file.
		switch err := s.claims.Move(ctx, r.RunID, r.EpisodeID, mine, rev); {
		case err == nil:
			p.add(mine, r)
		case errors.Is(err, ErrClaimMoved):
			again = append(again, r)
		default:
			return nil, nil, fmt.Errorf("write trajectories: move the claim of episode %s of run %s: %w", r.EpisodeID, r.RunID, err)
		}
	}
	return p, again, nil
}

// validPart reports whether key names a part file of r's run and dataset.
func validPart(key string, r parquet.Row) bool {
	name, ok := strings.CutPrefix(key, partDir(r.RunID, r.Dataset))
	return ok && !strings.ContainsAny(name, "/\\") && strings.HasPrefix(name, "part-") && strings.HasSuffix(name, ".parquet") &&
		!strings.Contains(name, "..")
}

// create encodes rows and creates the file key with them.
func (s *Store) create(ctx context.Context, key string, rows []parquet.Row) error {
	var buf bytes.Buffer
	if err := parquet.Write(&buf, rows, s.rowGroupLen); err != nil {
		return fmt.Errorf("write trajectories %s: %w", key, err)
	}
	if err := s.be.create(ctx, key, buf.Bytes()); err != nil {
		return fmt.Errorf("write trajectories: %w", err)
	}
	return nil
}

// markStored records rows' episodes as stored.
func (s *Store) markStored(rows []parquet.Row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rows {
		if s.seen[r.RunID] == nil {
			s.seen[r.RunID] = map[string]struct{}{}
		}
		s.seen[r.RunID][r.EpisodeID] = struct{}{}
	}
}

// sealedIDs returns the episode ids of a file this Store read after
// finding it exists (files are never replaced, so the set is final).
func (s *Store) sealedIDs(key string) (map[string]struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids, ok := s.sealed[key]
	return ids, ok
}

// partIDs reads the episode ids of the existing file key and remembers them.
func (s *Store) partIDs(ctx context.Context, key string) (map[string]struct{}, error) {
	if ids, ok := s.sealedIDs(key); ok {
		return ids, nil
	}
	data, err := s.be.get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("write trajectories: read %s: %w", key, err)
	}
	list, err := parquet.ReadEpisodeIDs(ctx, bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("write trajectories: read %s: %w", key, err)
	}
	ids := make(map[string]struct{}, len(list))
	for _, id := range list {
		ids[id] = struct{}{}
	}
	s.mu.Lock()
	s.sealed[key] = ids
	s.mu.Unlock()
	return ids, nil
}

func partDir(runID, dataset string) string { return runPrefix(runID) + "dataset=" + dataset + "/" }

// partName is unique and sorts by creation time, so "first file in key
// order" means "first written".
func partName() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand doc)
	return "part-" + time.Now().UTC().Format("20060102T150405.000000000Z") + "-" + hex.EncodeToString(b[:]) + ".parquet"
}

// load fills s.seen[runID] from the run's files the first time the run is
// touched.
func (s *Store) load(ctx context.Context, runID string) error {
	s.mu.Lock()
	_, ok := s.seen[runID]
	s.mu.Unlock()
	if ok {
		return nil
	}
	keys, err := s.partKeys(ctx, runID)
	if err != nil {
		return err
	}
	seen := map[string]struct{}{}
	for _, k := range keys {
		data, err := s.be.get(ctx, k)
		if err != nil {
			return fmt.Errorf("load episode ids of run %s: %w", runID, err)
		}
		ids, err := parquet.ReadEpisodeIDs(ctx, bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("load episode ids of run %s from %s: %w", runID, k, err)
		}
		for _, id := range ids {
			seen[id] = struct{}{}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.seen[runID]; ok { // loaded concurrently by Has
		for id := range seen {
			cur[id] = struct{}{}
		}
		return nil
	}
	s.seen[runID] = seen
	return nil
}

func (s *Store) has(ctx context.Context, runID, episodeID string) (bool, error) {
	if err := s.load(ctx, runID); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.seen[runID][episodeID]
	return ok, nil
}

func (s *Store) partKeys(ctx context.Context, runID string) ([]string, error) {
	keys, err := s.be.list(ctx, runPrefix(runID))
	if err != nil {
		return nil, fmt.Errorf("list run %s: %w", runID, err)
	}
	parts := keys[:0]
	for _, k := range keys {
		if strings.HasSuffix(k, ".parquet") {
			parts = append(parts, k)
		}
	}
	return parts, nil
}

// Has reports whether episodeID is stored for runID (by this process or,
// as of the first time this Store touched the run, by any other).
func (s *Store) Has(ctx context.Context, runID, episodeID string) (bool, error) {
	return s.has(ctx, runID, episodeID)
}

// HasRun reports whether the store holds anything of runID (rows or a
// manifest): a writer that must not add to another's run asks first.
func (s *Store) HasRun(ctx context.Context, runID string) (bool, error) {
	keys, err := s.be.list(ctx, runPrefix(runID))
	if err != nil {
		return false, fmt.Errorf("list run %s: %w", runID, err)
	}
	return len(keys) > 0, nil
}

// ReadRun returns every row of a run, one per episode: when an episode was
// stored twice (two writers racing), the row of the first file in key order
// wins. Rows are in file order, then row order.
func (s *Store) ReadRun(ctx context.Context, runID string) ([]parquet.Row, error) {
	return s.ReadRunChecked(ctx, runID, nil)
}

// ReadRunChecked is ReadRun that passes every row of every file to check
// (nil: none) and fails on the first error, naming the run and the file:
// "read run R: trajectories/run=R/part-….parquet: " and check's error
// (parquet.Row.Validate names the episode and the column).
func (s *Store) ReadRunChecked(ctx context.Context, runID string, check func(*parquet.Row) error) ([]parquet.Row, error) {
	var rows []parquet.Row
	err := s.scan(ctx, runID, nil, func(key string, got []parquet.Row) error {
		for i := range got {
			if check == nil {
				break
			}
			if err := check(&got[i]); err != nil {
				return fmt.Errorf("read run %s: %s: %w", runID, key, err)
			}
		}
		rows = append(rows, got...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// ScanRun passes the rows of a run to fn one file at a time, each episode
// once (as ReadRun: a later copy of an episode is dropped), reading only
// cols (parquet.ReadColumns; nil reads every column). It keeps no row
// between files, so a run of any size scans in the memory of one file.
func (s *Store) ScanRun(ctx context.Context, runID string, cols []string, fn func([]parquet.Row) error) error {
	return s.scan(ctx, runID, cols, func(_ string, rows []parquet.Row) error { return fn(rows) })
}

func (s *Store) scan(ctx context.Context, runID string, cols []string, fn func(key string, rows []parquet.Row) error) error {
	keys, err := s.partKeys(ctx, runID)
	if err != nil {
		return err
	}
	seen := map[string]struct{}{}
	for _, k := range keys {
		data, err := s.be.get(ctx, k)
		if err != nil {
			return fmt.Errorf("read run %s: %w", runID, err)
		}
		got, err := parquet.ReadColumns(ctx, bytes.NewReader(data), cols)
		if err != nil {
			return fmt.Errorf("read run %s: %s: %w", runID, k, err)
		}
		kept := got[:0]
		for _, r := range got {
			if _, dup := seen[r.EpisodeID]; dup {
				continue
			}
			seen[r.EpisodeID] = struct{}{}
			kept = append(kept, r)
		}
		if len(kept) == 0 {
			continue
		}
		if err := fn(k, kept); err != nil {
			return err
		}
	}
	return nil
}

// Runs lists the run ids that have any object in the store, sorted.
func (s *Store) Runs(ctx context.Context) ([]string, error) {
	keys, err := s.be.list(ctx, Root)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	set := map[string]struct{}{}
	for _, k := range keys {
		seg, _, _ := strings.Cut(strings.TrimPrefix(k, Root), "/")
		if id, ok := strings.CutPrefix(seg, "run="); ok && id != "" {
			set[id] = struct{}{}
		}
	}
	runs := make([]string, 0, len(set))
	for id := range set {
		runs = append(runs, id)
	}
	sort.Strings(runs)
	return runs, nil
}

// Manifest summarises a run next to its files.
type Manifest struct {
	RunID         string `json:"run_id"`
	SchemaVersion string `json:"schema_version"`
	Total         int    `json:"total"`
	// Counts is dataset → outcome → episodes.
	Counts map[string]map[string]int `json:"counts"`
	// Config is the run's configuration, any JSON value (e.g. the RunSpec).
	Config json.RawMessage `json:"config,omitempty"`
	// Cancelled marks a run stopped by `medgym cancel` before every
	// planned episode ran: Total counts the stored episodes, Planned the
	// episodes the run had.
	Cancelled bool      `json:"cancelled,omitempty"`
	Planned   int       `json:"planned,omitempty"`
	WrittenAt time.Time `json:"written_at"`
}

// NewManifest counts rows by dataset and outcome. config is marshalled to
// JSON (nil: none).
func NewManifest(runID string, rows []parquet.Row, config any) (Manifest, error) {
	m := Manifest{RunID: runID, SchemaVersion: parquet.SchemaVersion, Counts: map[string]map[string]int{}}
	for _, r := range rows {
		if m.Counts[r.Dataset] == nil {
			m.Counts[r.Dataset] = map[string]int{}
		}
		m.Counts[r.Dataset][r.Outcome]++
		m.Total++
	}
	if config != nil {
		b, err := json.Marshal(config)
		if err != nil {
			return Manifest{}, fmt.Errorf("manifest of run %s: config: %w", runID, err)
		}
		m.Config = b
	}
	return m, nil
}

// WriteManifest writes trajectories/run=<id>/_manifest.json, replacing any
// earlier one. Empty RunID, SchemaVersion and WrittenAt are filled in.
func (s *Store) WriteManifest(ctx context.Context, runID string, m Manifest) error {
	if !schemas.ValidToken(runID) {
		return fmt.Errorf("write manifest: run id %q is not a valid token", runID)
	}
	if m.RunID == "" {
		m.RunID = runID
	}
	if m.RunID != runID {
		return fmt.Errorf("write manifest of run %s: manifest names run %s", runID, m.RunID)
	}
	if m.SchemaVersion == "" {
		m.SchemaVersion = parquet.SchemaVersion
	}
	if m.WrittenAt.IsZero() {
		m.WrittenAt = time.Now().UTC()
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("write manifest of run %s: %w", runID, err)
	}
	if err := s.be.put(ctx, runPrefix(runID)+ManifestName, append(b, '\n')); err != nil {
		return fmt.Errorf("write manifest of run %s: %w", runID, err)
	}
	return nil
}

// ErrNoManifest is returned by ReadManifest for a run without one.
var ErrNoManifest = errors.New("no manifest")

// ReadManifest reads a run's manifest.
func (s *Store) ReadManifest(ctx context.Context, runID string) (Manifest, error) {
	b, err := s.be.get(ctx, runPrefix(runID)+ManifestName)
	if errors.Is(err, errNotFound) {
		return Manifest{}, fmt.Errorf("read manifest of run %s: %w", runID, ErrNoManifest)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("read manifest of run %s: %w", runID, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("read manifest of run %s: %w", runID, err)
	}
	return m, nil
}

// CopyLocal copies a run's objects (runID "": every run) into dir, keeping
// their keys as relative paths, so dir/trajectories/... can be queried
// with DuckDB (which cannot read s3:// offline).
func (s *Store) CopyLocal(ctx context.Context, runID string, dir string) error {
	prefix := Root
	if runID != "" {
		prefix = runPrefix(runID)
	}
	keys, err := s.be.list(ctx, prefix)
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", prefix, dir, err)
	}
	for _, k := range keys {
		data, err := s.be.get(ctx, k)
		if err != nil {
			return fmt.Errorf("copy %s to %s: %w", prefix, dir, err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(path.Clean(k)))
		if err := writeLocal(dst, bytes.NewReader(data)); err != nil {
			return fmt.Errorf("copy %s to %s: %w", k, dir, err)
		}
	}
	return nil
}
