package charttest

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/medgym/medgym/schemas"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Durables are schemas' durable consumer names: the only consumers a
// ScaledObject may follow.
var Durables = []string{
	schemas.DurableDispatcherRuns, schemas.DurableDispatcherScores, schemas.DurableDispatcherDead,
	schemas.DurableLLMEpisodes, schemas.DurableLLMChecks, schemas.DurableSandboxActions,
	schemas.DurableVerifierObs, schemas.DurableVerifierResults,
	schemas.DurableEnvChecks, schemas.DurableEnvScores,
}

// NotDeployed are the durables of services the chart does not deploy (the
// environment server, services/env, runs beside a training framework): the
// NATS permissions name them and schemas holds them, but no pod of the chart
// reads them, so the live scrape cannot show them.
var NotDeployed = []string{schemas.DurableEnvChecks, schemas.DurableEnvScores}

// Services are the medgym services the chart deploys (app.kubernetes.io/name).
var Services = []string{"dispatcher", "llm-worker", "sandbox-worker", "verifier"}

// Of returns the decoded objects of type T.
func Of[T any](ms []Manifest) []T {
	var out []T
	for _, m := range ms {
		if o, ok := m.Object.(T); ok {
			out = append(out, o)
		}
	}
	return out
}

// Deployment returns the Deployment of a service, nil when there is none.
func Deployment(ms []Manifest, svc string) *appsv1.Deployment {
	for _, d := range Of[*appsv1.Deployment](ms) {
		if d.Labels["app.kubernetes.io/name"] == svc {
			return d
		}
	}
	return nil
}

func envValue(c corev1.Container, name string) (corev1.EnvVar, bool) {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return corev1.EnvVar{}, false
	}
	return c.Env[i], true
}

func argAfter(args []string, flag string) (string, bool) {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return "", false
	}
	return args[i+1], true
}

// CheckDeployments checks what every service's pod must have: /metrics and
// /healthz bound on the pod IP at the declared port, scrape annotations for
// that port, readiness and liveness on /healthz, requests and limits, the NATS
// seed URLs and replicas, the password from a Secret file, a
// PodDisruptionBudget, and no replica count when KEDA scales it.
func CheckDeployments(ms []Manifest, natsNodes, replicas int) []error {
	var errs []error
	fail := func(svc, f string, a ...any) { errs = append(errs, fmt.Errorf("%s: %s", svc, fmt.Sprintf(f, a...))) }
	scaled := map[string]bool{}
	for _, so := range Of[*kedav1alpha1.ScaledObject](ms) {
		scaled[so.Spec.ScaleTargetRef.Name] = true
	}
	pdbs := Of[*policyv1.PodDisruptionBudget](ms)
	for _, svc := range Services {
		d := Deployment(ms, svc)
		if d == nil {
			fail(svc, "no Deployment")
			continue
		}
		pod := d.Spec.Template
		if len(pod.Spec.Containers) != 1 {
			fail(svc, "%d containers, want 1", len(pod.Spec.Containers))
			continue
		}
		c := pod.Spec.Containers[0]
		pi := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" })
		if pi < 0 {
			fail(svc, "no container port named metrics")
			continue
		}
		port := c.Ports[pi].ContainerPort
		if addr, _ := argAfter(c.Args, "--metrics"); addr != fmt.Sprintf("$(POD_IP):%d", port) {
			fail(svc, "--metrics %q, want $(POD_IP):%d (the pod IP, never every interface)", addr, port)
		}
		if e, ok := envValue(c, "POD_IP"); !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "status.podIP" {
			fail(svc, "POD_IP is not status.podIP")
		}
		a := pod.Annotations
		if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != strconv.Itoa(int(port)) || a["prometheus.io/path"] != "/metrics" {
			fail(svc, "scrape annotations %v do not name /metrics on port %d", a, port)
		}
		for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "metrics" {
				fail(svc, "no %s probe on /healthz at the metrics port", name)
			}
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if c.Resources.Requests.Name(r, "").IsZero() || c.Resources.Limits.Name(r, "").IsZero() {
				fail(svc, "no %s request and limit", r)
			}
		}
		if e, _ := envValue(c, "MEDGYM_NATS"); len(strings.Split(e.Value, ",")) != natsNodes {
			fail(svc, "MEDGYM_NATS %q: want the %d nodes' seed URLs", e.Value, natsNodes)
		}
		if e, _ := envValue(c, "MEDGYM_REPLICAS"); e.Value != strconv.Itoa(replicas) {
			fail(svc, "MEDGYM_REPLICAS %q, want %d", e.Value, replicas)
		}
		if e, _ := envValue(c, "MEDGYM_NATS_USER"); e.Value != svc {
			fail(svc, "MEDGYM_NATS_USER %q, want its own user %q", e.Value, svc)
		}
		if _, ok := envValue(c, "MEDGYM_NATS_PASSWORD"); ok {
			fail(svc, "the NATS password is in the environment; it must come from a Secret file")
		}
		if !passwordFromSecret(pod.Spec, c, svc) {
			fail(svc, "MEDGYM_NATS_PASSWORD_FILE is not the key %q of a mounted Secret", svc)
		}
		if scaled[d.Name] && d.Spec.Replicas != nil {
			fail(svc, "KEDA scales it, yet the Deployment sets replicas (each upgrade would reset them)")
		}
		if !slices.ContainsFunc(pdbs, func(p *policyv1.PodDisruptionBudget) bool {
			sel := labels.SelectorFromSet(p.Spec.Selector.MatchLabels)
			return sel.Matches(labels.Set(pod.Labels))
		}) {
			fail(svc, "no PodDisruptionBudget selects its pods")
		}
	}
	return errs
}

