// Package test renders the Reeve Helm chart (../reeve) with helm template
// for several value sets, decodes every document strictly into the
// Kubernetes API types (an unknown or misspelled field is an error), and
// checks what the chart promises: probes on the gRPC health service,
// non-root read-only containers, at least two supervisors with a
// PodDisruptionBudget, Services that reach their pods.
//
// It is a module of its own so that k8s.io/api stays out of Reeve's go.mod.
// Run it with `make test-helm` (which installs the pinned helm), or with
// HELM=/path/to/helm go test ./... here.
package test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const chart = "../reeve"

// valueSets are the configurations every check runs on.
var valueSets = []struct {
	name string
	args []string
}{
	{"default", nil},
	{"secure", []string{"-f", chart + "/ci/secure-values.yaml"}},
	{"external-etcd", []string{"-f", chart + "/ci/external-etcd-values.yaml"}},
}

func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		t.Fatal("helm not found: set HELM or run `make test-helm`, which installs the pinned helm")
	}
	return h
}

// helmTemplate renders the chart; it returns helm's error output on failure.
func helmTemplate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), append([]string{"template", "rv", chart, "--namespace", "reeve-ns"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s", err, errOut.String())
	}
	return out.String(), nil
}

// objects is one rendering, decoded.
type objects struct {
	deployments  []*appsv1.Deployment
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	pdbs         []*policyv1.PodDisruptionBudget
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	monitors     []*monitoringv1.ServiceMonitor
	accounts     []*corev1.ServiceAccount
}

// decode splits a rendering into documents and decodes each strictly into
// the type its apiVersion and kind name.
func decode(t *testing.T, rendered string) objects {
	t.Helper()
	var o objects
	r := k8syaml.NewYAMLReader(bufio.NewReader(strings.NewReader(rendered)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		var obj any
		switch tm.APIVersion + "/" + tm.Kind {
		case "apps/v1/Deployment":
			d := &appsv1.Deployment{}
			o.deployments, obj = append(o.deployments, d), d
		case "apps/v1/StatefulSet":
			s := &appsv1.StatefulSet{}
			o.statefulSets, obj = append(o.statefulSets, s), s
		case "v1/Service":
			s := &corev1.Service{}
			o.services, obj = append(o.services, s), s
		case "v1/ServiceAccount":
			s := &corev1.ServiceAccount{}
			o.accounts, obj = append(o.accounts, s), s
		case "policy/v1/PodDisruptionBudget":
			p := &policyv1.PodDisruptionBudget{}
			o.pdbs, obj = append(o.pdbs, p), p
		case "autoscaling/v2/HorizontalPodAutoscaler":
			h := &autoscalingv2.HorizontalPodAutoscaler{}
			o.hpas, obj = append(o.hpas, h), h
		case "monitoring.coreos.com/v1/ServiceMonitor":
			m := &monitoringv1.ServiceMonitor{}
			o.monitors, obj = append(o.monitors, m), m
		default:
			t.Fatalf("unexpected kind %s %s in the rendering:\n%s", tm.APIVersion, tm.Kind, doc)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("%s: strict decoding: %v\n%s", tm.Kind, err, doc)
		}
	}
	return o
}

func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out.Write(line)
		}
	}
	return out.Bytes()
}

// A misspelled field must fail the strict decoding, or the checks below
// prove nothing.
func TestDecodeIsStrict(t *testing.T) {
	doc := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n"
	if err := yaml.UnmarshalStrict([]byte(doc), &appsv1.Deployment{}); err == nil || !strings.Contains(err.Error(), "replica") {
		t.Fatalf("UnmarshalStrict of a misspelled field = %v, want an error naming it", err)
	}
}

type workload struct {
	kind, name string
	replicas   *int32
	labels     map[string]string
	pod        corev1.PodSpec
}

func (o objects) workloads() []workload {
	var w []workload
	for _, d := range o.deployments {
		w = append(w, workload{"Deployment", d.Name, d.Spec.Replicas, d.Spec.Template.Labels, d.Spec.Template.Spec})
	}
	for _, s := range o.statefulSets {
		w = append(w, workload{"StatefulSet", s.Name, s.Spec.Replicas, s.Spec.Template.Labels, s.Spec.Template.Spec})
	}
	return w
}

