package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/schemas"
	"github.com/moby/moby/client"
)

// dockerWith is the docker backend with Config.DockerReady = ready.
func dockerWith(ready int) constructor {
	return func(t testing.TB, cfg Config) *Sandbox {
		t.Helper()
		cfg.DockerReady = ready
		return newDocker(t, cfg)
	}
}

func requireDocker(t testing.TB) {
	t.Helper()
	if os.Getenv("MEDGYM_DOCKER") != "1" {
		t.Skip("MEDGYM_DOCKER != 1")
	}
}

// dockerPoolOf returns the sandbox's docker runner and its pool.
func dockerPoolOf(t testing.TB, s *Sandbox) (*dockerRunner, *dockerPool) {
	t.Helper()
	d, ok := s.run.(*dockerRunner)
	if !ok || d.pool == nil {
		t.Fatalf("not a docker backend with a pool: %T", s.run)
	}
	return d, d.pool
}

// waitPool waits until the pool has n containers ready and starts none.
func waitPool(t testing.TB, p *dockerPool, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ready, making := p.counts()
		if ready >= n && making == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool: %d ready, %d starting after 3 min; want %d ready", ready, making, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pooledIDs returns the ids of the pool's ready containers.
func pooledIDs(p *dockerPool) map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := map[string]bool{}
	for _, q := range p.idle {
		for _, c := range q {
			ids[c.id] = true
		}
	}
	return ids
}

// episodeCtr returns the id of the episode's container ("" if none).
func episodeCtr(d *dockerRunner, ep string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.ctrs[ep]; c != nil {
		return c.id
	}
	return ""
}

