package mimicfhir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/medgym/medgym/tasks"
)

// MEDSReader streams the events of a MEDS Parquet file whose code keep
// accepts (the signature of tasks/meds.Read, which the command line
// passes in so that this package links no Parquet reader).
type MEDSReader func(ctx context.Context, path string, keep func(code string) bool,
	fn func(subject int64, t time.Time, code string, value float32, ok bool) error) error

// Source names the inputs of a conversion.
type Source struct {
	// Demo is the MIMIC-IV Clinical Database Demo v2.2 folder (hosp/,
	// icu/, LICENSE.txt).
	Demo string
	// MEDS is the demo's MEDS-format copy, the source of the vital signs
	// (the demo's chartevents file is not available); empty: no vital
	// signs. Read needs Reader.
	MEDS   string
	Reader MEDSReader
}

// ResourceTypes are the types written, one NDJSON file each, in the order
// a server should load them (referenced resources first).
var ResourceTypes = []string{"Patient", "Encounter", "Condition", "Procedure", "MedicationRequest", "Observation"}

// sink receives the converted resources of one type, in order.
type sink func(resourceType string, r any) error

// fhirTime turns a MIMIC "YYYY-MM-DD HH:MM:SS" into a FHIR dateTime with a
// +00:00 offset; "" stays "".
func fhirTime(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	t, err := time.Parse(time.DateTime, s)
	if err != nil {
		return "", fmt.Errorf("time %q: %w", s, err)
	}
	return t.Format("2006-01-02T15:04:05") + "+00:00", nil
}

// number is the canonical JSON spelling of a decimal from the source, or
// ok false when s is not a finite number.
func number(s string) (json.Number, bool) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return "", false
	}
	return json.Number(strconv.FormatFloat(v, 'f', -1, 64)), true
}

// comparatorRe matches a lab value with a comparator ("<0.2", ">500",
// "GREATER THAN 10"): MIMIC-IV on FHIR writes these as a valueQuantity
// with a comparator, when the rest is a number.
var comparatorRe = regexp.MustCompile(`^\s*(<=|>=|<|>|LESS THAN|GREATER THAN)\s*([0-9]*\.?[0-9]+)\s*$`)

var comparators = map[string]string{"<=": "<=", ">=": ">=", "<": "<", ">": ">", "LESS THAN": "<", "GREATER THAN": ">"}

// unitQuantity is a quantity in MIMIC's unit code system (no unit: none).
func unitQuantity(v json.Number, unit string) *quantity {
	q := &quantity{Value: v}
	if unit = strings.TrimSpace(unit); unit != "" {
		q.Unit, q.System, q.Code = unit, systemUnits, unit
	}
	return q
}

func ref(resourceType, id string) reference { return reference{Reference: resourceType + "/" + id} }

func optRef(resourceType, id string) *reference {
	if id == "" {
		return nil
	}
	r := ref(resourceType, id)
	return &r
}

