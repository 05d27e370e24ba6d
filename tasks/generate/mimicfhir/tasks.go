package mimicfhir

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/medgym/medgym/tasks"
)

// The read task types of MedAgentBench (Jiang et al., arXiv:2501.14654),
// re-instantiated over the converted demo: each instance has its own
// current time, and its truth is computed here from the source tables
// (patients, labevents), not through FHIR. TestFHIRServerAgreesWithTheTables
// checks every truth against the answer the FHIR server gives. Not wired
// into the task library yet: the loader, the prompt (the FHIR base URL and
// the proxy) and the scoring rule are still to come.

// Task types.
const (
	TaskPatientLookup  = "patient_lookup"       // MedAgentBench task 1: MRN by name and date of birth
	TaskAge            = "age"                  // task 2: age in whole years at the current time
	TaskLatestMg24h    = "latest_magnesium_24h" // task 4: the latest magnesium of the last 24 h, or -1
	TaskAvgGlucose24h  = "average_glucose_24h"  // task 6: the mean glucose of the last 24 h, or -1
	TaskLatestGlucose  = "latest_glucose"       // task 7: the latest glucose at the current time, or -1
	NotFound           = "Patient not found"    // the lookup's answer when no patient matches
	taskSeed           = 20250124               // the tasks' fixed seed
	magnesiumItem      = "50960"
	glucoseItem        = "50931"
	testShareOfPatient = 5 // one patient in five is in the test split
)

// Task is one generated read task.
type Task struct {
	ID    string `json:"id"`
	Type  string `json:"type"`
	Split string `json:"split"` // "train" or "test", by patient
	// Now is the task's current time (FHIR dateTime, UTC).
	Now         string `json:"now"`
	Instruction string `json:"instruction"`
	// MRN is the patient's MRN (subject_id) the task is about: for a lookup,
	// the patient looked for (also when the lookup should find none).
	MRN string `json:"mrn"`
	// Params are the values the instruction names (given, family,
	// birthdate for a lookup).
	Params map[string]string `json:"params,omitempty"`
	// Answer is the truth: the MRN or NotFound (lookup), whole years (age),
	// mg/dL (magnesium, glucose), -1 where no result is in the window.
	Answer any `json:"answer"`
}

// labRow is one labevents result of an item the tasks read.
type labRow struct {
	at    time.Time
	value float64
	ok    bool // a plain numeric value (valuenum)
}