// labelled lists, through the Docker API, the containers with label (k=v).
func labelled(t testing.TB, label string) []string {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	res, err := cli.ContainerList(t.Context(), client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", label)})
	if err != nil {
		t.Fatalf("docker list: %v", err)
	}
	var ids []string
	for _, s := range res.Items {
		ids = append(ids, s.ID)
	}
	return ids
}

// look is what a first turn sees: /work and /tmp (but the server's own
// files), then it leaves a file in each.
const look = `import os, json
print(json.dumps({"work": sorted(os.listdir("/work")), "tmp": sorted(os.listdir("/tmp"))}))
open("/work/mine.txt", "w").write("secret")
open("/tmp/mine.txt", "w").write("secret")
`

func lookFirstTurn(t *testing.T, s *Sandbox, ep string) {
	t.Helper()
	if err := firstTurn(t, s, ep); err != nil {
		t.Fatal(err)
	}
}

// firstTurn runs look as the episode's first turn (from any goroutine).
func firstTurn(t testing.TB, s *Sandbox, ep string) error {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	r, err := s.Execute(ctx, numbered(code(ep, look, 30)))
	if err != nil {
		return err
	}
	if r.Status != schemas.StatusOK {
		return fmt.Errorf("first turn of %s: %+v", ep, r)
	}
	var seen struct{ Work, Tmp []string }
	if err := json.Unmarshal([]byte(r.Stdout), &seen); err != nil {
		return fmt.Errorf("first turn of %s: %q: %w", ep, r.Stdout, err)
	}
	if len(seen.Work) != 0 || slices.Contains(seen.Tmp, "mine.txt") {
		return fmt.Errorf("episode %s starts with files of another: /work %q /tmp %q", ep, seen.Work, seen.Tmp)
	}
	return nil
}

// TestDockerPool checks that new episodes get ready containers from the
// pool, each its own (never one twice), with an empty /work and /tmp, the
// same settings as a container started on demand, and that the episode
// keeps its workspace when its pooled container is killed.
func TestDockerPool(t *testing.T) {
	t.Parallel()
	requireDocker(t)
	root := filepath.Join(openTempDir(t), "work")
	s := dockerWith(2)(t, Config{WorkRoot: root})
	d, p := dockerPoolOf(t, s)

	// The first episode of a resource set starts its container on demand.
	first := newEpisode()
	lookFirstTurn(t, s, first)
	if p.hits.Load() != 0 || p.misses.Load() != 1 {
		t.Fatalf("first episode: %d hits, %d misses; want 0, 1", p.hits.Load(), p.misses.Load())
	}
	onDemand := episodeCtr(d, first)

	assigned := map[string]string{onDemand: first}
	var eps []string
	for i := range 4 {
		waitPool(t, p, 2)
		ready := pooledIDs(p)
		ep := newEpisode()
		lookFirstTurn(t, s, ep)
		id := episodeCtr(d, ep)
		if !ready[id] {
			t.Fatalf("episode %d: container %.12s was not ready in the pool before it began", i, id)
		}
		if got := p.hits.Load(); got != int64(i+1) {
			t.Fatalf("episode %d: %d pool hits, want %d", i, got, i+1)
		}
		if other, dup := assigned[id]; dup {
			t.Fatalf("container %.12s given to %s and %s", id, other, ep)
		}
		assigned[id] = ep
		if pooledIDs(p)[id] {
			t.Fatalf("container %.12s both an episode's and ready in the pool", id)
		}
		eps = append(eps, ep)
	}

	t.Run("same settings as on demand", func(t *testing.T) {
		const format = "{{json .HostConfig.Memory}} {{json .HostConfig.MemorySwap}} {{.HostConfig.NanoCpus}} " +
			"{{json .HostConfig.PidsLimit}} {{json .HostConfig.Ulimits}} {{.HostConfig.NetworkMode}} {{.HostConfig.ReadonlyRootfs}} " +
			"{{.HostConfig.CapDrop}} {{json .HostConfig.SecurityOpt}} {{.HostConfig.IpcMode}} {{json .HostConfig.Tmpfs}} " +
			"{{.Config.User}} {{.Config.Image}} {{json .Config.Cmd}} {{json .Config.Env}} {{.Config.NetworkDisabled}} {{.HostConfig.CpuShares}}"
		inspect := func(id string) string {
			out, err := exec.Command("docker", "inspect", "--format", format, id).Output()
			if err != nil {
				t.Fatalf("docker inspect: %v", err)
			}
			return strings.TrimSpace(string(out))
		}
		// Binds: the same targets and modes (the sources are per container).
		targets := func(id string) []string {
			out, err := exec.Command("docker", "inspect", "--format", "{{json .HostConfig.Binds}}", id).Output()
			if err != nil {
				t.Fatalf("docker inspect: %v", err)
			}
			var binds, tgt []string
			if err := json.Unmarshal(out, &binds); err != nil {
				t.Fatal(err)
			}
			for _, b := range binds {
				_, after, _ := strings.Cut(b, ":")
				tgt = append(tgt, after)
			}
			return tgt
		}
		if a, b := targets(onDemand), targets(episodeCtr(d, eps[0])); !slices.Equal(a, b) {
			t.Fatalf("binds differ: on demand %q, pooled %q", a, b)
		}
		want := inspect(onDemand)
		pooled := inspect(episodeCtr(d, eps[0]))
		// The engine's default weight is 1024 (shown as 0 when unset).
		if strings.TrimSuffix(want, " 0") != strings.TrimSuffix(pooled, " 1024") || !strings.HasSuffix(pooled, " 1024") {
			t.Fatalf("pooled container settings differ:\n on demand %s\n pooled    %s", want, pooled)
		}
	})

	t.Run("workspace survives a killed pooled container", func(t *testing.T) {
		ep := eps[0]
		before := episodeCtr(d, ep)
		if r := exec1(t, s, code(ep, "import time\ntime.sleep(60)", 1)); r.Status != schemas.StatusTimeout {
			t.Fatalf("timeout: %+v", r)
		}
		r := exec1(t, s, term(ep, "cat /work/mine.txt; if test -e /tmp/mine.txt; then echo ' and /tmp kept'; fi", 30))
		if r.Status != schemas.StatusOK || r.Stdout != "secret" {
			t.Fatalf("after the kill: %+v", r)
		}
		if after := episodeCtr(d, ep); after == before {
			t.Fatalf("a pooled container was started again on its old directory")
		}
	})

	t.Run("episodes see nothing of each other", func(t *testing.T) {
		// Each wrote /work/mine.txt and /tmp/mine.txt; each still sees only its own.
		for _, ep := range eps[1:] {
			r := exec1(t, s, term(ep, "ls /work /tmp | grep -c mine.txt; ls "+WorkDir, 30))
			if r.Status != schemas.StatusOK || r.Stdout != "2\nmine.txt\n" {
				t.Fatalf("%s: %+v", ep, r)
			}
		}
	})

	t.Run("release removes the episode's container", func(t *testing.T) {
		ep := eps[1]
		id := episodeCtr(d, ep)
		if err := s.Release(ep); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(labelled(t, labelWorkRoot+"="+root), id) || pooledIDs(p)[id] {
			t.Fatalf("container %.12s outlived its episode's release", id)
		}
		if _, err := os.Stat(filepath.Join(root, ep)); !os.IsNotExist(err) {
			t.Fatalf("workspace kept: %v", err)
		}
	})

	t.Run("reap keeps the pool's ready containers", func(t *testing.T) {
		waitPool(t, p, 2)
		ready := pooledIDs(p)
		if _, err := s.Reap(func(ep string) bool { return ep == eps[2] }); err != nil {
			t.Fatal(err)
		}
		left := labelled(t, labelWorkRoot+"="+root)
		for id := range ready {
			if !slices.Contains(left, id) {
				t.Fatalf("reap removed ready container %.12s", id)
			}
		}
		if len(left) != len(ready)+1 || !slices.Contains(left, episodeCtr(d, eps[2])) {
			t.Fatalf("after reap: %d containers, want the %d ready and the live episode's", len(left), len(ready))
		}
	})
}

// TestDockerPoolResourceSets checks that the pool serves the resource set
// of the episodes that start: the first episode of a set starts its
// container on demand, later ones get ready containers with that set
// mounted, and the pool holds DockerReady containers in all.
func TestDockerPoolResourceSets(t *testing.T) {
	t.Parallel()
	requireDocker(t)
	data := openTempDir(t)
	for _, res := range []string{"toy", "other"} {
		if err := os.MkdirAll(filepath.Join(data, res), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, res, "name.txt"), []byte(res), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := dockerWith(2)(t, Config{DataRoot: data})
	_, p := dockerPoolOf(t, s)
	withRes := func(ep, res string) schemas.ActionRequest {
		r := term(ep, "cat /data/"+res+"/name.txt; ls /data", 30)
		r.Resources = []string{res}
		return r
	}
	if r := exec1(t, s, withRes(newEpisode(), "toy")); r.Status != schemas.StatusOK || r.Stdout != "toytoy\n" {
		t.Fatalf("toy: %+v", r)
	}
	waitPool(t, p, 2)
	if r := exec1(t, s, withRes(newEpisode(), "toy")); r.Status != schemas.StatusOK || r.Stdout != "toytoy\n" || p.hits.Load() != 1 {
		t.Fatalf("toy from the pool (%d hits): %+v", p.hits.Load(), r)
	}
	// A second resource set: on demand first, then the two share the pool.
	if r := exec1(t, s, withRes(newEpisode(), "other")); r.Status != schemas.StatusOK || r.Stdout != "otherother\n" || p.hits.Load() != 1 {
		t.Fatalf("other (%d hits): %+v", p.hits.Load(), r)
	}
	waitPool(t, p, 2)
	p.mu.Lock()
	counts := map[string]int{}
	for k, q := range p.idle {
		counts[k] = len(q)
	}
	p.mu.Unlock()
	if len(counts) != 2 || counts[keyOf(s.mustMounts(t, "toy")).key] != 1 || counts[keyOf(s.mustMounts(t, "other")).key] != 1 {
		t.Fatalf("ready containers by resource set: %v; want one each", counts)
	}
	for _, res := range []string{"other", "toy"} {
		if r := exec1(t, s, withRes(newEpisode(), res)); r.Status != schemas.StatusOK || r.Stdout != res+res+"\n" {
			t.Fatalf("%s: %+v", res, r)
		}
	}
	if p.hits.Load() != 3 {
		t.Fatalf("%d hits, want 3", p.hits.Load())
	}
}

func (s *Sandbox) mustMounts(t testing.TB, res ...string) []mount {
	t.Helper()
	m, err := s.mounts(res)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDockerPoolExhausted checks that episodes that find the pool empty
// start their containers on demand, and work.
func TestDockerPoolExhausted(t *testing.T) {
	t.Parallel()
	requireDocker(t)
	s := dockerWith(1)(t, Config{})
	d, p := dockerPoolOf(t, s)
	lookFirstTurn(t, s, newEpisode())
	waitPool(t, p, 1)
	// Three at once: one gets the ready container, the others find none
	// (a refill takes seconds) and start their own.
	eps := []string{newEpisode(), newEpisode(), newEpisode()}
	errs := make(chan error)
	for _, ep := range eps {
		go func() { errs <- firstTurn(t, s, ep) }()
	}
	for range eps {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		return
	}
	if p.hits.Load() != 1 || p.misses.Load() != 3 {
		t.Fatalf("%d hits, %d misses; want 1, 3", p.hits.Load(), p.misses.Load())
	}
	pooled := 0
	for _, ep := range eps {
		out, err := exec.Command("docker", "inspect", "--format", "{{index .Config.Labels \""+labelPool+"\"}}", episodeCtr(d, ep)).Output()
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(out)) != "" {
			pooled++
		}
		if r := exec1(t, s, term(ep, "cat /work/mine.txt", 30)); r.Status != schemas.StatusOK || r.Stdout != "secret" {
			t.Fatalf("second turn of %s: %+v", ep, r)
		}
	}
	if pooled != 1 {
		t.Fatalf("%d of 3 episodes got pooled containers, want 1", pooled)
	}
}

// TestDockerPoolCleanup checks that Close removes the containers no
// episode got (and their directories), and that a worker restarted on the
// same WorkRoot removes what the pool of the one before left.
func TestDockerPoolCleanup(t *testing.T) {
	t.Parallel()
	requireDocker(t)
	root := filepath.Join(openTempDir(t), "work")

	t.Run("close while starting", func(t *testing.T) {
		s := dockerWith(2)(t, Config{WorkRoot: root})
		d, p := dockerPoolOf(t, s)
		lookFirstTurn(t, s, newEpisode())
		if _, starting := p.counts(); starting == 0 {
			t.Fatal("the pool starts no container after the first episode")
		}
		closedClean(t, s, d.token, root, false)
	})

	t.Run("close", func(t *testing.T) {
		s := dockerWith(2)(t, Config{WorkRoot: root})
		d, p := dockerPoolOf(t, s)
		lookFirstTurn(t, s, newEpisode())
		waitPool(t, p, 2)
		if n := len(labelled(t, labelPool+"="+d.token)); n != 2 {
			t.Fatalf("%d pooled containers, want 2", n)
		}
		closedClean(t, s, d.token, root, true)
	})

	t.Run("restart", func(t *testing.T) {
		a := dockerWith(2)(t, Config{WorkRoot: root})
		da, pa := dockerPoolOf(t, a)
		taken := newEpisode()
		lookFirstTurn(t, a, newEpisode())
		waitPool(t, pa, 2)
		lookFirstTurn(t, a, taken) // from the pool
		waitPool(t, pa, 2)
		if n := len(labelled(t, labelPool+"="+da.token)); n != 3 {
			t.Fatalf("%d containers of a's pool, want 3 (2 ready, 1 an episode's)", n)
		}
		// The worker restarts on the same root (a stays, as if it had
		// been killed): the new one removes everything a left.
		b := dockerWith(2)(t, Config{WorkRoot: root})
		if ids := labelled(t, labelPool+"="+da.token); len(ids) != 0 {
			t.Fatalf("start-up left %d containers of the old pool", len(ids))
		}
		if ids := labelled(t, labelWorkRoot+"="+root); len(ids) != 0 {
			t.Fatalf("start-up left %d containers", len(ids))
		}
		_, pb := dockerPoolOf(t, b)
		lookFirstTurn(t, b, newEpisode())
		waitPool(t, pb, 2)
		lookFirstTurn(t, b, newEpisode())
		if pb.hits.Load() != 1 {
			t.Fatalf("restarted worker's pool: %d hits, want 1", pb.hits.Load())
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if ids := labelled(t, labelWorkRoot+"="+root); len(ids) != 0 {
			t.Fatalf("close left %d containers", len(ids))
		}
	})
}

// closedClean closes s and checks that no container of its pool (token)
// nor any pool directory is left, and with all, no container of root.
func closedClean(t *testing.T, s *Sandbox, token, root string, all bool) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ids := labelled(t, labelPool+"="+token); len(ids) != 0 {
		t.Fatalf("close left %d pooled containers", len(ids))
	}
	if ids := labelled(t, labelWorkRoot+"="+root); all && len(ids) != 0 {
		t.Fatalf("close left %d containers", len(ids))
	}
	if ents, _ := os.ReadDir(filepath.Join(root, metaDir, "pool")); len(ents) != 0 {
		t.Fatalf("close left %d pool directories", len(ents))
	}
}
