package mysqlsource

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// A Resultset a client closed goes back to go-mysql's pool with its Field
// pointers; the double's next result set must not be refused for them
// (the column type of that earlier result differs).
func TestResultsetAfterAPooledOne(t *testing.T) {
	for range 20 {
		rs, err := mysql.BuildSimpleTextResultset([]string{"n"}, [][]any{{int64(1)}})
		if err != nil {
			t.Fatal(err)
		}
		mysql.NewResult(rs).Close() // back to the pool, Fields kept
		if _, err := resultset([]string{"s"}, [][]any{{"text"}}); err != nil {
			t.Fatalf("result set after a pooled one: %v", err)
		}
	}
}
