package generate

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// mimicChartItems are the CareVue chart items EHRSQL keeps in CHARTEVENTS.
var mimicChartItems = map[string]bool{"677": true, "834": true, "211": true, "618": true, "51": true,
	"8368": true, "52": true, "762": true, "920": true}

// ehrBuild collects a database's tables while it is built.
type ehrBuild struct {
	ddl    *ehrDDL
	tables map[string]*ehrTable // lower-case name → table
}

func newEHRBuild(ddl *ehrDDL) *ehrBuild {
	b := &ehrBuild{ddl: ddl, tables: map[string]*ehrTable{}}
	for _, n := range ddl.tables {
		b.tables[strings.ToLower(n)] = &ehrTable{name: n, cols: ddl.cols[strings.ToLower(n)]}
	}
	return b
}

// add appends a row given as column → value; missing columns are NULL.
func (b *ehrBuild) add(table string, vals map[string]any) {
	t := b.tables[table]
	row := make([]any, len(t.cols))
	for i, c := range t.cols {
		row[i] = vals[c]
	}
	t.rows = append(t.rows, row)
}

// renumber sets the first (surrogate id) column of every row of table to
// its index, as EHRSQL does after filtering.
func (b *ehrBuild) renumber(table string) {
	for i, r := range b.tables[table].rows {
		r[0] = int64(i)
	}
}

// ordered returns the tables in DDL order.
func (b *ehrBuild) ordered() []*ehrTable {
	out := make([]*ehrTable, 0, len(b.ddl.tables))
	for _, n := range b.ddl.tables {
		out = append(out, b.tables[strings.ToLower(n)])
	}
	return out
}

// drawTargetYear draws EHRSQL's target year: 2100…2105 with weights 1…6.
func drawTargetYear(rng *rand.Rand) int {
	x := rng.IntN(21) // 1+2+…+6
	for y := 0; y < 6; y++ {
		if x < y+1 {
			return 2100 + y
		}
		x -= y + 1
	}
	return 2105
}

// percentile95 is numpy.percentile(xs, 95) (linear interpolation).
func percentile95(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return math.Inf(1)
	}
	pos := 0.95 * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// costPricer assigns EHRSQL's synthetic prices: one price per (event type,
// item), Normal(mean_type, 1) rounded to cents, mean_type ~ Poisson(10).
type costPricer struct {
	rng    *rand.Rand
	means  map[string]float64
	prices map[string]float64
}

func newCostPricer(rng *rand.Rand, types []string) *costPricer {
	p := &costPricer{rng: rng, means: map[string]float64{}, prices: map[string]float64{}}
	for _, t := range types {
		p.means[t] = float64(poisson(rng, 10))
	}
	return p
}

func (p *costPricer) price(meanType, key string) float64 {
	k := meanType + "\x00" + key
	if v, ok := p.prices[k]; ok {
		return v
	}
	v := math.Round((p.means[meanType]+p.rng.NormFloat64())*100) / 100
	p.prices[k] = v
	return v
}

