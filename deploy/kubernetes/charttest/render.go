package charttest

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/yaml"
)

// KubeVersion is the cluster version the chart is rendered for: the oldest
// it supports (Chart.yaml kubeVersion), where pod user namespaces
// (hostUsers: false) and procMount: Unmasked are on by default.
const KubeVersion = "v1.33.0"

// Manifest is one rendered document: its template, its source text and the
// typed object it decoded to.
type Manifest struct {
	Template string
	Source   string
	Object   runtime.Object
}

// Render renders the chart at dir as `helm template` does (client only, no
// cluster), release "medgym" in namespace "medgym", with the values files
// given (later ones win) and the dependencies disabled
// (nats.enabled=false, minio.enabled=false): CI has neither chart.
func Render(dir string, valueFiles ...[]byte) (map[string]string, error) {
	chrt, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	vals := map[string]any{}
	for _, b := range valueFiles {
		v, err := chartutil.ReadValues(b)
		if err != nil {
			return nil, fmt.Errorf("values: %w", err)
		}
		vals = chartutil.CoalesceTables(v, vals)
	}
	for _, dep := range []string{"nats", "minio"} {
		sub, _ := vals[dep].(map[string]any)
		if sub == nil {
			sub = map[string]any{}
		}
		sub["enabled"] = false
		vals[dep] = sub
	}
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return nil, err
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.ClientOnly, inst.DryRun, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "medgym", "medgym"
	inst.KubeVersion = kv
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", dir, err)
	}
	docs := releaseutil.SplitManifests(rel.Manifest)
	// Hooks (the NATS provisioning Job) are rendered apart from the manifest.
	for i, h := range rel.Hooks {
		docs[fmt.Sprintf("hook-%d", i)] = "# Source: " + h.Path + "\n" + h.Manifest
	}
	return docs, nil
}

// Scheme knows the kinds the chart may render: the Kubernetes API groups it
// uses and KEDA's. A kind outside it is an error, not a skip.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme,
		kedav1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

var sourceRE = regexp.MustCompile(`(?m)^# Source: (.+)$`)

// Decode decodes every rendered document strictly: a field the type does not
// have, a duplicate field, or a kind the scheme does not know is an error.
func Decode(docs map[string]string) ([]Manifest, error) {
	s, err := Scheme()
	if err != nil {
		return nil, err
	}
	ser := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, s, s, kjson.SerializerOptions{Yaml: true, Strict: true})
	var out []Manifest
	var errs []error
	for _, doc := range docs {
		tmpl := "?"
		if m := sourceRE.FindStringSubmatch(doc); m != nil {
			tmpl = m[1]
		}
		// A document of comments only (a disabled template) is no object.
		if j, err := yaml.YAMLToJSON([]byte(doc)); err == nil && (bytes.Equal(j, []byte("null")) || len(bytes.TrimSpace(j)) == 0) {
			continue
		}
		obj, _, err := ser.Decode([]byte(doc), nil, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", tmpl, err))
			continue
		}
		out = append(out, Manifest{Template: tmpl, Source: doc, Object: obj})
	}
	return out, errors.Join(errs...)
}

// metricRE finds medgym's metric names in any text (PromQL, manifests).
var metricRE = regexp.MustCompile(`\bmedgym_[a-z_]+`)

// MetricNames returns the medgym series names a text mentions (a
// histogram's as queried: name_bucket, name_sum, name_count).
func MetricNames(text string) []string {
	return metricRE.FindAllString(text, -1)
}

// Series returns the series names on a Prometheus text page (the names its
// sample lines start with), with the label sets of each.
func Series(page string) map[string][]string {
	out := map[string][]string{}
	for _, line := range strings.Split(page, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		if i := strings.IndexByte(name, ' '); i >= 0 {
			name, rest = name[:i], ""
		}
		labels, _, _ := strings.Cut(rest, "}")
		out[name] = append(out[name], labels)
	}
	return out
}
