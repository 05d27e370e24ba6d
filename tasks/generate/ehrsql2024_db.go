package generate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The EHRSQL 2024 database, rebuilt from the MIMIC-IV Clinical Database
// Demo v2.2 following the authors' build (preprocess/preprocess_db_mimic_iv.py
// run by preprocess/preprocess.sh: 100 patients, time shift on, start year
// 2100, time span 0, current time 2100-12-31 23:59:00, current-patient
// ratio 0.1, no de-identification). The steps, in the authors' order:
//
//  1. Every text value is lower-cased and trimmed.
//  2. Time shift: a patient's offset moves the year of their first admission
//     to 2100, in whole 365-day years (year difference × 525,600 minutes, as
//     upstream computes it). Every time column of every table is shifted by
//     its patient's offset; a time after the current time becomes NULL, and
//     a row whose key time (admittime, intime, charttime, starttime) is NULL
//     is dropped. Event rows before 2100-01-01 are dropped.
//  3. patients.dob is anchor_year − anchor_age plus 197 days (upstream draws
//     the day with Python's random.seed(0) before each call, so the draw is
//     always randint(0, 365|366) = 197), shifted like the rest.
//  4. admissions.age is year(admittime) − anchor_year + anchor_age (before
//     the shift); a discharge location without a discharge time is NULL.
//  5. Cohort: every patient with an admission open at the current time is a
//     current patient (4 in the demo, fewer than the 10 asked for, so all are
//     kept); upstream then draws 90 of the other 94 patients with numpy's
//     generator, a draw we cannot rerun here. We keep the 90 of them that
//     EHRSQL 2024's own questions name (94 patients in all: the drawn cohort
//     is visible in the questions), so the cohort is the authors'.
//  6. Dictionaries: ICD codes become "icd<version>|<code>"; duplicate codes
//     and titles keep the first; three diagnosis titles duplicated among
//     procedures are dropped; item labels that EHRSQL 2024 assigns to another
//     table (its label map, ehrsql2024LabelTable) are dropped from d_labitems,
//     d_items and prescriptions.
//  7. Events: diagnoses are charted at their admission's (shifted) admit
//     time; procedures at their chart date, or at the discharge time when
//     the date falls outside the stay; labs need a value and a unit;
//     prescriptions need start, stop, an integer dose (stored as upstream
//     stores it, "100.0") and the drug's most frequent dose unit; input and
//     output events need an amount in ml; microbiology falls back to the
//     chart date. Surrogate row ids are renumbered from 0.
//  8. cost is synthetic, as upstream: one price per (event type, item) drawn
//     Normal(mean_type, 1) rounded to cents with mean_type ~ Poisson(10), for
//     diagnoses, labs, procedures and prescriptions, charged at the event's
//     time. Our generator is math/rand/v2 PCG with a fixed seed, not numpy's,
//     so prices differ from the authors'.
//  9. chartevents is reconstructed (ehrsql2024_chart.go): the demo's raw
//     chartevents file is not available (../shared/data/mimic-iv-demo/
//     PROVENANCE.md), so the rows of EHRSQL's nine chart items come from
//     the MEDS-format copy of the demo: item and unit from the MEDS code,
//     the value rounded from float32 to 4 decimals, and hadm_id / stay_id
//     from the subject's ICU stay nearest to the chart time (checked by
//     the data's curator against MEDS shards that keep the true ids:
//     hadm_id 6,740 of 6,740 right, stay_id 6,731). Tasks that read it say
//     so in their ground truth (Truth.Extra["reconstructed"]).

const (
	ehrsql24Now       = "2100-12-31 23:59:00"
	ehrsql24Year      = 2100
	ehrsql24Patients  = 100 // --num_patient
	ehrsql24CurRatio  = 0.1 // --cur_patient_ratio
	ehrsql24DOBOffset = 197 // days: Python's random.seed(0); randint(0, 365 or 366)
)

var (
	ehrsql24NowTime   = mustParseEHRTime(ehrsql24Now)
	ehrsql24PivotTime = time.Date(ehrsql24Year, 1, 1, 0, 0, 0, 0, time.UTC)
)