// CheckProvisionJob checks that the chart provisions NATS as the admin
// user before (and on each upgrade, again) the services verify: a hook Job
// running `medgym nats provision` with the admin password from its Secret
// file and the services' seed URLs and replicas.
func CheckProvisionJob(ms []Manifest, natsNodes, replicas int) []error {
	var errs []error
	fail := func(f string, a ...any) { errs = append(errs, fmt.Errorf("nats-provision Job: "+f, a...)) }
	var job *batchv1.Job
	for _, j := range Of[*batchv1.Job](ms) {
		if strings.HasSuffix(j.Name, "-nats-provision") {
			job = j
		}
	}
	if job == nil {
		return []error{fmt.Errorf("no nats-provision Job: nothing creates the streams and durables the services only verify")}
	}
	if h := job.Annotations["helm.sh/hook"]; !strings.Contains(h, "post-install") || !strings.Contains(h, "post-upgrade") {
		fail("helm.sh/hook %q, want post-install and post-upgrade", h)
	}
	pod := job.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		return append(errs, fmt.Errorf("nats-provision Job: %d containers, want 1", len(pod.Containers)))
	}
	c := pod.Containers[0]
	if !slices.Equal(c.Command, []string{"medgym"}) || len(c.Args) < 2 || c.Args[0] != "nats" || c.Args[1] != "provision" {
		fail("runs %v %v, want medgym nats provision", c.Command, c.Args)
	}
	if u, _ := argAfter(c.Args, "--nats"); u != "$(MEDGYM_NATS)" {
		fail("--nats %q, want $(MEDGYM_NATS)", u)
	}
	if e, _ := envValue(c, "MEDGYM_NATS"); len(strings.Split(e.Value, ",")) != natsNodes {
		fail("MEDGYM_NATS %q: want the %d nodes' seed URLs", e.Value, natsNodes)
	}
	if e, _ := envValue(c, "MEDGYM_REPLICAS"); e.Value != strconv.Itoa(replicas) {
		fail("MEDGYM_REPLICAS %q, want %d", e.Value, replicas)
	}
	if e, _ := envValue(c, "MEDGYM_NATS_USER"); e.Value != "admin" {
		fail("MEDGYM_NATS_USER %q, want admin (the only user that may create streams and consumers)", e.Value)
	}
	if !passwordFromSecret(pod, c, "admin") {
		fail("MEDGYM_NATS_PASSWORD_FILE is not the key admin of a mounted Secret")
	}
	return errs
}

func passwordFromSecret(pod corev1.PodSpec, c corev1.Container, svc string) bool {
	e, ok := envValue(c, "MEDGYM_NATS_PASSWORD_FILE")
	if !ok {
		return false
	}
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(e.Value, m.MountPath+"/") {
			continue
		}
		file := strings.TrimPrefix(e.Value, m.MountPath+"/")
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return slices.ContainsFunc(v.Secret.Items, func(k corev1.KeyToPath) bool { return k.Key == svc && k.Path == file })
			}
		}
	}
	return false
}

// LibraryTrees returns, for a pod, the library trees its init containers
// copy in (the TREE variable of each library-* init container) and the files
// each copies (ONLY; "" for the whole tree).
func LibraryTrees(pod corev1.PodSpec) map[string]string {
	out := map[string]string{}
	for _, c := range pod.InitContainers {
		tree, _ := envValue(c, "TREE")
		only, _ := envValue(c, "ONLY")
		if tree.Value != "" {
			out[tree.Value] = only.Value
		}
	}
	return out
}

