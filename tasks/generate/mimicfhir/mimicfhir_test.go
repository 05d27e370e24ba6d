package mimicfhir

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/medgym/medgym/tasks"
	"github.com/medgym/medgym/tasks/meds"
)

// The ids MIMIC-IV on FHIR published for subject 10000032 and its
// admission 22595853 (both in the demo): the UUID v5 scheme must give the
// same.
func TestResourceIDsMatchMIMICOnFHIR(t *testing.T) {
	if got, want := PatientID("10000032"), "0a8eebfd-a352-522e-89f0-1d4a13abdebc"; got != want {
		t.Errorf("PatientID(10000032) = %s, want %s", got, want)
	}
	if got, want := EncounterID("22595853"), "9c4ef2ae-dd61-5efe-885d-2a2f0816646f"; got != want {
		t.Errorf("EncounterID(22595853) = %s, want %s", got, want)
	}
}

// converted is one conversion of the demo, shared by the tests. The
// NDJSON is streamed, not held: ids and references are checked on the way,
// and only the Patients, the Encounters and the resources the field-by-field
// test reads are kept decoded.
type converted struct {
	dir   string
	stats Stats
	err   error
	// count is the number of lines per type.
	count map[string]int
	// byType maps type → id → the resource as decoded JSON, for the kept ones.
	byType map[string]map[string]map[string]any
	// patients are the Patient ids in file order.
	patients []string
	// badRefs are references that resolve to no resource of the output.
	badRefs []string
}

var (
	convOnce sync.Once
	conv     converted
)

// keptIDs are the resources kept decoded beside every Patient and Encounter.
var keptIDs = map[string]bool{
	ResourceID(nsObservationLabs, "172062"): true, ResourceID(nsObservationLabs, "172086"): true,
	ResourceID(nsObservationLabs, "150770"): true, ResourceID(nsCondition, "22580999-3-4139"): true,
	ResourceID(nsProcedure, "27505812-3-3961"): true, ResourceID(nsMedicationRequest, "27168639"): true,
}

// demoSource is the demo under the data root, or a skip.
func demoSource(t *testing.T) Source {
	t.Helper()
	root := tasks.DataRoot()
	src := Source{Demo: filepath.Join(root, "mimic-iv-demo"),
		MEDS: filepath.Join(root, "mimic-iv-demo", "fallback_meds", "mimic_iv_demo_meds_events.parquet"), Reader: meds.Read}
	for _, p := range []string{filepath.Join(src.Demo, "hosp", "labevents.csv.gz"), src.MEDS} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("the MIMIC-IV demo is not under %s (set MEDGYM_DATA): %v", root, err)
		}
	}
	return src
}

// convertDemo converts the demo once into a temporary folder and streams
// the output through the checks above.
func convertDemo(t *testing.T) *converted {
	t.Helper()
	src := demoSource(t)
	convOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mimicfhir-")
		if err != nil {
			conv.err = err
			return
		}
		conv.dir = dir
		start := time.Now()
		conv.stats, conv.err = Write(t.Context(), src, dir)
		if conv.err != nil {
			return
		}
		t.Logf("converted in %s: %v", time.Since(start).Round(time.Millisecond), conv.stats.Counts)
		conv.err = conv.scan()
	})
	if conv.err != nil {
		t.Fatalf("convert: %v", conv.err)
	}
	return &conv
}

// scan reads the output type by type (referenced types come first).
func (c *converted) scan() error {
	c.count, c.byType = map[string]int{}, map[string]map[string]map[string]any{}
	ids := map[string]map[string]bool{}
	for _, typ := range ResourceTypes {
		c.byType[typ], ids[typ] = map[string]map[string]any{}, map[string]bool{}
		f, err := os.Open(filepath.Join(c.dir, NDJSONFile(typ)))
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var r struct {
				ID        string `json:"id"`
				Subject   struct{ Reference string }
				Encounter struct{ Reference string }
			}
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				f.Close()
				return err
			}
			if ids[typ][r.ID] {
				f.Close()
				return &dupError{typ, r.ID}
			}
			ids[typ][r.ID] = true
			c.count[typ]++
			for _, ref := range []string{r.Subject.Reference, r.Encounter.Reference} {
				rt, rid, _ := strings.Cut(ref, "/")
				if ref != "" && !ids[rt][rid] {
					c.badRefs = append(c.badRefs, typ+"/"+r.ID+" → "+ref)
				}
			}
			if typ == "Patient" || typ == "Encounter" || keptIDs[r.ID] {
				var full map[string]any
				if err := json.Unmarshal(sc.Bytes(), &full); err != nil {
					f.Close()
					return err
				}
				c.byType[typ][r.ID] = full
			}
			if typ == "Patient" {
				c.patients = append(c.patients, r.ID)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return err
		}
	}
	return nil
}

