//go:build integration

package mysqlitest

import (
	"sort"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

type configT = config.Config

func sortStrings(s []string) { sort.Strings(s) }
