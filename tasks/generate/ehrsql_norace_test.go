//go:build !race

package generate

// ehrRaceBuild is true under the race detector (see ehrsql_race_test.go).
const ehrRaceBuild = false
