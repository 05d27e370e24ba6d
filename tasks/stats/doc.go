// Package stats holds the hand-written statistics behind the biostat and
// npowerai task sets: distribution tails (central and noncentral t, F and
// χ²), classical tests, regression, Kaplan–Meier, log-rank and Cox models,
// and power/sample-size formulas. Results follow R's conventions (stats,
// survival, pwr) and are cross-checked against R in the tasks tests.
//
// Functions return an error only for inputs they cannot handle (too few
// observations, zero variance, non-convergence); they never panic on data.
package stats