type dupError struct{ typ, id string }

func (e *dupError) Error() string { return "duplicate " + e.typ + " id " + e.id }

func TestMain(m *testing.M) {
	code := m.Run()
	if conv.dir != "" {
		os.RemoveAll(conv.dir)
	}
	os.Exit(code)
}

// Row counts and SHA-256 sums of the source tables, as the demo's
// PROVENANCE.md and PhysioNet's SHA256SUMS.txt give them.
var demoTables = map[string]struct {
	rows   int
	typ    string
	sha256 string
}{
	"hosp/patients.csv.gz":       {100, "Patient", "59dcc6cd8450ddf03ad32cc7d76e41caa4c9633541715987f590c74835cf6fae"},
	"hosp/admissions.csv.gz":     {275, "Encounter", "910b9f160ffdf1e08ea673585393f347c773ccc87d66875c627584a903ae8493"},
	"hosp/diagnoses_icd.csv.gz":  {4506, "Condition", "958565670c0b3903c0c12825366dc2bae8561d2d55f16feac0c949dd630ed3e4"},
	"hosp/procedures_icd.csv.gz": {722, "Procedure", "68f21dcba9ae0c4b7faa3ef38aa950a8ebeb6d167bc74416314dccdcf28674e0"},
	"hosp/prescriptions.csv.gz":  {18087, "MedicationRequest", "33c392ba5b9299b08eca0a61911ba106f0aebdba26ed31b856bb9ffd49fe3654"},
	"hosp/labevents.csv.gz":      {107727, "", "d51a4cf1ea63245abe7d544b0d50a928e9ee2ec5eb9a5ce85500aed0bd6c6dfc"},
}

func TestCountsAgreeWithTheSourceTables(t *testing.T) {
	c := convertDemo(t)
	for path, tb := range demoTables {
		if got := c.stats.Sources[path]; got != tb.sha256 {
			t.Errorf("%s: read a file with SHA-256 %s, PhysioNet lists %s", path, got, tb.sha256)
		}
		if tb.typ != "" && c.count[tb.typ] != tb.rows {
			t.Errorf("%s: %d rows, %d %s resources", path, tb.rows, c.count[tb.typ], tb.typ)
		}
	}
	// Observations: one per labevents row plus one per MEDS vital event with
	// a value, counted here independently of the converter.
	src := demoSource(t)
	vitals := 0
	err := meds.Read(t.Context(), src.MEDS, func(code string) bool {
		p := strings.Split(code, "//")
		_, ok := VitalItems[p[min(1, len(p)-1)]]
		return len(p) == 3 && p[0] == "LAB" && ok
	}, func(_ int64, _ time.Time, _ string, _ float32, ok bool) error {
		if ok {
			vitals++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if vitals == 0 {
		t.Fatal("no vital-sign event in the MEDS file")
	}
	if want := demoTables["hosp/labevents.csv.gz"].rows + vitals; c.count["Observation"] != want {
		t.Errorf("%d Observations, want %d labevents rows + %d vital events = %d", c.count["Observation"], demoTables["hosp/labevents.csv.gz"].rows, vitals, want)
	}
	for _, typ := range ResourceTypes {
		if c.stats.Counts[typ] != c.count[typ] {
			t.Errorf("stats count %d %s, file holds %d", c.stats.Counts[typ], typ, c.count[typ])
		}
	}
}

// Every reference points at a resource of the output.
func TestReferencesResolve(t *testing.T) {
	c := convertDemo(t)
	if len(c.badRefs) > 0 {
		t.Errorf("%d references resolve to nothing, e.g. %s", len(c.badRefs), c.badRefs[0])
	}
}

// get walks a decoded resource: string keys for objects, ints for arrays.
func get(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %v: not an object", path)
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				t.Fatalf("at %v: not an array of %d", path, k+1)
			}
			v = a[k]
		}
	}
	return v
}

