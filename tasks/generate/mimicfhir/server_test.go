package mimicfhir

import (
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/medgym/medgym/tasks"
)

// TestFHIRServerAgreesWithTheTables starts the real FHIR server (HAPI
// FHIR, deploy/fhir-server) with scripts/fhir-server.sh, loaded with this
// conversion, and checks that the FHIR searches the scenario's task types
// need answer what the source tables say, for every demo patient:
// lookup by synthetic name and birth date, the latest magnesium before a
// time, the magnesium results in the 24 hours before it, and the glucose
// values in a window. The truths are computed from labevents.csv.gz here,
// not from the converter's output.
func TestFHIRServerAgreesWithTheTables(t *testing.T) {
	if testing.Short() {
		t.Skip("builds (once per source digest) and starts the Java FHIR server")
	}
	for _, tool := range []string{"java", "mvn", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH: the FHIR server is built with Maven and runs on a JDK (CI installs both)", tool)
		}
	}
	c := convertDemo(t)
	base := startServer(t, c.dir)
	labs := readLabs(t, filepath.Join(demoSource(t).Demo, "hosp", "labevents.csv.gz"))

	t.Run("patient by name and birth date", func(t *testing.T) {
		n := 0
		for subj, d := range c.stats.Demographics {
			q := url.Values{"given": {d.Given}, "family": {d.Family}, "birthdate": {d.BirthDate}}
			b := search(t, base, "Patient", q)
			if len(b.Entry) != 1 {
				t.Fatalf("Patient?%s: %d patients, want 1 (subject %s)", q.Encode(), len(b.Entry), subj)
			}
			if got := identifierValue(b.Entry[0].Resource, IdentifierPatient); got != subj {
				t.Errorf("Patient?%s: subject_id %s, want %s", q.Encode(), got, subj)
			}
			bd, _ := time.Parse(time.DateOnly, d.BirthDate)
			q.Set("birthdate", bd.AddDate(0, 0, 1).Format(time.DateOnly))
			if b := search(t, base, "Patient", q); len(b.Entry) != 0 {
				t.Errorf("Patient?%s (a day off): %d patients, want 0", q.Encode(), len(b.Entry))
			}
			n++
		}
		if n != 100 {
			t.Errorf("%d patients checked, want the demo's 100", n)
		}
	})

	t.Run("latest magnesium before a time, and the last 24 hours", func(t *testing.T) {
		checked := 0
		for _, subj := range sortedKeys(labs) {
			mg := labs[subj]["50960"]
			if len(mg) == 0 {
				continue
			}
			// Cut-offs: at the median result's time (le includes it), a minute
			// after it, and a minute before the first result (none).
			mid := mg[len(mg)/2].at
			cuts := []time.Time{mid, mid.Add(time.Minute), mg[0].at.Add(-time.Minute)}
			for _, cut := range cuts {
				var latest []lab // the results at the latest time <= cut
				var window []float64
				for _, l := range mg {
					if l.at.After(cut) {
						continue
					}
					if len(latest) == 0 || l.at.After(latest[0].at) {
						latest = []lab{l}
					} else if l.at.Equal(latest[0].at) {
						latest = append(latest, l)
					}
					if !l.at.Before(cut.Add(-24*time.Hour)) && l.hasValue {
						window = append(window, l.value)
					}
				}
				q := url.Values{"patient": {PatientID(subj)}, "code": {SystemLOINC + "|19123-9"},
					"date": {"le" + fhirInstant(cut)}, "_sort": {"-date"}, "_count": {"1"}}
				b := search(t, base, "Observation", q)
				if b.Total != countBefore(mg, cut) {
					t.Errorf("subject %s Observation?%s: total %d, want %d", subj, q.Encode(), b.Total, countBefore(mg, cut))
				}
				if len(latest) == 0 {
					if len(b.Entry) != 0 {
						t.Errorf("subject %s: a magnesium before %s, want none", subj, cut)
					}
					continue
				}
				if len(b.Entry) != 1 {
					t.Fatalf("subject %s Observation?%s: %d entries, want 1", subj, q.Encode(), len(b.Entry))
				}
				o := b.Entry[0].Resource
				if at := parseFHIRTime(t, o.EffectiveDateTime); !at.Equal(latest[0].at) {
					t.Errorf("subject %s: latest magnesium before %s at %s, want %s", subj, cut, at, latest[0].at)
				}
				if !slices.ContainsFunc(latest, func(l lab) bool { return o.ValueQuantity != nil && l.value == o.ValueQuantity.Value }) {
					t.Errorf("subject %s: latest magnesium %+v, want one of %+v", subj, o.ValueQuantity, latest)
				}
				q = url.Values{"patient": {PatientID(subj)}, "code": {SystemLabItems + "|50960"},
					"date": {"ge" + fhirInstant(cut.Add(-24*time.Hour)), "le" + fhirInstant(cut)}, "_count": {"1000"}}
				if got := values(search(t, base, "Observation", q)); !sameValues(got, window) {
					t.Errorf("subject %s Observation?%s: values %v, want %v", subj, q.Encode(), got, window)
				}
				checked++
			}
		}
		t.Logf("%d magnesium cut-offs checked", checked)
		if checked < 50 {
			t.Errorf("only %d magnesium cut-offs checked", checked)
		}
	})

	t.Run("glucose values in a window", func(t *testing.T) {
		checked := 0
		for _, subj := range sortedKeys(labs) {
			glu := labs[subj]["50931"]
			if len(glu) == 0 {
				continue
			}
			mid := glu[len(glu)/2].at
			from, to := mid.Add(-72*time.Hour), mid.Add(72*time.Hour)
			var want []float64
			for _, l := range glu {
				if !l.at.Before(from) && !l.at.After(to) && l.hasValue {
					want = append(want, l.value)
				}
			}
			q := url.Values{"subject": {"Patient/" + PatientID(subj)}, "code": {SystemLOINC + "|2345-7"},
				"date": {"ge" + fhirInstant(from), "le" + fhirInstant(to)}, "_count": {"1000"}}
			if got := values(search(t, base, "Observation", q)); !sameValues(got, want) {
				t.Errorf("subject %s Observation?%s: values %v, want %v", subj, q.Encode(), got, want)
			}
			checked++
		}
		t.Logf("%d glucose windows checked", checked)
		if checked < 50 {
			t.Errorf("only %d glucose windows checked", checked)
		}
	})

	t.Run("generated read tasks: the FHIR answer is the truth", func(t *testing.T) {
		ts, err := GenerateTasks(t.Context(), demoSource(t).Demo)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			now := parseFHIRTime(t, tk.Now)
			var got any
			switch tk.Type {
			case TaskPatientLookup:
				b := search(t, base, "Patient", url.Values{"given": {tk.Params["given"]}, "family": {tk.Params["family"]}, "birthdate": {tk.Params["birthdate"]}})
				switch len(b.Entry) {
				case 0:
					got = NotFound
				case 1:
					got = identifierValue(b.Entry[0].Resource, IdentifierPatient)
				default:
					t.Fatalf("%s: %d patients", tk.ID, len(b.Entry))
				}
			case TaskAge:
				b := search(t, base, "Patient", url.Values{"identifier": {IdentifierPatient + "|" + tk.MRN}})
				if len(b.Entry) != 1 {
					t.Fatalf("%s: %d patients with MRN %s", tk.ID, len(b.Entry), tk.MRN)
				}
				got = ageAt(b.Entry[0].Resource.BirthDate, now)
			case TaskLatestMg24h, TaskAvgGlucose24h, TaskLatestGlucose:
				code, dates := SystemLOINC+"|2345-7", []string{"ge" + fhirInstant(now.Add(-24*time.Hour)), "le" + fhirInstant(now)}
				switch tk.Type {
				case TaskLatestMg24h:
					code = SystemLOINC + "|19123-9"
				case TaskLatestGlucose:
					dates = dates[1:]
				}
				b := search(t, base, "Observation", url.Values{"patient": {PatientID(tk.MRN)}, "code": {code},
					"date": dates, "_count": {"1000"}})
				var latest time.Time
				latestV, sum, n := -1.0, 0.0, 0
				for _, e := range b.Entry {
					q := e.Resource.ValueQuantity
					if q == nil || q.Comparator != "" {
						continue
					}
					sum += q.Value
					n++
					if at := parseFHIRTime(t, e.Resource.EffectiveDateTime); n == 1 || at.After(latest) {
						latest, latestV = at, q.Value
					}
				}
				if tk.Type != TaskAvgGlucose24h {
					got = latestV
				} else if got = -1.0; n > 0 {
					got = sum / float64(n)
				}
			}
			if !sameAnswer(got, tk.Answer) {
				t.Errorf("%s (%s): the FHIR server answers %v, the tables %v", tk.ID, tk.Now, got, tk.Answer)
			}
		}
		t.Logf("%d generated tasks checked: %v", len(ts), TaskCounts(ts))
	})

	t.Run("a created resource is read back and found", func(t *testing.T) {
		pid := PatientID("10014729")
		body := `{"resourceType":"Observation","status":"final",` +
			`"category":[{"coding":[{"system":"http://terminology.hl7.org/CodeSystem/observation-category","code":"vital-signs"}]}],` +
			`"code":{"coding":[{"system":"http://loinc.org","code":"85354-9"}],"text":"Blood pressure"},` +
			`"subject":{"reference":"Patient/` + pid + `"},"effectiveDateTime":"2130-01-01T10:00:00+00:00",` +
			`"valueString":"118/77 mmHg"}`
		resp, err := http.Post(base+"/Observation", "application/fhir+json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusCreated || !strings.Contains(loc, "/Observation/") {
			t.Fatalf("POST Observation: status %d, Location %q; want 201 and the new resource's URL", resp.StatusCode, loc)
		}
		id := strings.Split(loc[strings.Index(loc, "/Observation/")+len("/Observation/"):], "/")[0]
		got, err := http.Get(base + "/Observation/" + id)
		if err != nil {
			t.Fatal(err)
		}
		got.Body.Close()
		if got.StatusCode != http.StatusOK {
			t.Errorf("GET Observation/%s: status %d", id, got.StatusCode)
		}
		q := url.Values{"patient": {pid}, "code": {"http://loinc.org|85354-9"}}
		if b := search(t, base, "Observation", q); len(b.Entry) != 1 || b.Entry[0].Resource.EffectiveDateTime != "2130-01-01T10:00:00+00:00" {
			t.Errorf("Observation?%s: %+v, want the created one", q.Encode(), b.Entry)
		}
		missing, err := http.Get(base + "/Observation/no-such-id")
		if err != nil {
			t.Fatal(err)
		}
		missing.Body.Close()
		if missing.StatusCode != http.StatusNotFound {
			t.Errorf("GET Observation/no-such-id: status %d, want 404", missing.StatusCode)
		}
	})

	t.Run("a line with an unknown element stops the load, naming it", func(t *testing.T) {
		dir := t.TempDir()
		good, err := os.ReadFile(filepath.Join(c.dir, NDJSONFile("Patient")))
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(good), "\n")
		bad := first + "\n" + `{"resourceType":"Patient","id":"x","nmae":[{"family":"Typo"}]}` + "\n"
		for name, body := range map[string]string{NDJSONFile("Patient"): bad, ManifestFile: "{}\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(filepath.Join(tasks.RepoRoot(), "scripts", "fhir-server.sh"), "start")
		tmp := t.TempDir() // the script keeps a failed server's log there
		cmd.Env = append(os.Environ(), "MEDGYM_FHIR_DATA="+dir, "MEDGYM_FHIR_STATE="+filepath.Join(tmp, "fhir.env"), "MEDGYM_FHIR_PORT=", "TMPDIR="+tmp)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("the server started on a malformed line:\n%s", out)
		}
		if !strings.Contains(string(out), "Patient.ndjson line 2") {
			t.Errorf("the script's output does not name the line:\n%s", out)
		}
	})

	t.Run("unknown parameters are refused", func(t *testing.T) {
		resp, err := http.Get(base + "/Observation?" + url.Values{"no-such-param": {"1"}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("an unknown search parameter: status %d, want 400", resp.StatusCode)
		}
	})
}

