package canary

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/gate"
	"github.com/retrain-ml/retrain/internal/number"
)

// Placeholders a check's query may hold: the version whose series it
// selects (the canary's, or production's for the comparison) and that
// version's alias. In a spec they are written $${version} and $${alias},
// since ${...} there is a reference the run resolves.
const (
	VersionPlaceholder = "${version}"
	AliasPlaceholder   = "${alias}"
)

// What a check does with a query that returns no data.
const (
	NoDataFail   = "fail"   // the check is breached: no data, no promotion
	NoDataIgnore = "ignore" // the evaluation does not count, either way
)

// Limits on a spec: any client may start a run with any input, and each
// check is queried every interval.
const (
	MaxSteps  = 20
	MaxChecks = 20
)

// DefaultInterval is how often checks run during a bake when the spec
// does not say.
const DefaultInterval = 30 * time.Second

// DefaultFailureLimit is how many consecutive breached evaluations of a
// check roll the canary back when neither the check nor the node says.
// Argo Rollouts fails an analysis at its first failed measurement
// (failureLimit 0) but tolerates 4 errors or empty results in a row
// (consecutiveErrorLimit); Flagger rolls back after `threshold` failed
// checks, 5 to 10 in its examples at one-minute intervals. 2 tolerates
// the one noisy sample that live metrics produce while rolling back a
// real regression one interval after it shows; missing data at a step's
// start is excused by warmup and min_samples, not by a higher limit.
const DefaultFailureLimit = 2

// DefaultInconclusiveTimeout is how long an inconclusive step waits for
// a person's approval or rejection before the canary is rolled back.
const DefaultInconclusiveTimeout = time.Hour

// Step is one traffic step: the canary's share of traffic, and how long
// it bakes there (0: not at all, the checks are not run). During its
// first Warmup a query without data is inconclusive, not a breach.
type Step struct {
	Percent float64       `json:"percent"`
	Bake    time.Duration `json:"bake"`
	Warmup  time.Duration `json:"warmup,omitempty"`
}

// Check is one check on live metrics.
type Check struct {
	Name  string `json:"name"`
	Query string `json:"query"`
	// Threshold is the gate's: exactly one of min, max,
	// min_absolute_change, min_relative_change (the last two compare with
	// production's value of the same query).
	Threshold gate.Threshold `json:"threshold"`
	// CountQuery, when set, says how many events the value stands on (the
	// canary's impressions, say); the check cannot pass below MinCount.
	CountQuery string  `json:"count_query,omitempty"`
	MinCount   float64 `json:"min_count,omitempty"`
	// MinSamples is how many evaluations with data a step needs before
	// the check can pass at its end.
	MinSamples int    `json:"min_samples"`
	OnNoData   string `json:"on_no_data"`
	// FailureLimit is how many consecutive breached evaluations roll the
	// canary back; 0 (a plan recorded before it existed) is 1.
	FailureLimit int `json:"failure_limit,omitempty"`
}

// Limit is the check's failure limit, at least 1.
func (c Check) Limit() int { return max(c.FailureLimit, 1) }

// Relative reports whether the check compares with production.
func (c Check) Relative() bool {
	return c.Threshold.MinAbsoluteChange != nil || c.Threshold.MinRelativeChange != nil
}

// ThresholdText says the threshold as written: "max 0.01",
// "min_relative_change -0.02 (higher_is_better)".
func (c Check) ThresholdText() string {
	t := c.Threshold
	var s string
	switch {
	case t.Min != nil:
		s = "min " + fmtNum(*t.Min)
	case t.Max != nil:
		s = "max " + fmtNum(*t.Max)
	case t.MinAbsoluteChange != nil:
		s = "min_absolute_change " + fmtNum(*t.MinAbsoluteChange)
	case t.MinRelativeChange != nil:
		s = "min_relative_change " + fmtNum(*t.MinRelativeChange)
	}
	if t.Direction != "" {
		s += " (" + string(t.Direction) + ")"
	}
	return s
}

// QueryFor is the check's query for one version under alias.
func QueryFor(query, version, alias string) string {
	return strings.NewReplacer(VersionPlaceholder, version, AliasPlaceholder, alias).Replace(query)
}

