package cluster

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/tlsconfig"
	"github.com/reeve-org/reeve/internal/workflow"
)

// Identity names a certificate of a secure cluster (files <Dir>/certs/<name>.pem
// and <name>-key.pem, issued by <Dir>/certs/ca.pem).
type Identity string

// The identities of a secure cluster. The grants are those of `reeve certs
// init` for namespace default.
const (
	// Server is the schedulers' and etcd members' server (and etcd peer)
	// certificate, valid for 127.0.0.1 and localhost.
	Server Identity = "server"
	// EtcdClient is the certificate schedulers, supervisors and the
	// launcher's checks present to etcd (no grant).
	EtcdClient Identity = "etcd-client"
	// Admin has reeve://admin/* (an operator: workflows, recovery, alerts).
	Admin Identity = "admin"
	// Supervisor has reeve://supervisor/*; the supervisors run with it.
	Supervisor Identity = "supervisor"
	// Agent has reeve://agent/default; the agents run with it.
	Agent Identity = "agent"
	// Client has reeve://client/default.
	Client Identity = "client"
	// Approver has reeve://approver/default: it completes waiting steps by
	// name (issue 35).
	Approver Identity = "approver"
)

// certSpecs are the certificates a secure cluster issues.
func certSpecs() []tlsconfig.CertSpec {
	grant := func(r auth.Role, ns string) []*url.URL { return []*url.URL{auth.Grant{Role: r, Namespace: ns}.URI()} }
	return []tlsconfig.CertSpec{
		{Name: string(Server), Server: true},
		{Name: string(EtcdClient)},
		{Name: string(Admin), URIs: grant(auth.RoleAdmin, auth.AllNamespaces)},
		{Name: string(Supervisor), URIs: grant(auth.RoleSupervisor, auth.AllNamespaces)},
		{Name: string(Agent), URIs: grant(auth.RoleAgent, workflow.DefaultNamespace)},
		{Name: string(Client), URIs: grant(auth.RoleClient, workflow.DefaultNamespace)},
		{Name: string(Approver), URIs: grant(auth.RoleApprover, workflow.DefaultNamespace)},
	}
}

// issueCerts creates the CA and the certificates in <Dir>/certs, unless a
// CA is there already (a cluster started again in the same Dir keeps its
// certificates, so that a shell set up for it still works).
func (c *Cluster) issueCerts() error {
	if _, err := os.Stat(c.certPath("ca.pem")); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	_, err := tlsconfig.Init(c.CertDir(), certSpecs(), tlsconfig.InitOptions{Hosts: []string{"127.0.0.1", "localhost"}})
	if err != nil {
		return fmt.Errorf("cluster: certificates: %w", err)
	}
	return nil
}

// Secure reports whether the cluster runs over mutual TLS (Config.Secure).
func (c *Cluster) Secure() bool { return c.cfg.Secure }

// CertDir is where a secure cluster's CA and certificates are:
// <Dir>/certs.
func (c *Cluster) CertDir() string { return filepath.Join(c.cfg.Dir, "certs") }

func (c *Cluster) certPath(name string) string { return filepath.Join(c.CertDir(), name) }

// Files returns the CA and the certificate files of id.
func (c *Cluster) Files(id Identity) tlsconfig.Files {
	return tlsconfig.Files{CA: c.certPath("ca.pem"), Cert: c.certPath(string(id) + ".pem"), Key: c.certPath(string(id) + "-key.pem")}
}

// ClientTLS returns the TLS configuration of a client presenting id's
// certificate and verifying the server's against the cluster's CA (for the
// dialed host: 127.0.0.1); nil when the cluster is plaintext.
func (c *Cluster) ClientTLS(id Identity) (*tls.Config, error) {
	if !c.cfg.Secure {
		return nil, nil
	}
	return tlsconfig.Client(c.Files(id), "")
}

// DialOptions returns the options of a gRPC connection to a scheduler as
// id: TLS with id's certificate, or plaintext when the cluster is.
func (c *Cluster) DialOptions(id Identity) ([]grpc.DialOption, error) {
	cfg, err := c.ClientTLS(id)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}, nil
}

// clientTLSArgs are the client TLS flags of a reeve process running as id.
func (c *Cluster) clientTLSArgs(id Identity) []string {
	if !c.cfg.Secure {
		return nil
	}
	f := c.Files(id)
	return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}
}

// etcdTLSArgs are the flags of a reeve process's etcd client.
func (c *Cluster) etcdTLSArgs() []string {
	if !c.cfg.Secure {
		return nil
	}
	f := c.Files(EtcdClient)
	return []string{"--etcd-ca", f.CA, "--etcd-cert", f.Cert, "--etcd-key", f.Key}
}

// schedulerTLSArgs are a scheduler's server flags: mutual TLS with role
// checks.
func (c *Cluster) schedulerTLSArgs() []string {
	if !c.cfg.Secure {
		return nil
	}
	f := c.Files(Server)
	return append([]string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-client-ca", f.CA}, c.etcdTLSArgs()...)
}

// etcdMemberTLSArgs are an etcd member's flags: client certificates
// required on the client and the peer URLs.
func (c *Cluster) etcdMemberTLSArgs() []string {
	if !c.cfg.Secure {
		return nil
	}
	f := c.Files(Server)
	return []string{
		"--cert-file", f.Cert, "--key-file", f.Key, "--trusted-ca-file", f.CA, "--client-cert-auth",
		"--peer-cert-file", f.Cert, "--peer-key-file", f.Key, "--peer-trusted-ca-file", f.CA, "--peer-client-cert-auth",
	}
}

// scheme is the scheme of etcd's URLs.
func (c *Cluster) scheme() string {
	if c.cfg.Secure {
		return "https://"
	}
	return "http://"
}

// RefusedCall is a call the schedulers' role checks refused, from a
// scheduler's log (a "call refused" line).
type RefusedCall struct {
	// Scheduler is the process that logged it, e.g. "scheduler-1".
	Scheduler string
	// Method is the full gRPC method, Caller the identity ("cert:<cn>").
	Method, Caller string
	// Line is the log line.
	Line string
}

// Expected reports whether the refusal is one the cluster's own set-up
// causes: an agent's attempt to register its workflows (the agent role
// may not; Config.Workflows are registered as Admin).
func (r RefusedCall) Expected() bool {
	return r.Method == "/reeve.v1.SchedulerService/RegisterWorkflow" && r.Caller == "cert:"+string(Agent)
}

var (
	methodField = regexp.MustCompile(` method=(\S+)`)
	callerField = regexp.MustCompile(` caller=(\S+)`)
)

// RefusedCalls returns every call the role checks refused, read from the
// schedulers' logs (text format, as the cluster starts them). In a secure
// cluster where every process has its role's certificate, a refusal that
// is not Expected is a call a component needs and the authorization table
// does not allow. A plaintext cluster has none.
func (c *Cluster) RefusedCalls() ([]RefusedCall, error) {
	var out []RefusedCall
	for _, p := range c.Schedulers {
		f, err := os.Open(p.logPath)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, `msg="call refused"`) {
				continue
			}
			r := RefusedCall{Scheduler: p.Name, Line: line}
			if m := methodField.FindStringSubmatch(line); m != nil {
				r.Method = m[1]
			}
			if m := callerField.FindStringSubmatch(line); m != nil {
				r.Caller = m[1]
			}
			out = append(out, r)
		}
		err = sc.Err()
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("cluster: read %s: %w", p.logPath, err)
		}
	}
	return out, nil
}
