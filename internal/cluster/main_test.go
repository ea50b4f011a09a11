package cluster_test

import (
	"os"
	"testing"

	"github.com/reeve-org/reeve/internal/cluster/clustertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }
