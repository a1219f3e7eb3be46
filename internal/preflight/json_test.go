package preflight

import (
	"encoding/json"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// check --json uses snake_case keys like every other JSON output.
func TestItemJSON(t *testing.T) {
	b, err := json.Marshal(Report{{Target: "kafka", Name: "acl topic cp", Status: Fail, Detail: "missing READ", Fix: "kafka-acls.sh ..."},
		{Target: "kafka", Name: "connect", Status: Pass, Detail: "k:9092"}})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"target":"kafka","name":"acl topic cp","status":"FAIL","detail":"missing READ","fix":"kafka-acls.sh ..."},` +
		`{"target":"kafka","name":"connect","status":"PASS","detail":"k:9092"}]`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}

func TestAllows(t *testing.T) {
	if !allows([]kmsg.ACLOperation{kmsg.ACLOperationAll}, kmsg.ACLOperationWrite) ||
		allows([]kmsg.ACLOperation{kmsg.ACLOperationDescribe, kmsg.ACLOperationRead}, kmsg.ACLOperationWrite) ||
		!allows([]kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationWrite}, kmsg.ACLOperationWrite) {
		t.Fatal("allows")
	}
	if got := opNames([]kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationWrite}); got != "READ and WRITE" {
		t.Fatalf("opNames %q", got)
	}
}
