package mimicfhir

// Systems, profiles and identifier systems of MIMIC-IV on FHIR (the
// mimic-profiles implementation guide), and the standard ones used beside
// them.
const (
	mimicBase = "http://mimic.mit.edu/fhir/mimic/"

	profilePatient           = mimicBase + "StructureDefinition/mimic-patient"
	profileEncounter         = mimicBase + "StructureDefinition/mimic-encounter"
	profileObservationLabs   = mimicBase + "StructureDefinition/mimic-observation-labevents"
	profileObservationChart  = mimicBase + "StructureDefinition/mimic-observation-chartevents"
	profileCondition         = mimicBase + "StructureDefinition/mimic-condition"
	profileProcedure         = mimicBase + "StructureDefinition/mimic-procedure"
	profileMedicationRequest = mimicBase + "StructureDefinition/mimic-medication-request"

	// IdentifierPatient is the system of a Patient's MIMIC subject_id,
	// the patient's medical record number in this scenario.
	IdentifierPatient = mimicBase + "identifier/patient"
	// IdentifierEncounter is the system of an Encounter's hadm_id.
	IdentifierEncounter         = mimicBase + "identifier/encounter-hosp"
	identifierObservationLabs   = mimicBase + "identifier/observation-labevents"
	identifierObservationChart  = mimicBase + "identifier/observation-chartevents"
	identifierCondition         = mimicBase + "identifier/condition"
	identifierProcedure         = mimicBase + "identifier/procedure"
	identifierMedicationRequest = mimicBase + "identifier/medication-request"

	// SystemLabItems codes a lab Observation by MIMIC's d_labitems itemid.
	SystemLabItems = mimicBase + "CodeSystem/mimic-d-labitems"
	// SystemChartItems codes a vital-sign Observation by MIMIC's d_items
	// itemid.
	SystemChartItems  = mimicBase + "CodeSystem/mimic-chartevents-d-items"
	systemUnits       = mimicBase + "CodeSystem/mimic-units"
	systemLabFlags    = mimicBase + "CodeSystem/mimic-lab-flags"
	systemDiagICD9    = mimicBase + "CodeSystem/mimic-diagnosis-icd9"
	systemDiagICD10   = mimicBase + "CodeSystem/mimic-diagnosis-icd10"
	systemProcICD9    = mimicBase + "CodeSystem/mimic-procedure-icd9"
	systemProcICD10   = mimicBase + "CodeSystem/mimic-procedure-icd10"
	systemAdmType     = mimicBase + "CodeSystem/mimic-admission-type"
	systemAdmitSource = mimicBase + "CodeSystem/mimic-admit-source"
	systemDischarge   = mimicBase + "CodeSystem/mimic-discharge-disposition"
	systemMedFormCode = mimicBase + "CodeSystem/mimic-medication-formulary-drug-cd"
	systemMedRoute    = mimicBase + "CodeSystem/mimic-medication-route"

	// SystemLOINC is LOINC's code system URI.
	SystemLOINC       = "http://loinc.org"
	systemNDC         = "http://hl7.org/fhir/sid/ndc"
	systemObsCategory = "http://terminology.hl7.org/CodeSystem/observation-category"
	systemActCode     = "http://terminology.hl7.org/CodeSystem/v3-ActCode"
	systemCondClin    = "http://terminology.hl7.org/CodeSystem/condition-clinical"
	systemCondCat     = "http://terminology.hl7.org/CodeSystem/condition-category"

	// systemMedgymTag tags what this build adds that MIMIC does not have.
	systemMedgymTag = "https://github.com/medgym/medgym/fhir/tag"
)

// loincCode is one LOINC code with its long common name.
type loincCode struct{ Code, Display string }

// LabLOINC maps the MIMIC-IV d_labitems itemids the scenario's tasks read
// (and a few common ones) to LOINC. The demo's d_labitems (v2.2) has no
// loinc_code column, so this small map ships with the code; an itemid not
// in it keeps its MIMIC coding only. Each entry matches the item's fluid
// and unit in d_labitems (e.g. 50960 "Magnesium", Blood, mg/dL).
var LabLOINC = map[string]loincCode{
	"50960": {"19123-9", "Magnesium [Mass/volume] in Serum or Plasma"},
	"50931": {"2345-7", "Glucose [Mass/volume] in Serum or Plasma"},
	"50809": {"2339-0", "Glucose [Mass/volume] in Blood"},
	"50971": {"2823-3", "Potassium [Moles/volume] in Serum or Plasma"},
	"50822": {"6298-4", "Potassium [Moles/volume] in Blood"},
	"50852": {"4548-4", "Hemoglobin A1c/Hemoglobin.total in Blood"},
	"50983": {"2951-2", "Sodium [Moles/volume] in Serum or Plasma"},
	"50912": {"2160-0", "Creatinine [Mass/volume] in Serum or Plasma"},
	"51222": {"718-7", "Hemoglobin [Mass/volume] in Blood"},
	"51301": {"6690-2", "Leukocytes [#/volume] in Blood by Automated count"},
}

// VitalItems maps the MIMIC-IV chartevents itemids converted to vital-sign
// Observations to LOINC (code "" where no LOINC code is given).
var VitalItems = map[string]loincCode{
	"220045": {"8867-4", "Heart rate"},
	"220179": {"8480-6", "Systolic blood pressure"},
	"220180": {"8462-4", "Diastolic blood pressure"},
	"220181": {"8478-0", "Mean blood pressure"},
	"220050": {"", ""}, // arterial (invasive) systolic: MIMIC coding only
	"220051": {"", ""}, // arterial diastolic
	"220052": {"", ""}, // arterial mean
	"220210": {"9279-1", "Respiratory rate"},
	"220277": {"59408-5", "Oxygen saturation in Arterial blood by Pulse oximetry"},
	"223762": {"8310-5", "Body temperature"},
	"224639": {"29463-7", "Body weight"},
	"226512": {"29463-7", "Body weight"},
	"226730": {"8302-2", "Body height"},
}

// encounterClass maps an admission_type to an HL7 v3 ActCode encounter
// class.
func encounterClass(admissionType string) coding {
	switch admissionType {
	case "EW EMER.", "DIRECT EMER.":
		return coding{System: systemActCode, Code: "EMER", Display: "emergency"}
	case "EU OBSERVATION", "OBSERVATION ADMIT", "DIRECT OBSERVATION", "AMBULATORY OBSERVATION":
		return coding{System: systemActCode, Code: "OBSENC", Display: "observation encounter"}
	default: // URGENT, ELECTIVE, SURGICAL SAME DAY ADMISSION
		return coding{System: systemActCode, Code: "IMP", Display: "inpatient encounter"}
	}
}