// ehrsql2024LabelTable is EHRSQL 2024's label map (label_mapper in the
// authors' build, CC-BY 4.0): a label that names items in several tables is
// kept only in the table listed here.
var ehrsql2024LabelTable = func() map[string]string {
	m := map[string]string{}
	add := func(table string, labels ...string) {
		for _, l := range labels {
			m[l] = table
		}
	}
	add("inputevents", "micafungin", "propofol", "lr", "ambisome", "ceftaroline", "epinephrine", "magnesium sulfate",
		"albumin 25%", "caspofungin", "ciprofloxacin", "atropine", "fentanyl", "dextrose 50%", "atovaquone",
		"penicillin g potassium", "diltiazem", "dilantin", "esmolol", "dopamine", "potassium phosphate", "ensure",
		"verapamil", "ceftriaxone", "ceftazidime", "d5ns", "citrate", "solution", "phenylephrine", "vasopressin",
		"doxycycline", "albumin 5%", "ribavirin", "metronidazole", "multivitamins", "tamiflu", "meropenem",
		"protamine sulfate", "d5 1/2ns", "rocuronium", "calcium chloride", "calcium gluconate", "linezolid",
		"potassium chloride", "clindamycin", "adenosine", "morphine sulfate", "chloroquine", "folic acid",
		"nafcillin", "daptomycin", "d5lr", "moxifloxacin", "mannitol", "ampicillin", "isoniazid", "fluconazole",
		"keflex", "folate", "colistin", "ranitidine", "argatroban", "dobutamine", "cisatracurium", "dextrose 5%",
		"levofloxacin", "factor viii", "aminophylline", "hydrochloric acid", "nesiritide", "hydromorphone (dilaudid)",
		"octreotide", "nicardipine", "rifampin", "amiodarone", "tigecycline", "hydralazine", "labetalol",
		"cyclosporine", "sodium bicarbonate 8.4%", "potassium acetate", "aztreonam", "cefepime", "norepinephrine",
		"milrinone", "heparin sodium", "foscarnet", "mannitol 20%", "d5 1/4ns", "acetylcysteine",
		"epoprostenol (veletri)", "pyrazinamide", "sodium acetate", "acyclovir", "oxacillin", "ketamine",
		"fosphenytoin", "sterile water", "metoprolol", "nitroglycerin", "erythromycin", "voriconazole",
		"pamidronate", "cefazolin", "azithromycin", "fondaparinux", "lepirudin", "thiamine")
	add("prescriptions", "progesterone", "heparin", "procainamide", "primidone", "potassium", "test", "phenobarbital",
		"amikacin", "quinidine", "acetaminophen", "d", "lidocaine", "vancomycin", "methotrexate", "gentamicin",
		"insulin", "digoxin", "zinc")
	add("labevents", "testosterone", "albumin", "tobramycin", "factor xiii", "oxycodone", "sodium", "lithium",
		"theophylline", "magnesium", "carbamazepine", "valproic acid", "phenytoin", "iron", "estradiol", "thrombin")
	return m
}()

// keepLabel reports whether label stays in table under the label map.
func keepLabel(label, table string) bool {
	t, ok := ehrsql2024LabelTable[label]
	return !ok || t == table
}

// ehr24Build is the state of one EHRSQL 2024 database build.
type ehr24Build struct {
	*ehrBuild
	src      string
	offset   map[string]time.Duration // subject → time shift
	anchor   map[string][2]int        // subject → anchor_year, anchor_age
	admit    map[string]string        // hadm → original admittime
	disch    map[string]string        // hadm → original dischtime ("" = none)
	hadms    map[string]bool          // kept admissions
	cohort   map[string]bool          // kept patients
	current  []string                 // current patients (open admission at now)
	stays    map[string][]ehr24Stay   // subject → ICU stays (demo times)
	labItems map[string]bool
	items    map[string]bool
	diagDict map[string]bool
	procDict map[string]bool
}