// convert reads the demo and hands every resource to out, type by type in
// ResourceTypes order; within a type, in source row order.
func convert(ctx context.Context, src Source, out sink, st *Stats) error {
	hosp := func(t string) string { return filepath.Join(src.Demo, "hosp", t+".csv.gz") }
	icu := func(t string) string { return filepath.Join(src.Demo, "icu", t+".csv.gz") }
	read := func(path string, fn func(get func(string) string) error) error {
		sum, err := tasks.ReadCSVGz(ctx, path, fn)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src.Demo, path)
		st.Sources[filepath.ToSlash(rel)] = sum
		return nil
	}

	// Patients: synthetic names and birth dates need all rows first.
	var pats []patientRow
	dod := map[string]string{}
	err := read(hosp("patients"), func(get func(string) string) error {
		age, err1 := strconv.Atoi(get("anchor_age"))
		year, err2 := strconv.Atoi(get("anchor_year"))
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		pats = append(pats, patientRow{SubjectID: get("subject_id"), Gender: get("gender"), AnchorAge: age, AnchorYear: year})
		dod[get("subject_id")] = get("dod")
		return nil
	})
	if err != nil {
		return err
	}
	demo, err := syntheticDemographics(pats)
	if err != nil {
		return err
	}
	for _, p := range pats {
		d := demo[p.SubjectID]
		r := Patient{ResourceType: "Patient", ID: PatientID(p.SubjectID),
			Meta:       meta{Profile: []string{profilePatient}, Tag: []coding{{System: systemMedgymTag, Code: "synthetic-name-and-birthdate"}}},
			Identifier: []identifier{{Use: "usual", System: IdentifierPatient, Value: p.SubjectID}},
			Name:       []humanName{{Use: "official", Family: d.Family, Given: []string{d.Given}}},
			Gender:     map[string]string{"F": "female", "M": "male"}[p.Gender],
			BirthDate:  d.BirthDate, DeceasedDateTime: dod[p.SubjectID]}
		if err := out("Patient", r); err != nil {
			return err
		}
	}
	st.Demographics = demo

	// Encounters (hospital admissions); their spans place vital signs.
	spans := map[string][]admSpan{}
	err = read(hosp("admissions"), func(get func(string) string) error {
		start, err1 := fhirTime(get("admittime"))
		end, err2 := fhirTime(get("dischtime"))
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		subj, hadm := get("subject_id"), get("hadm_id")
		spans[subj] = append(spans[subj], admSpan{hadm: hadm, start: get("admittime"), end: get("dischtime")})
		r := Encounter{ResourceType: "Encounter", ID: EncounterID(hadm), Meta: meta{Profile: []string{profileEncounter}},
			Identifier: []identifier{{Use: "usual", System: IdentifierEncounter, Value: hadm}},
			Status:     "finished", Class: encounterClass(get("admission_type")),
			Type:    []codeableConcept{{Coding: []coding{{System: systemAdmType, Code: get("admission_type")}}}},
			Subject: ref("Patient", PatientID(subj)), Period: period{Start: start, End: end}}
		h := &hospitalization{}
		if s := get("admission_location"); s != "" {
			h.AdmitSource = &codeableConcept{Coding: []coding{{System: systemAdmitSource, Code: s}}}
		}
		if s := get("discharge_location"); s != "" {
			h.DischargeDisposition = &codeableConcept{Coding: []coding{{System: systemDischarge, Code: s}}}
		}
		if h.AdmitSource != nil || h.DischargeDisposition != nil {
			r.Hospitalization = h
		}
		return out("Encounter", r)
	})
	if err != nil {
		return err
	}

	if err := conditions(src, read, out); err != nil {
		return err
	}
	if err := procedures(src, read, out); err != nil {
		return err
	}
	if err := medicationRequests(hosp("prescriptions"), read, out); err != nil {
		return err
	}
	if err := labObservations(src, read, out); err != nil {
		return err
	}
	if src.MEDS == "" {
		return nil
	}
	return vitalObservations(ctx, src, icu("d_items"), read, spans, out, st)
}

// admSpan is one admission's hadm_id and MIMIC admit/discharge times.
type admSpan struct{ hadm, start, end string }

type readFunc func(path string, fn func(get func(string) string) error) error

// icdTitles reads a d_icd_* table: (version, code) → long title.
func icdTitles(read readFunc, path string) (map[[2]string]string, error) {
	titles := map[[2]string]string{}
	err := read(path, func(get func(string) string) error {
		titles[[2]string{get("icd_version"), strings.TrimSpace(get("icd_code"))}] = get("long_title")
		return nil
	})
	return titles, err
}