// Spec is what a canary walks and checks.
type Spec struct {
	Steps         []Step        `json:"steps"`
	Checks        []Check       `json:"checks"`
	Interval      time.Duration `json:"interval"`
	PrometheusURL string        `json:"prometheus_url"`
	// InconclusiveTimeout is how long an inconclusive step waits for a
	// person before the canary rolls back; 0 (a plan recorded before it
	// existed): an inconclusive step fails, as it did then.
	InconclusiveTimeout time.Duration `json:"inconclusive_timeout,omitempty"`
}

// checkKeys are the keys of a check other than its threshold's.
var checkKeys = []string{"name", "query", "count_query", "min_count", "min_samples", "on_no_data", "failure_limit"}

// thresholdKeys are the gate's threshold keys; a check sets exactly one.
var thresholdKeys = []string{"min", "max", "min_absolute_change", "min_relative_change"}

// ParseSteps reads a canary's steps: a list of {percent, bake, warmup},
// percents increasing in (0, 100], the last one 100. warmup is the
// node's, for steps that do not set their own; no baked step's warmup
// may be longer than its bake.
func ParseSteps(v any, warmup time.Duration) ([]Step, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("steps: want a list of {percent, bake} ending at percent 100, got %s", describe(v))
	}
	if len(list) > MaxSteps {
		return nil, fmt.Errorf("steps: %d steps, at most %d", len(list), MaxSteps)
	}
	steps := make([]Step, 0, len(list))
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("steps[%d]: want {percent, bake}, got %s", i, describe(item))
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if k != "percent" && k != "bake" && k != "warmup" {
				return nil, fmt.Errorf("steps[%d]: unknown key %q (want percent, bake, warmup)", i, k)
			}
		}
		p, err := number.Figure(m["percent"])
		if err != nil || m["percent"] == nil {
			return nil, fmt.Errorf("steps[%d].percent: want a number in (0, 100], got %s", i, describe(m["percent"]))
		}
		if !(p > 0 && p <= 100) {
			return nil, fmt.Errorf("steps[%d].percent: %s is not in (0, 100]", i, fmtNum(p))
		}
		if i > 0 && p <= steps[i-1].Percent {
			return nil, fmt.Errorf("steps[%d].percent: %s does not increase on steps[%d]'s %s", i, fmtNum(p), i-1, fmtNum(steps[i-1].Percent))
		}
		s := Step{Percent: p}
		if b, ok := m["bake"]; ok && b != nil {
			text, ok := b.(string)
			if !ok {
				return nil, fmt.Errorf("steps[%d].bake: want a duration such as 30m, got %s", i, describe(b))
			}
			if s.Bake, err = dags.ParseDuration(text); err != nil {
				return nil, fmt.Errorf("steps[%d].bake: %w", i, err)
			}
			if s.Bake < 0 {
				return nil, fmt.Errorf("steps[%d].bake: %s is negative", i, text)
			}
		}
		s.Warmup = warmup
		if w, ok := m["warmup"]; ok && w != nil {
			if s.Warmup, err = parseDuration(w, fmt.Sprintf("steps[%d].warmup", i)); err != nil {
				return nil, err
			}
		}
		if s.Bake > 0 && s.Warmup > s.Bake {
			return nil, fmt.Errorf("steps[%d].warmup: %s is longer than the step's bake %s: the step would end before its checks count", i, s.Warmup, s.Bake)
		}
		steps = append(steps, s)
	}
	if last := steps[len(steps)-1]; last.Percent != 100 {
		return nil, fmt.Errorf("steps[%d].percent: the last step's percent is %s; it must be 100 (where the canary is promoted)", len(steps)-1, fmtNum(last.Percent))
	}
	if !slices.ContainsFunc(steps, func(s Step) bool { return s.Bake > 0 }) {
		return nil, errors.New("steps: no step bakes, so no check would ever run; give a step a bake")
	}
	return steps, nil
}

