// Package cross is a planted violation, in its test only.
package cross
