package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/reeve-org/reeve/internal/version"
)

// newVersionCmd prints which build is running. It needs no scheduler.
func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			w := cmd.OutOrStdout()
			if g.output == "json" {
				b, err := json.MarshalIndent(info, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(w, string(b))
				return err
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "VERSION:\t%s\n", info.Version)
			fmt.Fprintf(tw, "COMMIT:\t%s\n", info.Commit)
			fmt.Fprintf(tw, "GO:\t%s\n", info.GoVersion)
			fmt.Fprintf(tw, "PLATFORM:\t%s\n", info.Platform)
			return tw.Flush()
		},
	}
}