// ParseChecks reads a canary's checks: a list of {name, query, one
// threshold, ...}. failureLimit is the node's, for checks that do not set
// their own (0: DefaultFailureLimit).
func ParseChecks(v any, failureLimit int) ([]Check, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("checks: want a list of {name, query, one of %s}, got %s", strings.Join(thresholdKeys, "/"), describe(v))
	}
	if len(list) > MaxChecks {
		return nil, fmt.Errorf("checks: %d checks, at most %d", len(list), MaxChecks)
	}
	var checks []Check
	seen := map[string]bool{}
	for i, item := range list {
		c, err := parseCheck(item)
		if err != nil {
			return nil, fmt.Errorf("checks[%d]: %w", i, err)
		}
		if c.FailureLimit == 0 {
			c.FailureLimit = cmp.Or(failureLimit, DefaultFailureLimit)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("checks[%d].name: %q is taken by another check", i, c.Name)
		}
		seen[c.Name] = true
		checks = append(checks, c)
	}
	return checks, nil
}

func parseCheck(item any) (Check, error) {
	m, ok := item.(map[string]any)
	if !ok {
		return Check{}, fmt.Errorf("want {name, query, threshold}, got %s", describe(item))
	}
	known := append(slices.Clone(checkKeys), append(thresholdKeys, "direction")...)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(known, k) {
			return Check{}, fmt.Errorf("unknown key %q (want %s)", k, strings.Join(known, ", "))
		}
	}
	c := Check{MinSamples: 1, OnNoData: NoDataFail}
	var err error
	if c.Name, err = stringField(m, "name", true); err != nil {
		return Check{}, err
	}
	if c.Query, err = stringField(m, "query", true); err != nil {
		return Check{}, err
	}
	if c.CountQuery, err = stringField(m, "count_query", false); err != nil {
		return Check{}, err
	}
	if v, ok := m["min_count"]; ok {
		if c.MinCount, err = number.Figure(v); err != nil || c.MinCount < 0 || v == nil {
			return Check{}, fmt.Errorf("min_count: want a number >= 0, got %s", describe(v))
		}
		if c.CountQuery == "" {
			return Check{}, errors.New("min_count needs count_query: the query that counts the events the value stands on")
		}
	}
	if v, ok := m["min_samples"]; ok {
		f, err := number.Figure(v)
		if err != nil || v == nil || f < 1 || f != float64(int(f)) {
			return Check{}, fmt.Errorf("min_samples: want a whole number >= 1, got %s", describe(v))
		}
		c.MinSamples = int(f)
	}
	if v, ok := m["failure_limit"]; ok {
		if c.FailureLimit, err = ParseFailureLimit(v); err != nil {
			return Check{}, err
		}
	}
	if v, ok := m["on_no_data"]; ok {
		if s, _ := v.(string); s != NoDataFail && s != NoDataIgnore {
			return Check{}, fmt.Errorf("on_no_data: want %s or %s, got %s", NoDataFail, NoDataIgnore, describe(v))
		}
		c.OnNoData = v.(string)
	}
	th := map[string]any{}
	n := 0
	for _, k := range append([]string{"direction"}, thresholdKeys...) {
		if v, ok := m[k]; ok {
			th[k] = v
			if k != "direction" {
				n++
			}
		}
	}
	if n != 1 {
		return Check{}, fmt.Errorf("want exactly one threshold of %s, got %d", strings.Join(thresholdKeys, ", "), n)
	}
	cfg, err := gate.ParseConfig(map[string]any{"metrics": map[string]any{c.Name: th}})
	if err != nil {
		return Check{}, err
	}
	c.Threshold = cfg.Metrics[c.Name]
	return c, nil
}

// placeholderRe finds the ${NAME} placeholders of a query.
var placeholderRe = regexp.MustCompile(`\$\{([^}]*)\}`)

