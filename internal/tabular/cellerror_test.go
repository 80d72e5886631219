package tabular

import (
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// TestCSVErrorNamesCellNotValue: a value that does not parse is named by
// the line a user finds it on (a quoted field over several lines counted
// as the lines it takes) and its column's name, and never quoted: a cell
// may hold a secret, and the message goes to history and the report.
func TestCSVErrorNamesCellNotValue(t *testing.T) {
	const secret = "s3cr3t-Value\nline two"
	cols := []Column{{Name: "id", Type: Int64}, {Name: "note", Type: String}, {Name: "score", Type: Double}}
	csv := "id,note,score\n" +
		"1,\"two\nlines\",0.5\n" + // lines 2-3
		"2,x,\"" + secret + "\"\n" // line 4 (and 5)
	r, err := NewCSVReader(strings.NewReader(csv), cols)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.ReadRows(make([]parquet.Row, 4))
	if err == nil {
		t.Fatal("a non-number in a double column read")
	}
	msg := err.Error()
	if !strings.Contains(msg, `CSV line 4, column "score": the value is not a double`) {
		t.Errorf("error %q: want line 4 and column \"score\"", msg)
	}
	for _, piece := range []string{"s3cr3t", "Value", "line two", `\n`} {
		if strings.Contains(msg, piece) {
			t.Errorf("error %q quotes the cell (%q)", msg, piece)
		}
	}
}
