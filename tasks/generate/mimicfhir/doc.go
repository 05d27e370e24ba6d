// Package mimicfhir converts the MIMIC-IV Clinical Database Demo into FHIR
// R4 resources, deterministically: the same source files give the same
// bytes. It follows the published MIMIC-IV on FHIR mapping of the MIT
// Laboratory for Computational Physiology (Bennett et al., "MIMIC-IV on
// FHIR", JAMIA 30(4), 2023; the demo release, PhysioNet,
// https://doi.org/10.13026/2f5g-dh02; the ETL at
// github.com/kind-lab/mimic-fhir) where it exists: the same resource ids
// (UUID version 5 of the source key in a per-resource namespace derived
// from the OID namespace and "MIMIC-IV"), the same identifier systems,
// profiles and MIMIC code systems. Where this build differs (synthetic
// names and full birth dates, LOINC codings from a small shipped map, vital
// signs from the demo's MEDS copy), docs/reference/data-and-licences.md and
// the LICENSE.md written beside the output say so.
//
// Times are written as they are in MIMIC, which already shifted every
// patient's dates into the future (2100–2200) for de-identification: no
// further shift is applied. MIMIC's times carry no zone; they are written
// with a "+00:00" offset (the MIMIC-IV on FHIR release writes "-04:00"),
// so that a task's current time and every search bound are plain UTC.
//
// The output is one NDJSON file per resource type (the FHIR bulk-data
// format, as the MIMIC-IV on FHIR release ships it), a LICENSE.md and a
// MANIFEST.json with the SHA-256 of every file. It is imported by the
// command line only (archtest: no service depends on the generators).
package mimicfhir
