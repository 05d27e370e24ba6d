// Package harbor writes medgym's tasks as Harbor task folders (the `harbor`
// package's format, schema 1.4 as of harbor 0.25.0) and scores a Harbor
// trial's answer with the verifier's rules (Score).
//
// One folder per task:
//
//	instruction.md          the task as the agent sees it: the dataset's instruction, the question,
//	                        the context, where its data lies and where the answer goes
//	task.toml               name medgym/<task id>, metadata, timeouts, no network, the verifier in a
//	                        container of its own (environment_mode "separate"), /work as the artifact
//	environment/Dockerfile  FROM the sandbox image, the task's data files copied under /data
//	environment/data/...    those files (hard links into the library when it can)
//	solution/solve.sh       the reference solution (solution.py), run as medgym's sandbox runs it;
//	                        its stdout is the answer
//	tests/Dockerfile        FROM the verifier image (the sandbox image with the medgym binary),
//	                        adding task.json and test.sh under /tests
//	tests/task.json         the task's view and ground truth
//	tests/test.sh           medgym harbor-verify: the answer in /work scored by the verifier's rules
//
// The ground truth is only in tests/: Harbor builds the verifier's image from
// tests/ and starts it after the agent's container has stopped, with /work
// copied over as the trial's artifact; the agent's image is built from
// environment/ alone.
package harbor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/medgym/medgym/schemas"
	"github.com/medgym/medgym/services/sandbox-worker/sandbox"
	"github.com/medgym/medgym/services/verifier/verify"
	"github.com/medgym/medgym/tasks"
)

// AnswerFile is where the agent writes its final answer.
const AnswerFile = "/work/answer.txt"

// WorkDir is the agent's working directory, collected as the trial's artifact.
const WorkDir = "/work"

// Options configure the task folders.
type Options struct {
	// Image is the agent environment's base image (the sandbox image,
	// scripts/sandbox-image.sh).
	Image string
	// VerifierImage is the verifier environment's base image
	// (scripts/harbor-images.sh: the sandbox image with the medgym binary).
	VerifierImage string
	// AgentTree is the library's agent tree: the task resources' root.
	AgentTree string
	// AgentTimeoutSec and VerifierTimeoutSec are Harbor's phase timeouts.
	AgentTimeoutSec    int
	VerifierTimeoutSec int
	// Network is how the containers are kept off the network: NetworkPolicy
	// (the default) or NetworkCompose.
	Network string
}

// How a task keeps its containers off the network.
const (
	// NetworkPolicy declares network_mode "no-network" in task.toml, which
	// every Harbor environment must enforce or refuse (Harbor's Docker
	// environment enforces it with an egress-control sidecar whose images
	// it pulls from Docker Hub).
	NetworkPolicy = "no-network"
	// NetworkCompose leaves task.toml's network public and sets
	// network_mode: none on the container in a docker-compose.yaml beside
	// each Dockerfile: for a local Docker engine that cannot pull the
	// sidecar's images. Only Harbor's Docker environments read it.
	NetworkCompose = "compose"
)

// ErrHarness is returned for a task whose code runs inside a harness the
// agent never sees (upstream BioCoder's context code): a terminal agent
// has no validate_code action to splice it into.
var ErrHarness = errors.New("the task runs the agent's code inside a harness, which a Harbor task cannot hold out of the agent's image")

// Name is the Harbor package name of a task.
func Name(t schemas.TaskView) string { return "medgym/" + t.ID }

// TaskFile is tests/task.json: what the verifier scores with.
type TaskFile struct {
	View  schemas.TaskView `json:"view"`
	Truth tasks.Truth      `json:"truth"`
}

