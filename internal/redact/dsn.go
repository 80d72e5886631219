package redact

import "strings"

// isDSN reports whether s reads as a libpq key=value connection string
// (host=db port=5432 user=u password=p): it starts with a key and "=".
func isDSN(s string) bool {
	s = strings.TrimLeft(s, " \t\r\n")
	k := 0
	for k < len(s) && isKeyByte(s[k], k) {
		k++
	}
	if k == 0 {
		return false
	}
	rest := strings.TrimLeft(s[k:], " \t")
	return strings.HasPrefix(rest, "=")
}

func isKeyByte(c byte, i int) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && (c >= '0' && c <= '9' || c == '-' || c == '.')
}

// scanDSN masks the values of a key=value string's credential keys. A
// value is a run of non-spaces or a single-quoted string in which \' and
// \\ are escapes, as libpq reads it. Whatever does not parse from some
// point on is masked from there, since it cannot be told apart.
func scanDSN(s string) (string, []string) {
	var b strings.Builder
	var secrets []string
	i := 0
	for i < len(s) {
		// Spaces between pairs.
		j := i
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		b.WriteString(s[i:j])
		if j == len(s) {
			break
		}
		// key
		k := j
		for k < len(s) && isKeyByte(s[k], k-j) {
			k++
		}
		eq := k
		for eq < len(s) && isSpace(s[eq]) {
			eq++
		}
		if k == j || eq == len(s) || s[eq] != '=' {
			// Not a pair: keep nothing of it that could be a secret.
			secrets = append(secrets, s[j:])
			b.WriteString(Mask)
			break
		}
		key := s[j:k]
		v := eq + 1
		for v < len(s) && isSpace(s[v]) {
			v++
		}
		end, ok := valueEnd(s, v)
		b.WriteString(s[j:v])
		if SecretKey(key) || !ok {
			secrets = append(secrets, s[v:end])
			if strings.HasPrefix(s[v:end], "'") {
				inner := strings.Trim(s[v:end], "'")
				secrets = append(secrets, inner, strings.NewReplacer(`\'`, "'", `\\`, `\`).Replace(inner))
			}
			b.WriteString(Mask)
		} else {
			b.WriteString(s[v:end])
		}
		i = end
	}
	return b.String(), secrets
}

// valueEnd is where the value starting at v ends; ok is false for a
// quoted value left open (it then runs to the end of s).
func valueEnd(s string, v int) (end int, ok bool) {
	if v < len(s) && s[v] == '\'' {
		for e := v + 1; e < len(s); e++ {
			switch s[e] {
			case '\\':
				e++
			case '\'':
				return e + 1, true
			}
		}
		return len(s), false
	}
	e := v
	for e < len(s) && !isSpace(s[e]) {
		e++
	}
	return e, true
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