func (o objects) deployment(t *testing.T, component string) *appsv1.Deployment {
	t.Helper()
	for _, d := range o.deployments {
		if d.Labels["app.kubernetes.io/component"] == component {
			return d
		}
	}
	t.Fatalf("no %s Deployment", component)
	return nil
}

func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return corev1.EnvVar{}, false
	}
	return c.Env[i], true
}

func TestChart(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			rendered, err := helmTemplate(t, vs.args...)
			if err != nil {
				t.Fatal(err)
			}
			o := decode(t, rendered)
			checkWorkloads(t, o)
			checkSupervisors(t, o)
			checkSchedulers(t, o)
			checkServices(t, o)
			checkAutoscaling(t, o)
			checkMonitors(t, o)
		})
	}
}

// Every pod: not root, read-only root file system, no privilege escalation,
// no capabilities, RuntimeDefault seccomp, no service account token,
// resource requests, readiness and liveness probes on a declared port.
func checkWorkloads(t *testing.T, o objects) {
	if len(o.workloads()) == 0 {
		t.Fatal("no workloads rendered")
	}
	for _, w := range o.workloads() {
		p := w.pod
		psc := p.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
			t.Errorf("%s %s: pod must run as a non-root uid: %+v", w.kind, w.name, psc)
		}
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s %s: seccomp profile is not RuntimeDefault", w.kind, w.name)
		}
		if p.AutomountServiceAccountToken == nil || *p.AutomountServiceAccountToken {
			t.Errorf("%s %s: mounts a service account token it has no use for", w.kind, w.name)
		}
		for _, c := range p.Containers {
			sc := c.SecurityContext
			switch {
			case sc == nil:
				t.Errorf("%s/%s: no securityContext", w.name, c.Name)
				continue
			case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
				t.Errorf("%s/%s: root file system is writable", w.name, c.Name)
			case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
				t.Errorf("%s/%s: privilege escalation allowed", w.name, c.Name)
			case sc.Privileged != nil && *sc.Privileged:
				t.Errorf("%s/%s: privileged", w.name, c.Name)
			case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL"):
				t.Errorf("%s/%s: capabilities not dropped", w.name, c.Name)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s/%s: no CPU or memory request", w.name, c.Name)
			}
			if c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s/%s: no memory limit", w.name, c.Name)
			}
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s/%s: readiness or liveness probe missing", w.name, c.Name)
				continue
			}
			for _, pr := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
				if pr == nil {
					continue
				}
				if !probePortDeclared(c, pr) {
					t.Errorf("%s/%s: probe on a port the container does not declare: %+v", w.name, c.Name, pr.ProbeHandler)
				}
			}
		}
	}
}

func probePortDeclared(c corev1.Container, p *corev1.Probe) bool {
	has := func(port intstr.IntOrString) bool {
		return slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
			return (port.Type == intstr.String && cp.Name == port.StrVal) || (port.Type == intstr.Int && cp.ContainerPort == port.IntVal)
		})
	}
	switch {
	case p.GRPC != nil:
		return has(intstr.FromInt32(p.GRPC.Port))
	case p.HTTPGet != nil:
		return has(p.HTTPGet.Port)
	case p.TCPSocket != nil:
		return has(p.TCPSocket.Port)
	}
	return false
}

// reeveHealth checks that a reeve container's probes are gRPC health checks
// of its --health-listen port: readiness on the overall status, liveness on
// "liveness" (which stays SERVING while etcd is down).
func reeveHealth(t *testing.T, c corev1.Container) {
	t.Helper()
	r, l := c.ReadinessProbe, c.LivenessProbe
	if r == nil || r.GRPC == nil || l == nil || l.GRPC == nil {
		t.Fatalf("%s: readiness and liveness must be grpc probes", c.Name)
	}
	want := fmt.Sprintf("--health-listen=0.0.0.0:%d", r.GRPC.Port)
	if !slices.Contains(c.Args, want) {
		t.Errorf("%s: readiness probes port %d, args %q lack %s", c.Name, r.GRPC.Port, c.Args, want)
	}
	if r.GRPC.Service != nil && *r.GRPC.Service != "" {
		t.Errorf("%s: readiness probes service %q, want the overall status", c.Name, *r.GRPC.Service)
	}
	if l.GRPC.Port != r.GRPC.Port || l.GRPC.Service == nil || *l.GRPC.Service != "liveness" {
		t.Errorf("%s: liveness must probe service \"liveness\" on port %d: %+v", c.Name, r.GRPC.Port, l.GRPC)
	}
	if ep, ok := env(c, "REEVE_ETCD_ENDPOINTS"); !ok || ep.Value == "" {
		t.Errorf("%s: REEVE_ETCD_ENDPOINTS not set", c.Name)
	}
}

