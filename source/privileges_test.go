package source

import (
	"slices"
	"testing"
)

// Grants as MariaDB and MySQL print them: each privilege is compared whole.
func TestMissingGrantsWholeNames(t *testing.T) {
	for _, tc := range []struct {
		grants []string
		want   []string
	}{
		{[]string{"GRANT REPLICATION SLAVE ADMIN, BINLOG MONITOR ON *.* TO `u`@`%`"}, []string{"REPLICATION SLAVE"}},
		{[]string{"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `u`@`%` IDENTIFIED BY PASSWORD '*AB'"}, nil},
		{[]string{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'u'@'%'"}, nil},
		{[]string{"GRANT USAGE ON *.* TO `u`@`%`", "GRANT REPLICATION SLAVE ON `app`.* TO `u`@`%`"}, []string{"REPLICATION SLAVE", "REPLICATION CLIENT"}},
		{[]string{"GRANT REPLICATION SLAVE ON *.* TO `u`@`%`", "GRANT BINLOG_ADMIN,REPLICATION_SLAVE_ADMIN ON *.* TO `u`@`%`"}, []string{"REPLICATION CLIENT"}},
		{[]string{"GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"}, nil},
		{[]string{"GRANT `r` TO `u`@`%`", "GRANT REPLICATION SLAVE ADMIN ON *.* TO `r`"}, []string{"REPLICATION SLAVE", "REPLICATION CLIENT"}},
		{[]string{"grant replication client, replication replica on *.* to u"}, nil},
	} {
		if got := missingGrants(tc.grants); !slices.Equal(got, tc.want) {
			t.Errorf("%q: missing %q, want %q", tc.grants, got, tc.want)
		}
	}
}