// startServer builds and starts the FHIR server on dir with the project's
// script, and stops it when the test ends. It returns the base URL.
func startServer(t *testing.T, dir string) string {
	t.Helper()
	script := filepath.Join(tasks.RepoRoot(), "scripts", "fhir-server.sh")
	state := filepath.Join(t.TempDir(), "fhir.env")
	env := append(os.Environ(), "MEDGYM_FHIR_DATA="+dir, "MEDGYM_FHIR_STATE="+state, "MEDGYM_FHIR_PORT=")
	run := func(arg string) (string, error) {
		cmd := exec.Command(script, arg)
		cmd.Env = env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		t.Logf("fhir-server.sh %s: %s", arg, strings.TrimSpace(stderr.String()))
		if err != nil {
			return "", fmt.Errorf("fhir-server.sh %s: %w", arg, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	start := time.Now()
	base, err := run("start")
	t.Cleanup(func() {
		if _, err := run("stop"); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FHIR server at %s after %s (build, if needed, and load)", base, time.Since(start).Round(time.Millisecond))
	return base
}

// lab is one labevents row of one item.
type lab struct {
	at       time.Time
	value    float64
	hasValue bool
}

// readLabs reads labevents: subject → itemid → rows in time order.
func readLabs(t *testing.T, path string) map[string]map[string][]lab {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	r := csv.NewReader(zr)
	header, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	out := map[string]map[string][]lab{}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		item := rec[col["itemid"]]
		if item != "50960" && item != "50931" {
			continue
		}
		at, err := time.Parse(time.DateTime, rec[col["charttime"]])
		if err != nil {
			t.Fatal(err)
		}
		l := lab{at: at}
		if v, err := strconv.ParseFloat(rec[col["valuenum"]], 64); err == nil {
			l.value, l.hasValue = v, true
		}
		subj := rec[col["subject_id"]]
		if out[subj] == nil {
			out[subj] = map[string][]lab{}
		}
		out[subj][item] = append(out[subj][item], l)
	}
	for _, items := range out {
		for _, ls := range items {
			sort.SliceStable(ls, func(i, j int) bool { return ls[i].at.Before(ls[j].at) })
		}
	}
	return out
}

func countBefore(ls []lab, cut time.Time) int {
	n := 0
	for _, l := range ls {
		if !l.at.After(cut) {
			n++
		}
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// fhirInstant writes t as a FHIR dateTime with seconds and a UTC offset.
func fhirInstant(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05") + "Z" }

func parseFHIRTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("effectiveDateTime %q: %v", s, err)
	}
	return at
}

// bundle is the part of a search Bundle the test reads.
type bundle struct {
	Total int `json:"total"`
	Entry []struct {
		Resource resource `json:"resource"`
	} `json:"entry"`
	Link []struct {
		Relation string `json:"relation"`
		URL      string `json:"url"`
	} `json:"link"`
}

type resource struct {
	ResourceType string `json:"resourceType"`
	Identifier   []struct {
		System string `json:"system"`
		Value  string `json:"value"`
	} `json:"identifier"`
	BirthDate         string `json:"birthDate"`
	EffectiveDateTime string `json:"effectiveDateTime"`
	ValueQuantity     *struct {
		Value      float64 `json:"value"`
		Comparator string  `json:"comparator"`
	} `json:"valueQuantity"`
}

func identifierValue(r resource, system string) string {
	for _, i := range r.Identifier {
		if i.System == system {
			return i.Value
		}
	}
	return ""
}

// search runs a FHIR search and follows the Bundle's next links.
func search(t *testing.T, base, typ string, q url.Values) bundle {
	t.Helper()
	var all bundle
	next := base + "/" + typ + "?" + q.Encode()
	for page := 0; next != ""; page++ {
		if page == 100 {
			t.Fatalf("%s: more than 100 pages", next)
		}
		resp, err := http.Get(next)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s: %s", next, resp.Status, body)
		}
		var b bundle
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatalf("GET %s: %v", next, err)
		}
		if page == 0 {
			all.Total = b.Total
		}
		all.Entry = append(all.Entry, b.Entry...)
		next = ""
		for _, l := range b.Link {
			if l.Relation == "next" && q.Get("_count") != "1" {
				next = l.URL
			}
		}
	}
	return all
}

// values are the Observations' numeric values (none for one without).
func values(b bundle) []float64 {
	var v []float64
	for _, e := range b.Entry {
		if e.Resource.ValueQuantity != nil {
			v = append(v, e.Resource.ValueQuantity.Value)
		}
	}
	return v
}

// sameAnswer compares answers; means to a relative 1e-9 (summation order).
func sameAnswer(got, want any) bool {
	g, ok1 := got.(float64)
	w, ok2 := want.(float64)
	if ok1 && ok2 {
		return math.Abs(g-w) <= 1e-9*math.Max(1, math.Abs(w))
	}
	return got == want
}

func sameValues(a, b []float64) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
