package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// applyConfig sets the flags of cmd named in the YAML (or JSON) file at
// path, a map from flag name (without "--") to value, e.g.
//
//	tls-ca: /etc/reeve/ca.pem
//	etcd-endpoints: [https://etcd-1:2379, https://etcd-2:2379]
//
// A flag given on the command line wins over the file; the file wins over
// the environment. A name that is not a flag of cmd is an error, so that a
// typo does not silently leave a setting at its default.
func applyConfig(cmd *cobra.Command, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		f := cmd.Flags().Lookup(name)
		if f == nil || name == "config" {
			return fmt.Errorf("%s: %q is not a flag of %q", path, name, cmd.CommandPath())
		}
		if f.Changed {
			continue
		}
		var val string
		switch v := m[name].(type) {
		case []any:
			parts := make([]string, len(v))
			for i, x := range v {
				parts[i] = fmt.Sprint(x)
			}
			val = strings.Join(parts, ",")
		case nil:
			continue
		default:
			val = fmt.Sprint(v)
		}
		if err := cmd.Flags().Set(name, val); err != nil {
			return fmt.Errorf("%s: %s: %w", path, name, err)
		}
	}
	return nil
}
