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

var eicuSpec = &ehrSpec{
	dataset: "eicu", demoDir: "eicu-demo", seedDir: "ehrsql-templates/eicu", ddlFile: "eicu.sql",
	build: buildEICU,
	indexes: map[string][]string{
		"patient":   {"uniquepid", "patienthealthsystemstayid"},
		"diagnosis": {"patientunitstayid", "diagnosisname"}, "treatment": {"patientunitstayid", "treatmentname"},
		"medication": {"patientunitstayid", "drugname"}, "allergy": {"patientunitstayid"},
		"intakeoutput": {"patientunitstayid", "celllabel"}, "microlab": {"patientunitstayid"},
		"cost": {"patienthealthsystemstayid", "eventid"},
	},
	patients:   "SELECT DISTINCT uniquepid FROM patient ORDER BY uniquepid",
	patientSQL: `uniquepid = '%s'`,
	slots: map[string]string{
		"drug_name":       "SELECT p.uniquepid, m.drugname FROM medication m JOIN patient p ON m.patientunitstayid = p.patientunitstayid ORDER BY m.medicationid",
		"drug_route":      "SELECT p.uniquepid, m.routeadmin FROM medication m JOIN patient p ON m.patientunitstayid = p.patientunitstayid ORDER BY m.medicationid",
		"diagnosis_name":  "SELECT p.uniquepid, x.diagnosisname FROM diagnosis x JOIN patient p ON x.patientunitstayid = p.patientunitstayid ORDER BY x.diagnosisid",
		"procedure_name":  "SELECT p.uniquepid, x.treatmentname FROM treatment x JOIN patient p ON x.patientunitstayid = p.patientunitstayid ORDER BY x.treatmentid",
		"intake_name":     "SELECT p.uniquepid, x.celllabel FROM intakeoutput x JOIN patient p ON x.patientunitstayid = p.patientunitstayid WHERE x.cellpath LIKE '%intake%' ORDER BY x.intakeoutputid",
		"output_name":     "SELECT p.uniquepid, x.celllabel FROM intakeoutput x JOIN patient p ON x.patientunitstayid = p.patientunitstayid WHERE x.cellpath LIKE '%output%' ORDER BY x.intakeoutputid",
		"culture_name":    "SELECT p.uniquepid, x.culturesite FROM microlab x JOIN patient p ON x.patientunitstayid = p.patientunitstayid ORDER BY x.microlabid",
		"admission_route": "SELECT uniquepid, hospitaladmitsource FROM patient ORDER BY patientunitstayid",
	},
	missing: []string{"lab", "vitalperiodic"},
	primer: "The database follows EHRSQL's eICU schema. A patient is identified by uniquepid, a hospital stay by " +
		"patienthealthsystemstayid and an ICU unit stay by patientunitstayid; event tables (diagnosis, treatment, " +
		"medication, allergy, intakeoutput, microlab) link to unit stays through patientunitstayid, and cost links to " +
		"patients and hospital stays. All text values are lower-case. The current time is " + ehrNow + "; a stay " +
		"without a discharge time (hospitaldischargetime / unitdischargetime) is the current one. The lab and " +
		"vitalperiodic tables are empty in this demo build.",
}

type eicuStay struct {
	get                           map[string]string
	unitStay, hospStay, pid       string
	admitOff, unitDisOff, hospDis int
	year                          int
	age                           int
	unitAdmit                     time.Time
}