// buildEHRSQL2024 builds the 17 tables from the demo CSVs under src.
// named is the set of patients EHRSQL 2024's questions name (step 5).
func buildEHRSQL2024(ctx context.Context, src, meds string, ddl *ehrDDL, named map[string]bool, rng *rand.Rand) (*ehr24Build, error) {
	b := &ehr24Build{ehrBuild: newEHRBuild(ddl), src: src, offset: map[string]time.Duration{}, anchor: map[string][2]int{},
		admit: map[string]string{}, disch: map[string]string{}, hadms: map[string]bool{}, cohort: map[string]bool{},
		stays: map[string][]ehr24Stay{}}
	steps := []func(context.Context) error{
		func(ctx context.Context) error { return b.admissions(ctx, named) },
		b.dictionaries, b.diagnoses, b.procedures, b.labevents, b.prescriptions,
		func(context.Context) error { b.cost(rng); return nil },
		func(ctx context.Context) error { return b.chartevents(ctx, meds) },
		b.inputevents, b.outputevents, b.microbiology,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	for _, t := range b.ordered() {
		b.renumber(strings.ToLower(t.name))
	}
	return b, nil
}

func (b *ehr24Build) path(name string) string { return filepath.Join(b.src, name+".csv.gz") }

// shift moves a demo timestamp (or date) of subject by its offset; nil when
// empty, when the subject has no offset, or when after the current time.
func (b *ehr24Build) shift(subject, s string) any {
	t, ok := parseEHR24Time(s)
	if !ok {
		return nil
	}
	off, ok := b.offset[subject]
	if !ok {
		return nil
	}
	t = t.Add(off)
	if t.After(ehrsql24NowTime) {
		return nil
	}
	return t.Format(ehrTimeLayout)
}

// parseEHR24Time parses "2006-01-02 15:04:05" or a bare date.
func parseEHR24Time(s string) (time.Time, bool) {
	if t, ok := parseEHRTime(s); ok {
		return t, true
	}
	t, err := time.Parse("2006-01-02", strings.TrimSpace(s))
	return t, err == nil
}

// keepEvent reports whether a shifted key time is set and not before 2100.
func keepEvent(shifted any) bool {
	s, ok := shifted.(string)
	if !ok {
		return false
	}
	t, _ := parseEHRTime(s)
	return !t.Before(ehrsql24PivotTime)
}

func (b *ehr24Build) admissions(ctx context.Context, named map[string]bool) error {
	var pats, adms, icus, trs []map[string]string
	read := func(name string, cols []string, into *[]map[string]string) error {
		return csvRows(ctx, b.path(name), func(get func(string) string) error {
			r := make(map[string]string, len(cols))
			for _, c := range cols {
				r[c] = get(c)
			}
			*into = append(*into, r)
			return nil
		})
	}
	if err := read("hosp/patients", []string{"subject_id", "gender", "anchor_age", "anchor_year", "dod"}, &pats); err != nil {
		return err
	}
	if err := read("hosp/admissions", []string{"subject_id", "hadm_id", "admittime", "dischtime", "admission_type",
		"admission_location", "discharge_location", "insurance", "language", "marital_status"}, &adms); err != nil {
		return err
	}
	if err := read("icu/icustays", []string{"subject_id", "hadm_id", "stay_id", "first_careunit", "last_careunit", "intime", "outtime"}, &icus); err != nil {
		return err
	}
	if err := read("hosp/transfers", []string{"subject_id", "hadm_id", "transfer_id", "eventtype", "careunit", "intime", "outtime"}, &trs); err != nil {
		return err
	}
	for _, p := range pats {
		y, err1 := strconv.Atoi(p["anchor_year"])
		a, err2 := strconv.Atoi(p["anchor_age"])
		if err1 != nil || err2 != nil {
			return fmt.Errorf("patient %s: bad anchor year/age %q/%q", p["subject_id"], p["anchor_year"], p["anchor_age"])
		}
		b.anchor[p["subject_id"]] = [2]int{y, a}
	}
	first := map[string]string{}
	for _, a := range adms {
		b.admit[a["hadm_id"]], b.disch[a["hadm_id"]] = a["admittime"], a["dischtime"]
		if f, ok := first[a["subject_id"]]; !ok || a["admittime"] < f {
			first[a["subject_id"]] = a["admittime"]
		}
	}
	for s, f := range first {
		y, _ := strconv.Atoi(f[:4])
		b.offset[s] = time.Duration(ehrsql24Year-y) * 365 * 24 * time.Hour
	}
	// Admissions after the shift, and the cohort (step 5).
	type adm struct {
		vals map[string]any
		subj string
	}
	var kept []adm
	cur, noncur := map[string]bool{}, map[string]bool{}
	var curOrder, noncurOrder []string
	for _, a := range adms {
		s := a["subject_id"]
		at := b.shift(s, a["admittime"])
		if at == nil {
			continue
		}
		anc := b.anchor[s]
		y, _ := strconv.Atoi(a["admittime"][:4])
		dt := b.shift(s, a["dischtime"])
		loc := lowerText(a["discharge_location"])
		if dt == nil {
			loc = nil
		}
		kept = append(kept, adm{subj: s, vals: map[string]any{"subject_id": optInt(s), "hadm_id": optInt(a["hadm_id"]),
			"admittime": at, "dischtime": dt, "admission_type": lowerText(a["admission_type"]),
			"admission_location": lowerText(a["admission_location"]), "discharge_location": loc,
			"insurance": lowerText(a["insurance"]), "language": lowerText(a["language"]),
			"marital_status": lowerText(a["marital_status"]), "age": int64(y - anc[0] + anc[1])}})
		if dt == nil && !cur[s] {
			cur[s] = true
			curOrder = append(curOrder, s)
		}
	}
	for _, a := range kept {
		if a.vals["dischtime"] != nil && !cur[a.subj] && !noncur[a.subj] {
			noncur[a.subj] = true
			noncurOrder = append(noncurOrder, a.subj)
		}
	}
	wantCur := int(ehrsql24Patients * ehrsql24CurRatio)
	if len(curOrder) > wantCur {
		return fmt.Errorf("cohort: %d current patients, more than the %d upstream draws from (the draw cannot be rerun)", len(curOrder), wantCur)
	}
	for _, s := range curOrder {
		b.cohort[s] = true
		b.current = append(b.current, s)
	}
	wantNon := ehrsql24Patients - wantCur
	chosen := noncurOrder
	if len(noncurOrder) > wantNon {
		chosen = nil
		for _, s := range noncurOrder {
			if named[s] {
				chosen = append(chosen, s)
			}
		}
		if len(chosen) != wantNon {
			return fmt.Errorf("cohort: the questions name %d of the %d non-current patients, want %d", len(chosen), len(noncurOrder), wantNon)
		}
	}
	for _, s := range chosen {
		b.cohort[s] = true
	}
	for _, p := range pats {
		s := p["subject_id"]
		if !b.cohort[s] {
			continue
		}
		anc := b.anchor[s]
		dob := time.Date(anc[0]-anc[1], 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, ehrsql24DOBOffset)
		d := b.shift(s, dob.Format(ehrTimeLayout))
		if d == nil {
			continue
		}
		b.add("patients", map[string]any{"subject_id": optInt(s), "gender": lowerText(p["gender"]), "dob": d, "dod": b.shift(s, p["dod"])})
	}
	for _, a := range kept {
		if b.cohort[a.subj] {
			b.add("admissions", a.vals)
			b.hadms[ehrValueText(a.vals["hadm_id"])] = true
		}
	}
	for _, r := range icus {
		if in, ok := parseEHRTime(r["intime"]); ok {
			out, ok := parseEHRTime(r["outtime"])
			if !ok {
				out = in
			}
			b.stays[r["subject_id"]] = append(b.stays[r["subject_id"]], ehr24Stay{hadm: r["hadm_id"], stay: r["stay_id"], in: in, out: out})
		}
		in := b.shift(r["subject_id"], r["intime"])
		if in == nil || !b.hadms[r["hadm_id"]] {
			continue
		}
		b.add("icustays", map[string]any{"subject_id": optInt(r["subject_id"]), "hadm_id": optInt(r["hadm_id"]),
			"stay_id": optInt(r["stay_id"]), "first_careunit": lowerText(r["first_careunit"]),
			"last_careunit": lowerText(r["last_careunit"]), "intime": in, "outtime": b.shift(r["subject_id"], r["outtime"])})
	}
	for _, r := range trs {
		in := b.shift(r["subject_id"], r["intime"])
		if in == nil || !b.hadms[r["hadm_id"]] {
			continue
		}
		b.add("transfers", map[string]any{"subject_id": optInt(r["subject_id"]), "hadm_id": optInt(r["hadm_id"]),
			"transfer_id": optInt(r["transfer_id"]), "eventtype": lowerText(r["eventtype"]), "careunit": lowerText(r["careunit"]),
			"intime": in, "outtime": b.shift(r["subject_id"], r["outtime"])})
	}
	return nil
}

func (b *ehr24Build) dictionaries(ctx context.Context) error {
	icd := func(name, table string, drop map[string]bool) (map[string]bool, error) {
		codes, titles := map[string]bool{}, map[string]bool{}
		err := csvRows(ctx, b.path(name), func(get func(string) string) error {
			title, code := lowerText(get("long_title")), lowerText(get("icd_code"))
			v := strings.TrimSpace(get("icd_version"))
			if title == nil || code == nil || v == "" || drop[title.(string)] {
				return nil
			}
			c := "icd" + v + "|" + code.(string)
			if codes[c] || titles[title.(string)] {
				return nil
			}
			codes[c], titles[title.(string)] = true, true
			b.add(table, map[string]any{"icd_code": c, "long_title": title})
			return nil
		})
		return codes, err
	}
	var err error
	b.diagDict, err = icd("hosp/d_icd_diagnoses", "d_icd_diagnoses", map[string]bool{"artificial insemination": true,
		"dental examination": true, "insertion of intrauterine contraceptive device": true})
	if err != nil {
		return err
	}
	if b.procDict, err = icd("hosp/d_icd_procedures", "d_icd_procedures", nil); err != nil {
		return err
	}
	b.labItems = map[string]bool{}
	err = csvRows(ctx, b.path("hosp/d_labitems"), func(get func(string) string) error {
		label := lowerText(get("label"))
		if label == nil || !keepLabel(label.(string), "labevents") {
			return nil
		}
		b.labItems[get("itemid")] = true
		b.add("d_labitems", map[string]any{"itemid": optInt(get("itemid")), "label": label})
		return nil
	})
	if err != nil {
		return err
	}
	b.items = map[string]bool{}
	return csvRows(ctx, b.path("icu/d_items"), func(get func(string) string) error {
		label, link := lowerText(get("label")), lowerText(get("linksto"))
		switch link {
		case "inputevents", "outputevents", "chartevents":
		default:
			return nil
		}
		if label == nil || !keepLabel(label.(string), "inputevents") {
			return nil
		}
		b.items[get("itemid")] = true
		b.add("d_items", map[string]any{"itemid": optInt(get("itemid")), "label": label,
			"abbreviation": lowerText(get("abbreviation")), "linksto": link})
		return nil
	})
}

func (b *ehr24Build) diagnoses(ctx context.Context) error {
	return csvRows(ctx, b.path("hosp/diagnoses_icd"), func(get func(string) string) error {
		code := lowerText(get("icd_code"))
		if code == nil {
			return nil
		}
		c := "icd" + strings.TrimSpace(get("icd_version")) + "|" + code.(string)
		h := get("hadm_id")
		if !b.diagDict[c] || !b.hadms[h] {
			return nil
		}
		t := b.shift(get("subject_id"), b.admit[h])
		if !keepEvent(t) {
			return nil
		}
		b.add("diagnoses_icd", map[string]any{"subject_id": optInt(get("subject_id")), "hadm_id": optInt(h), "icd_code": c, "charttime": t})
		return nil
	})
}

func (b *ehr24Build) procedures(ctx context.Context) error {
	return csvRows(ctx, b.path("hosp/procedures_icd"), func(get func(string) string) error {
		code := lowerText(get("icd_code"))
		if code == nil {
			return nil
		}
		c := "icd" + strings.TrimSpace(get("icd_version")) + "|" + code.(string)
		h := get("hadm_id")
		if !b.procDict[c] || !b.hadms[h] {
			return nil
		}
		d, ok := parseEHR24Time(get("chartdate"))
		if !ok {
			return nil
		}
		ct := d.Format(ehrTimeLayout)
		// Outside [admit, discharge]: the discharge time (string order,
		// as upstream compares; no discharge time leaves it as it is
		// unless it is before the admission).
		if adm, dis := b.admit[h], b.disch[h]; ct < adm || (dis != "" && ct > dis) {
			ct = dis
		}
		t := b.shift(get("subject_id"), ct)
		if !keepEvent(t) {
			return nil
		}
		b.add("procedures_icd", map[string]any{"subject_id": optInt(get("subject_id")), "hadm_id": optInt(h), "icd_code": c, "charttime": t})
		return nil
	})
}

func (b *ehr24Build) labevents(ctx context.Context) error {
	return csvRows(ctx, b.path("hosp/labevents"), func(get func(string) string) error {
		// A blank unit (" ") is not missing to upstream's pandas: the row
		// stays, with a NULL unit after its CSV round trip.
		h, v, u := get("hadm_id"), optFloat(get("valuenum")), lowerText(get("valueuom"))
		if h == "" || v == nil || get("valueuom") == "" || !b.labItems[get("itemid")] || !b.hadms[h] {
			return nil
		}
		t := b.shift(get("subject_id"), get("charttime"))
		if !keepEvent(t) {
			return nil
		}
		b.add("labevents", map[string]any{"subject_id": optInt(get("subject_id")), "hadm_id": optInt(h),
			"itemid": optInt(get("itemid")), "charttime": t, "valuenum": v, "valueuom": u})
		return nil
	})
}

func (b *ehr24Build) prescriptions(ctx context.Context) error {
	type rx struct {
		subj, hadm, start, stop, drug, unit, route string
		dose                                       int64
	}
	var rows []rx
	units := map[string]map[string]int{}
	var unitOrder = map[string][]string{}
	err := csvRows(ctx, b.path("hosp/prescriptions"), func(get func(string) string) error {
		drug := lowerText(get("drug"))
		if drug == nil || !keepLabel(drug.(string), "prescriptions") {
			return nil
		}
		r := rx{subj: get("subject_id"), hadm: get("hadm_id"), start: get("starttime"), stop: get("stoptime"), drug: drug.(string)}
		unit, route, dose := lowerText(get("dose_unit_rx")), lowerText(get("route")), strings.TrimSpace(get("dose_val_rx"))
		if r.start == "" || r.stop == "" || unit == nil || route == nil || dose == "" {
			return nil
		}
		d := strings.ReplaceAll(strings.ToLower(dose), ",", "")
		if !isDecimalDigits(d) {
			return nil
		}
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil {
			return nil
		}
		r.dose, r.unit, r.route = n, unit.(string), route.(string)
		if units[r.drug] == nil {
			units[r.drug] = map[string]int{}
		}
		if units[r.drug][r.unit] == 0 {
			unitOrder[r.drug] = append(unitOrder[r.drug], r.unit)
		}
		units[r.drug][r.unit]++
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		return err
	}
	mode := map[string]string{} // Counter.most_common: ties go to the first seen
	for d, order := range unitOrder {
		best := ""
		for _, u := range order {
			if best == "" || units[d][u] > units[d][best] {
				best = u
			}
		}
		mode[d] = best
	}
	for _, r := range rows {
		if r.unit != mode[r.drug] || !b.hadms[r.hadm] {
			continue
		}
		st := b.shift(r.subj, r.start)
		if !keepEvent(st) {
			continue
		}
		b.add("prescriptions", map[string]any{"subject_id": optInt(r.subj), "hadm_id": optInt(r.hadm), "starttime": st,
			"stoptime": b.shift(r.subj, r.stop), "drug": r.drug, "dose_val_rx": pyFloat(float64(r.dose)),
			"dose_unit_rx": r.unit, "route": r.route})
	}
	return nil
}

// isDecimalDigits is Python's str.isnumeric for ASCII input.
func isDecimalDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// cost builds the synthetic cost table (step 8). Each event table's row
// index is its future row_id (tables are renumbered from 0 in row order).
func (b *ehr24Build) cost(rng *rand.Rand) {
	events := []struct{ table, key, time string }{
		{"diagnoses_icd", "icd_code", "charttime"}, {"labevents", "itemid", "charttime"},
		{"procedures_icd", "icd_code", "charttime"}, {"prescriptions", "drug", "starttime"},
	}
	types := make([]string, len(events))
	for i, ev := range events {
		types[i] = ev.table
	}
	pricer := newCostPricer(rng, types)
	for _, ev := range events {
		t := b.tables[ev.table]
		ci := map[string]int{}
		for i, c := range t.cols {
			ci[c] = i
		}
		keys := map[string]bool{}
		for _, r := range t.rows {
			keys[ehrValueText(r[ci[ev.key]])] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted { // prices drawn in sorted item order, as upstream
			pricer.price(ev.table, k)
		}
		for i, r := range t.rows {
			b.add("cost", map[string]any{"subject_id": r[ci["subject_id"]], "hadm_id": r[ci["hadm_id"]], "event_type": ev.table,
				"event_id": int64(i), "chargetime": r[ci[ev.time]], "cost": pricer.price(ev.table, ehrValueText(r[ci[ev.key]]))})
		}
	}
}

func (b *ehr24Build) inputevents(ctx context.Context) error {
	return csvRows(ctx, b.path("icu/inputevents"), func(get func(string) string) error {
		h, amt, uom := get("hadm_id"), optFloat(get("totalamount")), lowerText(get("totalamountuom"))
		if h == "" || get("stay_id") == "" || amt == nil || uom != "ml" || !b.items[get("itemid")] || !b.hadms[h] {
			return nil
		}
		t := b.shift(get("subject_id"), get("starttime"))
		if !keepEvent(t) {
			return nil
		}
		b.add("inputevents", map[string]any{"subject_id": optInt(get("subject_id")), "hadm_id": optInt(h),
			"stay_id": optInt(get("stay_id")), "starttime": t, "itemid": optInt(get("itemid")), "totalamount": amt, "totalamountuom": uom})
		return nil
	})
}

func (b *ehr24Build) outputevents(ctx context.Context) error {
	return csvRows(ctx, b.path("icu/outputevents"), func(get func(string) string) error {
		h, v, uom := get("hadm_id"), optFloat(get("value")), lowerText(get("valueuom"))
		if h == "" || get("stay_id") == "" || v == nil || uom != "ml" || !b.items[get("itemid")] || !b.hadms[h] {
			return nil
		}
		t := b.shift(get("subject_id"), get("charttime"))
		if !keepEvent(t) {
			return nil
		}
		b.add("outputevents", map[string]any{"subject_id": optInt(get("subject_id")), "hadm_id": optInt(h),
			"stay_id": optInt(get("stay_id")), "charttime": t, "itemid": optInt(get("itemid")), "value": v, "valueuom": uom})
		return nil
	})
}

func (b *ehr24Build) microbiology(ctx context.Context) error {
	return csvRows(ctx, b.path("hosp/microbiologyevents"), func(get func(string) string) error {
		h := get("hadm_id")
		if !b.hadms[h] {
			return nil
		}
		ct := get("charttime")
		if strings.TrimSpace(ct) == "" {
			ct = get("chartdate")
		}
		t := b.shift(get("subject_id"), ct)
		if !keepEvent(t) {
			return nil
		}
		b.add("microbiologyevents", map[string]any{"subject_id": optInt(get("subject_id")), "hadm_id": optInt(h), "charttime": t,
			"spec_type_desc": lowerText(get("spec_type_desc")), "test_name": lowerText(get("test_name")), "org_name": lowerText(get("org_name"))})
		return nil
	})
}