// CheckQueries refuses, before a run, queries that would mislead a
// canary rather than fail it: a placeholder other than ${version} and
// ${alias} (Prometheus would get it as text, and the query finds no
// series or an error), and a check that compares with production
// (min_relative_change, min_absolute_change) whose query selects no
// version: production's figure would be the canary's, and the check
// would always pass. The queries are as the run has them: ${version},
// written $${version} in a spec.
func CheckQueries(checks []Check) error {
	names := []string{"version", "alias"}
	var errs []error
	for i, c := range checks {
		for _, q := range []struct{ key, text string }{{"query", c.Query}, {"count_query", c.CountQuery}} {
			for _, m := range placeholderRe.FindAllStringSubmatch(q.text, -1) {
				if !slices.Contains(names, m[1]) {
					errs = append(errs, fmt.Errorf("checks[%d].%s: unknown placeholder $${%s}%s; a query's placeholders are $${version} and $${alias}",
						i, q.key, m[1], dags.DidYouMean(m[1], names)))
				}
			}
		}
		if c.Relative() && !strings.Contains(c.Query, VersionPlaceholder) && !strings.Contains(c.Query, AliasPlaceholder) {
			errs = append(errs, fmt.Errorf("checks[%d].query: the check compares with production (%s) but its query selects no version: "+
				"put $${version} (or $${alias}) in it, as in rate(clicks_total{version=\"$${version}\"}[5m]), or it compares production with itself", i, c.ThresholdText()))
		}
	}
	return errors.Join(errs...)
}

// CheckPrometheusURL refuses what is not an http(s) URL with a host, and
// a URL with a query or a fragment: the checks' requests go to its path
// followed by /api/v1/query, and nothing else may choose where they go.
func CheckPrometheusURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("prometheus_url %q: want the http(s) URL of a Prometheus server, such as http://prometheus:9090", s)
	}
	if u.User != nil {
		return fmt.Errorf("prometheus_url: user information in the URL is not supported (it would be recorded with the run)")
	}
	if strings.ContainsAny(s, "?#") {
		return fmt.Errorf("prometheus_url %q: a query or fragment is refused: the checks query the server's /api/v1/query, under the URL's path only", u.Scheme+"://"+u.Host+u.Path+"?...")
	}
	return nil
}

// hostEntryRe is a prometheus_hosts entry: a host name or IP address,
// with or without a port.
var hostEntryRe = regexp.MustCompile(`^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?$`)

// CheckPrometheusHosts refuses a prometheus_hosts entry that is not a
// host or host:port.
func CheckPrometheusHosts(hosts []string) error {
	for _, h := range hosts {
		if !hostEntryRe.MatchString(h) {
			return fmt.Errorf("prometheus_hosts: %q is not a host or host:port (write hosts only, such as prometheus or 127.0.0.1:9090)", h)
		}
	}
	return nil
}

// CheckPrometheusHost refuses a prometheus_url (whose host a param or an
// output chose) unless hosts, the spec's prometheus_hosts, lists its host
// (an entry without a port allows any port) and it has no path: all of
// it but the host is the spec's.
func CheckPrometheusHost(s string, hosts []string) error {
	if len(hosts) == 0 {
		return nil
	}
	if err := CheckPrometheusURL(s); err != nil {
		return err
	}
	u, _ := url.Parse(s)
	if u.Path != "" && u.Path != "/" {
		return fmt.Errorf("prometheus_url: a URL whose host comes from prometheus_hosts is scheme://HOST[:PORT] only; a path is refused")
	}
	for _, h := range hosts {
		if strings.EqualFold(h, u.Host) || strings.EqualFold(h, u.Hostname()) {
			return nil
		}
	}
	return fmt.Errorf("prometheus_url: host %q is not one of the spec's prometheus_hosts (%s)", u.Host, strings.Join(hosts, ", "))
}

// refRe matches a ${...} of a spec's text.
var refRe = regexp.MustCompile(`\$\{[^}]*\}`)