// Write writes task t's folder at dir (created; it must not exist).
func Write(dir string, t tasks.Task, o Options) error {
	if t.View.Harness != "" || t.Truth.Type == schemas.AnswerOutput {
		return fmt.Errorf("harbor: task %s: %w", t.View.ID, ErrHarness)
	}
	if t.Reference == "" {
		return fmt.Errorf("harbor: task %s has no reference solution", t.View.ID)
	}
	if o.Image == "" || o.VerifierImage == "" {
		return errors.New("harbor: the agent and verifier base images are required")
	}
	switch o.Network {
	case "":
		o.Network = NetworkPolicy
	case NetworkPolicy, NetworkCompose:
	default:
		return fmt.Errorf("harbor: network %q: %s or %s", o.Network, NetworkPolicy, NetworkCompose)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("harbor: %w", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("harbor: %w", err)
	}
	for _, d := range []string{"environment/data", "solution", "tests"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("harbor: %w", err)
		}
	}
	for _, r := range t.View.Resources {
		if err := copyResource(o.AgentTree, r, filepath.Join(dir, "environment", "data")); err != nil {
			return fmt.Errorf("harbor: task %s: %w", t.View.ID, err)
		}
	}
	truth, err := json.MarshalIndent(TaskFile{View: t.View, Truth: t.Truth}, "", "  ")
	if err != nil {
		return fmt.Errorf("harbor: %w", err)
	}
	files := []struct {
		name string
		body string
		mode os.FileMode
	}{
		{"instruction.md", Instruction(t.View), 0o644},
		{"task.toml", taskTOML(t.View, o), 0o644},
		{"environment/Dockerfile", envDockerfile(o.Image), 0o644},
		{"solution/solution.py", solution(t.Reference), 0o644},
		{"solution/solve.sh", solveSh, 0o755},
		{"tests/Dockerfile", testsDockerfile(o.VerifierImage), 0o644},
		{"tests/task.json", string(truth) + "\n", 0o644},
		{"tests/test.sh", testSh, 0o755},
	}
	if o.Network == NetworkCompose {
		for _, d := range []string{"environment", "tests"} {
			files = append(files, struct {
				name string
				body string
				mode os.FileMode
			}{d + "/docker-compose.yaml", composeNoNetwork, 0o644})
		}
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.body), f.mode); err != nil {
			return fmt.Errorf("harbor: %w", err)
		}
	}
	return nil
}

// Instruction is instruction.md: the task as a terminal agent sees it.
func Instruction(v schemas.TaskView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", v.ID)
	if s := strings.TrimSpace(v.Instruction); s != "" {
		b.WriteString(s + "\n\n")
	}
	b.WriteString("## Question\n\n" + strings.TrimSpace(v.Question) + "\n\n")
	if s := strings.TrimSpace(v.Context); s != "" {
		b.WriteString("## Context\n\n" + s + "\n\n")
	}
	b.WriteString("## Environment\n\n")
	if len(v.Resources) > 0 {
		b.WriteString("The task's data files are under /data (read-only):\n\n")
		for _, r := range v.Resources {
			fmt.Fprintf(&b, "- `%s`\n", path.Join("/data", path.Clean("/"+r)))
		}
		b.WriteString("\n")
	}
	b.WriteString("Work in `/work`. Installed: " + sandbox.PreinstalledPackages +
		", sqlite3; there is no network, so nothing more can be installed.\n\n")
	b.WriteString("## Answer\n\n")
	if v.AnswerType == schemas.AnswerPredictions {
		files := v.OutputFiles
		if len(files) == 0 {
			files = []string{"predictions.csv"}
		}
		fmt.Fprintf(&b, "Write the predictions file the question asks for to `%s` "+
			"(the file is scored, not an answer text).\n", path.Join(WorkDir, files[0]))
		return b.String()
	}
	fmt.Fprintf(&b, "Write your final answer to `%s`. Its last non-empty line is read as the answer", AnswerFile)
	if v.AnswerType == schemas.AnswerList {
		b.WriteString(" (a list: the whole file, as one JSON or Python list literal or one value per line)")
	}
	if v.AnswerType != "" {
		fmt.Fprintf(&b, "; the answer type is %s", v.AnswerType)
	}
	b.WriteString(". Only the file counts.\n")
	return b.String()
}

