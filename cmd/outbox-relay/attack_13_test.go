package main

import "testing"

// Command-line mistakes that exit 0 or 1 instead of 2 (README "Exit
// codes": 2 a command-line mistake, an unknown command among them). A CI
// step `outbox-relay completion zhs > _outbox-relay` succeeds and writes
// the help text into the completion file.
func TestAttack13UsageMistakesExit2(t *testing.T) {
	for _, args := range [][]string{
		{"completion", "zhs"},
		{"completion", "bash", "extra"},
		{"help", "nosuch"},
		{"completion", "bash", "--bogus"},
	} {
		code, stdout, stderr := run(t, args...)
		if code != 2 {
			n := min(len(stdout), 80)
			t.Errorf("%q: exit %d, want 2 (stdout %q…, stderr %q)", args, code, stdout[:n], stderr)
		}
	}
}
