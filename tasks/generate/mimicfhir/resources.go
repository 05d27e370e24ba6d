package mimicfhir

import "encoding/json"

// The FHIR R4 elements this conversion writes: only the fields it sets,
// in the order FHIR's JSON examples list them (encoding/json writes struct
// fields in declaration order, so the output is stable).

type meta struct {
	Profile []string `json:"profile,omitempty"`
	Tag     []coding `json:"tag,omitempty"`
}

type coding struct {
	System  string `json:"system,omitempty"`
	Code    string `json:"code,omitempty"`
	Display string `json:"display,omitempty"`
}

type codeableConcept struct {
	Coding []coding `json:"coding,omitempty"`
	Text   string   `json:"text,omitempty"`
}

type identifier struct {
	Use    string `json:"use,omitempty"`
	System string `json:"system"`
	Value  string `json:"value"`
}

type reference struct {
	Reference string `json:"reference"`
}

type period struct {
	Start string `json:"start,omitempty"`
	End   string `json:"end,omitempty"`
}

// quantity's Value is a json.Number so that a source decimal is written
// as the source spells it ("3.35" stays 3.35).
type quantity struct {
	Value      json.Number `json:"value"`
	Comparator string      `json:"comparator,omitempty"`
	Unit       string      `json:"unit,omitempty"`
	System     string      `json:"system,omitempty"`
	Code       string      `json:"code,omitempty"`
}

type humanName struct {
	Use    string   `json:"use,omitempty"`
	Family string   `json:"family"`
	Given  []string `json:"given,omitempty"`
}

type annotation struct {
	Text string `json:"text"`
}

// Patient is a FHIR R4 Patient.
type Patient struct {
	ResourceType     string       `json:"resourceType"`
	ID               string       `json:"id"`
	Meta             meta         `json:"meta"`
	Identifier       []identifier `json:"identifier"`
	Name             []humanName  `json:"name"`
	Gender           string       `json:"gender,omitempty"`
	BirthDate        string       `json:"birthDate,omitempty"`
	DeceasedDateTime string       `json:"deceasedDateTime,omitempty"`
}

type hospitalization struct {
	AdmitSource          *codeableConcept `json:"admitSource,omitempty"`
	DischargeDisposition *codeableConcept `json:"dischargeDisposition,omitempty"`
}

// Encounter is a FHIR R4 Encounter.
type Encounter struct {
	ResourceType    string            `json:"resourceType"`
	ID              string            `json:"id"`
	Meta            meta              `json:"meta"`
	Identifier      []identifier      `json:"identifier"`
	Status          string            `json:"status"`
	Class           coding            `json:"class"`
	Type            []codeableConcept `json:"type,omitempty"`
	Subject         reference         `json:"subject"`
	Period          period            `json:"period"`
	Hospitalization *hospitalization  `json:"hospitalization,omitempty"`
}

type referenceRange struct {
	Low  *quantity `json:"low,omitempty"`
	High *quantity `json:"high,omitempty"`
}

// Observation is a FHIR R4 Observation (a lab result or a vital sign).
type Observation struct {
	ResourceType      string            `json:"resourceType"`
	ID                string            `json:"id"`
	Meta              meta              `json:"meta"`
	Identifier        []identifier      `json:"identifier,omitempty"`
	Status            string            `json:"status"`
	Category          []codeableConcept `json:"category"`
	Code              codeableConcept   `json:"code"`
	Subject           reference         `json:"subject"`
	Encounter         *reference        `json:"encounter,omitempty"`
	EffectiveDateTime string            `json:"effectiveDateTime"`
	Issued            string            `json:"issued,omitempty"`
	ValueQuantity     *quantity         `json:"valueQuantity,omitempty"`
	ValueString       string            `json:"valueString,omitempty"`
	Interpretation    []codeableConcept `json:"interpretation,omitempty"`
	Note              []annotation      `json:"note,omitempty"`
	ReferenceRange    []referenceRange  `json:"referenceRange,omitempty"`
}

// Condition is a FHIR R4 Condition (a billed diagnosis of an admission).
type Condition struct {
	ResourceType   string            `json:"resourceType"`
	ID             string            `json:"id"`
	Meta           meta              `json:"meta"`
	Identifier     []identifier      `json:"identifier"`
	ClinicalStatus codeableConcept   `json:"clinicalStatus"`
	Category       []codeableConcept `json:"category"`
	Code           codeableConcept   `json:"code"`
	Subject        reference         `json:"subject"`
	Encounter      reference         `json:"encounter"`
}

// Procedure is a FHIR R4 Procedure (a billed procedure of an admission).
type Procedure struct {
	ResourceType      string          `json:"resourceType"`
	ID                string          `json:"id"`
	Meta              meta            `json:"meta"`
	Identifier        []identifier    `json:"identifier"`
	Status            string          `json:"status"`
	Code              codeableConcept `json:"code"`
	Subject           reference       `json:"subject"`
	Encounter         reference       `json:"encounter"`
	PerformedDateTime string          `json:"performedDateTime,omitempty"`
}

type doseAndRate struct {
	DoseQuantity *quantity `json:"doseQuantity,omitempty"`
}

type dosage struct {
	Text        string           `json:"text,omitempty"`
	Route       *codeableConcept `json:"route,omitempty"`
	DoseAndRate []doseAndRate    `json:"doseAndRate,omitempty"`
}

type dispenseRequest struct {
	ValidityPeriod period `json:"validityPeriod"`
}

// MedicationRequest is a FHIR R4 MedicationRequest (a prescription).
type MedicationRequest struct {
	ResourceType              string           `json:"resourceType"`
	ID                        string           `json:"id"`
	Meta                      meta             `json:"meta"`
	Identifier                []identifier     `json:"identifier"`
	Status                    string           `json:"status"`
	Intent                    string           `json:"intent"`
	MedicationCodeableConcept codeableConcept  `json:"medicationCodeableConcept"`
	Subject                   reference        `json:"subject"`
	Encounter                 *reference       `json:"encounter,omitempty"`
	AuthoredOn                string           `json:"authoredOn,omitempty"`
	DosageInstruction         []dosage         `json:"dosageInstruction,omitempty"`
	DispenseRequest           *dispenseRequest `json:"dispenseRequest,omitempty"`
}