func check(t *testing.T, what string, r any, want map[string]any) {
	t.Helper()
	for p, w := range want {
		var path []any
		for _, s := range strings.Split(p, ".") {
			if n, err := strconv.Atoi(s); err == nil {
				path = append(path, n)
			} else {
				path = append(path, s)
			}
		}
		if got := get(t, r, path...); got != w {
			t.Errorf("%s: %s = %v, want %v", what, p, got, w)
		}
	}
}

// A few resources, field by field, against their source rows (quoted).
func TestResourcesFieldByField(t *testing.T) {
	c := convertDemo(t)
	pat := func(s string) string { return "Patient/" + PatientID(s) }
	enc := func(s string) string { return "Encounter/" + EncounterID(s) }

	// patients: 10014729,F,21,2125,2011 - 2013,
	p := c.byType["Patient"][PatientID("10014729")]
	check(t, "patient 10014729", p, map[string]any{"identifier.0.system": IdentifierPatient, "identifier.0.value": "10014729",
		"gender": "female", "meta.profile.0": profilePatient})
	if d, _ := p["birthDate"].(string); !strings.HasPrefix(d, "2104-") || len(d) != 10 {
		t.Errorf("patient 10014729: birthDate %q, want a day of 2104 (anchor_year 2125 - anchor_age 21)", d)
	}
	if _, ok := p["deceasedDateTime"]; ok {
		t.Error("patient 10014729 has no dod but is deceased")
	}
	// patients: 10003400,F,72,2134,2011 - 2013,2137-09-02
	check(t, "patient 10003400", c.byType["Patient"][PatientID("10003400")], map[string]any{"deceasedDateTime": "2137-09-02"})

	// admissions: 10004235,24181354,2196-02-24 14:38:00,2196-03-04 14:02:00,,URGENT,P03YMR,TRANSFER FROM HOSPITAL,SKILLED NURSING FACILITY,...
	check(t, "encounter 24181354", c.byType["Encounter"][EncounterID("24181354")], map[string]any{
		"identifier.0.value": "24181354", "status": "finished", "class.code": "IMP", "type.0.coding.0.code": "URGENT",
		"subject.reference": pat("10004235"), "period.start": "2196-02-24T14:38:00+00:00", "period.end": "2196-03-04T14:02:00+00:00",
		"hospitalization.admitSource.coding.0.code": "TRANSFER FROM HOSPITAL", "hospitalization.dischargeDisposition.coding.0.code": "SKILLED NURSING FACILITY"})

	// labevents: 172062,10014354,29600294,1808066,51279,,2148-08-16 00:00:00,2148-08-16 01:30:00,3.35,3.35,m/uL,4.6,6.1,abnormal,ROUTINE,
	check(t, "labevent 172062", c.byType["Observation"][ResourceID(nsObservationLabs, "172062")], map[string]any{
		"identifier.0.value": "172062", "status": "final", "category.0.coding.0.code": "laboratory",
		"code.coding.0.system": SystemLabItems, "code.coding.0.code": "51279", "code.coding.0.display": "Red Blood Cells",
		"subject.reference": pat("10014354"), "encounter.reference": enc("29600294"),
		"effectiveDateTime": "2148-08-16T00:00:00+00:00", "issued": "2148-08-16T01:30:00+00:00",
		"valueQuantity.value": 3.35, "valueQuantity.unit": "m/uL", "referenceRange.0.low.value": 4.6, "referenceRange.0.high.value": 6.1,
		"interpretation.0.coding.0.code": "abnormal"})
	// labevents: 172086,10014354,29600294,43195817,50960,,2148-08-16 00:00:00,2148-08-16 01:47:00,2.0,2,mg/dL,1.6,2.6,,ROUTINE,
	mg := c.byType["Observation"][ResourceID(nsObservationLabs, "172086")]
	check(t, "labevent 172086 (magnesium)", mg, map[string]any{"code.coding.0.code": "50960", "code.coding.1.system": SystemLOINC,
		"code.coding.1.code": "19123-9", "valueQuantity.value": 2.0, "valueQuantity.unit": "mg/dL"})
	if _, ok := mg["interpretation"]; ok {
		t.Error("labevent 172086 has no flag but an interpretation")
	}
	// labevents: 150770,10012853,,77781686,51492,,2176-06-06 16:00:00,2176-06-06 16:26:00,>300,,mg/dL,,,,STAT,
	cmp := c.byType["Observation"][ResourceID(nsObservationLabs, "150770")]
	check(t, "labevent 150770 (>300)", cmp, map[string]any{"valueQuantity.value": 300.0, "valueQuantity.comparator": ">"})
	if _, ok := cmp["encounter"]; ok {
		t.Error("labevent 150770 has no hadm_id but an encounter")
	}

	// diagnoses_icd: 10035185,22580999,3,4139,9
	check(t, "diagnosis 22580999-3-4139", c.byType["Condition"][ResourceID(nsCondition, "22580999-3-4139")], map[string]any{
		"code.coding.0.system": systemDiagICD9, "code.coding.0.code": "4139", "subject.reference": pat("10035185"),
		"encounter.reference": enc("22580999"), "clinicalStatus.coding.0.code": "active"})
	// procedures_icd: 10011398,27505812,3,2146-12-15,3961,9
	check(t, "procedure 27505812-3-3961", c.byType["Procedure"][ResourceID(nsProcedure, "27505812-3-3961")], map[string]any{
		"code.coding.0.system": systemProcICD9, "code.coding.0.code": "3961", "performedDateTime": "2146-12-15",
		"subject.reference": pat("10011398"), "encounter.reference": enc("27505812"), "status": "completed"})
	// prescriptions: the first row, 10027602,28166872,27168639,,,,2201-10-30 12:00:00,,MAIN,Fentanyl Citrate,FENT2I,...
	// (pharmacy_id 27168639 is unique in the table; no stoptime)
	check(t, "prescription 27168639", c.byType["MedicationRequest"][ResourceID(nsMedicationRequest, "27168639")], map[string]any{
		"status": "unknown", "intent": "order", "medicationCodeableConcept.text": "Fentanyl Citrate",
		"medicationCodeableConcept.coding.0.code": "FENT2I", "authoredOn": "2201-10-30T12:00:00+00:00",
		"subject.reference": pat("10027602"), "encounter.reference": enc("28166872")})
}