func conditions(src Source, read readFunc, out sink) error {
	titles, err := icdTitles(read, filepath.Join(src.Demo, "hosp", "d_icd_diagnoses.csv.gz"))
	if err != nil {
		return err
	}
	return read(filepath.Join(src.Demo, "hosp", "diagnoses_icd.csv.gz"), func(get func(string) string) error {
		hadm, code, ver := get("hadm_id"), strings.TrimSpace(get("icd_code")), get("icd_version")
		key := hadm + "-" + get("seq_num") + "-" + code
		system := systemDiagICD10
		if ver == "9" {
			system = systemDiagICD9
		}
		r := Condition{ResourceType: "Condition", ID: ResourceID(nsCondition, key), Meta: meta{Profile: []string{profileCondition}},
			Identifier:     []identifier{{System: identifierCondition, Value: key}},
			ClinicalStatus: codeableConcept{Coding: []coding{{System: systemCondClin, Code: "active"}}},
			Category:       []codeableConcept{{Coding: []coding{{System: systemCondCat, Code: "encounter-diagnosis"}}}},
			Code:           codeableConcept{Coding: []coding{{System: system, Code: code, Display: titles[[2]string{ver, code}]}}},
			Subject:        ref("Patient", PatientID(get("subject_id"))), Encounter: ref("Encounter", EncounterID(hadm))}
		return out("Condition", r)
	})
}

func procedures(src Source, read readFunc, out sink) error {
	titles, err := icdTitles(read, filepath.Join(src.Demo, "hosp", "d_icd_procedures.csv.gz"))
	if err != nil {
		return err
	}
	return read(filepath.Join(src.Demo, "hosp", "procedures_icd.csv.gz"), func(get func(string) string) error {
		hadm, code, ver := get("hadm_id"), strings.TrimSpace(get("icd_code")), get("icd_version")
		key := hadm + "-" + get("seq_num") + "-" + code
		system := systemProcICD10
		if ver == "9" {
			system = systemProcICD9
		}
		r := Procedure{ResourceType: "Procedure", ID: ResourceID(nsProcedure, key), Meta: meta{Profile: []string{profileProcedure}},
			Identifier: []identifier{{System: identifierProcedure, Value: key}}, Status: "completed",
			Code:    codeableConcept{Coding: []coding{{System: system, Code: code, Display: titles[[2]string{ver, code}]}}},
			Subject: ref("Patient", PatientID(get("subject_id"))), Encounter: ref("Encounter", EncounterID(hadm)),
			PerformedDateTime: get("chartdate")}
		return out("Procedure", r)
	})
}

// medicationRequests converts prescriptions. A pharmacy_id can repeat (a
// base solution and its additives share one): the key is the pharmacy_id
// where it is unique in the table, else pharmacy_id-<n> for its n-th row.
func medicationRequests(path string, read readFunc, out sink) error {
	type row map[string]string
	cols := []string{"subject_id", "hadm_id", "pharmacy_id", "starttime", "stoptime", "drug_type", "drug", "formulary_drug_cd",
		"ndc", "dose_val_rx", "dose_unit_rx", "route", "doses_per_24_hrs"}
	var rows []row
	seen := map[string]int{}
	err := read(path, func(get func(string) string) error {
		r := make(row, len(cols))
		for _, c := range cols {
			r[c] = get(c)
		}
		rows = append(rows, r)
		seen[r["pharmacy_id"]]++
		return nil
	})
	if err != nil {
		return err
	}
	nth := map[string]int{}
	for _, r := range rows {
		key := r["pharmacy_id"]
		if seen[key] > 1 {
			nth[key]++
			key += "-" + strconv.Itoa(nth[key])
		}
		med := codeableConcept{Text: r["drug"]}
		if ndc := r["ndc"]; ndc != "" && strings.Trim(ndc, "0") != "" {
			med.Coding = append(med.Coding, coding{System: systemNDC, Code: ndc})
		}
		if fc := r["formulary_drug_cd"]; fc != "" {
			med.Coding = append(med.Coding, coding{System: systemMedFormCode, Code: fc, Display: r["drug"]})
		}
		authored, err1 := fhirTime(r["starttime"])
		stop, err2 := fhirTime(r["stoptime"])
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("prescription %s: %w", key, err)
		}
		status := "unknown"
		if stop != "" {
			status = "completed"
		}
		m := MedicationRequest{ResourceType: "MedicationRequest", ID: ResourceID(nsMedicationRequest, key),
			Meta: meta{Profile: []string{profileMedicationRequest}}, Identifier: []identifier{{System: identifierMedicationRequest, Value: key}},
			Status: status, Intent: "order", MedicationCodeableConcept: med,
			Subject: ref("Patient", PatientID(r["subject_id"])), AuthoredOn: authored}
		if r["hadm_id"] != "" {
			m.Encounter = optRef("Encounter", EncounterID(r["hadm_id"]))
		}
		var d dosage
		if v, ok := number(r["dose_val_rx"]); ok {
			d.DoseAndRate = []doseAndRate{{DoseQuantity: unitQuantity(v, r["dose_unit_rx"])}}
		} else if r["dose_val_rx"] != "" {
			d.Text = strings.TrimSpace(r["dose_val_rx"] + " " + r["dose_unit_rx"])
		}
		if rt := r["route"]; rt != "" {
			d.Route = &codeableConcept{Coding: []coding{{System: systemMedRoute, Code: rt}}}
		}
		if d.DoseAndRate != nil || d.Text != "" || d.Route != nil {
			m.DosageInstruction = []dosage{d}
		}
		if authored != "" || stop != "" {
			m.DispenseRequest = &dispenseRequest{ValidityPeriod: period{Start: authored, End: stop}}
		}
		if err := out("MedicationRequest", m); err != nil {
			return err
		}
	}
	return nil
}