// CheckSandbox checks the sandbox-worker's pod: the agent tree only (never
// the verifier tree, the shared data or a Secret but its NATS password), no
// privileges beyond what bubblewrap needs (documented in values.yaml and the
// README), and one worker per node.
func CheckSandbox(ms []Manifest, verifierImage string) []error {
	var errs []error
	fail := func(f string, a ...any) { errs = append(errs, fmt.Errorf("sandbox-worker: "+f, a...)) }
	d := Deployment(ms, "sandbox-worker")
	if d == nil {
		return []error{fmt.Errorf("no sandbox-worker Deployment")}
	}
	pod := d.Spec.Template.Spec
	if trees := LibraryTrees(pod); len(trees) != 1 || trees["agent"] != "" {
		fail("library trees %v: want the whole agent tree and nothing else", trees)
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		if c.Image == verifierImage {
			fail("container %s runs the verifier tree's image", c.Name)
		}
		for _, m := range c.VolumeMounts {
			if strings.Contains(m.MountPath, "verifier") || strings.Contains(m.MountPath, "shared") {
				fail("container %s mounts %s", c.Name, m.MountPath)
			}
		}
	}
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil || v.HostPath != nil || v.Image != nil {
			fail("volume %s comes from outside the pod", v.Name)
		}
		if v.Secret != nil && v.Name != "nats-password" {
			fail("volume %s mounts Secret %s", v.Name, v.Secret.SecretName)
		}
	}
	if pod.HostUsers == nil || *pod.HostUsers {
		fail("hostUsers is not false: the pod needs its own user namespace for procMount Unmasked")
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		fail("shares the host's network, pid or IPC namespace")
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		fail("no securityContext")
	case sc.Privileged == nil || *sc.Privileged:
		fail("privileged is not false")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		fail("allowPrivilegeEscalation is not false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		fail("capabilities %v: want every one dropped and none added", sc.Capabilities)
	case sc.ProcMount == nil || *sc.ProcMount != corev1.UnmaskedProcMount:
		fail("procMount is not Unmasked: bwrap cannot mount the sandbox's /proc")
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault:
		fail("seccomp is the runtime default, which refuses the namespaces bwrap creates")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		fail("runAsNonRoot is not set")
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
		fail("a rollout surges a pod beyond one per node, which cannot be scheduled: maxSurge must be 0")
	}
	aff := pod.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || !slices.ContainsFunc(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
		func(t corev1.PodAffinityTerm) bool { return t.TopologyKey == "kubernetes.io/hostname" }) {
		fail("no required anti-affinity per node: two workers on a node share its cores")
	}
	return errs
}

// CheckLibrary checks which trees reach which pods (docs/adr/0008): the
// verifier tree to the dispatcher, llm-worker and verifier, the agent tree
// to the sandbox-worker and, its manifest only, to the verifier; each pod's
// annotations name the hashes it got.
func CheckLibrary(ms []Manifest) []error {
	want := map[string]map[string]string{
		"dispatcher":     {"verifier": ""},
		"llm-worker":     {"verifier": ""},
		"sandbox-worker": {"agent": ""},
		"verifier":       {"verifier": "", "agent": schemas.AgentManifestFile},
	}
	var errs []error
	for svc, trees := range want {
		d := Deployment(ms, svc)
		if d == nil {
			continue // CheckDeployments says so
		}
		got := LibraryTrees(d.Spec.Template.Spec)
		if fmt.Sprint(got) != fmt.Sprint(trees) {
			errs = append(errs, fmt.Errorf("%s: library trees %v, want %v", svc, got, trees))
		}
		for tree := range got {
			if !strings.HasPrefix(d.Spec.Template.Annotations["medgym.io/"+tree+"-tree"], "sha256:") {
				errs = append(errs, fmt.Errorf("%s: no medgym.io/%s-tree annotation with the tree's hash", svc, tree))
			}
		}
	}
	return errs
}

