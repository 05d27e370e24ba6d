package generate

// Python reference code for the biostat tasks. A reference is the task's
// parameters as Python assignments, then bsPrelude, then one body. It reads
// the CSV from $MEDGYM_DATA_DIR (default /data/biostat) and prints the
// answer alone on the last line.

const bsPrelude = `import os
import numpy as np
import pandas as pd
from scipy import stats

DATA = os.environ.get("MEDGYM_DATA_DIR", "/data/biostat")
df = pd.read_csv(os.path.join(DATA, FILE))
`

const bsSurvPrelude = `if SUB is not None:
    df = df[df[SUB] == SV]
d = df.dropna(subset=[T, E] + COLS)
time = d[T].astype(float).to_numpy()
event = (d[E] == EV).to_numpy()


def kaplan_meier(t, e):
    times = np.unique(t[e])
    surv, s = [], 1.0
    for u in times:
        s *= 1 - (e & (t == u)).sum() / (t >= u).sum()
        surv.append(s)
    return times, np.array(surv)
`

// bsBodies maps a body name to its Python code.
var bsBodies = map[string]string{
	"two_sample": `d = df.dropna(subset=[Y, G])
a = d.loc[d[G] == A, Y].astype(float)
b = d.loc[d[G] == B, Y].astype(float)
if TEST == "welch":
    r = stats.ttest_ind(a, b, equal_var=False)
elif TEST == "student":
    r = stats.ttest_ind(a, b, equal_var=True)
else:
    r = stats.mannwhitneyu(a, b, use_continuity=True, alternative="two-sided", method="asymptotic")
answer = r.statistic if WHAT == "stat" else r.pvalue
print(f"{answer:.10g}")
`,
	"paired": `d = df
if G is not None:
    d = d[d[G] == A]
d = d.dropna(subset=[X1, X2])
r = stats.ttest_rel(d[X2].astype(float), d[X1].astype(float))
answer = r.statistic if WHAT == "stat" else r.pvalue
print(f"{answer:.10g}")
`,
	"anova": `d = df.dropna(subset=[Y, G])
groups = [g[Y].astype(float).to_numpy() for _, g in d.groupby(G)]
r = stats.f_oneway(*groups)
answer = r.statistic if WHAT == "stat" else r.pvalue
print(f"{answer:.10g}")
`,
	"chisq": `d = df.dropna(subset=[R, C])
tab = pd.crosstab(d[R], d[C]).to_numpy()
if TEST == "fisher":
    answer = stats.fisher_exact(tab)[1]
else:
    chi2, p, dof, expected = stats.chi2_contingency(tab, correction=True)
    answer = chi2 if WHAT == "stat" else p
print(f"{answer:.10g}")
`,
	"linreg": `d = df.dropna(subset=[X, Y])
x, y = d[X].astype(float), d[Y].astype(float)
if WHAT == "spearman":
    answer = stats.spearmanr(x, y)[0]
elif WHAT == "pearson":
    answer = stats.pearsonr(x, y)[0]
else:
    r = stats.linregress(x, y)
    answer = {"slope": r.slope, "intercept": r.intercept, "r2": r.rvalue ** 2, "slope_p": r.pvalue}[WHAT]
print(f"{answer:.10g}")
`,
	"logreg": `import statsmodels.api as sm

d = df.dropna(subset=[X, G])
y = (d[G] == B).astype(float)
m = sm.Logit(y, sm.add_constant(d[[X]].astype(float))).fit(disp=0)
answer = m.params[X] if WHAT == "coef" else np.exp(m.params[X])
print(f"{answer:.10g}")
`,
	"describe": `d = df
if G is not None:
    d = d[d[G] == A]
if WHAT == "count":
    print(len(d))
else:
    y = d[Y].dropna().astype(float)
    answer = {"mean": y.mean(), "median": y.median(), "sd": y.std(ddof=1)}[WHAT]
    print(f"{answer:.10g}")
`,
	"km": `if G is not None:
    keep = (d[G] == A).to_numpy()
    time, event = time[keep], event[keep]
times, surv = kaplan_meier(time, event)
if WHAT == "median":
    answer = times[np.argmax(surv <= 0.5)]
else:
    answer = surv[times <= AT][-1] if (times <= AT).any() else 1.0
print(f"{answer:.10g}")
`,
	"logrank": `from statsmodels.duration.survfunc import survdiff

chisq, p = survdiff(time, event.astype(int), d[G].to_numpy())
answer = chisq if WHAT == "stat" else p
print(f"{answer:.10g}")
`,
	"cox": `from statsmodels.duration.hazard_regression import PHReg

if B is None:
    x = d[[X]].astype(float).to_numpy()
else:
    x = (d[[X]] == B).astype(float).to_numpy()
m = PHReg(time, x, status=event.astype(int), ties="efron").fit()
answer = {"hr": np.exp(m.params[0]), "coef": m.params[0], "p": m.pvalues[0]}[WHAT]
print(f"{answer:.10g}")
`,
}