// CheckPrometheusTemplate refuses, at validation, a prometheus_url whose
// text holds a ${...} anywhere but its host, or that has one without a
// prometheus_hosts list to choose from.
func CheckPrometheusTemplate(s string, hosts []string) error {
	if len(hosts) == 0 {
		return fmt.Errorf("prometheus_url %q takes part of the URL from a param or an output, which would let whoever starts a run send the checks' requests (and their credentials) anywhere: write the URL out, or list the hosts it may name in prometheus_hosts", s)
	}
	rest := refRe.ReplaceAllString(s, "")
	for _, scheme := range []string{"https://", "http://"} {
		if after, ok := strings.CutPrefix(rest, scheme); ok {
			rest = after
			break
		}
	}
	if strings.ContainsAny(rest, "/?#@") {
		return fmt.Errorf("prometheus_url %q: with a ${...}, the URL is scheme://HOST[:PORT] only (HOST one of prometheus_hosts): no path, query or user information", s)
	}
	return nil
}

// ParseFailureLimit reads a failure_limit: a whole number >= 1.
func ParseFailureLimit(v any) (int, error) {
	f, err := number.Figure(v)
	if err != nil || v == nil || f < 1 || f != float64(int(f)) || f > 1000 {
		return 0, fmt.Errorf("failure_limit: want a whole number from 1 (the first breached evaluation rolls back) to 1000, got %s", describe(v))
	}
	return int(f), nil
}

// Settings are a spec's node-wide settings; "" and 0 are the defaults.
type Settings struct {
	Interval            string
	PrometheusURL       string
	PrometheusHosts     []string // the hosts prometheus_url may name; empty: the URL is the spec's own
	Warmup              string   // each step's, unless it sets its own
	FailureLimit        int      // each check's, unless it sets its own
	InconclusiveTimeout string
}

// ParseSpec reads a whole spec.
func ParseSpec(steps, checks any, set Settings) (Spec, error) {
	s := Spec{Interval: DefaultInterval, PrometheusURL: set.PrometheusURL, InconclusiveTimeout: DefaultInconclusiveTimeout}
	var err error
	var warmup time.Duration
	if set.Warmup != "" {
		if warmup, err = parseDuration(set.Warmup, "warmup"); err != nil {
			return Spec{}, err
		}
	}
	if set.FailureLimit != 0 {
		if _, err := ParseFailureLimit(float64(set.FailureLimit)); err != nil {
			return Spec{}, err
		}
	}
	if s.Steps, err = ParseSteps(steps, warmup); err != nil {
		return Spec{}, err
	}
	if s.Checks, err = ParseChecks(checks, set.FailureLimit); err != nil {
		return Spec{}, err
	}
	if set.Interval != "" {
		if s.Interval, err = dags.ParseDuration(set.Interval); err != nil {
			return Spec{}, fmt.Errorf("interval: %w", err)
		}
		if s.Interval < time.Second {
			return Spec{}, fmt.Errorf("interval: %s is under 1s", set.Interval)
		}
	}
	if set.InconclusiveTimeout != "" {
		if s.InconclusiveTimeout, err = parseDuration(set.InconclusiveTimeout, "inconclusive_timeout"); err != nil {
			return Spec{}, err
		}
		if s.InconclusiveTimeout <= 0 {
			return Spec{}, errors.New("inconclusive_timeout: want a duration above 0 (an inconclusive step waits that long for a person, then rolls back)")
		}
	}
	if err := CheckPrometheusURL(set.PrometheusURL); err != nil {
		return Spec{}, err
	}
	if err := CheckPrometheusHosts(set.PrometheusHosts); err != nil {
		return Spec{}, err
	}
	if err := CheckPrometheusHost(set.PrometheusURL, set.PrometheusHosts); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// parseDuration reads a non-negative duration such as "30s" at what.
func parseDuration(v any, what string) (time.Duration, error) {
	text, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("%s: want a duration such as 30s, got %s", what, describe(v))
	}
	d, err := dags.ParseDuration(text)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s: %s is negative", what, text)
	}
	return d, nil
}

func stringField(m map[string]any, key string, required bool) (string, error) {
	v, ok := m[key]
	if !ok || v == nil {
		if required {
			return "", fmt.Errorf("%s is required", key)
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok || strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("%s: want a non-empty string, got %s", key, describe(v))
	}
	return s, nil
}

func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "nothing"
	case string:
		return fmt.Sprintf("%q", v)
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	default:
		return fmt.Sprintf("%v (%T)", v, v)
	}
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'g', 6, 64) }
