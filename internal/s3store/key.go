package s3store

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxKeyLen is S3's limit on the length of a full object key, in bytes.
const maxKeyLen = 1024

// ValidateKey reports whether key may name an object relative to a Store's
// prefix. A valid key is non-empty UTF-8, does not start or end with "/",
// has no empty, "." or ".." segment, and contains no control character or
// backslash. These rules make key a plain relative path, so joining it to the
// prefix can never produce a key outside the prefix, and they rule out names
// that S3-compatible servers backed by a file system (versitygw's POSIX
// backend among them) interpret or reject differently than AWS does.
//
// The error wraps [ErrInvalidKey].
func ValidateKey(key string) error {
	if key == "" {
		return invalidKey(key, "empty key")
	}
	return validatePath(key)
}

// ValidatePrefix is like [ValidateKey] for a listing prefix: the empty prefix
// (everything under the Store's prefix) and a single trailing "/" are allowed.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	p, _ := strings.CutSuffix(prefix, "/")
	if p == "" {
		return invalidKey(prefix, `prefix "/" would be absolute`)
	}
	return validatePath(p)
}

func validatePath(key string) error {
	if len(key) > maxKeyLen {
		return invalidKey(key, fmt.Sprintf("longer than %d bytes", maxKeyLen))
	}
	if !utf8.ValidString(key) {
		return invalidKey(key, "not valid UTF-8")
	}
	for _, r := range key {
		switch {
		case unicode.IsControl(r):
			return invalidKey(key, fmt.Sprintf("control character %U", r))
		case r == '\\':
			return invalidKey(key, "backslash")
		}
	}
	if strings.HasPrefix(key, "/") {
		return invalidKey(key, "leading /")
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return invalidKey(key, "empty path segment")
		case ".", "..":
			return invalidKey(key, fmt.Sprintf("%q path segment", seg))
		}
	}
	return nil
}

func invalidKey(key, reason string) error {
	// %q escapes control characters, so a hostile key cannot forge log lines.
	return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, reason)
}

// join returns the full object key for key below prefix. prefix has no
// leading or trailing slash; both may be empty.
func join(prefix, key string) string {
	switch {
	case prefix == "":
		return key
	case key == "":
		return prefix + "/"
	}
	return prefix + "/" + key
}