// Synthetic names are unique, and birth dates fall in anchor_year −
// anchor_age.
func TestSyntheticDemographics(t *testing.T) {
	c := convertDemo(t)
	names := map[string]string{}
	for _, id := range c.patients {
		p := c.byType["Patient"][id]
		n := get(t, p, "name", 0, "given", 0).(string) + " " + get(t, p, "name", 0, "family").(string)
		if other, dup := names[n]; dup {
			t.Errorf("patients %s and %s are both named %s", other, id, n)
		}
		names[n] = id
	}
	rows := []patientRow{{"1", "F", 30, 2100}, {"2", "M", 91, 2150}, {"3", "F", 0, 2104}}
	d, err := syntheticDemographics(rows)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if y := strconv.Itoa(r.AnchorYear - r.AnchorAge); !strings.HasPrefix(d[r.SubjectID].BirthDate, y+"-") {
			t.Errorf("subject %s: birth date %s, want in %s", r.SubjectID, d[r.SubjectID].BirthDate, y)
		}
	}
	if d2, _ := syntheticDemographics([]patientRow{rows[2], rows[0], rows[1]}); d2["1"] != d["1"] || d2["3"] != d["3"] {
		t.Error("the demographics depend on the row order")
	}
}

// Two conversions write the same bytes.
func TestDeterministic(t *testing.T) {
	if testing.Short() {
		t.Skip("converts the demo a second time")
	}
	c := convertDemo(t)
	dir := t.TempDir()
	if _, err := Write(t.Context(), demoSource(t), dir); err != nil {
		t.Fatal(err)
	}
	a, err1 := os.ReadFile(filepath.Join(c.dir, ManifestFile))
	b, err2 := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if string(a) != string(b) {
		t.Errorf("two conversions differ:\n%s\n%s", a, b)
	}
}
