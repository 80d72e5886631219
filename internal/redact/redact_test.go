package redact

import (
	"strings"
	"testing"
)

func TestURI(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		// User info.
		{"postgres://retrain:s3cret@db.internal:5432/lake", "postgres://retrain:xxxxx@db.internal:5432/lake"},
		{"postgresql://retrain:s3cret@db/lake?sslmode=require", "postgresql://retrain:xxxxx@db/lake?sslmode=require"},
		{"postgres://retrain@db/lake", "postgres://retrain@db/lake"},
		{"postgres://retrain:p%40ss%2Fw@db/lake", "postgres://retrain:xxxxx@db/lake"},
		{"https://user:pw@rest.example/catalog", "https://user:xxxxx@rest.example/catalog"},
		// Passwords url.Parse cannot read: unescaped / # ? @.
		{"postgres://retrain:pa/ss@db/lake", "postgres://retrain:xxxxx@db/lake"},
		{"postgres://retrain:12/34@db/lake", "postgres://retrain:xxxxx@db/lake"},
		{"postgres://retrain:pa#ss@db/lake", "postgres://retrain:xxxxx@db/lake"},
		{"postgres://retrain:pa?ss@db/lake", "postgres://retrain:xxxxx@db/lake"},
		{"postgres://retrain:p@ss@db/lake", "postgres://retrain:xxxxx@db/lake"},
		{"postgres://h1:5432,h2:5433/lake?password=s3cret", "postgres://h1:5432,h2:5433/lake?password=xxxxx"},
		// Query parameters.
		{"postgres://retrain@db/lake?password=s3cret", "postgres://retrain@db/lake?password=xxxxx"},
		{"postgres://db/lake?sslmode=verify-full&sslpassword=keypw&user=u", "postgres://db/lake?sslmode=verify-full&sslpassword=xxxxx&user=u"},
		{"postgres://db/lake?PassWord=a&x=1", "postgres://db/lake?PassWord=xxxxx&x=1"},
		{"https://rest/cat?client_secret=abc&scope=all", "https://rest/cat?client_secret=xxxxx&scope=all"},
		{"https://rest/cat?access_token=abc;x=1", "https://rest/cat?access_token=xxxxx;x=1"},
		{"https://rest/cat?pass%77ord=abc", "https://rest/cat?pass%77ord=xxxxx"},
		{"https://rest/cat#access_token=abc&state=1", "https://rest/cat#access_token=xxxxx&state=1"},
		{"https://u:pw@rest/cat?token=t&token=t2", "https://u:xxxxx@rest/cat?token=xxxxx&token=xxxxx"},
		// Opaque URIs and paths.
		{"file:/data/catalog.db?_pragma=busy_timeout(5000)&_txlock=immediate", "file:/data/catalog.db?_pragma=busy_timeout(5000)&_txlock=immediate"},
		{"file:/data/catalog.db?_auth_pass=x&password=y", "file:/data/catalog.db?_auth_pass=x&password=xxxxx"},
		{"/data/catalog.db", "/data/catalog.db"},
		// DSN key=value strings.
		{"host=db port=5432 user=retrain password=s3cret dbname=lake", "host=db port=5432 user=retrain password=xxxxx dbname=lake"},
		{"host=db password = s3cret sslmode=require", "host=db password = xxxxx sslmode=require"},
		{"host=db password='s3 cr\\'et' dbname=lake", "host=db password=xxxxx dbname=lake"},
		{"user=u sslpassword=kp sslkey=/k.pem", "user=u sslpassword=xxxxx sslkey=/k.pem"},
		{"host=db password='open", "host=db password=xxxxx"},
		{"host=db dbname='open sesame", "host=db dbname=xxxxx"},
		{"host=db garbage", "host=db xxxxx"},
		// Nothing to hide.
		{"", ""},
		{"s3://bucket/prefix", "s3://bucket/prefix"},
		{"postgres://db/lake?sslmode=disable&application_name=retrain&connect_timeout=5", "postgres://db/lake?sslmode=disable&application_name=retrain&connect_timeout=5"},
		{"host=db port=5432 user=retrain dbname=lake sslmode=disable", "host=db port=5432 user=retrain dbname=lake sslmode=disable"},
		{"http://127.0.0.1:8181/", "http://127.0.0.1:8181/"},
	} {
		if got := URI(c.in); got != c.want {
			t.Errorf("URI(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSecretKey(t *testing.T) {
	for _, k := range []string{"password", "sslpassword", "PASSWORD", "db_password", "secret", "client_secret", "token", "access_token", "X-Auth-Token", "passwd", "api_key"} {
		if !SecretKey(k) {
			t.Errorf("SecretKey(%q) = false", k)
		}
	}
	for _, k := range []string{"user", "host", "dbname", "sslmode", "sslkey", "sslcert", "application_name", "connect_timeout", "port", "_pragma", "target_session_attrs"} {
		if SecretKey(k) {
			t.Errorf("SecretKey(%q) = true", k)
		}
	}
}

func TestText(t *testing.T) {
	for _, c := range []struct{ uri, text string }{
		{"postgres://u:s3cret-pw@db/lake", `cannot parse "postgres://u:s3cret-pw@db/lake": bad`},
		{"postgres://u@db/lake?password=s3cret-pw", "cannot parse `postgres://u@db/lake?password=s3cret-pw`: x"},
		{"postgres://u:p%40ss-word@db/lake", "auth failed for p@ss-word"},
		{"host=db password='s3cret pw' dbname=lake", "cannot parse `host=db password='s3cret pw' dbname=lake`"},
		{"postgres://u:pa/ss-word@db/lake", `parse "postgres://u:pa/ss-word@db/lake": invalid port ":pa" after host`},
	} {
		got := Text(c.text, c.uri)
		for _, s := range Secrets(c.uri) {
			if strings.Contains(got, s) {
				t.Errorf("Text(%q) = %q: still holds %q", c.text, got, s)
			}
		}
		if strings.Contains(got, "s3cret") || strings.Contains(got, "ss-word") {
			t.Errorf("Text(%q) = %q: still holds the password", c.text, got)
		}
	}
	if got := Text("dial tcp db:5432: connection refused", "postgres://u:pw1234@db:5432/lake"); got != "dial tcp db:5432: connection refused" {
		t.Errorf("Text changed a message without secrets: %q", got)
	}
}
