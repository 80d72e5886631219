package canary

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Prometheus queries the HTTP API of a Prometheus server
// (/api/v1/query): the checks' one number per evaluation.
type Prometheus struct {
	URL  string       // http(s)://host:port[/prefix]
	HTTP *http.Client // nil: a client with a 10 s timeout
	// Header is sent with every request: authentication (a bearer token,
	// basic auth) and what a proxy in front of Prometheus wants (a
	// tenant). Never logged or recorded.
	Header http.Header
	// Logger, when set, gets the cause of an unreachable server (the
	// worker's log, for its operator); the error says only ErrUnreachable.
	Logger *slog.Logger
}

// ErrUnreachable is the one error for a server that did not answer as
// the Prometheus API: refused, timed out, reset, not HTTP, or HTTP but not
// the API. One message for all, so that the errors a run records cannot
// tell an open port from a closed one (the URL's host may be a param's).
var ErrUnreachable = errors.New("no Prometheus API answered at prometheus_url (no connection, or the answer was not the API's; the worker's log has the cause)")

// unreachable logs cause and returns ErrUnreachable for query q.
func (p Prometheus) unreachable(q string, cause error) error {
	if p.Logger != nil {
		p.Logger.Warn("prometheus query failed", "query", q, "error", cause)
	}
	return fmt.Errorf("prometheus query %q: %w", q, ErrUnreachable)
}

// QueryError is a query Prometheus refused (a bad query, 400 or 422):
// asking again gets the same answer.
type QueryError struct {
	Query, Type, Message string
}

func (e *QueryError) Error() string {
	return fmt.Sprintf("prometheus refused query %q: %s: %s", e.Query, e.Type, e.Message)
}

// maxResponse bounds what is read of an answer: a check's query returns
// one series, so a huge answer is a query that selects too much.
const maxResponse = 4 << 20

type apiResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

type queryData struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

type vectorSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// Query evaluates q at time at and returns its one value: nil when it
// returns no series. A query that returns more than one series is an
// error (a check compares one number; aggregate with sum or avg).
func (p Prometheus) Query(ctx context.Context, q string, at time.Time) (*float64, error) {
	form := url.Values{"query": {q}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)}}
	var d queryData
	if err := p.post(ctx, "/api/v1/query", q, form, &d); err != nil {
		return nil, err
	}
	switch d.ResultType {
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(d.Result, &v); err != nil {
			return nil, fmt.Errorf("prometheus query %q: decode scalar: %w", q, err)
		}
		return sampleValue(q, v[1])
	case "vector":
		var vs []vectorSample
		if err := json.Unmarshal(d.Result, &vs); err != nil {
			return nil, fmt.Errorf("prometheus query %q: decode vector: %w", q, err)
		}
		switch len(vs) {
		case 0:
			return nil, nil
		case 1:
			return sampleValue(q, vs[0].Value[1])
		}
		return nil, &QueryError{Query: q, Type: "many_series", Message: fmt.Sprintf("%d series (%v, ...); a check compares one number: aggregate them (sum, avg, histogram_quantile over sum by (le))", len(vs), vs[0].Metric)}
	}
	return nil, &QueryError{Query: q, Type: "result_type", Message: fmt.Sprintf("a %s result; a check wants an instant vector or a scalar", d.ResultType)}
}

// post sends one API request and decodes its data into d.
func (p Prometheus) post(ctx context.Context, path, q string, form url.Values, d *queryData) error {
	endpoint := strings.TrimRight(p.URL, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return fmt.Errorf("prometheus query: %w", err)
	}
	for k, vs := range p.Header {
		req.Header[k] = append([]string(nil), vs...)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	client := p.HTTP
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err // its message repeats the URL; the caller names the server
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("prometheus query %q: %w", q, ctx.Err())
		}
		return p.unreachable(q, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return p.unreachable(q, fmt.Errorf("read answer: %w", err))
	}
	if len(body) > maxResponse {
		return &QueryError{Query: q, Type: "too_large", Message: fmt.Sprintf("answer over %d bytes; a check's query must return one series", maxResponse)}
	}
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil || (r.Status != "success" && r.Status != "error") {
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			return p.unreachable(q, fmt.Errorf("HTTP %d: the server refused the credentials (prometheus_bearer_token, prometheus_basic_auth, prometheus_headers)", resp.StatusCode))
		}
		return p.unreachable(q, fmt.Errorf("HTTP %d, not the Prometheus API's JSON: %v", resp.StatusCode, err))
	}
	if r.Status != "success" {
		if resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusUnprocessableEntity {
			return &QueryError{Query: q, Type: r.ErrorType, Message: r.Error}
		}
		return fmt.Errorf("prometheus query %q: HTTP %d: %s: %s", q, resp.StatusCode, r.ErrorType, r.Error)
	}
	if err := json.Unmarshal(r.Data, d); err != nil {
		return fmt.Errorf("prometheus query %q: decode data: %w", q, err)
	}
	return nil
}

// sampleValue reads a sample's value: Prometheus sends it as a string
// ("0.042", "NaN", "+Inf").
func sampleValue(q string, v any) (*float64, error) {
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("prometheus query %q: value %v is not a string", q, v)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("prometheus query %q: value %q: %w", q, s, err)
	}
	return &f, nil
}

// Point is one value of a range query.
type Point struct {
	Time  time.Time `json:"t"`
	Value float64   `json:"v"`
}

type matrixSeries struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
}

// QueryRange evaluates q from start to end every step
// (/api/v1/query_range) and returns its one series' finite values: none
// when it returns no series. More than one series is an error, as for
// Query.
func (p Prometheus) QueryRange(ctx context.Context, q string, start, end time.Time, step time.Duration) ([]Point, error) {
	sec := func(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }
	form := url.Values{"query": {q}, "start": {sec(start)}, "end": {sec(end)}, "step": {strconv.FormatFloat(step.Seconds(), 'f', 3, 64)}}
	var d queryData
	if err := p.post(ctx, "/api/v1/query_range", q, form, &d); err != nil {
		return nil, err
	}
	if d.ResultType != "matrix" {
		return nil, &QueryError{Query: q, Type: "result_type", Message: fmt.Sprintf("a %s result from a range query", d.ResultType)}
	}
	var ms []matrixSeries
	if err := json.Unmarshal(d.Result, &ms); err != nil {
		return nil, fmt.Errorf("prometheus range query %q: decode matrix: %w", q, err)
	}
	switch len(ms) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, &QueryError{Query: q, Type: "many_series", Message: fmt.Sprintf("%d series; a check compares one number", len(ms))}
	}
	var out []Point
	for _, v := range ms[0].Values {
		t, ok := v[0].(float64)
		if !ok {
			continue
		}
		f, err := sampleValue(q, v[1])
		if err != nil || math.IsNaN(*f) || math.IsInf(*f, 0) {
			continue
		}
		out = append(out, Point{Time: time.UnixMilli(int64(t * 1000)).UTC(), Value: *f})
	}
	return out, nil
}