// GenerateTasks generates the read tasks from the demo folder. The same
// files give the same tasks.
func GenerateTasks(ctx context.Context, demo string) ([]Task, error) {
	var pats []patientRow
	_, err := tasks.ReadCSVGz(ctx, filepath.Join(demo, "hosp", "patients.csv.gz"), func(get func(string) string) error {
		age, err1 := strconv.Atoi(get("anchor_age"))
		year, err2 := strconv.Atoi(get("anchor_year"))
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		pats = append(pats, patientRow{SubjectID: get("subject_id"), Gender: get("gender"), AnchorAge: age, AnchorYear: year})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tasks: %w", err)
	}
	demoGr, err := syntheticDemographics(pats)
	if err != nil {
		return nil, fmt.Errorf("tasks: %w", err)
	}
	labs := map[string]map[string][]labRow{}
	_, err = tasks.ReadCSVGz(ctx, filepath.Join(demo, "hosp", "labevents.csv.gz"), func(get func(string) string) error {
		item := get("itemid")
		if item != magnesiumItem && item != glucoseItem {
			return nil
		}
		at, err := time.Parse(time.DateTime, get("charttime"))
		if err != nil {
			return err
		}
		r := labRow{at: at}
		if v, err := strconv.ParseFloat(get("valuenum"), 64); err == nil {
			r.value, r.ok = v, true
		}
		s := get("subject_id")
		if labs[s] == nil {
			labs[s] = map[string][]labRow{}
		}
		labs[s][item] = append(labs[s][item], r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tasks: %w", err)
	}
	for _, items := range labs {
		for _, rows := range items {
			slices.SortStableFunc(rows, func(a, b labRow) int { return a.at.Compare(b.at) })
		}
	}
	subjects := make([]string, 0, len(pats))
	for _, p := range pats {
		subjects = append(subjects, p.SubjectID)
	}
	slices.Sort(subjects)

	rng := rand.New(rand.NewPCG(taskSeed, 1))
	var out []Task
	add := func(typ, subj string, now time.Time, instr string, answer any) {
		n := fhirNow(now)
		out = append(out, Task{ID: typ + "-" + subj + "-" + now.UTC().Format("20060102T150405"), Type: typ, Split: splitOf(subj),
			Now: n, Instruction: instr, MRN: subj, Answer: answer})
	}
	for _, s := range subjects {
		d := demoGr[s]
		// Lookup: the patient; for one in four also a date of birth a few days off (none matches: names are unique).
		someTime := firstLab(labs[s])
		add(TaskPatientLookup, s, someTime, lookupInstruction(d.Given, d.Family, d.BirthDate), s)
		out[len(out)-1].Params = map[string]string{"given": d.Given, "family": d.Family, "birthdate": d.BirthDate}
		if rng.IntN(4) == 0 {
			bd, _ := time.Parse(time.DateOnly, d.BirthDate)
			delta := 1 + rng.IntN(9)
			if rng.IntN(2) == 0 {
				delta = -delta
			}
			off := bd.AddDate(0, 0, delta)
			add(TaskPatientLookup, s, someTime.Add(time.Hour), lookupInstruction(d.Given, d.Family, off.Format(time.DateOnly)), NotFound)
			out[len(out)-1].Params = map[string]string{"given": d.Given, "family": d.Family, "birthdate": off.Format(time.DateOnly)}
		}
		// Age at two times: a lab result's time and a random time up to a year later.
		all := append(slices.Clone(labs[s][magnesiumItem]), labs[s][glucoseItem]...)
		for range 2 {
			if len(all) == 0 {
				break
			}
			now := all[rng.IntN(len(all))].at.Add(time.Duration(rng.Int64N(int64(365 * 24 * time.Hour))))
			add(TaskAge, s, now, fmt.Sprintf("What's the age of the patient with MRN of %s? It's %s now. The answer should be rounded down to an integer.", s, fhirNow(now)),
				ageAt(d.BirthDate, now))
		}
		// Magnesium and glucose: two current times after a result (within a day of it), one with none in the day before.
		for _, item := range []string{magnesiumItem, glucoseItem} {
			rows := labs[s][item]
			if len(rows) == 0 {
				continue
			}
			var nows []time.Time
			for range 2 {
				nows = append(nows, rows[rng.IntN(len(rows))].at.Add(time.Minute+time.Duration(rng.Int64N(int64(23*time.Hour)))))
			}
			nows = append(nows, rows[0].at.Add(-time.Hour-time.Duration(rng.Int64N(int64(30*day)))))
			for _, now := range nows {
				if item == magnesiumItem {
					v, ok := latestIn(rows, now, day)
					if !ok {
						continue // several results at the latest time: ambiguous, left out
					}
					add(TaskLatestMg24h, s, now, fmt.Sprintf("What's the most recent magnesium level of the patient with MRN of %s within the last 24 hours? It's %s now. "+
						"Magnesium results are Observations with the LOINC code 19123-9. The answer should be a single number in mg/dL, and -1 if no measurement within the last 24 hours is available.", s, fhirNow(now)), v)
				} else {
					add(TaskAvgGlucose24h, s, now, fmt.Sprintf("What is the average glucose level of the patient with MRN of %s over the last 24 hours? It's %s now. "+
						"Glucose results are Observations with the LOINC code 2345-7; average the numeric results (not those given as a bound, such as >500). "+
						"The answer should be a single number in mg/dL, and -1 if no measurement within the last 24 hours is available.", s, fhirNow(now)), averageIn(rows, now))
				}
			}
		}
		// The latest glucose at any earlier time: two current times up to 30 days after a result, one before the first.
		if rows := labs[s][glucoseItem]; len(rows) > 0 {
			nows := []time.Time{}
			for range 2 {
				nows = append(nows, rows[rng.IntN(len(rows))].at.Add(time.Duration(rng.Int64N(int64(30*day)))))
			}
			nows = append(nows, rows[0].at.Add(-time.Minute-time.Duration(rng.Int64N(int64(30*day)))))
			for _, now := range nows {
				v, ok := latestIn(rows, now, 0)
				if !ok {
					continue
				}
				add(TaskLatestGlucose, s, now, fmt.Sprintf("What is the most recent glucose level of the patient with MRN of %s? It's %s now. "+
					"Glucose results are Observations with the LOINC code 2345-7; take the latest result with a plain number (not one given as a bound, such as >500). "+
					"The answer should be a single number in mg/dL, and -1 if there is none.", s, fhirNow(now)), v)
			}
		}
	}
	return out, nil
}

func lookupInstruction(given, family, dob string) string {
	return fmt.Sprintf("What's the MRN of the patient with name %s %s and DOB of %s? If the patient does not exist, the answer should be %q.", given, family, dob, NotFound)
}

// fhirNow writes t as the tasks' current time.
func fhirNow(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05") + "+00:00" }

// splitOf is a patient's split: "test" for one in testShareOfPatient,
// picked by a UUID v5 of the subject_id.
func splitOf(subj string) string {
	u := uuid5(uuid5(mimicNS, "medgym-split"), subj)
	if binary.BigEndian.Uint32(u[:4])%testShareOfPatient == 0 {
		return "test"
	}
	return "train"
}

func firstLab(items map[string][]labRow) time.Time {
	var first time.Time
	for _, rows := range items {
		if len(rows) > 0 && (first.IsZero() || rows[0].at.Before(first)) {
			first = rows[0].at
		}
	}
	if first.IsZero() {
		first = time.Date(2150, 1, 1, 12, 0, 0, 0, time.UTC)
	}
	return first
}

// ageAt is the age in whole years on now of a patient born on birth.
func ageAt(birth string, now time.Time) int {
	b, _ := time.Parse(time.DateOnly, birth)
	age := now.Year() - b.Year()
	if now.Month() < b.Month() || now.Month() == b.Month() && now.Day() < b.Day() {
		age--
	}
	return age
}

// day is the window of the "last 24 hours" tasks.
const day = 24 * time.Hour

// inWindow reports whether t lies in the span up to now, both ends
// included; span 0 is unbounded.
func inWindow(t, now time.Time, span time.Duration) bool {
	return !t.After(now) && (span == 0 || !t.Before(now.Add(-span)))
}

// latestIn is the value of the latest result with a numeric value in the
// window, -1 for none; ok is false when that is ambiguous: several results
// share the latest time, or a result without a numeric value is as late.
func latestIn(rows []labRow, now time.Time, span time.Duration) (float64, bool) {
	var at, other time.Time
	var vals []float64
	for _, r := range rows {
		if !inWindow(r.at, now, span) {
			continue
		}
		if !r.ok {
			if r.at.After(other) {
				other = r.at
			}
			continue
		}
		switch {
		case vals == nil || r.at.After(at):
			at, vals = r.at, []float64{r.value}
		case r.at.Equal(at):
			vals = append(vals, r.value)
		}
	}
	if vals == nil {
		return -1, other.IsZero()
	}
	return vals[0], len(vals) == 1 && at.After(other)
}

// averageIn is the mean of the numeric results in the window, -1 for none.
func averageIn(rows []labRow, now time.Time) float64 {
	sum, n := 0.0, 0
	for _, r := range rows {
		if r.ok && inWindow(r.at, now, day) {
			sum += r.value
			n++
		}
	}
	if n == 0 {
		return -1
	}
	return sum / float64(n)
}

// TaskCounts counts tasks by type and split ("type/split").
func TaskCounts(ts []Task) map[string]int {
	c := map[string]int{}
	for _, t := range ts {
		c[t.Type+"/"+t.Split]++
	}
	return c
}
