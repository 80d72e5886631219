package lakeimport

import (
	"strings"
	"testing"
)

func TestParsePartitionBy(t *testing.T) {
	good := map[string]string{
		"":                                  "",
		"date":                              "identity(date)",
		" date , bucket(16, user_id) ":      "identity(date) bucket[16](user_id)",
		"day(event_ts),truncate(4,country)": "day(event_ts) truncate[4](country)",
		"Month(ts),identity(x)":             "month(ts) identity(x)",
	}
	for in, want := range good {
		fs, err := ParsePartitionBy(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		var got []string
		for _, f := range fs {
			got = append(got, f.Transform.String()+"("+f.Column+")")
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("%q: %s, want %s", in, g, want)
		}
	}
	bad := map[string]string{
		"date,,x":           "empty entry",
		"bucket(user_id)":   "takes a number and a column",
		"bucket(0,user_id)": "not a count",
		"bucket(16,user_id": "closing parenthesis",
		"hash(user_id)":     `unknown transform "hash"`,
		"day(a,b)":          "one column",
		"date,date":         "listed twice",
		"a b":               "not a column name",
	}
	for in, want := range bad {
		_, err := ParsePartitionBy(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error about %q", in, err, want)
		}
	}
}

func FuzzParsePartitionBy(f *testing.F) {
	for _, s := range []string{"date", "bucket(16,user_id)", "day(ts),truncate(4,c)", "((", "a,)", "bucket(99999999999999999999,x)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fs, err := ParsePartitionBy(s)
		if err != nil {
			return
		}
		for _, x := range fs {
			if x.Column == "" || x.Transform == nil || strings.ContainsAny(x.Column, "(), ") {
				t.Fatalf("%q gave field %+v", s, x)
			}
		}
	})
}