// taskTOML is task.toml. Top-level keys come before every table.
func taskTOML(v schemas.TaskView, o Options) string {
	agentTimeout, verifierTimeout := o.AgentTimeoutSec, o.VerifierTimeoutSec
	if agentTimeout <= 0 {
		agentTimeout = 1800
	}
	if verifierTimeout <= 0 {
		verifierTimeout = 300
	}
	keywords := []string{"medgym", v.Dataset}
	if v.Category != "" && !slices.Contains(keywords, v.Category) {
		keywords = append(keywords, v.Category)
	}
	var b strings.Builder
	b.WriteString("schema_version = \"1.4\"\n")
	b.WriteString("source = \"medgym\"\n")
	// The agent's working directory is the answer: it is collected when
	// the agent ends and recreated at /work in the verifier's container.
	fmt.Fprintf(&b, "artifacts = [%s]\n\n", q(WorkDir))
	fmt.Fprintf(&b, "[task]\nname = %s\ndescription = %s\nkeywords = [%s]\n\n",
		q(Name(v)), q(fmt.Sprintf("medgym %s task %s (%s split)", v.Dataset, v.ID, v.Split)), joinQ(keywords))
	fmt.Fprintf(&b, "[metadata]\ntask_id = %s\ndataset = %s\nsplit = %s\ncategory = %s\nanswer_type = %s\n\n",
		q(v.ID), q(v.Dataset), q(v.Split), q(v.Category), q(string(v.AnswerType)))
	fmt.Fprintf(&b, "[agent]\ntimeout_sec = %d.0\n\n", agentTimeout)
	network := "no-network"
	if o.Network == NetworkCompose {
		network = "public" // environment/docker-compose.yaml and tests/docker-compose.yaml: network_mode none
	}
	fmt.Fprintf(&b, "[verifier]\ntimeout_sec = %d.0\nenvironment_mode = \"separate\"\nnetwork_mode = %s\n\n", verifierTimeout, q(network))
	fmt.Fprintf(&b, "[environment]\nnetwork_mode = %s\ncpus = 1\nmemory_mb = 2048\nbuild_timeout_sec = 600.0\n", q(network))
	return b.String()
}

// q quotes s as a TOML basic string (JSON's escapes are TOML's).
func q(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func joinQ(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = q(s)
	}
	return strings.Join(out, ", ")
}

func envDockerfile(image string) string {
	// The sandbox image runs as nobody; Harbor's agents and its oracle run
	// as the image's user and write under /work and /logs, so the task's
	// image runs as root (Harbor's default) inside its no-network container.
	return "FROM " + image + "\n" +
		"USER root\n" +
		"COPY data/ /data/\n" +
		"RUN chmod -R a+rX /data && mkdir -p " + WorkDir + "\n" +
		"WORKDIR " + WorkDir + "\n"
}

func testsDockerfile(image string) string {
	return "FROM " + image + "\n" +
		"USER root\n" +
		"COPY task.json test.sh /tests/\n" +
		"WORKDIR /tests\n"
}

// solution is the reference program as medgym's sandbox runs a
// validate_code action: code that names an answer but prints nothing
// gets a print(answer) (services/sandbox-worker/sandbox/actions.go).
func solution(ref string) string {
	if !strings.Contains(ref, "print") && strings.Contains(ref, "answer") {
		ref += "\nprint(answer)"
	}
	return ref + "\n"
}

// composeNoNetwork takes Harbor's main service off the network (Harbor
// merges a docker-compose.yaml beside the Dockerfile into its own).
const composeNoNetwork = `services:
  main:
    network_mode: none
`

const solveSh = `#!/bin/sh
# The reference solution, run in /work as medgym's sandbox runs it; what it prints is the answer.
set -e
cd /work
python3 /solution/solution.py > /work/answer.txt
cat /work/answer.txt
`

const testSh = `#!/bin/sh
# medgym's verifier rules score the answer the agent left in /work (the trial's artifact) against
# /tests/task.json; reward.json and medgym.json (outcome and verdict) land in /logs/verifier.
exec medgym harbor-verify --task /tests/task.json --work /work --out /logs/verifier
`