// At least two supervisors, and a PodDisruptionBudget keeping one.
func checkSupervisors(t *testing.T, o objects) {
	d := o.deployment(t, "supervisor")
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("supervisor replicas %v, want at least 2", d.Spec.Replicas)
	}
	c := d.Spec.Template.Spec.Containers[0]
	reeveHealth(t, c)
	if c.Args[0] != "supervisor" {
		t.Errorf("supervisor args %q", c.Args)
	}
	pdb := pdbFor(t, o, d.Spec.Template.Labels)
	if pdb == nil || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 {
		t.Errorf("no PodDisruptionBudget keeping at least one supervisor: %+v", pdb)
	}
	// The supervisors reach the schedulers through the scheduler Service.
	sched := o.deployment(t, "scheduler")
	addr, _ := env(c, "REEVE_SCHEDULERS")
	svc := serviceFor(o, sched.Spec.Template.Labels, "grpc")
	if svc == nil || !strings.HasPrefix(addr.Value, svc.Name+"."+"reeve-ns.svc:") {
		t.Errorf("REEVE_SCHEDULERS %q does not name the scheduler Service", addr.Value)
	}
}

func checkSchedulers(t *testing.T, o objects) {
	d := o.deployment(t, "scheduler")
	p := d.Spec.Template.Spec
	c := p.Containers[0]
	reeveHealth(t, c)
	if c.Args[0] != "scheduler" {
		t.Errorf("scheduler args %q", c.Args)
	}
	// docs/operations.md: a scheduler needs up to 20s to drain and stop.
	if p.TerminationGracePeriodSeconds == nil || *p.TerminationGracePeriodSeconds < 20 {
		t.Errorf("terminationGracePeriodSeconds %v, want at least 20", p.TerminationGracePeriodSeconds)
	}
	// Rolling updates never take a scheduler away before its replacement is
	// ready to take its agents.
	ru := d.Spec.Strategy.RollingUpdate
	if ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("rolling update maxUnavailable %+v, want 0", ru)
	}
	if pdbFor(t, o, d.Spec.Template.Labels) == nil {
		t.Error("no PodDisruptionBudget for the schedulers")
	}
	// Secret-backed files the env points at are mounted.
	for _, name := range []string{"REEVE_TLS_CERT", "REEVE_TLS_KEY", "REEVE_TLS_CLIENT_CA", "REEVE_TOKENS_FILE", "REEVE_ETCD_CA", "REEVE_ETCD_CERT", "REEVE_ETCD_KEY"} {
		e, ok := env(c, name)
		if !ok {
			continue
		}
		dir := filepath.Dir(e.Value)
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir }) {
			t.Errorf("%s=%s: nothing is mounted at %s", name, e.Value, dir)
		}
	}
}

func pdbFor(t *testing.T, o objects, podLabels map[string]string) *policyv1.PodDisruptionBudget {
	t.Helper()
	for _, p := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		if sel.Matches(labels.Set(podLabels)) {
			return p
		}
	}
	return nil
}

// serviceFor returns a non-headless... any Service selecting the pods with
// a port named portName.
func serviceFor(o objects, podLabels map[string]string, portName string) *corev1.Service {
	for _, s := range o.services {
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(podLabels)) &&
			slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == portName }) {
			return s
		}
	}
	return nil
}

// Every Service selects some pods, and each of its ports reaches a port
// those pods declare.
func checkServices(t *testing.T, o objects) {
	for _, s := range o.services {
		matched := 0
		for _, w := range o.workloads() {
			if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.labels)) {
				continue
			}
			matched++
			for _, sp := range s.Spec.Ports {
				c := w.pod.Containers[0]
				if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
					return (sp.TargetPort.Type == intstr.String && cp.Name == sp.TargetPort.StrVal) || (sp.TargetPort.Type == intstr.Int && cp.ContainerPort == sp.TargetPort.IntVal)
				}) {
					t.Errorf("Service %s port %s: %s %s declares no port %s", s.Name, sp.Name, w.kind, w.name, sp.TargetPort.String())
				}
			}
		}
		if matched == 0 {
			t.Errorf("Service %s selects no workload", s.Name)
		}
	}
}

