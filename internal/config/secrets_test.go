package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

const atkBase = `name: a
source:
  hosts: ["db1:3306"]
  user: relay
  server_id: 7
  tables: [app.outbox, app.other]
kafka:
  brokers: ["k1:9092"]
`

// Every secret file setting that names a missing file is refused by Load.
// The failure guarded against: source.password_file and
// kafka.sasl.password_file that do not exist are refused by Load;
// kafka.sasl.token_file, secret_access_key_file and session_token_file are
// not checked at all: a typo passes Load (and so `run --print-config`) and
// only shows as failed authentications.
func TestLoadRefusesMissingSecretFiles(t *testing.T) {
	for _, sasl := range []string{
		"    mechanism: OAUTHBEARER\n    token_file: /nonexistent/token\n",
		"    mechanism: AWS_MSK_IAM\n    access_key_id: AKIA\n    secret_access_key_file: /nonexistent/secret\n",
		"    mechanism: AWS_MSK_IAM\n    access_key_id: AKIA\n    secret_access_key: s\n    session_token_file: /nonexistent/session\n",
	} {
		_, err := Parse([]byte(atkBase+"  sasl:\n"+sasl), env(nil))
		if err == nil {
			t.Errorf("accepted a secret file that does not exist:\n%s", sasl)
		}
	}
}

// An error about source.hosts never echoes credentials. The failure guarded
// against: A DATABASE_URL-style variable put into source.hosts (a common
// 12-factor habit) is echoed, password and all, in the error: Load's
// contract says it never returns secrets inside errors.
func TestHostErrorMasksCredentials(t *testing.T) {
	raw := strings.Replace(atkBase, `hosts: ["db1:3306"]`, `hosts: ["${DB_URL}"]`, 1)
	_, err := Parse([]byte(raw), env(map[string]string{"DB_URL": "relay:s3cretPW@db1:3306"}))
	if err == nil {
		t.Fatal("accepted")
	}
	if strings.Contains(err.Error(), "s3cretPW") {
		t.Errorf("error shows the password: %v", err)
	}
}

// A broker or host written as a URL with credentials: the error hides them.
func TestBrokerErrorMasksCredentials(t *testing.T) {
	raw := strings.Replace(atkBase, `brokers: ["k1:9092"]`, `brokers: ["sasl://u:pw123@k1:9092"]`, 1)
	_, err := Parse([]byte(raw), env(nil))
	if err == nil || strings.Contains(err.Error(), "pw123") || !strings.Contains(err.Error(), "URL or holds credentials") {
		t.Fatalf("%v", err)
	}
}

// Every key that holds a secret is hidden by Redacted: the list comes from
// the fields' secret tag, and a secret field that Redacted cannot reach
// (inside a map or a list) fails here.
func TestRedactedHidesEverySecretKey(t *testing.T) {
	keys := SecretKeys()
	if len(keys) == 0 {
		t.Fatal("no secret keys")
	}
	c := Default()
	for i, path := range keys {
		v := reflect.ValueOf(&c).Elem()
		for _, name := range strings.Split(path, ".") {
			if v.Kind() != reflect.Struct {
				t.Fatalf("%s: inside a %s: Redacted reaches secrets in structs only", path, v.Kind())
			}
			v = fieldByKey(v, name)
		}
		if v.Kind() != reflect.String {
			t.Fatalf("%s: a %s, want a string", path, v.Kind())
		}
		v.SetString(fmt.Sprintf("s3cret-%d", i))
	}
	out := c.Redacted().YAML()
	for i, path := range keys {
		if strings.Contains(out, fmt.Sprintf("s3cret-%d", i)) {
			t.Errorf("Redacted shows %s", path)
		}
	}
	if c.Source.Password == "REDACTED" {
		t.Error("Redacted changed the original")
	}
}

// Every credential key is marked secret. The failure guarded against:
// kafka.sasl.token, secret_access_key and session_token were secrets in
// name only; the Helm chart refused source.password and kafka.sasl.password
// inline and let the others into a ConfigMap in plain text.
func TestCredentialKeysAreMarkedSecret(t *testing.T) {
	credential := regexp.MustCompile(`\.(password|token|secret_access_key|session_token)$`)
	for _, k := range SourceDocs().Keys() {
		if credential.MatchString(k.Path) != k.Secret {
			t.Errorf("%s: secret %v, want %v", k.Path, k.Secret, !k.Secret)
		}
	}
}

// fieldByKey is the field of struct v whose yaml key is name.
func fieldByKey(v reflect.Value, name string) reflect.Value {
	for i := range v.NumField() {
		if key, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ","); key == name {
			return v.Field(i)
		}
	}
	panic("no key " + name)
}
