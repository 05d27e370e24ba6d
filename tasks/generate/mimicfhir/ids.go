package mimicfhir

import (
	"crypto/sha1"
	"encoding/hex"
)

// uuidNSOID is RFC 4122's name space for ISO OIDs (6ba7b812-…).
var uuidNSOID = [16]byte{0x6b, 0xa7, 0xb8, 0x12, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

// uuid5 is an RFC 4122 version 5 (SHA-1) UUID of name in namespace ns.
func uuid5(ns [16]byte, name string) [16]byte {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = (u[6] & 0x0f) | 0x50
	u[8] = (u[8] & 0x3f) | 0x80
	return u
}

// uuidString formats u as 8-4-4-4-12 lower-case hex.
func uuidString(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:16])
	return string(b[:])
}

// mimicNS is the root namespace of MIMIC-IV on FHIR:
// uuid_generate_v5(uuid_ns_oid(), 'MIMIC-IV').
var mimicNS = uuid5(uuidNSOID, "MIMIC-IV")

// Namespace names of MIMIC-IV on FHIR's fhir_etl.uuid_namespace table.
const (
	nsPatient                = "Patient"
	nsEncounter              = "Encounter"
	nsCondition              = "Condition"
	nsProcedure              = "Procedure"
	nsObservationLabs        = "ObservationLabs"
	nsObservationChartevents = "ObservationChartevents"
	nsMedicationRequest      = "MedicationRequest"
)

// ResourceID is the id MIMIC-IV on FHIR gives the resource of the source
// key key in the namespace named ns (e.g. ns "Patient", key the
// subject_id).
func ResourceID(ns, key string) string {
	return uuidString(uuid5(uuid5(mimicNS, ns), key))
}

// PatientID is the id of the Patient of a MIMIC subject_id.
func PatientID(subjectID string) string { return ResourceID(nsPatient, subjectID) }

// EncounterID is the id of the Encounter of a MIMIC hadm_id.
func EncounterID(hadmID string) string { return ResourceID(nsEncounter, hadmID) }
