package mimicfhir

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// The MIMIC-IV demo has no names and only an anchor age: MIMIC-IV on FHIR
// writes a Patient's name as "Patient_<subject_id>" and no birth date.
// Tasks that look a patient up by name and date of birth (MedAgentBench's
// first task type) need both, so this build invents them, deterministically
// from the subject_id alone:
//
//   - the name: a given name (from the female or male list, by MIMIC's
//     gender) and a family name, each picked by bytes of
//     SHA-1(namespace "Patient-name", subject_id) (the same UUID version 5
//     construction as the ids); when the pair is already taken by a
//     patient with a smaller subject_id, the family name moves on through
//     the list until the pair is free, so every patient's full name is
//     unique;
//   - the birth date: in the year anchor_year − anchor_age (the age MIMIC
//     gives at anchor_year, so the age at the patient's anchor_year is
//     anchor_age or anchor_age − 1), on a day of that year picked the same
//     way. MIMIC caps ages over 89 at 91: such a patient's birth year is
//     anchor_year − 91.
//
// The Patient carries a meta.tag ("synthetic-name-and-birthdate") saying
// so. The lists are common US given and family names; the pairs mean
// nothing.

var femaleGiven = []string{
	"Mary", "Patricia", "Jennifer", "Linda", "Elizabeth", "Barbara", "Susan", "Jessica", "Sarah", "Karen",
	"Lisa", "Nancy", "Betty", "Margaret", "Sandra", "Ashley", "Kimberly", "Emily", "Donna", "Michelle",
	"Carol", "Amanda", "Dorothy", "Melissa", "Deborah", "Stephanie", "Rebecca", "Sharon", "Laura", "Cynthia",
}

var maleGiven = []string{
	"James", "Robert", "John", "Michael", "David", "William", "Richard", "Joseph", "Thomas", "Charles",
	"Christopher", "Daniel", "Matthew", "Anthony", "Mark", "Donald", "Steven", "Paul", "Andrew", "Joshua",
	"Kenneth", "Kevin", "Brian", "George", "Timothy", "Ronald", "Edward", "Jason", "Jeffrey", "Ryan",
}

var familyNames = []string{
	"Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
	"Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore", "Jackson", "Martin",
	"Lee", "Perez", "Thompson", "White", "Harris", "Sanchez", "Clark", "Ramirez", "Lewis", "Robinson",
	"Walker", "Young", "Allen", "King", "Wright", "Scott", "Torres", "Nguyen", "Hill", "Flores",
}

// Demographics is a patient's synthetic name and birth date.
type Demographics struct {
	Given, Family string
	BirthDate     string // YYYY-MM-DD
}

// nameSeed is the UUID version 5 behind a subject's synthetic name and
// birth date.
func nameSeed(subjectID string) [16]byte {
	return uuid5(uuid5(mimicNS, "Patient-name"), subjectID)
}

// patientRow is what the synthetic demographics are computed from.
type patientRow struct {
	SubjectID, Gender     string
	AnchorAge, AnchorYear int
}

// syntheticDemographics assigns every patient its name and birth date
// (see above), keyed by subject_id.
func syntheticDemographics(rows []patientRow) (map[string]Demographics, error) {
	sorted := slices.Clone(rows)
	slices.SortFunc(sorted, func(a, b patientRow) int {
		x, _ := strconv.ParseInt(a.SubjectID, 10, 64)
		y, _ := strconv.ParseInt(b.SubjectID, 10, 64)
		return int(x - y)
	})
	taken := map[string]bool{}
	out := make(map[string]Demographics, len(rows))
	for _, r := range sorted {
		seed := nameSeed(r.SubjectID)
		given := maleGiven
		if r.Gender == "F" {
			given = femaleGiven
		}
		g := given[binary.BigEndian.Uint32(seed[0:4])%uint32(len(given))]
		fi := int(binary.BigEndian.Uint32(seed[4:8]) % uint32(len(familyNames)))
		var f string
		for n := 0; ; n++ {
			if n == len(familyNames) {
				return nil, fmt.Errorf("synthetic names: no free family name for given name %s", g)
			}
			f = familyNames[(fi+n)%len(familyNames)]
			if !taken[g+" "+f] {
				break
			}
		}
		taken[g+" "+f] = true
		year := r.AnchorYear - r.AnchorAge
		days := 365
		if time.Date(year, 12, 31, 0, 0, 0, 0, time.UTC).YearDay() == 366 {
			days = 366
		}
		day := int(binary.BigEndian.Uint32(seed[8:12]) % uint32(days))
		birth := time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, day)
		out[r.SubjectID] = Demographics{Given: g, Family: f, BirthDate: birth.Format(time.DateOnly)}
	}
	return out, nil
}