// copyResource copies the resource r (a path relative to the agent tree)
// under dst, keeping its relative path; a directory is copied whole. It
// hard-links where it can (the same file system), else copies.
func copyResource(tree, r, dst string) error {
	clean := path.Clean("/" + r)[1:]
	if clean == "" {
		return fmt.Errorf("resource %q names the whole data root", r)
	}
	src := filepath.Join(tree, filepath.FromSlash(clean))
	root := filepath.Join(dst, filepath.FromSlash(clean))
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(root, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case !d.Type().IsRegular():
			return fmt.Errorf("resource %s: %s is not a regular file", r, p)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if os.Link(p, to) == nil {
			return nil
		}
		return copyFile(p, to)
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Result is what Score returns and harbor-verify writes to medgym.json.
type Result struct {
	TaskID          string          `json:"task_id"`
	Outcome         schemas.Outcome `json:"outcome"`
	Reward          float64         `json:"reward"`
	Verdict         string          `json:"verdict"`
	VerifierVersion string          `json:"verifier_version"`
}

// Score scores the answer a Harbor trial left in work (the agent's /work)
// as the verifier scores an episode under the default options (end_on
// answer, strict rules): the answer file's text is the episode's final
// answer, and the files the task asks for (a predictions file) are the
// output of its last code run.
func Score(t TaskFile, work string) (Result, error) {
	answer, err := readCapped(filepath.Join(work, filepath.Base(AnswerFile)))
	if tooLarge := (*fileTooLargeError)(nil); errors.As(err, &tooLarge) {
		return Result{TaskID: t.View.ID, Outcome: schemas.OutcomeIncorrect, Verdict: err.Error(),
			VerifierVersion: verify.VersionFor(verify.Mode(schemas.DefaultOptions().VerifierMode))}, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Result{}, err
	}
	files := map[string]string{}
	outs := t.View.OutputFiles
	if t.Truth.Type == schemas.AnswerPredictions && len(outs) == 0 {
		outs = []string{"predictions.csv"}
	}
	for _, f := range outs {
		body, err := readCapped(filepath.Join(work, filepath.FromSlash(path.Clean("/" + f)[1:])))
		switch tooLarge := (*fileTooLargeError)(nil); {
		case errors.Is(err, os.ErrNotExist), errors.As(err, &tooLarge):
			// Missing, or larger than a sandbox run may return (where the sandbox would leave it out).
		case err != nil:
			return Result{}, err
		default:
			files[f] = body
		}
	}
	opts := schemas.DefaultOptions()
	res := schemas.EpisodeResult{
		Request: schemas.EpisodeRequest{Task: t.View, Options: opts},
		Turns: []schemas.Turn{
			{Index: 0, ActionName: schemas.ActionValidateCode, ExecStatus: schemas.StatusOK,
				Stdout: answer, Observation: answer, Files: files},
			{Index: 1, ActionName: schemas.ActionAnswer},
		},
		FinalAnswer: strings.TrimSpace(answer),
		Termination: schemas.EndAnswered,
	}
	mode := verify.Mode(opts.VerifierMode)
	outcome, reward, verdict := verify.Score(verify.Options{Mode: mode}, t.Truth, res)
	return Result{TaskID: t.View.ID, Outcome: outcome, Reward: reward, Verdict: verdict, VerifierVersion: verify.VersionFor(mode)}, nil
}

// readCapped reads a file the agent wrote, refusing one larger than a
// sandbox run may return (schemas.MaxOutputFileBytes).
func readCapped(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, schemas.MaxOutputFileBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > schemas.MaxOutputFileBytes {
		return "", &fileTooLargeError{path: p}
	}
	return string(b), nil
}

// fileTooLargeError is a file the agent wrote that is larger than a
// sandbox run may return: an answer scored as wrong, not a verifier error.
type fileTooLargeError struct{ path string }

func (e *fileTooLargeError) Error() string {
	return fmt.Sprintf("rejected: %s is larger than %d bytes", e.path, schemas.MaxOutputFileBytes)
}
