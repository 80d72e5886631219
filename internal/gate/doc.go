// Package gate decides whether a candidate model may replace the model in
// production, by comparing the candidate's evaluation metrics with
// thresholds and with the production model's (the baseline's) metrics on
// the same held-out data.
//
// Everything here is a pure function of its arguments: no clock, no I/O, no
// global state. A gate node in a pipeline parses its `with` block with
// [ParseConfig] (the DAG validator calls the same function before a run to
// reject a bad spec), scores the metrics with [Evaluate], and a human may
// override a failed result with [Force].
//
// # Configuration
//
//	metrics:
//	  auc:     {direction: higher_is_better, min: 0.7, min_absolute_change: -0.002}
//	  logloss: {direction: lower_is_better, min_relative_change: -0.01}
//	no_baseline: value_only   # value_only (default) | block | bless
//	zero_baseline: fail       # fail (default) | skip_relative
//
// Each metric has one or more checks:
//
//   - min, max: value bounds on the candidate, both inclusive: the check
//     passes when min <= candidate (value_min) and candidate <= max
//     (value_max). A candidate exactly at a bound passes. Value bounds
//     ignore direction and baseline.
//   - min_absolute_change, min_relative_change: change thresholds against
//     the baseline (checks of the same names). They need a direction,
//     higher_is_better or lower_is_better.
//
// # Change thresholds
//
// With c the candidate's value and b the baseline's:
//
//	diff     = c - b                  (check "min_absolute_change")
//	relative = (c - b) / |b|          (check "min_relative_change")
//
// The relative change is divided by the absolute value of the baseline, so
// its sign is the sign of c - b whatever the sign of b (a log-likelihood of
// -2.0 improving to -1.8 is a relative change of +0.1, not -0.1). TFX
// documents the relative change as c / b and computes (c - b) / b
// (tensorflow/model-analysis#520); neither is used here.
//
// A change threshold is the minimum improvement, measured in the direction
// that is better for the metric, as MLflow's min_absolute_change and
// min_relative_change are (MLflow takes only positive figures, and its
// relative change is a share of the baseline, not of |baseline|):
//
//	higher_is_better: improvement = diff       (or relative) = c - b
//	lower_is_better:  improvement = -diff      (or -relative) = b - c
//	passes when improvement >= threshold
//
// A positive threshold demands an improvement; a negative one tolerates a
// small regression; zero forbids any regression. So
// {direction: higher_is_better, min_absolute_change: -0.002} lets AUC drop
// by at most 0.002, and {direction: lower_is_better, min_relative_change:
// -0.01} lets log loss rise by at most 1% of |baseline|. The comparison at
// the threshold is inclusive.
//
// Note for users of TFX: its LOWER_IS_BETTER thresholds bound the raw diff
// (diff <= t); the same limit is min_absolute_change: -t here, so that one
// reading ("how much better must it be") holds for both directions. The
// keys were once called absolute and relative, TFX's names with this
// package's meaning, so a config copied from TFX inverted silently for
// lower_is_better; [ParseConfig] now refuses those keys with an error that
// gives the equivalent new setting ([RemovedKeyError]).
//
// # Failures that never pass silently
//
//   - A configured metric missing from the candidate's evaluation fails
//     every check of that metric, naming it. A metric missing from the
//     baseline's evaluation fails that metric's change checks.
//   - NaN, +Inf or -Inf in the candidate fails every check of the metric; in
//     the baseline, every change check of the metric. A diff that overflows
//     to an infinity fails too. (A plain comparison would let +Inf pass a
//     min bound.)
//   - A baseline of exactly 0 (either sign) fails a relative check, since
//     the relative change is undefined, unless zero_baseline is
//     skip_relative, which skips it. The min_absolute_change check is
//     unaffected.
//
// # No baseline
//
// When there is no production model yet (Evaluate gets a nil baseline):
//
//   - value_only (the default): value bounds are checked, change checks are
//     reported as skipped.
//   - block: every change check fails (reason: no baseline). A config with
//     no change threshold at all cannot block anything, so Validate rejects
//     block there instead of letting it pass silently.
//   - bless: change checks are skipped, and value bounds still apply: a
//     first model that misses an absolute floor (say AUC >= 0.7) is not
//     deployed just because there is nothing to compare it with. It
//     differs from value_only when no check is left to evaluate (below).
//
// A gate passes when every comparison passed and at least one was actually
// evaluated. If every comparison was skipped (no baseline and no value
// bounds under value_only, or only relative checks against zero baselines
// under skip_relative) the gate fails with the reason "nothing was
// checked", as tfx#5148 asks for an empty configuration. The one exception
// is no_baseline: bless without a baseline, which is an explicit choice to
// accept the first model.
//
// # Configuration errors
//
// [Config.Validate] (called by ParseConfig and Evaluate) rejects: no metrics
// at all (tfx#5148: TFX blesses every model then), a metric with no check,
// an unknown or missing direction where a change threshold needs one, min >
// max, a non-finite threshold, unknown no_baseline or zero_baseline values,
// and no_baseline: block with no change threshold. ParseConfig also
// rejects unknown keys, naming the metric and key, and the removed keys
// absolute and relative, giving the equivalent new setting.
//
// # Output
//
// [Result] lists one [Comparison] per configured check, in metric-name
// order and value_min, value_max, min_absolute_change, min_relative_change
// within a metric, with the figures that decided it. Figures are
// [Number]s, which encode NaN and infinities as the JSON strings "NaN",
// "+Inf" and "-Inf" (encoding/json refuses them as numbers); absent
// figures are null.
//
// [Force] records a human override (tfx#4390): the result passes, keeps
// every comparison as it was, and says who forced it and why.
package gate
