package process

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestMaskMultiLineSecret: a program that prints a multi-line secret has
// it logged line by line, each line masked (and its %q form), while a
// line of it too short to mask ("}") and other output stay; the tail
// holds none of it either.
func TestMaskMultiLineSecret(t *testing.T) {
	const secret = "{\n  \"token\": \"Tok3n-Part-One\",\n  \"user\": \"svc-Us3r-Two\"\n}"
	var logged bytes.Buffer
	w := NewTailWriter(OutputTail, slog.New(slog.NewJSONHandler(&logged, nil)), "stdout").Mask([]string{secret})
	fmt.Fprintf(w, "config:\n%s\n", secret)
	fmt.Fprintf(w, "quoted %q\n", secret)
	fmt.Fprintln(w, "done }")
	w.Flush()
	for what, s := range map[string]string{"log": logged.String(), "tail": w.Tail()} {
		for _, piece := range []string{"Tok3n", "Us3r"} {
			if strings.Contains(s, piece) {
				t.Errorf("%s holds %q:\n%s", what, piece, s)
			}
		}
	}
	if !strings.Contains(logged.String(), `"line":"done }"`) || !strings.Contains(logged.String(), `"line":"***"`) {
		t.Errorf("logged:\n%s", logged.String())
	}
}