func checkAutoscaling(t *testing.T, o objects) {
	for _, h := range o.hpas {
		d := o.deployment(t, "scheduler")
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != d.Name {
			t.Errorf("HPA %s scales %s %s, want Deployment %s", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name, d.Name)
		}
		if d.Spec.Replicas != nil {
			t.Errorf("Deployment %s sets replicas while an HPA scales it (every upgrade would reset the scale)", d.Name)
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
			t.Errorf("HPA %s minReplicas %v, want at least 2", h.Name, h.Spec.MinReplicas)
		}
	}
}

// A ServiceMonitor scrapes a Service exposing the metrics of both the
// schedulers and the supervisors.
func checkMonitors(t *testing.T, o objects) {
	for _, m := range o.monitors {
		var svc *corev1.Service
		for _, s := range o.services {
			if labels.SelectorFromSet(m.Spec.Selector.MatchLabels).Matches(labels.Set(s.Labels)) {
				svc = s
			}
		}
		if svc == nil {
			t.Fatalf("ServiceMonitor %s selects no Service", m.Name)
		}
		for _, ep := range m.Spec.Endpoints {
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
				t.Errorf("ServiceMonitor %s: Service %s has no port %q", m.Name, svc.Name, ep.Port)
			}
		}
		for _, comp := range []string{"scheduler", "supervisor"} {
			d := o.deployment(t, comp)
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("metrics Service %s does not select the %s pods", svc.Name, comp)
			}
		}
	}
}

// Values that would make an installation that loses or wedges work are
// refused at render time with a message naming the value.
func TestChartRefuses(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"one supervisor", []string{"--set", "supervisor.replicas=1"}, "supervisor.replicas"},
		{"no etcd", []string{"--set", "etcd.bundled.enabled=false"}, "etcd.endpoints"},
		{"tokens over plaintext", []string{"--set", "tokens.secretName=t"}, "tls.serverSecretName"},
		{"TLS schedulers, supervisors without a CA", []string{"--set", "tls.serverSecretName=s"}, "tls.supervisorSecretName"},
		{"archive TLS without an archive", []string{"--set", "archive.tlsSecretName=pg-tls"}, "archive.dsnSecret.name"},
		{"archive DSN without a key", []string{"--set", "archive.dsnSecret.name=pg", "--set", "archive.dsnSecret.key="}, "archive.dsnSecret.key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := helmTemplate(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("helm template %v = %v, want an error naming %s", tt.args, err, tt.want)
			}
		})
	}
}