// CheckNetworkPolicies checks that NATS monitoring is open to the KEDA
// operator only and that sandbox-workers reach nothing but NATS and DNS.
func CheckNetworkPolicies(ms []Manifest, monitorPort int) []error {
	var errs []error
	var natsPolicy, sandboxPolicy *networkingv1.NetworkPolicy
	for _, p := range Of[*networkingv1.NetworkPolicy](ms) {
		switch {
		case p.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] == "nats":
			natsPolicy = p
		case p.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] == "sandbox-worker":
			sandboxPolicy = p
		}
	}
	if natsPolicy == nil {
		errs = append(errs, fmt.Errorf("no NetworkPolicy selects the NATS pods"))
	} else {
		for _, r := range natsPolicy.Spec.Ingress {
			if !slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.IntValue() == monitorPort }) {
				continue
			}
			if len(r.Ports) != 1 || len(r.From) != 1 || r.From[0].NamespaceSelector == nil || r.From[0].PodSelector == nil ||
				len(r.From[0].PodSelector.MatchLabels) == 0 || len(r.From[0].NamespaceSelector.MatchLabels) == 0 {
				errs = append(errs, fmt.Errorf("NATS monitoring (%d) is open to %v, not to the KEDA operator's pods alone", monitorPort, r.From))
			}
		}
		if len(natsPolicy.Spec.Ingress) == 0 {
			errs = append(errs, fmt.Errorf("the NATS NetworkPolicy has no ingress rules"))
		}
	}
	if sandboxPolicy == nil || !slices.Contains(sandboxPolicy.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		errs = append(errs, fmt.Errorf("no egress NetworkPolicy for the sandbox-workers"))
	} else {
		for _, r := range sandboxPolicy.Spec.Egress {
			for _, p := range r.Ports {
				if p.Port == nil || (p.Port.IntValue() != 4222 && p.Port.IntValue() != 53) {
					errs = append(errs, fmt.Errorf("sandbox-workers may reach port %v", p.Port))
				}
			}
			if len(r.Ports) == 0 || len(r.To) == 0 {
				errs = append(errs, fmt.Errorf("a sandbox-worker egress rule is open to any port or any peer: %+v", r))
			}
		}
	}
	return errs
}

// Lag is one KEDA trigger on a consumer's lag.
type Lag struct {
	ScaledObject, Service, Stream, Consumer string
}

// Uses are the names the chart and the dashboard use.
type Uses struct {
	Lags []Lag
	// Subjects are the JetStream API subjects of the NATS permissions the
	// chart ships (its ConfigMap's permissions.conf): the streams, buckets
	// and durable consumers each user may touch.
	Subjects []Subject
	Metrics  map[string]string // metric name → where it is used
}

// Subject is a stream or bucket (and durable, if any) a permission names.
type Subject struct {
	Where, Stream, Consumer string
	Bucket                  bool // a key-value bucket or object store (KV_, OBJ_, $KV., $O.)
}

// permRE finds the quoted $-subjects of permissions.conf; nameRE the
// stream or bucket (and a durable after it) inside one.
var (
	permRE = regexp.MustCompile(`"(\$[^"]+)"`)
	nameRE = regexp.MustCompile(`(KV_|OBJ_|\$KV\.|\$O\.)?\b(MEDGYM_[A-Z_]+)\b(?:\.([a-z][a-z-]*[a-z]))?`)
)

// PermissionSubjects reads the streams, buckets and durables the $JS, $KV
// and $O subjects of a NATS permissions file name.
func PermissionSubjects(where, conf string) []Subject {
	var out []Subject
	for _, q := range permRE.FindAllStringSubmatch(conf, -1) {
		for _, m := range nameRE.FindAllStringSubmatch(q[1], -1) {
			out = append(out, Subject{Where: where + ": " + q[1], Stream: m[2], Consumer: m[3], Bucket: m[1] != ""})
		}
	}
	return out
}

// CollectUses reads the nats-jetstream triggers of the ScaledObjects (and
// the service each scales), and the metric names the rendered manifests and
// the Grafana dashboard's queries mention.
func CollectUses(ms []Manifest, dashboard []byte) (Uses, error) {
	u := Uses{Metrics: map[string]string{}}
	for _, so := range Of[*kedav1alpha1.ScaledObject](ms) {
		var svc string
		for _, d := range Of[*appsv1.Deployment](ms) {
			if d.Name == so.Spec.ScaleTargetRef.Name && so.Spec.ScaleTargetRef.Kind == "Deployment" {
				svc = d.Labels["app.kubernetes.io/name"]
			}
		}
		if svc == "" {
			return u, fmt.Errorf("ScaledObject %s scales %s %q, which the chart does not deploy", so.Name, so.Spec.ScaleTargetRef.Kind, so.Spec.ScaleTargetRef.Name)
		}
		for _, t := range so.Spec.Triggers {
			if t.Type != "nats-jetstream" {
				return u, fmt.Errorf("ScaledObject %s: trigger %q, want nats-jetstream", so.Name, t.Type)
			}
			u.Lags = append(u.Lags, Lag{so.Name, svc, t.Metadata["stream"], t.Metadata["consumer"]})
		}
	}
	for _, m := range ms {
		for _, n := range MetricNames(m.Source) {
			u.Metrics[n] = m.Template
		}
		if cm, ok := m.Object.(*corev1.ConfigMap); ok {
			for key, conf := range cm.Data {
				u.Subjects = append(u.Subjects, PermissionSubjects("ConfigMap "+cm.Name+" "+key, conf)...)
			}
		}
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dashboard, &dash); err != nil {
		return u, fmt.Errorf("dashboard: %w", err)
	}
	for _, p := range dash.Panels {
		for _, t := range p.Targets {
			for _, n := range MetricNames(t.Expr) {
				u.Metrics[n] = "dashboard panel " + p.Title
			}
		}
	}
	return u, nil
}

