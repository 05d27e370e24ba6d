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

	// writeMu serialises Write so the check for stored episodes and the
	// recording of new ones cannot interleave.
	writeMu sync.Mutex
	mu      sync.Mutex                     // guards seen
	seen    map[string]map[string]struct{} // run id → stored episode ids
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
	s := &Store{url: url, rowGroupLen: opt.RowGroupLength, seen: map[string]map[string]struct{}{}}
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
// per run and dataset present among the new rows). Rows whose episode is
// already stored for their run, or repeated within rows, are skipped; if
// nothing is new, no file is written and the result is empty. Every row
// needs a valid run id, episode id and dataset (letters, digits, - and _).
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

	type group struct{ run, dataset string }
	groups := map[group][]parquet.Row{}
	var order []group
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
		g := group{r.RunID, r.Dataset}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], r)
	}

	var keys []string
	for _, g := range order {
		part := groups[g]
		var buf bytes.Buffer
		if err := parquet.Write(&buf, part, s.rowGroupLen); err != nil {
			return keys, fmt.Errorf("write trajectories run %s dataset %s: %w", g.run, g.dataset, err)
		}
		key := runPrefix(g.run) + "dataset=" + g.dataset + "/" + partName()
		if err := s.be.put(ctx, key, buf.Bytes()); err != nil {
			// The object may have landed although the call failed (the
			// reply was lost): forget what we know of this run, so the
			// retry re-reads the stored episode ids and writes no row twice.
			s.mu.Lock()
			delete(s.seen, g.run)
			s.mu.Unlock()
			return keys, fmt.Errorf("write trajectories run %s dataset %s: %w", g.run, g.dataset, err)
		}
		s.mu.Lock()
		for _, r := range part {
			s.seen[g.run][r.EpisodeID] = struct{}{}
		}
		s.mu.Unlock()
		keys = append(keys, key)
	}
	return keys, nil
}

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
	keys, err := s.partKeys(ctx, runID)
	if err != nil {
		return nil, err
	}
	var rows []parquet.Row
	seen := map[string]struct{}{}
	for _, k := range keys {
		data, err := s.be.get(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("read run %s: %w", runID, err)
		}
		got, err := parquet.Read(ctx, bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("read run %s: %s: %w", runID, k, err)
		}
		for i := range got {
			if check == nil {
				break
			}
			if err := check(&got[i]); err != nil {
				return nil, fmt.Errorf("read run %s: %s: %w", runID, k, err)
			}
		}
		for _, r := range got {
			if _, dup := seen[r.EpisodeID]; dup {
				continue
			}
			seen[r.EpisodeID] = struct{}{}
			rows = append(rows, r)
		}
	}
	return rows, nil
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
