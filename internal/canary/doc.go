// Package canary is the pure part of a canary deploy: its spec (traffic
// steps, bakes, checks on live metrics) parsed and validated, the judgement
// of one evaluation of a check against its threshold, and a small client
// of the Prometheus HTTP API the checks query. It does no Temporal work:
// activities/canary walks the steps durably and calls in here.
//
// A check's threshold is the gate's (package gate): min and max bound the
// canary's value; min_absolute_change and min_relative_change bound its
// change from production's value of the same query, in the metric's
// direction, a negative figure allowing that much worse.
package canary
