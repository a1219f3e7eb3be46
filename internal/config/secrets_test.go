package config

import (
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