// labObservations converts labevents, coded by itemid (d_labitems' label
// as display) and LOINC where LabLOINC has the item.
func labObservations(src Source, read readFunc, out sink) error {
	labels := map[string]string{}
	err := read(filepath.Join(src.Demo, "hosp", "d_labitems.csv.gz"), func(get func(string) string) error {
		labels[get("itemid")] = get("label")
		return nil
	})
	if err != nil {
		return err
	}
	lab := []codeableConcept{{Coding: []coding{{System: systemObsCategory, Code: "laboratory", Display: "Laboratory"}}}}
	return read(filepath.Join(src.Demo, "hosp", "labevents.csv.gz"), func(get func(string) string) error {
		id, item := get("labevent_id"), get("itemid")
		eff, err1 := fhirTime(get("charttime"))
		issued, err2 := fhirTime(get("storetime"))
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		code := codeableConcept{Coding: []coding{{System: SystemLabItems, Code: item, Display: labels[item]}}}
		if l, ok := LabLOINC[item]; ok {
			code.Coding = append(code.Coding, coding{System: SystemLOINC, Code: l.Code, Display: l.Display})
		}
		o := Observation{ResourceType: "Observation", ID: ResourceID(nsObservationLabs, id), Meta: meta{Profile: []string{profileObservationLabs}},
			Identifier: []identifier{{System: identifierObservationLabs, Value: id}}, Status: "final", Category: lab, Code: code,
			Subject: ref("Patient", PatientID(get("subject_id"))), EffectiveDateTime: eff, Issued: issued}
		if h := get("hadm_id"); h != "" {
			o.Encounter = optRef("Encounter", EncounterID(h))
		}
		unit := get("valueuom")
		if v, ok := number(get("valuenum")); ok {
			o.ValueQuantity = unitQuantity(v, unit)
		} else if m := comparatorRe.FindStringSubmatch(get("value")); m != nil {
			v, _ := number(m[2])
			o.ValueQuantity = unitQuantity(v, unit)
			o.ValueQuantity.Comparator = comparators[m[1]]
		} else if s := strings.TrimSpace(get("value")); s != "" {
			o.ValueString = s
		}
		if f := get("flag"); f != "" {
			o.Interpretation = []codeableConcept{{Coding: []coding{{System: systemLabFlags, Code: f}}}}
		}
		if c := strings.TrimSpace(get("comments")); c != "" {
			o.Note = []annotation{{Text: c}}
		}
		lo, okLo := number(get("ref_range_lower"))
		hi, okHi := number(get("ref_range_upper"))
		if okLo || okHi {
			var rr referenceRange
			if okLo {
				rr.Low = unitQuantity(lo, unit)
			}
			if okHi {
				rr.High = unitQuantity(hi, unit)
			}
			o.ReferenceRange = []referenceRange{rr}
		}
		return out("Observation", o)
	})
}