// buildEICU builds EHRSQL's eICU tables from the demo CSVs (lab and
// vitalperiodic stay empty: the demo snapshot lacks them).
func buildEICU(ctx context.Context, src string, ddl *ehrDDL, rng *rand.Rand) (*ehrBuild, []string, error) {
	b := newEHRBuild(ddl)
	path := func(n string) string { return filepath.Join(src, n+".csv.gz") }
	atoi := func(s string) (int, bool) {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		return n, err == nil
	}

	var stays []*eicuStay
	var los []float64
	cols := []string{"patientunitstayid", "patienthealthsystemstayid", "uniquepid", "gender", "age", "ethnicity", "hospitalid",
		"wardid", "admissionheight", "admissionweight", "dischargeweight", "hospitaladmittime24", "hospitaladmitsource",
		"hospitaldischargestatus", "hospitaladmitoffset", "unitdischargeoffset", "hospitaldischargeoffset", "hospitaldischargeyear"}
	err := csvRows(ctx, path("patient"), func(get func(string) string) error {
		s := &eicuStay{get: map[string]string{}}
		for _, c := range cols {
			s.get[c] = strings.TrimSpace(get(c))
		}
		g := strings.ToLower(s.get["gender"])
		age := s.get["age"]
		if age == "> 89" {
			age = "90"
		}
		a, okAge := atoi(age)
		var ok1, ok2, ok3, ok4 bool
		s.admitOff, ok1 = atoi(s.get["hospitaladmitoffset"])
		s.unitDisOff, ok2 = atoi(s.get["unitdischargeoffset"])
		s.hospDis, ok3 = atoi(s.get["hospitaldischargeoffset"])
		s.year, ok4 = atoi(s.get["hospitaldischargeyear"])
		if (g != "male" && g != "female") || !okAge || a <= 10 || s.get["hospitaladmitsource"] == "" ||
			!ok1 || !ok2 || !ok3 || !ok4 || !(s.admitOff <= 0 && 0 < s.unitDisOff && s.unitDisOff <= s.hospDis) {
			return nil
		}
		if _, err := time.Parse("15:04:05", s.get["hospitaladmittime24"]); err != nil {
			return nil
		}
		s.age = a
		s.unitStay, s.hospStay, s.pid = s.get["patientunitstayid"], s.get["patienthealthsystemstayid"], strings.ToLower(s.get["uniquepid"])
		los = append(los, float64(s.hospDis-s.admitOff))
		stays = append(stays, s)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	cut := percentile95(los)
	kept := stays[:0]
	for _, s := range stays {
		if float64(s.hospDis-s.admitOff) < cut {
			kept = append(kept, s)
		}
	}
	stays = kept

	// Time shift per patient: first year, then one date per hospital stay
	// in equal slices of its year, in stay order.
	byPID := map[string][]*eicuStay{}
	var pids []string
	for _, s := range stays {
		if byPID[s.pid] == nil {
			pids = append(pids, s.pid)
		}
		byPID[s.pid] = append(byPID[s.pid], s)
	}
	sort.Strings(pids)
	hospAdmit := map[string]time.Time{}
	for _, pid := range pids {
		ss := byPID[pid]
		sort.SliceStable(ss, func(i, j int) bool {
			return ss[i].year < ss[j].year || ss[i].year == ss[j].year && ss[i].hospStay < ss[j].hospStay
		})
		first, minAge := ss[0].year, ss[0].age
		for _, s := range ss {
			minAge = min(minAge, s.age)
		}
		y := drawTargetYear(rng)
		yearStays := map[int][]string{}
		for _, s := range ss {
			list := yearStays[s.year]
			if len(list) == 0 || list[len(list)-1] != s.hospStay {
				yearStays[s.year] = append(list, s.hospStay)
			}
		}
		for _, d := range sortedIntKeys(yearStays) {
			hs := yearStays[d]
			for i, h := range hs {
				lo, hi := i*365/len(hs), (i+1)*365/len(hs)
				day := lo + rng.IntN(max(1, hi-lo))
				hospAdmit[h] = time.Date(y+d-first, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, day)
			}
		}
		for _, s := range ss {
			tod, _ := time.Parse("15:04:05", s.get["hospitaladmittime24"])
			ha := hospAdmit[s.hospStay].Add(time.Duration(tod.Hour())*time.Hour + time.Duration(tod.Minute())*time.Minute + time.Duration(tod.Second())*time.Second)
			s.unitAdmit = ha.Add(-time.Duration(s.admitOff) * time.Minute)
			s.age = minAge + s.year - first
		}
	}
	// ~10% of patients get a shift that puts now inside their last unit stay.
	cands := append([]string(nil), pids...)
	rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	current := append([]string(nil), cands[:(len(pids)+5)/10]...)
	sort.Strings(current)
	for _, pid := range current {
		ss := byPID[pid]
		last := ss[0]
		for _, s := range ss {
			if s.unitAdmit.After(last.unitAdmit) {
				last = s
			}
		}
		u := 0.3 + 0.4*rng.Float64()
		target := last.unitAdmit.Add(time.Duration(u * float64(last.unitDisOff) * float64(time.Minute)))
		delta := ehrNowTime.Sub(target).Truncate(time.Minute)
		for _, s := range ss {
			s.unitAdmit = s.unitAdmit.Add(delta)
		}
	}

	unitAdmit := map[string]time.Time{}
	stayOf := map[string]*eicuStay{}
	for _, s := range stays {
		if s.unitAdmit.Add(time.Duration(s.admitOff) * time.Minute).After(ehrNowTime) {
			continue // hospital admission after now
		}
		at := func(off int) any { return fmtTime(s.unitAdmit.Add(time.Duration(off) * time.Minute)) }
		ua := at(0)
		if ua == nil {
			continue
		}
		unitAdmit[s.unitStay], stayOf[s.unitStay] = s.unitAdmit, s
		v := map[string]any{"uniquepid": s.pid, "patienthealthsystemstayid": optInt(s.hospStay), "patientunitstayid": optInt(s.unitStay),
			"gender": lowerText(s.get["gender"]), "age": strconv.Itoa(s.age), "ethnicity": lowerText(s.get["ethnicity"]),
			"hospitalid": optInt(s.get["hospitalid"]), "wardid": optInt(s.get["wardid"]),
			"admissionheight": optFloat(s.get["admissionheight"]), "admissionweight": optFloat(s.get["admissionweight"]),
			"dischargeweight": optFloat(s.get["dischargeweight"]), "hospitaladmittime": at(s.admitOff),
			"hospitaladmitsource": lowerText(s.get["hospitaladmitsource"]), "unitadmittime": ua,
			"unitdischargetime": at(s.unitDisOff), "hospitaldischargetime": at(s.hospDis),
			"hospitaldischargestatus": lowerText(s.get["hospitaldischargestatus"])}
		if v["hospitaldischargetime"] == nil || v["unitdischargetime"] == nil {
			v["hospitaldischargestatus"], v["dischargeweight"] = nil, nil
		}
		b.add("patient", v)
	}
	// eventTime is an event's time from its offset; ok is false when the
	// stay is not kept or the time is after now.
	eventTime := func(stay, off string) (string, bool) {
		ua, ok := unitAdmit[strings.TrimSpace(stay)]
		m, okOff := atoi(off)
		if !ok || !okOff {
			return "", false
		}
		t := fmtTime(ua.Add(time.Duration(m) * time.Minute))
		if t == nil {
			return "", false
		}
		return t.(string), true
	}

	// diagnosis, treatment: names from the |-path (levels 3–4), keeping
	// rows under the most common parent (levels 1–2) of their name.
	for _, spec := range []struct{ file, table, str, off, id, name string }{
		{"diagnosis", "diagnosis", "diagnosisstring", "diagnosisoffset", "diagnosisid", "diagnosisname"},
		{"treatment", "treatment", "treatmentstring", "treatmentoffset", "treatmentid", "treatmentname"},
	} {
		type ev struct {
			v      map[string]any
			name   string
			parent string
		}
		var evs []ev
		parents := map[string]map[string]int{}
		err := csvRows(ctx, path(spec.file), func(get func(string) string) error {
			parts := strings.Split(strings.ToLower(strings.TrimSpace(get(spec.str))), "|")
			if len(parts) < 3 {
				return nil
			}
			t, ok := eventTime(get("patientunitstayid"), get(spec.off))
			if !ok {
				return nil
			}
			name := strings.TrimSpace(parts[2])
			if len(parts) >= 4 {
				name += " - " + strings.TrimSpace(parts[3])
			}
			if strings.ContainsAny(name, `'"`) {
				return nil
			}
			parent := parts[0] + "|" + parts[1]
			if parents[name] == nil {
				parents[name] = map[string]int{}
			}
			parents[name][parent]++
			v := map[string]any{"patientunitstayid": optInt(get("patientunitstayid")), spec.name: name,
				strings.TrimSuffix(spec.name, "name") + "time": t}
			if spec.table == "diagnosis" {
				v["icd9code"] = lowerText(get("icd9code"))
			}
			evs = append(evs, ev{v, name, parent})
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		top := map[string]string{}
		for name, m := range parents {
			best, n := "", -1
			for p, c := range m {
				if c > n || (c == n && p < best) {
					best, n = p, c
				}
			}
			top[name] = best
		}
		for _, e := range evs {
			if top[e.name] == e.parent {
				b.add(spec.table, e.v)
			}
		}
	}

	err = csvRows(ctx, path("medication"), func(get func(string) string) error {
		drug, dose, route := lowerText(get("drugname")), lowerText(get("dosage")), lowerText(get("routeadmin"))
		if drug == nil || dose == nil || route == nil || lowerText(get("drugordercancelled")) != "no" {
			return nil
		}
		start, ok := eventTime(get("patientunitstayid"), get("drugstartoffset"))
		if !ok {
			return nil
		}
		v := map[string]any{"patientunitstayid": optInt(get("patientunitstayid")), "drugname": drug, "dosage": dose,
			"routeadmin": route, "drugstarttime": start}
		if stop, ok := eventTime(get("patientunitstayid"), get("drugstopoffset")); ok {
			v["drugstoptime"] = stop
		}
		b.add("medication", v)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = csvRows(ctx, path("allergy"), func(get func(string) string) error {
		name := lowerText(get("allergyname"))
		t, ok := eventTime(get("patientunitstayid"), get("allergyoffset"))
		if name == nil || !ok {
			return nil
		}
		b.add("allergy", map[string]any{"patientunitstayid": optInt(get("patientunitstayid")), "drugname": lowerText(get("drugname")),
			"allergyname": name, "allergytime": t})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = csvRows(ctx, path("intakeOutput"), func(get func(string) string) error {
		cp := strings.ToLower(strings.TrimSpace(get("cellpath")))
		if !strings.Contains(cp, "intake (ml)") && !strings.Contains(cp, "output (ml)") {
			return nil
		}
		label := strings.ToLower(strings.TrimSpace(get("celllabel")))
		if label == "intake" || label == "output" {
			return nil
		}
		label = strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(label, " intake"), " output"))
		num := optFloat(get("cellvaluenumeric"))
		t, ok := eventTime(get("patientunitstayid"), get("intakeoutputoffset"))
		if label == "" || num == nil || !ok {
			return nil
		}
		b.add("intakeoutput", map[string]any{"patientunitstayid": optInt(get("patientunitstayid")), "cellpath": cp,
			"celllabel": label, "cellvaluenumeric": num, "intakeoutputtime": t})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = csvRows(ctx, path("microLab"), func(get func(string) string) error {
		site, org := lowerText(get("culturesite")), lowerText(get("organism"))
		t, ok := eventTime(get("patientunitstayid"), get("culturetakenoffset"))
		if site == nil || org == nil || !ok {
			return nil
		}
		b.add("microlab", map[string]any{"patientunitstayid": optInt(get("patientunitstayid")), "culturesite": site,
			"organism": org, "culturetakentime": t})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for _, t := range b.ordered() {
		if n := strings.ToLower(t.name); n != "patient" {
			b.renumber(n)
		}
	}

	// cost: one charge per diagnosis, treatment and medication (lab is
	// empty), priced per name; lab would reuse the diagnosis mean.
	pricer := newCostPricer(rng, []string{"diagnosis", "treatment", "medication"})
	for _, ev := range []struct{ table, name, time string }{
		{"diagnosis", "diagnosisname", "diagnosistime"}, {"treatment", "treatmentname", "treatmenttime"},
		{"medication", "drugname", "drugstarttime"},
	} {
		t := b.tables[ev.table]
		ci := colIndex(t.cols)
		for _, r := range t.rows {
			s := stayOf[ehrValueText(r[ci["patientunitstayid"]])]
			b.add("cost", map[string]any{"uniquepid": s.pid, "patienthealthsystemstayid": optInt(s.hospStay), "eventtype": ev.table,
				"eventid": r[0], "chargetime": r[ci[ev.time]], "cost": pricer.price(ev.table, ehrValueText(r[ci[ev.name]]))})
		}
	}
	b.renumber("cost")
	if len(b.tables["patient"].rows) == 0 {
		return nil, nil, fmt.Errorf("eicu: no patient stays kept")
	}
	return b, current, nil
}

func sortedIntKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
