package tasks

// What the EHR SQL task sets share between their generators (package
// generate) and the loader of upstream's task folders (upstream.go).

// EHRSQLTolerance is the relative tolerance of an EHR SQL task's numeric
// answers.
const EHRSQLTolerance = 1e-4

// EHRSQLActions are the actions an EHR SQL agent may use.
var EHRSQLActions = []string{"request_info", "validate_code", "debug", "answer"}

// TREQSTable is one table of the TREQS schema; the column order is the
// index order of MIMICSQL's `format` field.
type TREQSTable struct {
	Name  string
	Cols  []string
	Types []string // SQLite declared types, parallel to Cols
}

// TREQSSchema lists the tables in MIMICSQL's table-index order: 0
// DEMOGRAPHIC, 1 DIAGNOSES, 2 PROCEDURES, 3 PRESCRIPTIONS, 4 LAB.
var TREQSSchema = []TREQSTable{
	{Name: "DEMOGRAPHIC", Cols: []string{"SUBJECT_ID", "HADM_ID", "NAME", "MARITAL_STATUS", "AGE", "DOB", "GENDER",
		"LANGUAGE", "RELIGION", "ADMISSION_TYPE", "DAYS_STAY", "INSURANCE", "ETHNICITY", "EXPIRE_FLAG",
		"ADMISSION_LOCATION", "DISCHARGE_LOCATION", "DIAGNOSIS", "DOD", "DOB_YEAR", "DOD_YEAR", "ADMITTIME",
		"DISCHTIME", "ADMITYEAR"}},
	{Name: "DIAGNOSES", Cols: []string{"SUBJECT_ID", "HADM_ID", "ICD9_CODE", "SHORT_TITLE", "LONG_TITLE"}},
	{Name: "PROCEDURES", Cols: []string{"SUBJECT_ID", "HADM_ID", "ICD9_CODE", "SHORT_TITLE", "LONG_TITLE"}},
	{Name: "PRESCRIPTIONS", Cols: []string{"SUBJECT_ID", "HADM_ID", "ICUSTAY_ID", "DRUG_TYPE", "DRUG",
		"FORMULARY_DRUG_CD", "ROUTE", "DRUG_DOSE"}},
	{Name: "LAB", Cols: []string{"SUBJECT_ID", "HADM_ID", "ITEMID", "CHARTTIME", "FLAG", "VALUE_UNIT", "LABEL",
		"FLUID", "CATEGORY"}},
}

// EHRSQL2024Decimals is the decimals EHRSQL 2024's scorer rounds numeric
// result cells to before it compares them (its answers are printed so):
// Truth.Decimals of the ehrsql2024 tasks.
const EHRSQL2024Decimals = 3