// vitalObservations converts the VitalItems chart events of the MEDS copy
// (codes LAB//<itemid>//<unit>; float32 values rounded to 4 decimals). The
// MEDS copy has no hadm_id: the Encounter is the patient's admission whose
// admit–discharge span holds the time (the earliest such), or none. The
// key of the id is subject_id-<time as YYYY-MM-DDThh:mm:ss>-itemid-<n>, n counting repeats of the
// same (subject, time, item) in file order.
func vitalObservations(ctx context.Context, src Source, dItems string, read readFunc, spans map[string][]admSpan, out sink, st *Stats) error {
	if src.Reader == nil {
		return errors.New("vital signs: a MEDS file but no MEDS reader")
	}
	labels := map[string]string{}
	err := read(dItems, func(get func(string) string) error {
		if _, ok := VitalItems[get("itemid")]; ok {
			labels[get("itemid")] = get("label")
		}
		return nil
	})
	if err != nil {
		return err
	}
	keep := func(code string) bool {
		p := strings.SplitN(code, "//", 3)
		if len(p) != 3 || p[0] != "LAB" {
			return false
		}
		_, ok := VitalItems[p[1]]
		return ok
	}
	for _, ss := range spans {
		slices.SortStableFunc(ss, func(a, b admSpan) int { return strings.Compare(a.start, b.start) })
	}
	vital := []codeableConcept{{Coding: []coding{{System: systemObsCategory, Code: "vital-signs", Display: "Vital Signs"}}}}
	repeats := map[string]int{}
	err = src.Reader(ctx, src.MEDS, keep, func(subject int64, t time.Time, code string, value float32, ok bool) error {
		if !ok {
			st.VitalsNoValue++
			return nil
		}
		p := strings.SplitN(code, "//", 3)
		item, unit := p[1], p[2]
		if strings.EqualFold(unit, "UNK") {
			unit = ""
		}
		subj := strconv.FormatInt(subject, 10)
		mt := t.UTC().Format(time.DateTime)
		key := subj + "-" + t.UTC().Format("2006-01-02T15:04:05") + "-" + item
		repeats[key]++
		key += "-" + strconv.Itoa(repeats[key])
		c := codeableConcept{Coding: []coding{{System: SystemChartItems, Code: item, Display: labels[item]}}}
		if l := VitalItems[item]; l.Code != "" {
			c.Coding = append(c.Coding, coding{System: SystemLOINC, Code: l.Code, Display: l.Display})
		}
		v := json.Number(strconv.FormatFloat(math.Round(float64(value)*1e4)/1e4, 'f', -1, 64))
		o := Observation{ResourceType: "Observation", ID: ResourceID(nsObservationChartevents, key),
			Meta:       meta{Profile: []string{profileObservationChart}},
			Identifier: []identifier{{System: identifierObservationChart, Value: key}}, Status: "final", Category: vital, Code: c,
			Subject: ref("Patient", PatientID(subj)), EffectiveDateTime: t.UTC().Format("2006-01-02T15:04:05") + "+00:00",
			ValueQuantity: unitQuantity(v, unit)}
		for _, s := range spans[subj] {
			if s.start <= mt && mt <= s.end {
				o.Encounter = optRef("Encounter", EncounterID(s.hadm))
				break
			}
		}
		st.Vitals++
		return out("Observation", o)
	})
	if err != nil {
		return fmt.Errorf("vital signs: %w", err)
	}
	return nil
}
