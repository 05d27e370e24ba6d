package generate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ehrsql24ChartItems are EHRSQL 2024's chart items (its
// CHARTEVENT2ITEMID): temperature, SaO2, heart rate, respiration rate,
// arterial blood pressure systolic / diastolic / mean, daily weight and
// height.
var ehrsql24ChartItems = map[string]bool{"223762": true, "220277": true, "220045": true, "220210": true,
	"220050": true, "220051": true, "220052": true, "224639": true, "226730": true}

// ehrsql24MEDS is the MEDS-format copy of the demo, relative to the data
// root.
const ehrsql24MEDS = "mimic-iv-demo/fallback_meds/mimic_iv_demo_meds_events.parquet"

// ehr24Stay is one ICU stay as the demo records it (unshifted times).
type ehr24Stay struct {
	hadm, stay string
	in, out    time.Time
}

// nearestStay is the subject's ICU stay nearest to t: one that contains
// it, else the one whose interval is closest.
func nearestStay(stays []ehr24Stay, t time.Time) (ehr24Stay, bool) {
	best, bestD := ehr24Stay{}, time.Duration(math.MaxInt64)
	for _, s := range stays {
		var d time.Duration
		switch {
		case t.Before(s.in):
			d = s.in.Sub(t)
		case t.After(s.out):
			d = t.Sub(s.out)
		}
		if d < bestD {
			best, bestD = s, d
		}
	}
	return best, bestD != time.Duration(math.MaxInt64)
}

// MEDSReader streams the events of a MEDS Parquet file whose code keep
// accepts; github.com/medgym/medgym/tasks/meds.Read is one. It is set with
// SetMEDSReader by the program that generates the library, so that the
// services that only load tasks do not link a Parquet reader.
type MEDSReader func(ctx context.Context, path string, keep func(code string) bool,
	fn func(subject int64, t time.Time, code string, value float32, ok bool) error) error

var medsReader MEDSReader

// SetMEDSReader sets the reader the ehrsql2024 generator uses for the MEDS
// copy of the demo (its chartevents); generating ehrsql2024 without one is
// an error.
func SetMEDSReader(r MEDSReader) { medsReader = r }

// chartevents reconstructs the chart events of EHRSQL's items from the
// MEDS file (build step 9), then applies upstream's filters: a value and a
// unit, the shifted time set and not before 2100, a kept admission.
func (b *ehr24Build) chartevents(ctx context.Context, path string) error {
	if medsReader == nil {
		return errors.New("chartevents: no MEDS reader (tasks.SetMEDSReader(meds.Read) before generating ehrsql2024)")
	}
	keep := func(code string) bool {
		parts := strings.SplitN(code, "//", 3)
		return len(parts) == 3 && parts[0] == "LAB" && ehrsql24ChartItems[parts[1]]
	}
	err := medsReader(ctx, path, keep, func(subject int64, t time.Time, code string, value float32, ok bool) error {
		parts := strings.SplitN(code, "//", 3)
		unit := strings.ToLower(strings.TrimSpace(parts[2]))
		if !ok || unit == "" || unit == "unk" {
			return nil
		}
		s := strconv.FormatInt(subject, 10)
		if !b.cohort[s] {
			return nil
		}
		st, found := nearestStay(b.stays[s], t)
		if !found || !b.hadms[st.hadm] {
			return nil
		}
		ct := b.shift(s, t.Format(ehrTimeLayout))
		if !keepEvent(ct) {
			return nil
		}
		v := math.Round(float64(value)*1e4) / 1e4
		b.add("chartevents", map[string]any{"subject_id": optInt(s), "hadm_id": optInt(st.hadm), "stay_id": optInt(st.stay),
			"itemid": optInt(parts[1]), "charttime": ct, "valuenum": v, "valueuom": unit})
		return nil
	})
	if err != nil {
		return fmt.Errorf("chartevents: %w", err)
	}
	return nil
}
