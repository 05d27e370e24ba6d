//go:build race

package generate

// ehrRaceBuild is true under the race detector, where the transpiled
// SQLite runs about 20× slower and a full generation takes many minutes.
const ehrRaceBuild = true
