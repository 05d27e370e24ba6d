package charttest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const chartDir = "../medgym"

func ciValues(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/values-ci.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// render renders the chart with the CI values (and extra values files) and
// decodes it strictly.
func render(t *testing.T, extra ...string) []Manifest {
	t.Helper()
	files := [][]byte{ciValues(t)}
	for _, e := range extra {
		files = append(files, []byte(e))
	}
	docs, err := Render(chartDir, files...)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := Decode(docs)
	if err != nil {
		t.Fatalf("strict decoding:\n%v", err)
	}
	return ms
}

func noErrors(t *testing.T, what string, errs []error) {
	t.Helper()
	for _, e := range errs {
		t.Errorf("%s: %v", what, e)
	}
}

// TestChartRendersStrictly renders the chart as CI can (dependencies
// disabled), decodes every manifest with the Kubernetes API types and the
// ScaledObjects with KEDA's, and checks the workloads, the library trees, the
// sandbox's pod and the NetworkPolicies.
func TestChartRendersStrictly(t *testing.T) {
	ms := render(t)
	kinds := map[string]int{}
	for _, m := range ms {
		kinds[m.Object.GetObjectKind().GroupVersionKind().Kind]++
	}
	for kind, n := range map[string]int{"Deployment": 4, "PodDisruptionBudget": 4, "ScaledObject": 2, "NetworkPolicy": 3, "ConfigMap": 1, "Job": 1} {
		if kinds[kind] != n {
			t.Errorf("%d %s, want %d (all: %v)", kinds[kind], kind, n, kinds)
		}
	}
	noErrors(t, "deployments", CheckDeployments(ms, 3, 3))
	noErrors(t, "provisioning", CheckProvisionJob(ms, 3, 3))
	noErrors(t, "library", CheckLibrary(ms))
	noErrors(t, "sandbox", CheckSandbox(ms, "registry.example.org/medgym/library:verifier-d6d2745419ce"))
	noErrors(t, "network policies", CheckNetworkPolicies(ms, 8222))
	u, err := CollectUses(ms, dashboard(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Lags) != 3 {
		t.Errorf("lag triggers %v: want llm-worker on its two consumers and sandbox-worker on its one", u.Lags)
	}
	noErrors(t, "schemas", CheckSchemas(u))
	durables := map[string]bool{}
	for _, s := range u.Subjects {
		durables[s.Consumer] = s.Consumer != ""
	}
	for _, d := range Durables {
		if !durables[d] {
			t.Errorf("the NATS permissions in the chart never name durable %s (subjects read: %d)", d, len(u.Subjects))
		}
	}

	// Without KEDA the Deployments keep their replica counts.
	ms = render(t, "keda: {enabled: false}\n")
	if n := len(Of[*kedav1alpha1.ScaledObject](ms)); n != 0 {
		t.Errorf("keda.enabled=false renders %d ScaledObjects", n)
	}
	if d := Deployment(ms, "llm-worker"); d == nil || d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("without KEDA the llm-worker Deployment has no replicas: 2")
	}
}

// TestChartRefusesMissingLibrary: the library images and hashes are
// required, and a hash must be a sha256 content hash.
func TestChartRefusesMissingLibrary(t *testing.T) {
	if _, err := Render(chartDir); err == nil || !strings.Contains(err.Error(), "library.") {
		t.Errorf("rendered without library values: %v", err)
	}
	_, err := Render(chartDir, ciValues(t), []byte("library: {agent: {hash: latest}}\n"))
	if err == nil || !strings.Contains(err.Error(), "not sha256") {
		t.Errorf("rendered with hash \"latest\": %v", err)
	}
}

// TestPlantedViolations: each check fails on a manifest set, dashboard or
// scrape with one planted fault (the positive control of every check above
// and of the live one).
func TestPlantedViolations(t *testing.T) {
	docs, err := Render(chartDir, ciValues(t))
	if err != nil {
		t.Fatal(err)
	}
	// An unknown field and an unknown kind fail strict decoding.
	for name, plant := range map[string]func(string) string{
		"unknown field": func(d string) string {
			return strings.Replace(d, "readinessProbe:", "readinesProbe:", 1)
		},
		"unknown ScaledObject field": func(d string) string {
			return strings.Replace(d, "  triggers:", "  trigger:", 1)
		},
		"unknown kind": func(d string) string {
			return strings.Replace(d, "kind: PodDisruptionBudget", "kind: PodDisruptionBudgets", 1)
		},
	} {
		planted := map[string]string{}
		changed := false
		for k, d := range docs {
			p := plant(d)
			changed = changed || p != d
			planted[k] = p
		}
		if !changed {
			t.Fatalf("%s: nothing to plant it in", name)
		}
		if _, err := Decode(planted); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}

	ms, err := Decode(docs)
	if err != nil {
		t.Fatal(err)
	}
	expectFail := func(what string, errs []error) {
		t.Helper()
		if len(errs) == 0 {
			t.Errorf("planted %s: no check failed", what)
		}
		for _, e := range errs {
			t.Logf("planted %s: %v", what, e)
		}
	}
	// The sandbox gets the verifier tree.
	sb := Deployment(ms, "sandbox-worker")
	ver := Deployment(ms, "verifier").Spec.Template.Spec.InitContainers[0]
	saved := sb.Spec.Template.Spec.InitContainers
	sb.Spec.Template.Spec.InitContainers = append(saved, ver)
	expectFail("verifier tree in the sandbox", CheckSandbox(ms, ver.Image))
	expectFail("verifier tree in the sandbox", CheckLibrary(ms))
	sb.Spec.Template.Spec.InitContainers = saved
	// The sandbox privileged, and with the runtime's seccomp profile.
	sc := sb.Spec.Template.Spec.Containers[0].SecurityContext
	yes := true
	sc.Privileged = &yes
	expectFail("privileged sandbox", CheckSandbox(ms, ver.Image))
	no := false
	sc.Privileged = &no
	sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	expectFail("RuntimeDefault seccomp on the sandbox", CheckSandbox(ms, ver.Image))
	// Metrics on every interface, a probe elsewhere.
	llm := Deployment(ms, "llm-worker")
	c := &llm.Spec.Template.Spec.Containers[0]
	for i, a := range c.Args {
		if strings.HasPrefix(a, "$(POD_IP)") {
			c.Args[i] = ":9102"
		}
	}
	c.LivenessProbe.HTTPGet.Path = "/"
	errs := CheckDeployments(ms, 3, 3)
	expectFail("metrics on every interface and a liveness probe on /", errs)
	if len(errs) < 2 {
		t.Errorf("two faults planted, %d found", len(errs))
	}
	// NATS monitoring open to every pod; sandbox egress to anything.
	for _, p := range Of[*networkingv1.NetworkPolicy](ms) {
		for i := range p.Spec.Ingress {
			for _, port := range p.Spec.Ingress[i].Ports {
				if port.Port != nil && port.Port.IntValue() == 8222 {
					p.Spec.Ingress[i].From = append(p.Spec.Ingress[i].From, networkingv1.NetworkPolicyPeer{})
				}
			}
		}
		if p.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] == "sandbox-worker" {
			https := intstr.FromInt32(443)
			p.Spec.Egress = append(p.Spec.Egress, networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{{Port: &https}}})
		}
	}
	if errs := CheckNetworkPolicies(ms, 8222); len(errs) < 2 {
		t.Errorf("two network faults planted, found %v", errs)
	}

	// Names: a consumer that is no durable, a stream that is none, a
	// dashboard metric no service exports.
	u, err := CollectUses(ms, []byte(`{"panels":[{"title":"p","targets":[{"expr":"rate(medgym_episodes_scored[1m])"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	u.Lags = append(u.Lags, Lag{"planted", "llm-worker", "MEDGYM_EPISODE", "llm-worker-episode"})
	errs = CheckSchemas(u)
	if len(errs) != 2 {
		t.Errorf("a planted stream and consumer: %v", errs)
	}
	// A permission on a consumer that is none, a stream that is none and a
	// bucket that is none.
	u.Subjects = PermissionSubjects("planted", `allow: ["$JS.API.CONSUMER.MSG.NEXT.MEDGYM_ACTIONS.sandbox-worker-action",
		"$JS.ACK.MEDGYM_ACTION.sandbox-worker-actions.>", "$KV.MEDGYM_RUN.>", "_INBOX.>"]`)
	if errs := CheckSchemas(u); len(errs) != 5 {
		t.Errorf("three planted permission names and the planted trigger: %v", errs)
	}
	page := "# TYPE medgym_queue_depth gauge\nmedgym_queue_depth{consumer=\"llm-worker-episodes\",stream=\"MEDGYM_EPISODES\"} 0\n" +
		"medgym_episodes_scored_total{outcome=\"correct\"} 3\n"
	// llm-worker's page lacks the planted pair and llm-worker-checks; the
	// sandbox-worker's page is missing; the dashboard's name has no _total.
	errs = CheckScrape(u, map[string]string{"llm-worker": page})
	expectFail("names missing from the scrape", errs)
	for _, want := range []string{"queries medgym_episodes_scored,", "MEDGYM_EPISODE/llm-worker-episode,", "MEDGYM_ACTIONS/sandbox-worker-actions,", "MEDGYM_CHECKS/llm-worker-checks,"} {
		if !strings.Contains(errors.Join(errs...).Error(), want) {
			t.Errorf("no error about %s in %v", want, errs)
		}
	}
}

// TestNATSAuthMatchesDeploy: the chart's copies of deploy/nats's auth.conf
// and permissions.conf (Helm reads only files inside the chart) are those
// files, byte for byte.
func TestNATSAuthMatchesDeploy(t *testing.T) {
	for _, f := range []string{"auth.conf", "permissions.conf"} {
		a, err := os.ReadFile(filepath.Join("../../nats", f))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(chartDir, "files/nats", f))
		if err != nil {
			t.Fatal(err)
		}
		if string(a) != string(b) {
			t.Errorf("deploy/kubernetes/medgym/files/nats/%s differs from deploy/nats/%s: cp deploy/nats/%s deploy/kubernetes/medgym/files/nats/", f, f, f)
		}
	}
}

// TestLibraryInit runs the init containers' script (files/library-init.sh,
// as rendered into the pods) on a real library tree: the right hash copies
// the tree, a wrong one and a tree whose files changed are refused.
func TestLibraryInit(t *testing.T) {
	src := t.TempDir()
	tree := filepath.Join(src, "library", "agent")
	must(t, os.MkdirAll(filepath.Join(tree, "mimic_iii"), 0o755))
	must(t, os.WriteFile(filepath.Join(tree, "mimic_iii", "notes.csv"), []byte("id,text\n1,a b\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(tree, "LICENSE.md"), []byte("ODbL\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(tree, "with space.txt"), []byte("x"), 0o644))
	// The manifest as tasks.WriteManifests writes it (its hash: the sha256
	// of "<file sha256>  <path>\n" lines in path order).
	hash := treeHash(t, tree)
	must(t, os.WriteFile(filepath.Join(tree, "AGENT_TREE.json"), []byte("{\n \"tree\": \"agent\",\n \"hash\": \""+hash+"\",\n \"files\": {}\n}\n"), 0o644))

	ms := render(t)
	d := Deployment(ms, "sandbox-worker")
	init := d.Spec.Template.Spec.InitContainers[0]
	script := init.Args[0]
	run := func(want, only string) (string, error) {
		dst := t.TempDir()
		// The pod's paths, moved under the test's directories.
		s := strings.NewReplacer("/library/", src+"/library/", "/mnt/library", dst).Replace(script)
		cmd := exec.Command("/bin/sh", "-ec", s)
		cmd.Env = append(os.Environ(), "TREE=agent", "WANT_HASH="+want, "ONLY="+only)
		out, err := cmd.CombinedOutput()
		if err == nil {
			if _, serr := os.Stat(filepath.Join(dst, "agent", "AGENT_TREE.json")); serr != nil {
				return string(out), serr
			}
		}
		return string(out), err
	}
	if out, err := run(hash, ""); err != nil {
		t.Fatalf("the right hash: %v\n%s", err, out)
	}
	if out, err := run("sha256:"+strings.Repeat("0", 64), ""); err == nil || !strings.Contains(out, "the release wants") {
		t.Errorf("a wrong hash was accepted: %v\n%s", err, out)
	}
	must(t, os.WriteFile(filepath.Join(tree, "LICENSE.md"), []byte("changed\n"), 0o644))
	if out, err := run(hash, ""); err == nil || !strings.Contains(out, "files hash to") {
		t.Errorf("a changed tree was accepted: %v\n%s", err, out)
	}
	if lib := os.Getenv("MEDGYM_LIBRARY"); lib != "" {
		// The generated library's own manifest, as the init container reads it.
		b, err := os.ReadFile(filepath.Join(lib, "agent", "AGENT_TREE.json"))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.NewReplacer("/library/", lib+"/", "/mnt/library", t.TempDir()).Replace(script)
		want := treeHash(t, filepath.Join(lib, "agent"))
		if !strings.Contains(string(b), want) {
			t.Fatalf("%s/agent's manifest does not record %s", lib, want)
		}
		cmd := exec.Command("/bin/sh", "-ec", s)
		cmd.Env = append(os.Environ(), "TREE=agent", "WANT_HASH="+want, "ONLY=AGENT_TREE.json")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("the generated agent tree: %v\n%s", err, out)
		}
	}
}
