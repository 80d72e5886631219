package lake

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/retrain-ml/retrain/internal/redact"
)

// Identity names a catalog without its credentials: what an error, a log
// line or a queue id may say of it. Two configs that differ only in a
// password have the same Identity.
type Identity struct {
	Type     string // sql, rest or glue
	Engine   string // sql: "PostgreSQL" or "SQLite"
	Host     string // PostgreSQL: host[:port][,host[:port]...]
	Database string // PostgreSQL: database; SQLite: the file
	User     string // PostgreSQL: user
	// Location is a rest catalog's URL, redacted and without parameters,
	// or a PostgreSQL URL that cannot be read, redacted.
	Location  string
	Warehouse string // redacted
}

// Identity returns the identity of a config (resolved or not).
func (c Config) Identity() Identity {
	if r, err := c.Resolved(); err == nil {
		c = r
	}
	id := Identity{Type: c.Type, Warehouse: redact.URI(c.Warehouse)}
	if id.Type == "" {
		id.Type = TypeSQL
	}
	switch id.Type {
	case TypeSQL:
		if c.isPostgres() {
			id.Engine = "PostgreSQL"
			id.Host, id.Database, id.User = postgresIdentity(c.URI)
			if id.Host == "" && id.Database == "" && id.User == "" && strings.Contains(c.URI, "://") {
				// Unreadable: named by its redacted self.
				id.Location = redact.URI(c.URI)
			}
		} else {
			id.Engine = "SQLite"
			path, _, _ := strings.Cut(strings.TrimPrefix(c.URI, "file:"), "?")
			id.Database = redact.URI(path)
		}
	case TypeREST:
		loc, _, _ := strings.Cut(redact.URI(c.URI), "?")
		loc, _, _ = strings.Cut(loc, "#")
		id.Location = loc
	}
	return id
}

func (c Config) isPostgres() bool {
	if d := c.Props["sql.driver"]; d != "" {
		return d == "pgx"
	}
	return IsPostgresURI(c.URI)
}

// String describes the catalog, for example
// "PostgreSQL catalog (host db:5432, database lake, user retrain)".
func (id Identity) String() string {
	switch {
	case id.Engine == "PostgreSQL" && id.Location != "":
		return "PostgreSQL catalog (" + id.Location + ")"
	case id.Engine == "PostgreSQL":
		var parts []string
		for _, p := range [][2]string{{"host", id.Host}, {"database", id.Database}, {"user", id.User}} {
			if p[1] != "" {
				parts = append(parts, p[0]+" "+p[1])
			}
		}
		if len(parts) == 0 {
			return "PostgreSQL catalog (host, database and user from the PG* environment)"
		}
		return "PostgreSQL catalog (" + strings.Join(parts, ", ") + ")"
	case id.Engine == "SQLite":
		return "SQLite catalog (file " + id.Database + ")"
	case id.Location != "":
		return id.Type + " catalog (" + id.Location + ")"
	default:
		return id.Type + " catalog"
	}
}

// Key is the identity as one string, for digests: it holds no credential,
// so a digest of it reveals none.
func (id Identity) Key() string {
	return strings.Join([]string{id.Type, id.Engine, id.Host, id.Database, id.User, id.Location, id.Warehouse}, "\x00")
}

// postgresIdentity reads host, database and user from a postgres:// URL
// or a key=value string, as written (never from the environment, so that
// every worker given the same URI agrees).
func postgresIdentity(uri string) (host, database, user string) {
	var port string
	set := func(k, v string) {
		switch k {
		case "host":
			host = v
		case "hostaddr":
			if host == "" {
				host = v
			}
		case "port":
			port = v
		case "dbname":
			database = v
		case "user":
			user = v
		}
	}
	if !strings.Contains(uri, "://") {
		// key=value: the values of harmless keys survive redaction.
		for _, f := range strings.Fields(redact.URI(uri)) {
			if k, v, ok := strings.Cut(f, "="); ok {
				set(k, strings.Trim(v, "'"))
			}
		}
	} else {
		u, err := url.Parse(uri)
		_, after, _ := strings.Cut(uri, "://")
		if err != nil || u.User == nil && strings.Contains(after, "@") {
			// Not readable as its writer meant (a password with an
			// unescaped / ? # or @; pgx will not read it either): name
			// it by its redacted self (Identity), which leaves nothing
			// of the password.
			return "", "", ""
		}
		host, database = u.Host, strings.TrimPrefix(u.Path, "/")
		if u.User != nil {
			user = u.User.Username()
		}
		q := u.Query()
		for _, k := range []string{"host", "hostaddr", "port", "dbname", "user"} {
			if v := q.Get(k); v != "" {
				set(k, v)
			}
		}
	}
	if port != "" && host != "" && !strings.Contains(host, ":") {
		host += ":" + port
	}
	return host, database, user
}

// CatalogError is a catalog that could not be opened or reached. Its
// message names the catalog by its Identity and says why, with the
// catalog's URI and credentials removed from the cause's text. It does not
// unwrap: a wrapped driver error may quote the URI, and Temporal records
// every error of a chain in the run's history. Is still answers for the
// cause (context.DeadlineExceeded, say).
type CatalogError struct {
	Catalog Identity
	msg     string
	cause   error
}

func (e *CatalogError) Error() string { return "lake: " + e.Catalog.String() + " " + e.msg }

// Is reports whether the cause is target.
func (e *CatalogError) Is(target error) bool { return e.cause != nil && errors.Is(e.cause, target) }

// catalogError describes err, a failure of the catalog c to what
// (e.g. "is unreachable"), without c's URI or credentials.
func catalogError(c Config, what string, err error) error {
	msg := what
	if err != nil {
		msg += ": " + scrub(c, err)
	}
	return &CatalogError{Catalog: c.Identity(), msg: msg, cause: err}
}

// scrub is err's text without c's URI or credentials. pgx quotes a URI
// it cannot parse (redacting only a user-info password), and the URL
// parser's own message may quote a piece of a password written unescaped,
// so such an error is described, not quoted.
func scrub(c Config, err error) string {
	var ue *url.Error
	_, urlErr := url.Parse(c.URI)
	if errors.As(err, &ue) && ue.Op == "parse" || strings.Contains(c.URI, "://") && urlErr != nil {
		// The URL parser quotes the piece it stumbled on, which may be
		// part of a password.
		return "the catalog URI cannot be parsed as a URL (a password holding / ? # @ : or % must be percent-encoded)"
	}
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		msg := "the catalog URI cannot be parsed"
		if inner := errors.Unwrap(pe); inner != nil {
			msg += " (" + redact.Text(inner.Error(), c.URI) + ")"
		}
		return msg
	}
	return redact.Text(err.Error(), c.URI, c.Warehouse)
}

var _ fmt.Stringer = Identity{}