// The external-etcd values reach the processes as given.
func TestExternalEtcd(t *testing.T) {
	rendered, err := helmTemplate(t, "-f", chart+"/ci/external-etcd-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, rendered)
	if len(o.statefulSets) != 0 {
		t.Errorf("external etcd rendered %d StatefulSets", len(o.statefulSets))
	}
	for _, comp := range []string{"scheduler", "supervisor"} {
		c := o.deployment(t, comp).Spec.Template.Spec.Containers[0]
		ep, _ := env(c, "REEVE_ETCD_ENDPOINTS")
		if ep.Value != "https://etcd-0.etcd.db.svc:2379,https://etcd-1.etcd.db.svc:2379,https://etcd-2.etcd.db.svc:2379" {
			t.Errorf("%s: REEVE_ETCD_ENDPOINTS %q", comp, ep.Value)
		}
		for _, name := range []string{"REEVE_ETCD_CA", "REEVE_ETCD_CERT", "REEVE_ETCD_KEY", "REEVE_ETCD_USERNAME", "REEVE_ETCD_PASSWORD"} {
			if _, ok := env(c, name); !ok {
				t.Errorf("%s: %s not set", comp, name)
			}
		}
		if !slices.Contains(c.Args, "--prefix=/prod/reeve/") {
			t.Errorf("%s: args %q lack --prefix=/prod/reeve/", comp, c.Args)
		}
		if c.Image != "registry.example.com/reeve:v0.1.0" {
			t.Errorf("%s: image %q", comp, c.Image)
		}
	}
}

// The archive reaches the schedulers only when archive.dsnSecret names a
// Secret: its DSN as REEVE_ARCHIVE_DSN from that Secret (never a literal on
// the command line or in the pod spec), the grace and retention as flags,
// and archive.tlsSecretName mounted read-only where the DSN's sslrootcert,
// sslcert and sslkey point (docs/kubernetes.md). Supervisors never get it.
func TestArchive(t *testing.T) {
	const tlsDir = "/etc/reeve/archive-tls"
	hasArchiveArg := func(c corev1.Container) bool {
		return slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--archive-") })
	}
	mount := func(c corev1.Container) (corev1.VolumeMount, bool) {
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == tlsDir })
		if i < 0 {
			return corev1.VolumeMount{}, false
		}
		return c.VolumeMounts[i], true
	}

	t.Run("none", func(t *testing.T) {
		rendered, err := helmTemplate(t)
		if err != nil {
			t.Fatal(err)
		}
		o := decode(t, rendered)
		for _, comp := range []string{"scheduler", "supervisor"} {
			d := o.deployment(t, comp)
			c := d.Spec.Template.Spec.Containers[0]
			if e, ok := env(c, "REEVE_ARCHIVE_DSN"); ok {
				t.Errorf("%s: no archive set, yet REEVE_ARCHIVE_DSN %+v", comp, e)
			}
			if hasArchiveArg(c) {
				t.Errorf("%s: no archive set, yet args %q", comp, c.Args)
			}
			if m, ok := mount(c); ok {
				t.Errorf("%s: no archive set, yet %s is mounted: %+v", comp, tlsDir, m)
			}
		}
	})

	t.Run("dsnSecret", func(t *testing.T) {
		rendered, err := helmTemplate(t, "--set", "archive.dsnSecret.name=pg-dsn")
		if err != nil {
			t.Fatal(err)
		}
		o := decode(t, rendered)
		c := o.deployment(t, "scheduler").Spec.Template.Spec.Containers[0]
		e, ok := env(c, "REEVE_ARCHIVE_DSN")
		switch {
		case !ok:
			t.Fatal("scheduler: REEVE_ARCHIVE_DSN not set")
		case e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil:
			t.Fatalf("scheduler: REEVE_ARCHIVE_DSN %+v, want it from a Secret", e)
		case e.ValueFrom.SecretKeyRef.Name != "pg-dsn" || e.ValueFrom.SecretKeyRef.Key != "dsn":
			t.Errorf("scheduler: REEVE_ARCHIVE_DSN from Secret %s key %s, want pg-dsn key dsn (the default key)",
				e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
		}
		for _, want := range []string{"--archive-grace=1m", "--archive-retention=720h"} {
			if !slices.Contains(c.Args, want) {
				t.Errorf("scheduler: args %q lack %s (the defaults of values.yaml)", c.Args, want)
			}
		}
		if m, ok := mount(c); ok {
			t.Errorf("scheduler: no archive.tlsSecretName, yet %s is mounted: %+v", tlsDir, m)
		}
		sup := o.deployment(t, "supervisor").Spec.Template.Spec.Containers[0]
		if _, ok := env(sup, "REEVE_ARCHIVE_DSN"); ok || hasArchiveArg(sup) {
			t.Errorf("supervisor: given the archive (env %v, args %q); only schedulers use it", sup.Env, sup.Args)
		}
	})

	t.Run("tlsSecretName", func(t *testing.T) {
		rendered, err := helmTemplate(t, "-f", chart+"/ci/external-etcd-values.yaml")
		if err != nil {
			t.Fatal(err)
		}
		o := decode(t, rendered)
		p := o.deployment(t, "scheduler").Spec.Template.Spec
		c := p.Containers[0]
		e, _ := env(c, "REEVE_ARCHIVE_DSN")
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "reeve-archive" || e.ValueFrom.SecretKeyRef.Key != "url" {
			t.Errorf("scheduler: REEVE_ARCHIVE_DSN %+v, want Secret reeve-archive key url", e)
		}
		for _, want := range []string{"--archive-grace=2m", "--archive-retention=2160h"} {
			if !slices.Contains(c.Args, want) {
				t.Errorf("scheduler: args %q lack %s", c.Args, want)
			}
		}
		m, ok := mount(c)
		if !ok {
			t.Fatalf("scheduler: nothing mounted at %s: %+v", tlsDir, c.VolumeMounts)
		}
		if !m.ReadOnly {
			t.Errorf("scheduler: %s is mounted read-write", tlsDir)
		}
		i := slices.IndexFunc(p.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			t.Fatalf("scheduler: mount %s names volume %q, which the pod lacks", tlsDir, m.Name)
		}
		if v := p.Volumes[i]; v.Secret == nil || v.Secret.SecretName != "reeve-archive-tls" {
			t.Errorf("scheduler: volume %s is %+v, want Secret reeve-archive-tls", m.Name, v.VolumeSource)
		}
	})
}

