package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/reeve-org/reeve/internal/tlsconfig"
)

func newCertsRenewCmd() *cobra.Command {
	var (
		dir      string
		validity time.Duration
	)
	cmd := &cobra.Command{
		Use:   "renew NAME...",
		Short: "Issue certificates of certs init again (new key and serial, same grants), replacing their files atomically",
		Long: `renew issues <dir>/NAME.pem again with the CA of --dir: same common name,
grants and (server certificates) hosts, a new key and serial number, valid for
--validity from now. Each file is replaced atomically. Supervisors, agents and
the CLI present the renewed certificate on their next connection; schedulers
serve a renewed server certificate after SIGHUP (docs/security.md):
  reeve certs renew --dir certs supervisor agent`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, names []string) error {
			if dir == "" {
				return usagef("--dir: required (the CA's directory)")
			}
			for _, n := range names {
				c, err := tlsconfig.Renew(dir, n, tlsconfig.InitOptions{Validity: validity})
				if err != nil {
					return usageError{err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: serial %X, valid until %s\n", filepath.Join(dir, n+".pem"), c.SerialNumber, c.NotAfter.UTC().Format(time.RFC3339))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the CA (ca.pem, ca-key.pem) and the certificates")
	cmd.Flags().DurationVar(&validity, "validity", 365*24*time.Hour, "how long the renewed certificates are valid")
	return cmd
}

func newCertsRevokeCmd() *cobra.Command {
	var (
		dir, crl string
		certs    []string
	)
	cmd := &cobra.Command{
		Use:   "revoke",
		Short: "Add client certificates to the CRL of a local CA (crl.pem), for schedulers' --tls-crl",
		Long: `revoke adds each --cert to the certificate revocation list --crl (default
<dir>/crl.pem), signed with the CA of --dir (ca.pem, ca-key.pem, as certs init
wrote them), creating the list when missing (with no --cert: an empty list).
Schedulers started with --tls-crl <dir>/crl.pem (reeve dev --secure uses it
itself) refuse the revoked certificates after they re-read it on SIGHUP:
  reeve certs revoke --dir certs --cert certs/client.pem && kill -HUP <pid>
It prints the serial numbers the list holds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usagef("--dir: required (the CA's directory)")
			}
			if crl == "" {
				crl = filepath.Join(dir, "crl.pem")
			}
			ca := tlsconfig.Files{Cert: filepath.Join(dir, "ca.pem"), Key: filepath.Join(dir, "ca-key.pem")}
			serials, err := tlsconfig.Revoke(ca, crl, certs, time.Now())
			if err != nil {
				return usageError{err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d revoked\n", crl, len(serials))
			for _, s := range serials {
				fmt.Fprintf(cmd.OutOrStdout(), "%X\n", s)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the CA (ca.pem, ca-key.pem)")
	cmd.Flags().StringVar(&crl, "crl", "", "CRL file to update or create (default <dir>/crl.pem)")
	cmd.Flags().StringArrayVar(&certs, "cert", nil, "certificate (PEM) to revoke, repeatable")
	return cmd
}