// Buckets are schemas' key-value buckets and object stores.
var Buckets = append([]string{schemas.BucketRuns, schemas.BucketEpisodes, schemas.BucketCompletions, schemas.BucketEnvSessions,
	schemas.BucketStored}, schemas.BlobBuckets()...)

// CheckSchemas checks every stream, bucket and consumer the triggers and
// the NATS permissions name against schemas.
func CheckSchemas(u Uses) []error {
	var errs []error
	for _, s := range u.Subjects {
		_, stream := schemas.StreamSubjects[s.Stream]
		switch {
		case s.Bucket && !slices.Contains(Buckets, s.Stream):
			errs = append(errs, fmt.Errorf("%s: bucket %q is not one of schemas' buckets %v", s.Where, s.Stream, Buckets))
		case !s.Bucket && !stream && !slices.Contains(Buckets, s.Stream):
			errs = append(errs, fmt.Errorf("%s: %q is not one of schemas' streams or buckets", s.Where, s.Stream))
		case s.Consumer != "" && !slices.Contains(Durables, s.Consumer):
			errs = append(errs, fmt.Errorf("%s: consumer %q is not one of schemas' durables", s.Where, s.Consumer))
		}
	}
	for _, l := range u.Lags {
		if _, ok := schemas.StreamSubjects[l.Stream]; !ok {
			errs = append(errs, fmt.Errorf("%s: stream %q is not one of schemas' streams", l.ScaledObject, l.Stream))
		}
		if !slices.Contains(Durables, l.Consumer) {
			errs = append(errs, fmt.Errorf("%s: consumer %q is not one of schemas' durables %v", l.ScaledObject, l.Consumer, Durables))
		}
	}
	return errs
}

// CheckScrape checks the names against live /metrics pages of the services
// (service → page): every metric the chart or the dashboard uses is on some
// page, and each lag trigger's stream and consumer pair is a
// medgym_queue_depth series on the page of the service it scales, which is
// the consumer that service reads (so a trigger on another service's
// consumer, or a stream with the wrong consumer, fails).
func CheckScrape(u Uses, pages map[string]string) []error {
	var errs []error
	all := map[string]bool{}
	for _, page := range pages {
		for n := range Series(page) {
			all[n] = true
		}
	}
	for n, where := range u.Metrics {
		if !all[n] {
			errs = append(errs, fmt.Errorf("%s queries %s, which no service exports", where, n))
		}
	}
	// Every durable a permission names is a consumer some service reads.
	for _, s := range u.Subjects {
		if s.Consumer == "" || s.Bucket || slices.Contains(NotDeployed, s.Consumer) {
			continue
		}
		if !slices.ContainsFunc(slices.Collect(maps.Values(pages)), func(page string) bool { return hasLag(page, s.Stream, s.Consumer) }) {
			errs = append(errs, fmt.Errorf("%s: %s/%s is no consumer any service reads (no medgym_queue_depth series)", s.Where, s.Stream, s.Consumer))
		}
	}
	for _, l := range u.Lags {
		if !hasLag(pages[l.Service], l.Stream, l.Consumer) {
			errs = append(errs, fmt.Errorf("%s scales %s on %s/%s, which is not a consumer %s reads (medgym_queue_depth on its /metrics)",
				l.ScaledObject, l.Service, l.Stream, l.Consumer, l.Service))
		}
	}
	return errs
}

// hasLag reports whether a /metrics page has the medgym_queue_depth series
// of a stream's consumer.
func hasLag(page, stream, consumer string) bool {
	ws, wc := fmt.Sprintf(`stream="%s"`, stream), fmt.Sprintf(`consumer="%s"`, consumer)
	return slices.ContainsFunc(Series(page)["medgym_queue_depth"], func(s string) bool {
		return strings.Contains(s, ws) && strings.Contains(s, wc)
	})
}
