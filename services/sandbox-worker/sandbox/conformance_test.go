package sandbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/medgym/medgym/schemas"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	for name, mk := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conformance(t, mk)
		})
	}
}

// conformance is the contract every backend must meet.
func conformance(t *testing.T, mk constructor) {
	data := openTempDir(t)
	if err := os.MkdirAll(filepath.Join(data, "toy"), 0o755); err != nil {
		t.Fatal(err)
	}
	csv := "subject_id,gender,diagnosis\n1,M,sepsis\n2,F,pneumonia\n3,F,sepsis\n"
	if err := os.WriteFile(filepath.Join(data, "toy", "patients.csv"), []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	s := mk(t, Config{DataRoot: data})

	t.Run("print answer rule", func(t *testing.T) {
		r := exec1(t, s, code(newEpisode(), "answer = 6*7", 20))
		if r.Status != schemas.StatusOK || strings.TrimSpace(r.Stdout) != "42" || r.ExitCode != 0 {
			t.Fatalf("got %+v", r)
		}
		r = exec1(t, s, code(newEpisode(), "answer = 1\nprint('x')", 20))
		if strings.TrimSpace(r.Stdout) != "x" {
			t.Fatalf("print(answer) appended although code prints: %q", r.Stdout)
		}
	})
	t.Run("code of every size and encoding", func(t *testing.T) {
		// The fork servers take short valid UTF-8 code in the request and
		// the rest through a pipe: every kind must run as written.
		ep := newEpisode()
		for _, c := range []struct{ name, src, want string }{
			{"short", "print('short', 6*7)", "short 42"},
			{"long", "x = 1\n#" + strings.Repeat("#", 40<<10) + "\nprint('long', x)", "long 1"},
			{"escapes", "s = '\\x00\\n\\t\"'\n#" + strings.Repeat("\x01", 9<<10) + "\nprint('esc', len(s))", "esc 4"},
			{"invalid bytes (JSON makes them U+FFFD)", "# \xff\xfe\nprint('latin')", "latin"},
			{"shell", "", ""},
		} {
			if c.name == "shell" {
				r := exec1(t, s, term(ep, "echo shell-"+strings.Repeat("y", 3), 20))
				if strings.TrimSpace(r.Stdout) != "shell-yyy" {
					t.Fatalf("shell: %+v", r)
				}
				continue
			}
			r := exec1(t, s, code(ep, c.src, 20))
			if r.Status != schemas.StatusOK || strings.TrimSpace(r.Stdout) != c.want {
				t.Fatalf("%s: got %+v", c.name, r)
			}
		}
	})
	t.Run("stderr and exit code", func(t *testing.T) {
		r := exec1(t, s, code(newEpisode(), "import sys\nprint('out')\nraise ValueError('boom')", 20))
		if r.Status != schemas.StatusError || r.ExitCode != 1 {
			t.Fatalf("got %+v", r)
		}
		if !strings.Contains(r.Stderr, "ValueError: boom") || !strings.HasPrefix(r.Message, "out\n\n") || !strings.Contains(r.Message, "Traceback") {
			t.Fatalf("message %q", r.Message)
		}
		if strings.Contains(r.Stderr, "boot.py") {
			t.Fatalf("traceback leaks the bootstrap frame: %q", r.Stderr)
		}
	})
	t.Run("compile error", func(t *testing.T) {
		r := exec1(t, s, code(newEpisode(), "def f(:\n  pass", 20))
		if r.Status != schemas.StatusError || !strings.HasPrefix(r.Message, "Compilation error occurred for the code: def f(:") ||
			!strings.Contains(r.Message, "Full traceback:\n") || !strings.Contains(r.Message, "SyntaxError") {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("modules in the workspace", func(t *testing.T) {
		ep := newEpisode()
		if r := exec1(t, s, code(ep, "open('mymod.py','w').write('X = 41 + 1')", 20)); r.Status != schemas.StatusOK {
			t.Fatalf("write: %+v", r)
		}
		r := exec1(t, s, code(ep, "import os, sys, mymod\nprint(mymod.X, sys.path.index('/work'), os.environ['PYTHONPATH'])", 20))
		if r.Status != schemas.StatusOK || strings.TrimSpace(r.Stdout) != "42 1 /work" {
			t.Fatalf("import from /work: %+v", r)
		}
		r = exec1(t, s, term(ep, "echo $PYTHONPATH; cd /tmp && python3 -c 'import mymod; print(mymod.X)'", 20))
		if r.Status != schemas.StatusOK || r.Stdout != "/work\n42\n" {
			t.Fatalf("import from /work in a shell: %+v", r)
		}
	})
	t.Run("sys.exit code", func(t *testing.T) {
		r := exec1(t, s, code(newEpisode(), "import sys\nsys.exit(3)", 20))
		if r.Status != schemas.StatusError || r.ExitCode != 3 {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("persistence within an episode", func(t *testing.T) {
		ep := newEpisode()
		r := exec1(t, s, code(ep, "open('state.txt','w').write('hello')\nx = 5", 20))
		if r.Status != schemas.StatusOK {
			t.Fatalf("write: %+v", r)
		}
		r = exec1(t, s, code(ep, "import os\nprint(open('state.txt').read(), os.getcwd(), 'x' in globals())", 20))
		if strings.TrimSpace(r.Stdout) != "hello "+WorkDir+" False" {
			t.Fatalf("second turn: %+v", r)
		}
		r = exec1(t, s, term(ep, "cat state.txt; echo; id -u", 20))
		if r.Status != schemas.StatusOK || r.Message != "hello\n65534\n" {
			t.Fatalf("terminal: %+v", r)
		}
	})
	t.Run("output files", func(t *testing.T) {
		ep := newEpisode()
		r := code(ep, "import os\nos.makedirs('out', exist_ok=True)\n"+
			"open('predictions.csv','w').write('id,prediction\\n1,0\\n')\n"+
			"open('out/p.csv','w').write('x')\n"+
			"os.symlink('/etc/passwd', 'link.csv')\nos.symlink('predictions.csv', 'inner.csv')\nprint('done')", 20)
		r.OutputFiles = []string{"predictions.csv", "out/p.csv", "missing.csv", "link.csv", "inner.csv", "../escape.csv", "/etc/passwd"}
		res := exec1(t, s, r)
		if res.Status != schemas.StatusOK {
			t.Fatalf("run: %+v", res)
		}
		want := map[string]string{"predictions.csv": "id,prediction\n1,0\n", "out/p.csv": "x"}
		if len(res.Files) != len(want) {
			t.Fatalf("files %q, want %q", res.Files, want)
		}
		for k, v := range want {
			if res.Files[k] != v {
				t.Fatalf("file %s = %q, want %q", k, res.Files[k], v)
			}
		}
		for _, bad := range []string{"link.csv", "inner.csv", "../escape.csv", "/etc/passwd"} {
			if !strings.Contains(res.Message, bad) {
				t.Errorf("no note for refused %s in %q", bad, res.Message)
			}
		}
		// Not collected after a failed run, nor for terminal actions.
		r = code(ep, "raise SystemExit(1)", 20)
		r.OutputFiles = []string{"predictions.csv"}
		if res := exec1(t, s, r); res.Files != nil {
			t.Fatalf("files after a failed run: %q", res.Files)
		}
		r = term(ep, "ls", 20)
		r.OutputFiles = []string{"predictions.csv"}
		if res := exec1(t, s, r); res.Files != nil {
			t.Fatalf("files after terminal: %q", res.Files)
		}
	})
	t.Run("isolation between episodes", func(t *testing.T) {
		a, b := newEpisode(), newEpisode()
		exec1(t, s, code(a, "open('secret_a.txt','w').write('A')", 20))
		r := exec1(t, s, code(b, "import os\nprint(sorted(os.listdir('.')))", 20))
		if strings.Contains(r.Stdout, "secret_a") || r.Status != schemas.StatusOK {
			t.Fatalf("episode b sees a's files: %+v", r)
		}
	})
	t.Run("replay rebuilds the workspace", func(t *testing.T) {
		// The episode's workspace actions: turn 0 ran here, turn 1 on
		// another worker, turn 2 comes here with both in Replay.
		p0, _ := json.Marshal(map[string]string{"code": "open('a.txt','a').write('0\\n')"})
		p1, _ := json.Marshal(map[string]string{"cmd": "echo 1 >> a.txt"})
		p2, _ := json.Marshal(map[string]string{"code": "open('a.txt','a').write('2\\n')\nprint(open('a.txt').read().split())"})
		acts := []schemas.Action{{Name: schemas.ActionValidateCode, Params: p0}, {Name: schemas.ActionTerminal, Params: p1},
			{Name: schemas.ActionValidateCode, Params: p2}}
		turn := func(ep string, k int, a schemas.Action) schemas.ActionRequest {
			r := req(ep, a, 20)
			r.Ref.Turn, r.Replay = k, slices.Clone(acts[:min(k, len(acts))])
			return r
		}
		ep := newEpisode()
		exec1(t, s, turn(ep, 0, acts[0]))
		want := "['0', '1', '2']"
		if res := exec1(t, s, turn(ep, 2, acts[2])); strings.TrimSpace(res.Stdout) != want {
			t.Fatalf("a workspace that missed turn 1 did not replay it: %+v", res)
		}
		// A redelivery of turn 2 runs on the workspace as it was before it.
		if res := exec1(t, s, turn(ep, 2, acts[2])); strings.TrimSpace(res.Stdout) != want {
			t.Fatalf("redelivered turn 2: %+v", res)
		}
		look, _ := json.Marshal(map[string]string{"code": "print(open('a.txt').read().split())"})
		if res := exec1(t, s, turn(ep, 3, schemas.Action{Name: schemas.ActionValidateCode, Params: look})); strings.TrimSpace(res.Stdout) != want {
			t.Fatalf("turn 3 after the redelivery: %+v", res)
		}
		// An old action replayed into the live episode (a redelivery from
		// long ago, or a copy someone allowed to request actions sent again)
		// runs on the workspace as it was before that turn, and the next
		// turn still sees every action of the episode exactly once.
		if res := exec1(t, s, turn(ep, 0, acts[0])); res.Status != schemas.StatusOK {
			t.Fatalf("old turn 0 again: %+v", res)
		}
		r4 := req(ep, schemas.Action{Name: schemas.ActionValidateCode, Params: look}, 20)
		r4.Ref.Turn, r4.Replay = 4, append(slices.Clone(acts), schemas.Action{Name: schemas.ActionValidateCode, Params: look})
		if res := exec1(t, s, r4); strings.TrimSpace(res.Stdout) != want {
			t.Fatalf("turn 4 after an old turn 0 was replayed: %+v", res)
		}
		// A worker that never had the episode replays it from the start.
		if res := exec1(t, s, turn(newEpisode(), 2, acts[2])); strings.TrimSpace(res.Stdout) != want {
			t.Fatalf("replay from the start: %+v", res)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		r := exec1(t, s, code(newEpisode(), "import time\nprint('started', flush=True)\ntime.sleep(60)", 1))
		if r.Status != schemas.StatusTimeout || !strings.HasPrefix(r.Message, "Process timed out after ") ||
			!strings.Contains(r.Message, "(timeout limit: 1s)") || r.DurationMS > 10000 {
			t.Fatalf("got %+v", r)
		}
		if !strings.Contains(r.Stdout, "started") {
			t.Fatalf("output before the timeout lost: %+v", r)
		}
	})
	t.Run("data mounted read-only", func(t *testing.T) {
		r := code(newEpisode(), "import pandas as pd\ndf = pd.read_csv('/data/toy/patients.csv')\nprint(df.groupby('gender').size().to_dict())", 30)
		r.Resources = []string{"toy"}
		res := exec1(t, s, r)
		if strings.TrimSpace(res.Stdout) != "{'F': 2, 'M': 1}" {
			t.Fatalf("got %+v", res)
		}
	})
	t.Run("threads, processes, sqlite3, numpy", func(t *testing.T) {
		// What data-science code does that a syscall filter could break:
		// threads (clone3, then clone), fork, a multiprocessing pool
		// (semaphores in /dev/shm, helper threads), subprocess
		// (posix_spawn), sqlite3, numpy and pandas.
		src := `import concurrent.futures, multiprocessing, sqlite3, subprocess, threading
import numpy as np, pandas as pd
got = []
t = threading.Thread(target=lambda: got.append(sum(range(1000)))); t.start(); t.join()
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    got.append(sum(ex.map(lambda x: x * x, range(10))))
ctx = multiprocessing.get_context("fork")
with ctx.Pool(2) as pool:
    got.append(sum(pool.map(abs, range(-5, 5))))
q = ctx.Queue(); p = ctx.Process(target=q.put, args=(7,)); p.start(); got.append(q.get()); p.join()
db = sqlite3.connect(":memory:"); db.execute("create table t(x)")
db.executemany("insert into t values (?)", [(i,) for i in range(5)])
got.append(db.execute("select sum(x) from t").fetchone()[0])
got.append(subprocess.run(["echo", "hi"], capture_output=True, text=True, check=True).stdout.strip())
got.append(int(np.linalg.matrix_rank(np.eye(3))) + int(pd.DataFrame({"a": [1, 2, 3]}).a.sum()))
print(*got)
`
		r := exec1(t, s, code(newEpisode(), src, 60))
		if r.Status != schemas.StatusOK || strings.TrimSpace(r.Stdout) != "499500 285 25 7 10 hi 9" {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("request_info", func(t *testing.T) {
		ep := newEpisode()
		info := func(path, typ, key string) schemas.ExecResult {
			p, _ := json.Marshal(map[string]string{"data_path": path, "info_type": typ, "keyterm": key})
			r := req(ep, schemas.Action{Name: schemas.ActionRequestInfo, Params: p}, 10)
			r.Resources = []string{"toy"}
			return exec1(t, s, r)
		}
		if r := info("/data/toy/patients.csv", "column_names", ""); r.Status != schemas.StatusInfo ||
			r.Message != "The column names are: ['subject_id', 'gender', 'diagnosis']" {
			t.Fatalf("column_names: %+v", r)
		}
		if r := info("/data/toy/patients.csv", "column_values", "diagnosis"); r.Message != "The column values include: ['sepsis', 'pneumonia']" {
			t.Fatalf("column_values: %+v", r)
		}
		if r := info("/data/toy", "term", "sepsi"); !strings.Contains(r.Message, "The closest values are: ['sepsis']") {
			t.Fatalf("term: %+v", r)
		}
		if r := info("/data/other/x.csv", "column_names", ""); r.Status != schemas.StatusError {
			t.Fatalf("path outside resources: %+v", r)
		}
	})
	t.Run("unknown action", func(t *testing.T) {
		r := exec1(t, s, req(newEpisode(), schemas.Action{Name: "rm_rf", Params: json.RawMessage(`{}`)}, 10))
		if r.Status != schemas.StatusError || !strings.Contains(r.Message, "validate_code, terminal, request_info") {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("pip install fails fast", func(t *testing.T) {
		r := exec1(t, s, term(newEpisode(), "pip install requests", 10))
		if r.Status != schemas.StatusError || !strings.Contains(r.Message, "no network") {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("release removes the workspace", func(t *testing.T) {
		ep := newEpisode()
		exec1(t, s, code(ep, "open('f','w').write('1')", 10))
		if err := s.Release(ep); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(s.workspacePath(ep)); !os.IsNotExist(err) {
			t.Fatalf("workspace still there: %v", err)
		}
		r := exec1(t, s, code(ep, "import os\nprint(os.path.exists('f'))", 10))
		if strings.TrimSpace(r.Stdout) != "False" {
			t.Fatalf("released workspace came back: %+v", r)
		}
	})
}