// poisson draws from Poisson(lambda) (Knuth's method; lambda is small).
func poisson(rng *rand.Rand, lambda float64) int {
	l := math.Exp(-lambda)
	k, p := 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

type mimicAdm struct {
	subject, hadm string
	admit, disch  time.Time
	hasDisch      bool
	vals          map[string]any
}

// buildMIMIC builds EHRSQL's 17 MIMIC-III tables from the demo CSVs.
// current receives the subject ids made "current" (an open admission and
// ICU stay at ehrNow).
func buildMIMIC(ctx context.Context, src string, ddl *ehrDDL, rng *rand.Rand) (*ehrBuild, []string, error) {
	b := newEHRBuild(ddl)
	path := func(n string) string { return filepath.Join(src, n+".csv.gz") }

	type patient struct {
		vals     map[string]any
		dob, dod time.Time
		hasDOD   bool
	}
	patients := map[string]*patient{}
	var patientOrder []string
	err := csvRows(ctx, path("PATIENTS"), func(get func(string) string) error {
		dob, ok := parseEHRTime(get("dob"))
		if !ok {
			return fmt.Errorf("bad dob %q", get("dob"))
		}
		p := &patient{dob: dob, vals: map[string]any{"subject_id": optInt(get("subject_id")), "gender": lowerText(get("gender"))}}
		p.dod, p.hasDOD = parseEHRTime(get("dod"))
		patients[get("subject_id")] = p
		patientOrder = append(patientOrder, get("subject_id"))
		return nil
	})
	if err != nil {
		return nil, nil, err
	}

	var adms []*mimicAdm
	var los []float64
	err = csvRows(ctx, path("ADMISSIONS"), func(get func(string) string) error {
		p := patients[get("subject_id")]
		admit, ok := parseEHRTime(get("admittime"))
		if p == nil || !ok {
			return nil
		}
		age := int(admit.Sub(p.dob).Hours() / 24 / 365.25)
		if age <= 10 || age >= 90 {
			return nil
		}
		a := &mimicAdm{subject: get("subject_id"), hadm: get("hadm_id"), admit: admit}
		a.disch, a.hasDisch = parseEHRTime(get("dischtime"))
		a.vals = map[string]any{"subject_id": optInt(get("subject_id")), "hadm_id": optInt(get("hadm_id")),
			"admission_type": lowerText(get("admission_type")), "admission_location": lowerText(get("admission_location")),
			"discharge_location": lowerText(get("discharge_location")), "insurance": lowerText(get("insurance")),
			"language": lowerText(get("language")), "marital_status": lowerText(get("marital_status")),
			"ethnicity": lowerText(get("ethnicity")), "age": int64(age)}
		if a.hasDisch {
			los = append(los, a.disch.Sub(a.admit).Hours()/24)
		}
		adms = append(adms, a)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	cut := percentile95(los)
	kept := adms[:0]
	for _, a := range adms {
		if a.hasDisch && a.disch.Sub(a.admit).Hours()/24 >= cut {
			continue
		}
		kept = append(kept, a)
	}
	adms = kept
	admByHadm := map[string]*mimicAdm{}
	firstAdmit := map[string]time.Time{}
	lastAdm := map[string]*mimicAdm{}
	for _, a := range adms {
		admByHadm[a.hadm] = a
		if t, ok := firstAdmit[a.subject]; !ok || a.admit.Before(t) {
			firstAdmit[a.subject] = a.admit
		}
		if l := lastAdm[a.subject]; l == nil || a.admit.After(l.admit) {
			lastAdm[a.subject] = a
		}
	}

	type icu struct {
		vals            map[string]any
		subject, hadm   string
		intime, outtime time.Time
		hasIn, hasOut   bool
	}
	var icus []*icu
	err = csvRows(ctx, path("ICUSTAYS"), func(get func(string) string) error {
		if admByHadm[get("hadm_id")] == nil {
			return nil
		}
		s := &icu{subject: get("subject_id"), hadm: get("hadm_id"), vals: map[string]any{
			"subject_id": optInt(get("subject_id")), "hadm_id": optInt(get("hadm_id")), "icustay_id": optInt(get("icustay_id")),
			"first_careunit": lowerText(get("first_careunit")), "last_careunit": lowerText(get("last_careunit")),
			"first_wardid": optInt(get("first_wardid")), "last_wardid": optInt(get("last_wardid"))}}
		s.intime, s.hasIn = parseEHRTime(get("intime"))
		s.outtime, s.hasOut = parseEHRTime(get("outtime"))
		icus = append(icus, s)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}

	// Per-patient time shift: a target year for the first admission, and
	// for ~10% of patients (with an ICU stay in their last admission) an
	// offset that puts ehrNow inside that stay.
	subjects := make([]string, 0, len(firstAdmit))
	for _, s := range patientOrder {
		if _, ok := firstAdmit[s]; ok {
			subjects = append(subjects, s)
		}
	}
	offset := map[string]time.Duration{}
	for _, s := range subjects {
		y := drawTargetYear(rng)
		offset[s] = time.Duration(y-firstAdmit[s].Year()) * 365 * 24 * time.Hour
	}
	lastICU := map[string]*icu{}
	for _, s := range icus {
		if !s.hasIn || !s.hasOut || lastAdm[s.subject] == nil || lastAdm[s.subject].hadm != s.hadm {
			continue
		}
		if l := lastICU[s.subject]; l == nil || s.intime.After(l.intime) {
			lastICU[s.subject] = s
		}
	}
	var cands []string
	for _, s := range subjects {
		if lastICU[s] != nil {
			cands = append(cands, s)
		}
	}
	rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	nCur := (len(subjects) + 5) / 10
	if nCur > len(cands) {
		nCur = len(cands)
	}
	current := append([]string(nil), cands[:nCur]...)
	sort.Strings(current)
	for _, s := range current {
		st := lastICU[s]
		u := 0.3 + 0.4*rng.Float64()
		target := st.intime.Add(time.Duration(u * float64(st.outtime.Sub(st.intime))))
		offset[s] = ehrNowTime.Sub(target).Truncate(time.Minute)
	}
	minEvent := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	// shift moves a patient's timestamp; ok is false when it is missing.
	shift := func(subject, s string) (time.Time, bool) {
		t, ok := parseEHRTime(s)
		if !ok {
			return time.Time{}, false
		}
		return t.Add(offset[subject]), true
	}
	// eventTime shifts an event's main time; ok is false when the row must
	// be dropped (missing, before 2100 or after now).
	eventTime := func(subject, s string) (string, bool) {
		t, ok := shift(subject, s)
		if !ok || t.Before(minEvent) || t.After(ehrNowTime) {
			return "", false
		}
		return t.Format(ehrTimeLayout), true
	}

	// ADMISSIONS and PATIENTS.
	admTimes := map[string][2]any{} // hadm → shifted admittime, dischtime (or nil)
	keptSubject := map[string]bool{}
	for _, a := range adms {
		at := a.admit.Add(offset[a.subject])
		if at.After(ehrNowTime) {
			continue
		}
		a.vals["admittime"] = at.Format(ehrTimeLayout)
		a.vals["dischtime"] = nil
		if a.hasDisch {
			a.vals["dischtime"] = fmtTime(a.disch.Add(offset[a.subject]))
		}
		if a.vals["dischtime"] == nil {
			a.vals["discharge_location"] = nil
		}
		b.add("admissions", a.vals)
		admTimes[a.hadm] = [2]any{a.vals["admittime"], a.vals["dischtime"]}
		keptSubject[a.subject] = true
	}
	for _, s := range patientOrder {
		if !keptSubject[s] {
			continue
		}
		p := patients[s]
		p.vals["dob"] = p.dob.Add(offset[s]).Format(ehrTimeLayout)
		if p.hasDOD {
			p.vals["dod"] = fmtTime(p.dod.Add(offset[s]))
		}
		b.add("patients", p.vals)
	}
	inCohort := func(hadm string) bool { _, ok := admTimes[hadm]; return ok }

	// ICUSTAYS, TRANSFERS.
	for _, s := range icus {
		if !inCohort(s.hadm) || !s.hasIn {
			continue
		}
		in := s.intime.Add(offset[s.subject])
		if in.After(ehrNowTime) {
			continue
		}
		s.vals["intime"] = in.Format(ehrTimeLayout)
		if s.hasOut {
			s.vals["outtime"] = fmtTime(s.outtime.Add(offset[s.subject]))
		}
		b.add("icustays", s.vals)
	}
	err = csvRows(ctx, path("TRANSFERS"), func(get func(string) string) error {
		sub := get("subject_id")
		if !inCohort(get("hadm_id")) {
			return nil
		}
		in, ok := shift(sub, get("intime"))
		if !ok || in.After(ehrNowTime) {
			return nil
		}
		v := map[string]any{"subject_id": optInt(sub), "hadm_id": optInt(get("hadm_id")), "icustay_id": optInt(get("icustay_id")),
			"eventtype": lowerText(get("eventtype")), "careunit": lowerText(get("curr_careunit")), "wardid": optInt(get("curr_wardid")),
			"intime": in.Format(ehrTimeLayout)}
		if out, ok := shift(sub, get("outtime")); ok {
			v["outtime"] = fmtTime(out)
		}
		b.add("transfers", v)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}

	// Dictionaries.
	diagCodes, procCodes, labItems, items := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	err = csvRows(ctx, path("D_ICD_DIAGNOSES"), func(get func(string) string) error {
		code := strings.ToLower(strings.TrimSpace(get("icd9_code")))
		if code == "" || diagCodes[code] {
			return nil
		}
		diagCodes[code] = true
		b.add("d_icd_diagnoses", map[string]any{"icd9_code": code, "short_title": lowerText(get("short_title")), "long_title": lowerText(get("long_title"))})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = csvRows(ctx, path("D_ICD_PROCEDURES"), func(get func(string) string) error {
		code := strings.ToLower(strings.TrimSpace(get("icd9_code")))
		if code == "" || procCodes[code] {
			return nil
		}
		procCodes[code] = true
		b.add("d_icd_procedures", map[string]any{"icd9_code": code, "short_title": lowerText(get("short_title")), "long_title": lowerText(get("long_title"))})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = csvRows(ctx, path("D_LABITEMS"), func(get func(string) string) error {
		labItems[strings.TrimSpace(get("itemid"))] = true
		b.add("d_labitems", map[string]any{"itemid": optInt(get("itemid")), "label": lowerText(get("label"))})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = csvRows(ctx, path("D_ITEMS"), func(get func(string) string) error {
		lt := strings.ToLower(strings.TrimSpace(get("linksto")))
		if (lt != "chartevents" && lt != "inputevents_cv" && lt != "outputevents") || lowerText(get("label")) == nil {
			return nil
		}
		items[strings.TrimSpace(get("itemid"))] = true
		b.add("d_items", map[string]any{"itemid": optInt(get("itemid")), "label": lowerText(get("label")), "linksto": lt})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}

	// DIAGNOSES_ICD, PROCEDURES_ICD (charttime := admission / discharge time).
	for _, spec := range []struct {
		table string
		codes map[string]bool
		time  int
	}{{"diagnoses_icd", diagCodes, 0}, {"procedures_icd", procCodes, 1}} {
		err = csvRows(ctx, path(strings.ToUpper(spec.table)), func(get func(string) string) error {
			code := strings.ToLower(strings.TrimSpace(get("icd9_code")))
			ts, ok := admTimes[get("hadm_id")]
			if !ok || !spec.codes[code] || ts[spec.time] == nil {
				return nil
			}
			b.add(spec.table, map[string]any{"subject_id": optInt(get("subject_id")), "hadm_id": optInt(get("hadm_id")),
				"icd9_code": code, "charttime": ts[spec.time]})
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}

	// LABEVENTS.
	err = csvRows(ctx, path("LABEVENTS"), func(get func(string) string) error {
		sub := get("subject_id")
		if !inCohort(get("hadm_id")) || !labItems[strings.TrimSpace(get("itemid"))] {
			return nil
		}
		num, uom := optFloat(get("valuenum")), lowerText(get("valueuom"))
		t, ok := eventTime(sub, get("charttime"))
		if num == nil || uom == nil || !ok {
			return nil
		}
		b.add("labevents", map[string]any{"subject_id": optInt(sub), "hadm_id": optInt(get("hadm_id")), "itemid": optInt(get("itemid")),
			"charttime": t, "valuenum": num, "valueuom": uom})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}

	// PRESCRIPTIONS: integer doses in the drug's most frequent unit.
	var rx []map[string]any
	unitCount := map[string]map[string]int{}
	err = csvRows(ctx, path("PRESCRIPTIONS"), func(get func(string) string) error {
		sub := get("subject_id")
		if !inCohort(get("hadm_id")) {
			return nil
		}
		start, ok := eventTime(sub, get("startdate"))
		end, okEnd := shift(sub, get("enddate"))
		drug, unit, route := lowerText(get("drug")), lowerText(get("dose_unit_rx")), lowerText(get("route"))
		dose, err := strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(get("dose_val_rx")), ",", ""), 10, 64)
		if !ok || !okEnd || drug == nil || unit == nil || route == nil || err != nil {
			return nil
		}
		d, u := drug.(string), unit.(string)
		if unitCount[d] == nil {
			unitCount[d] = map[string]int{}
		}
		unitCount[d][u]++
		rx = append(rx, map[string]any{"subject_id": optInt(sub), "hadm_id": optInt(get("hadm_id")), "startdate": start,
			"enddate": fmtTime(end), "drug": d, "dose_val_rx": dose, "dose_unit_rx": u, "route": route})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	topUnit := map[string]string{}
	for d, m := range unitCount {
		best, n := "", -1
		for u, c := range m {
			if c > n || (c == n && u < best) {
				best, n = u, c
			}
		}
		topUnit[d] = best
	}
	for _, r := range rx {
		if r["dose_unit_rx"] == topUnit[r["drug"].(string)] {
			b.add("prescriptions", r)
		}
	}

	// CHARTEVENTS (streamed; only EHRSQL's vital items), INPUTEVENTS_CV,
	// OUTPUTEVENTS, MICROBIOLOGYEVENTS.
	err = csvRows(ctx, path("CHARTEVENTS"), func(get func(string) string) error {
		if !mimicChartItems[strings.TrimSpace(get("itemid"))] || !inCohort(get("hadm_id")) {
			return nil
		}
		sub := get("subject_id")
		t, ok := eventTime(sub, get("charttime"))
		num, uom, stay := optFloat(get("valuenum")), lowerText(get("valueuom")), optInt(get("icustay_id"))
		if !ok || num == nil || uom == nil || stay == nil {
			return nil
		}
		b.add("chartevents", map[string]any{"subject_id": optInt(sub), "hadm_id": optInt(get("hadm_id")), "icustay_id": stay,
			"itemid": optInt(get("itemid")), "charttime": t, "valuenum": num, "valueuom": uom})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = csvRows(ctx, path("INPUTEVENTS_CV"), func(get func(string) string) error {
		sub := get("subject_id")
		if !inCohort(get("hadm_id")) || !items[strings.TrimSpace(get("itemid"))] || lowerText(get("amountuom")) != "ml" {
			return nil
		}
		t, ok := eventTime(sub, get("charttime"))
		amount := optFloat(get("amount"))
		if !ok || amount == nil {
			return nil
		}
		b.add("inputevents_cv", map[string]any{"subject_id": optInt(sub), "hadm_id": optInt(get("hadm_id")), "icustay_id": optInt(get("icustay_id")),
			"charttime": t, "itemid": optInt(get("itemid")), "amount": amount})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = csvRows(ctx, path("OUTPUTEVENTS"), func(get func(string) string) error {
		sub := get("subject_id")
		if !inCohort(get("hadm_id")) || !items[strings.TrimSpace(get("itemid"))] || lowerText(get("valueuom")) != "ml" {
			return nil
		}
		t, ok := eventTime(sub, get("charttime"))
		value := optFloat(get("value"))
		if !ok || value == nil {
			return nil
		}
		b.add("outputevents", map[string]any{"subject_id": optInt(sub), "hadm_id": optInt(get("hadm_id")), "icustay_id": optInt(get("icustay_id")),
			"charttime": t, "itemid": optInt(get("itemid")), "value": value})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = csvRows(ctx, path("MICROBIOLOGYEVENTS"), func(get func(string) string) error {
		sub := get("subject_id")
		if !inCohort(get("hadm_id")) {
			return nil
		}
		ct := get("charttime")
		if strings.TrimSpace(ct) == "" {
			ct = get("chartdate")
		}
		t, ok := eventTime(sub, ct)
		if !ok {
			return nil
		}
		b.add("microbiologyevents", map[string]any{"subject_id": optInt(sub), "hadm_id": optInt(get("hadm_id")), "charttime": t,
			"spec_type_desc": lowerText(get("spec_type_desc")), "org_name": lowerText(get("org_name"))})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}

	for _, t := range b.ordered() {
		if t.cols[0] == "row_id" {
			b.renumber(strings.ToLower(t.name))
		}
	}

	// COST: one charge per diagnosis, procedure, lab test and prescription.
	pricer := newCostPricer(rng, []string{"diagnoses_icd", "procedures_icd", "labevents", "prescriptions"})
	for _, ev := range []struct{ table, key, time string }{
		{"diagnoses_icd", "icd9_code", "charttime"}, {"procedures_icd", "icd9_code", "charttime"},
		{"labevents", "itemid", "charttime"}, {"prescriptions", "drug", "startdate"},
	} {
		t := b.tables[ev.table]
		ci := colIndex(t.cols)
		for _, r := range t.rows {
			b.add("cost", map[string]any{"subject_id": r[ci["subject_id"]], "hadm_id": r[ci["hadm_id"]], "event_type": ev.table,
				"event_id": r[0], "chargetime": r[ci[ev.time]], "cost": pricer.price(ev.table, ehrValueText(r[ci[ev.key]]))})
		}
	}
	b.renumber("cost")
	return b, current, nil
}

// colIndex maps column name → position.
func colIndex(cols []string) map[string]int {
	m := make(map[string]int, len(cols))
	for i, c := range cols {
		m[c] = i
	}
	return m
}
