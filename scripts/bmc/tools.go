//go:build tools

// The BMC lab's exporter (scripts/bmc-lab.sh build): prometheus-community/ipmi_exporter, pinned in go.mod.
package bmclab

import (
	_ "github.com/prometheus-community/ipmi_exporter"
)
