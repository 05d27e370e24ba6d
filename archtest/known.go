package archtest

// KnownViolations are the violations main still has, each with the issue
// that removes it. The test fails when one is gone: delete it here then.
var KnownViolations = []Violation{}