// The bundled etcd forms one cluster: each member is named in the initial
// cluster under the address it advertises.
func TestBundledEtcd(t *testing.T) {
	rendered, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, rendered)
	if len(o.statefulSets) != 1 {
		t.Fatalf("%d StatefulSets, want the bundled etcd", len(o.statefulSets))
	}
	s := o.statefulSets[0]
	if s.Spec.Replicas == nil || *s.Spec.Replicas != 3 {
		t.Errorf("etcd replicas %v, want 3", s.Spec.Replicas)
	}
	c := s.Spec.Template.Spec.Containers[0]
	ic, _ := env(c, "ETCD_INITIAL_CLUSTER")
	for i := range 3 {
		member := fmt.Sprintf("%s-%d=http://%s-%d.%s.reeve-ns.svc:2380", s.Name, i, s.Name, i, s.Spec.ServiceName)
		if !strings.Contains(ic.Value, member) {
			t.Errorf("ETCD_INITIAL_CLUSTER %q lacks %s", ic.Value, member)
		}
	}
	sched := o.deployment(t, "scheduler").Spec.Template.Spec.Containers[0]
	ep, _ := env(sched, "REEVE_ETCD_ENDPOINTS")
	if strings.Count(ep.Value, ":2379") != 3 || !strings.Contains(ep.Value, s.Name+"-0."+s.Spec.ServiceName) {
		t.Errorf("scheduler REEVE_ETCD_ENDPOINTS %q does not list the 3 members", ep.Value)
	}
	if pdbFor(t, o, s.Spec.Template.Labels) == nil {
		t.Error("no PodDisruptionBudget for etcd's quorum")
	}
}

// Every flag the chart passes is a flag of the reeve binary's command
// (REEVE_BIN, set by `make test-helm`; skipped without it). The console's
// flags are checked once the binary has the console (issue 14).
func TestFlagsExist(t *testing.T) {
	bin := os.Getenv("REEVE_BIN")
	if bin == "" {
		t.Skip("REEVE_BIN not set: `make test-helm` sets it")
	}
	help := func(args ...string) string {
		out, err := exec.Command(bin, append(args, "--help")...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v --help: %v\n%s", bin, args, err, out)
		}
		return string(out)
	}
	hasConsole := strings.Contains(help(), "console")
	for _, vs := range valueSets {
		rendered, err := helmTemplate(t, vs.args...)
		if err != nil {
			t.Fatal(err)
		}
		o := decode(t, rendered)
		for _, comp := range []string{"scheduler", "supervisor"} {
			c := o.deployment(t, comp).Spec.Template.Spec.Containers[0]
			usage := help(c.Args[0])
			for _, a := range c.Args[1:] {
				name, _, _ := strings.Cut(a, "=")
				if strings.HasPrefix(name, "--console-") && !hasConsole {
					continue
				}
				if !strings.Contains(usage, "  "+name+" ") && !strings.Contains(usage, ", "+name+" ") {
					t.Errorf("%s, values %s: reeve %s has no flag %s", comp, vs.name, c.Args[0], name)
				}
			}
		}
	}
}

// scheduler.recordCompression reaches every scheduler as
// --record-compression when set; unset, the scheduler's own default applies
// (on with an archive): turning it on is a step of its own once every
// process reads compressed records (docs/operations.md).
func TestRecordCompression(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "": no flag
	}{
		{nil, ""},
		{[]string{"--set", "scheduler.recordCompression=true"}, "--record-compression=true"},
		{[]string{"--set", "scheduler.recordCompression=false"}, "--record-compression=false"},
	} {
		rendered, err := helmTemplate(t, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		o := decode(t, rendered)
		args := o.deployment(t, "scheduler").Spec.Template.Spec.Containers[0].Args
		flagged := slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--record-compression") })
		if (c.want == "" && flagged) || (c.want != "" && !slices.Contains(args, c.want)) {
			t.Errorf("values %q: scheduler args %q, want %q", c.args, args, c.want)
		}
		if args := o.deployment(t, "supervisor").Spec.Template.Spec.Containers[0].Args; slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--record-compression") }) {
			t.Errorf("values %q: supervisor args %q: supervisors write no records", c.args, args)
		}
	}
}
